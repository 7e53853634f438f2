"""`silodp reproduce` and `silodp plot`: the quick WBCD preset end to end (the CI reproduction),
CIFAR-10 from generated pickle batches, plots, and bad input as exit status 2."""

import json
import pickle

import numpy as np
import pytest

from silodp.cli import main

FIVE = {"mb-sgd", "local-sgd", "isrl-mb-sgd", "isrl-local-sgd", "isrl-spider"}
SDP_CELL = "sdp-prox-sgd"  # the quick WBCD grid's one shuffle-DP cell


@pytest.fixture(scope="module")
def quick_store(tmp_path_factory):
    return tmp_path_factory.mktemp("cli") / "results.db"


def _json(capsys, argv) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_reproduce_wbcd_quick(quick_store, capsys):
    out = _json(capsys, ["reproduce", "wbcd", "--quick", "--store", str(quick_store), "--workers", "1", "--json"])
    assert out["grid"] == "wbcd-quick" and out["quick"] is True
    runs = out["runs"]
    assert runs["total"] == 80 and runs["stored"] == {"ok": 64, "failed": 0, "skipped": 16}
    tight = [r for r in out["summary"] if r["calibration"] in ("tight", "none")]
    assert {r["algorithm"] for r in tight} == FIVE | {SDP_CELL}
    for r in out["summary"]:
        assert 0 <= r["mean_test_error"] <= 1 and r["std_test_error"] >= 0 and r["trials"] == 2
        if r["epsilon"] is not None:
            assert r["certified_epsilon"] <= r["epsilon"] or r["calibration"] == "paper"
    paper = [r for r in out["summary"] if r["calibration"] == "paper"]
    assert {r["algorithm"] for r in paper} == {"isrl-spider", SDP_CELL}  # closed forms: App H.2; Alg 5 as printed
    claims = {c["id"]: c for c in out["claims"]}
    assert claims["spider-never-worse-than-mb-sgd"]["reproduced"] in (True, False)
    assert claims["tight-accounting-vs-paper-calibration"]["measured"]["points"] == 2


def test_rerun_does_no_work_and_prints_a_table(quick_store, capsys):
    assert main(["reproduce", "wbcd", "--quick", "--store", str(quick_store), "--workers", "1"]) == 0
    text = capsys.readouterr().out
    assert "80 already in" in text and "ran 0" in text and "isrl-spider" in text


def test_plot_from_the_store(quick_store, tmp_path, capsys):
    out = _json(capsys, ["plot", "--store", str(quick_store), "--out", str(tmp_path / "fig.png"), "--json"])
    assert out["experiments"] == ["wbcd M=2 R=25"] and len(out["summary"]) == 14
    assert (tmp_path / "fig.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cifar10_quick_from_local_pickles(tmp_path, capsys):
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    rng = np.random.default_rng(0)
    labels = list(np.repeat(np.arange(10), 5))
    with open(root / "data_batch_1", "wb") as fh:
        pickle.dump({b"data": (rng.random((50, 3072)) * 255).astype(np.uint8), b"labels": labels}, fh, protocol=2)
    out = _json(capsys, ["reproduce", "cifar10", "--quick", "--data-path", str(tmp_path), "--store",
                         str(tmp_path / "c.db"), "--workers", "1", "--calibration", "tight", "--json"])
    assert out["runs"]["failed"] == 0 and out["runs"]["ok"] == out["runs"]["total"] == 12
    assert {r["algorithm"] for r in out["summary"]} == FIVE


@pytest.mark.parametrize("argv, match", [
    (["reproduce", "imagenet"], "preset"),
    (["reproduce", "wbcd", "--workers", "0"], "--workers"),
    (["reproduce", "wbcd", "--max-runs", "-1"], "--max-runs"),
    (["reproduce", "wbcd", "--data-path", "/tmp"], "--data-path"),
    (["reproduce", "cifar10", "--quick", "--workers", "1"], None),  # no data path: every run fails, recorded
    (["plot", "--store", "/nonexistent/results.db", "--out", "x.png"], "--store"),
])
def test_bad_input(argv, match, tmp_path, capsys):
    argv = argv + ["--store", str(tmp_path / "r.db")] if argv[0] == "reproduce" else argv
    code = main(argv + ["--json"])
    if match is None:  # the results are printed, and the exit status says runs failed (issue 15)
        captured = capsys.readouterr()
        out = json.loads(captured.out)
        assert code == 2 and out["runs"]["ok"] == 0 and "path" in out["failures"][0]["error"]
        *progress, error = captured.err.strip().splitlines()  # --json: progress lines first (stderr)
        assert all(line.startswith("cifar10") for line in progress)
        assert error == (f"silodp reproduce: error: {out['runs']['failed']} of {out['runs']['total']} "
                                        f"runs failed (their errors are in the JSON and in {out['store']}; fix the "
                                        "cause and rerun with --retry-failed)")
    else:
        assert code == 2 and match in capsys.readouterr().err


def test_plot_of_an_empty_store(tmp_path, capsys):
    from silodp.experiments import Store

    with Store(tmp_path / "empty.db") as st:
        st.counts()
    assert main(["plot", "--store", str(tmp_path / "empty.db"), "--out", str(tmp_path / "f.png")]) == 2
    assert "no finished runs" in capsys.readouterr().err


@pytest.mark.parametrize("lost, advice", [
    (2, "2 lost their worker: rerun the same command to retry them)"),
    (1, "1 lost their worker: rerun the same command to retry them; fix the cause and rerun with --retry-failed)"),
])
def test_lost_workers_are_retried_by_a_plain_rerun(lost, advice, monkeypatch, capsys):
    """A run whose worker died is retried by the next call (runner), so the message says so and
    suggests --retry-failed only for the runs' own failures."""
    import silodp.experiments as experiments

    runs = {"total": 4, "already_done": 0, "ran": 4, "failed": 2, "skipped": 0, "wall_s": 1.0, "worker_failed": lost}
    monkeypatch.setattr(experiments, "reproduce", lambda *a, **k: {"grid": "g", "store": "s.db", "runs": runs,
                                                                    "summary": [], "claims": []})
    assert main(["reproduce", "wbcd", "--json"]) == 2
    assert capsys.readouterr().err.strip().endswith(advice)


def test_sweep_lock_is_taken_before_torch(tmp_path):
    """A second sweep on a held store is refused before the grid expands (which imports torch)."""
    import subprocess
    import sys

    from silodp.experiments import Store

    path = tmp_path / "r.db"
    code = ("import sys, silodp.experiments as e\n"
            f"try: e.reproduce('wbcd', quick=True, store={str(path)!r}, workers=1, progress=False)\n"
            "except ValueError as exc: print('torch' in sys.modules, exc)\n")
    with Store(path) as st, st.sweep_lock():
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert out.startswith("False store: another sweep is running"), out
