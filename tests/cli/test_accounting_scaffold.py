"""``silodp run`` with the DP-SCAFFOLD family and FedProx's synthetic data (the issue's CLI contract)."""

import json

import pytest

from silodp.cli import main

BASE = ["run", "--dataset", "synthetic", "--epsilon", "5", "--rounds", "3", "--users", "5", "--json"]


def _run(capsys, argv):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_dp_scaffold_on_fedprox_synthetic(capsys):
    code, out, _ = _run(capsys, BASE + ["--algorithm", "dp-scaffold", "--model-heterogeneity", "1", "--input-heterogeneity", "1",
                                        "--local-steps", "3",
                                        "--user-sampling", "0.5", "--data-sampling", "0.25"])
    assert code == 0
    data = json.loads(out)
    assert {"algorithm", "epsilon", "delta", "test_error", "train_loss", "noise", "sigma_g", "epsilon_server",
            "epsilon_third_party"} <= set(data)
    assert data["local_steps"] == 3 and data["user_sampling"] == 0.5 and data["batch_size"] == 32  # 0.25 * 128 training records
    assert data["epsilon"] == data["epsilon_server"] <= 5.0
    assert data["epsilon_third_party"] < data["epsilon_server"]
    assert data["noise"]["sigma"] == pytest.approx(data["sigma_g"] * 2 / 32)
    assert 0 <= data["test_error"] <= 1


def test_third_party_calibration_and_iid_data(capsys):
    code, out, _ = _run(capsys, BASE + ["--algorithm", "dp-fedavg", "--iid", "--local-steps", "2",
                                        "--privacy-against", "third-party"])
    data = json.loads(out)
    assert code == 0 and data["epsilon_third_party"] <= 5.0 < data["epsilon_server"]


def test_local_steps_reaches_other_algorithms(capsys):
    code, out, _ = _run(capsys, ["run", "--algorithm", "isrl-local-sgd", "--dataset", "wbcd", "--epsilon", "2",
                                 "--rounds", "2", "--local-steps", "2", "--json"])
    assert code == 0 and json.loads(out)["epsilon"] <= 2.0


@pytest.mark.parametrize("argv,flag", [
    (["--algorithm", "dp-scaffold", "--dataset", "wbcd", "--model-heterogeneity", "1"], "--model-heterogeneity"),
    (["--algorithm", "isrl-prox-sgd", "--dataset", "wbcd", "--user-sampling", "0.5"], "--user-sampling"),
    (["--algorithm", "dp-scaffold", "--dataset", "wbcd", "--users", "4"], "--users"),
    (["--algorithm", "dp-scaffold", "--dataset", "synthetic", "--similarity", "0.5"], "--similarity"),
])
def test_misplaced_flags_exit_2_naming_the_flag(capsys, argv, flag):
    code, _, err = _run(capsys, ["run", "--epsilon", "1", "--json"] + argv)
    assert code == 2 and flag in err
