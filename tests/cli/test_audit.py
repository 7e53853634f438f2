"""``silodp audit`` prints the contracted JSON keys and rejects bad input with exit status 2."""

import json

import pytest

from silodp.accounting import gaussian
from silodp.cli import main

KEYS = {"epsilon_claimed", "epsilon_lower", "violation", "trials"}


def run(capsys, *argv):
    code = main(["audit", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_gaussian_mechanism_json(capsys):
    code, out, _ = run(capsys, "--mechanism", "gaussian", "--noise-multiplier", "1", "--delta", "1e-5",
                       "--trials", "20000", "--json")
    data = json.loads(out)
    assert code == 0 and KEYS <= set(data)
    assert data["epsilon_claimed"] == pytest.approx(gaussian.epsilon_for_delta(1.0, 1e-5))
    assert data["trials"] == 20000 and data["violation"] is False
    assert 0 < data["epsilon_lower"] <= data["epsilon_claimed"]


def test_algorithm_with_mutation_is_flagged(capsys):
    code, out, _ = run(capsys, "--algorithm", "isrl-prox-sgd", "--mutation", "halve-noise", "--epsilon", "2", "--json")
    data = json.loads(out)
    assert code == 1 and KEYS <= set(data)  # exit 1: a violated claim fails a CI step without parsing JSON
    assert data["violation"] is True and data["epsilon_lower"] > data["epsilon_claimed"]
    assert data["trials"] == 100000 and data["mutation"] == "halve-noise"


def test_correct_algorithm_is_not_flagged(capsys):
    code, out, _ = run(capsys, "--algorithm", "isrl-spider", "--trials", "20000", "--json")
    data = json.loads(out)
    assert code == 0 and data["violation"] is False and data["epsilon_claimed"] <= 2.0


def test_detection_rate_mode(capsys):
    code, out, _ = run(capsys, "--algorithm", "isrl-prox-sgd", "--mutation", "missing-k", "--repeats", "2",
                       "--trials", "20000", "--json")
    data = json.loads(out)
    assert code == 0 and data["repeats"] == 2 and data["rate"] == 1.0


@pytest.mark.parametrize("argv, flag", [
    (["--algorithm", "nope", "--json"], "--algorithm"),
    (["--algorithm", "isrl-prox-sgd", "--mutation", "nope", "--json"], "--mutation"),
    (["--mechanism", "gaussian", "--json"], "--noise-multiplier"),
    (["--mechanism", "gaussian", "--noise-multiplier", "1", "--trials", "1", "--json"], "--trials"),
    (["--mechanism", "gaussian", "--noise-multiplier", "1", "--delta", "2", "--json"], "delta"),
    (["--algorithm", "isrl-prox-sgd", "--repeats", "3", "--json"], "--repeats"),
])
def test_bad_input_exits_2_naming_the_flag(capsys, argv, flag):
    code, _, err = run(capsys, *argv)
    assert code == 2 and flag in err


def test_pvec_mechanism_json(capsys):
    code, out, _ = run(capsys, "--mechanism", "pvec", "--epsilon", "1", "--messages", "50", "--trials", "20000",
                       "--json")
    data = json.loads(out)
    assert code == 0 and KEYS <= set(data) and data["messages"] == 50
    assert data["epsilon_claimed"] <= 1.0 and 0 < data["epsilon_lower"] <= data["epsilon_claimed"]


@pytest.mark.parametrize("name", ["dp-scaffold", "dp-fedsgd"])
def test_dp_scaffold_family_is_audited(capsys, name):
    """Issue 12: the audit reads every private algorithm from the registry, DP-SCAFFOLD included;
    the claim is the curious server's worst case, calibrated to the target."""
    code, out, _ = run(capsys, "--algorithm", name, "--epsilon", "2", "--trials", "5000", "--json")
    data = json.loads(out)
    assert code == 0 and KEYS <= set(data) and data["algorithm"] == name
    assert 0.99 * 2 <= data["epsilon_claimed"] <= 2 and data["violation"] is False
    assert 0 < data["epsilon_lower"] <= data["epsilon_claimed"]


def test_exit_status_is_the_verdict():
    """0 consistent, 1 violated, 2 error (docs/audit.md): the status follows the payload's verdict."""
    from silodp.cli.audit import exit_code

    assert exit_code({"violation": False}) == 0 and exit_code({"violation": True}) == 1
    assert exit_code({"verdict": "consistent"}) == 0 and exit_code({"verdict": "violated"}) == 1
    assert exit_code({"papers": [{"violation": False}, {"violation": True}]}) == 1
    # the shipped-bugs table: the bugs are meant to be caught; only a flagged correct run fails
    assert exit_code({"shipped": [{"verdict": "violated", "counterpart_verdict": "consistent"}]}) == 0
    assert exit_code({"shipped": [{"verdict": "violated", "counterpart_verdict": "violated"}]}) == 1
