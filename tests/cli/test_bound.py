"""``silodp bound``: list, evaluate, render; errors exit 2 with a one-line message."""

import json

import pytest

from silodp.cli import main

THM31 = ["--param", "n=1000", "--param", "N=10", "--param", "eps=1", "--param", "delta=1e-5",
         "--param", "d=50", "--param", "L=1", "--param", "beta=1", "--param", "Delta=1"]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_json_has_ids_titles_sources(capsys):
    code, out, _ = run(capsys, "bound", "--list", "--json")
    assert code == 0
    rows = json.loads(out)["bounds"]
    ids = [r["id"] for r in rows]
    assert {"thm3.1", "thm3.2", "eq20", "eq45", "wang2019", "arora2022"} <= set(ids)
    assert all(r["title"] and r["source"] for r in rows)


def test_list_human_is_a_table(capsys):
    code, out, _ = run(capsys, "bound", "--list")
    assert code == 0 and out.splitlines()[0].startswith("thm2.1-isrl")


def test_evaluate_thm31_json(capsys):
    code, out, _ = run(capsys, "bound", "thm3.1", *THM31, "--json")
    assert code == 0
    payload = json.loads(out)
    assert {"value", "dominant_term", "exponents", "conditions_hold"} <= set(payload)
    assert payload["value"] == pytest.approx(0.0015484255503011252, rel=1e-9)
    assert payload["dominant_term"] == "optimization"
    assert payload["conditions_hold"] is True
    assert set(payload["exponents"]) == {"n", "N", "eps", "delta", "d", "L", "beta", "Delta"}
    assert payload["exponents"]["eps"] == pytest.approx(payload["exponents"]["n"])
    assert payload["unused"] == []
    assert payload["prescribed"]["eta"] == pytest.approx(0.5)


def test_unused_parameters_are_reported_not_errors(capsys):
    code, out, _ = run(capsys, "bound", "wang2019", *THM31, "--param", "M=3", "--json")
    assert code == 0
    assert json.loads(out)["unused"] == sorted(["Delta", "L", "M", "beta", "delta"])


def test_evaluate_human_output(capsys):
    code, out, _ = run(capsys, "bound", "thm3.1", *THM31)
    assert code == 0 and "dominant term" in out and "optimization" in out


def test_latex(capsys):
    code, out, _ = run(capsys, "bound", "eq20", "--latex")
    assert code == 0 and r"\left(1 - \frac{1}{2 \kappa}\right)^{R}" in out
    code, out, _ = run(capsys, "bound", "eq20", "--latex", "--json")
    assert json.loads(out)["id"] == "eq20"


def test_describe_without_params(capsys):
    code, out, _ = run(capsys, "bound", "eq45", "--json")
    assert code == 0 and "q_small" in json.loads(out)["conditions"]


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["bound", "nope"], "nope"),
        (["bound", "thm3.1", "--param", "n=-5"], "'n'"),
        (["bound", "thm3.1", "--param", "n=abc"], "n"),
        (["bound", "thm3.1", "--param", "foo=1"], "'foo'"),
        (["bound", "thm3.1", "--param", "n"], "NAME=VALUE"),
        (["bound", "thm3.1", "--param", "n=1"], "missing parameter"),
        (["bound", "thm3.1", "--param", "n=1", "--param", "n=2"], "twice"),
        (["bound", "wang2019", "--param", "delta=1.5"], "'delta'"),
        (["bound"], "--list"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and needle in err
