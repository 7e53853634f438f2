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
