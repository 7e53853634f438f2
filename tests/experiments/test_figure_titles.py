"""The DP-SCAFFOLD headline figure states its target epsilon and fixed parameters."""

from silodp.experiments import scaffold_headline


def _row(algorithm: str, k: int, iid: bool, error: float) -> dict:
    return {"algorithm": algorithm, "calibration": "tight", "epsilon": 10.0, "rounds": 200 // k,
            "mean_test_error": error, "std_test_error": 0.01,
            "data": {"alpha": 0.0, "beta": 0.0, "dim": 40, "iid": iid, "num_users": 10,
                     "samples_per_user": 150},
            "hyperparameters": {"local_steps": k, "params": [["data_sampling", 0.2], ["user_sampling", 1.0]]}}


def test_scaffold_headline_states_epsilon_and_fixed_parameters():
    rows = [_row(a, k, iid, 0.3) for a in ("dp-scaffold", "dp-fedavg") for k in (5, 50) for iid in (True, False)]
    title = scaffold_headline(rows).get_suptitle()
    for part in ("target \u03b5 = 10", "M = 10 users x 150 records", "d = 40", "K T = 200", "data sampling 0.2"):
        assert part in title, title
