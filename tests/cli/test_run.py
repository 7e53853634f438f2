"""``silodp run`` prints the documented JSON and rejects bad input with exit status 2."""

import json

import pytest

from silodp.cli import main


def test_run_json_nonprivate(capsys):
    code = main(["run", "--algorithm", "mb-sgd", "--dataset", "synthetic", "--epsilon", "1", "--rounds", "3", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert {"algorithm", "epsilon", "delta", "test_error", "train_loss", "noise"} <= set(out)
    assert out["algorithm"] == "mb-sgd" and 0 <= out["test_error"] <= 1


def test_run_json_private_calibrated(capsys):
    code = main(["run", "--algorithm", "isrl-prox-sgd", "--dataset", "wbcd", "--epsilon", "2", "--rounds", "3",
                 "--silos-per-round", "2", "--seed", "1", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["epsilon"] <= 2 + 1e-9 and out["noise"]["sigma"] > 0


def test_unknown_algorithm_exits_2(capsys):
    code = main(["run", "--algorithm", "nope", "--dataset", "wbcd", "--epsilon", "1", "--json"])
    assert code == 2
    assert "--algorithm" in capsys.readouterr().err


def test_run_with_paper_calibration_reports_certified_epsilon(capsys):
    """Thm E.1's closed-form noise, certified by the tight accountant: at most the target epsilon."""
    from silodp.cli import main as cli_main
    code = cli_main(["run", "--algorithm", "isrl-prox-sgd", "--dataset", "wbcd", "--epsilon", "3",
                     "--rounds", "3", "--calibration", "paper", "--json"])
    import json as _json
    data = _json.loads(capsys.readouterr().out)
    assert code == 0 and 0 < data["epsilon"] <= 3.0 and data["noise"]["sigma"] > 0


@pytest.mark.parametrize("command", ["run", "noise"])
def test_help_says_how_to_see_and_then_lists_the_generated_flags(command, capsys):
    """The plain --help names the way to the generated flags; with --algorithm it lists them
    (every registered family's own parameter, e.g. Local SGD's --local-steps; noise: those in
    the transcript)."""
    with pytest.raises(SystemExit) as stop:
        main([command, "--help"])
    plain = capsys.readouterr().out
    assert stop.value.code == 0 and f"silodp {command} --algorithm NAME --help" in " ".join(plain.split())
    assert "--local-steps" not in plain
    with pytest.raises(SystemExit) as stop:
        main([command, "--algorithm", "isrl-local-sgd", "--help"])
    listed = capsys.readouterr().out
    assert stop.value.code == 0 and "--local-steps" in listed
    assert ("--server-momentum" in listed) == (command == "run")  # noise: the transcript's fields only


def test_run_accountant_calibrates_and_certifies_with_the_named_one(capsys):
    base = ["run", "--algorithm", "isrl-mb-sgd", "--dataset", "synthetic", "--epsilon", "2", "--rounds", "3",
            "--batch-size", "5", "--json"]
    results = {}
    for accountant in ("rdp", "pld"):
        assert main(base + ["--accountant", accountant]) == 0
        results[accountant] = json.loads(capsys.readouterr().out)
    assert all(r["accountant"] == a and r["epsilon"] <= 2 + 1e-9 for a, r in results.items())
    assert results["rdp"]["noise"]["sigma"] > results["pld"]["noise"]["sigma"]  # rdp is looser here
    assert main(base + ["--accountant", "pvec"]) == 2  # certifies no Gaussian step
    assert "accountant" in capsys.readouterr().err
    assert main(["run", "--algorithm", "mb-sgd", "--dataset", "synthetic", "--epsilon", "1", "--rounds", "3",
                 "--accountant", "rdp", "--json"]) == 2
    assert "--accountant" in capsys.readouterr().err
