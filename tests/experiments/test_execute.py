"""silodp.experiments.execute: one run, its noise (calibrated once per transcript, scaled by the
clip), its metrics; failures and skips as records, not exceptions."""

import math

import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from silodp.algorithms import privacy as transcripts
from silodp.algorithms import registry
from silodp.algorithms.baselines import IsrlMBSGD
from silodp.experiments import execute as ex
from silodp.experiments.grid import RunConfig

N_MALIGNANT = 136  # WBCD training records of the smaller silo (212 - 42 test - 34 validation)


def _cfg(**kw):
    base = dict(dataset="wbcd", algorithm="isrl-mb-sgd", epsilon=2.0, calibration="tight", silos_per_round=2,
                rounds=5, step_size=0.5, clip=1.0, trial=0)
    return RunConfig(**{**base, **kw})


def _run(cfg):
    request = ex.calibration_request(cfg)
    return ex.execute(cfg, None if request is None else ex.calibrate_request(request))


def test_paper_batch_size_rule():
    assert ex.paper_batch_size(136, 25) == 66  # 136 sqrt(24) / (2 * 5) = 66.6
    assert ex.paper_batch_size(10, 1) == 10 and ex.paper_batch_size(3, 10_000) == 1
    assert ex.paper_batch_size(1000, 25, epsilon=1.0) == 100


def test_calibrating_at_clip_one_and_scaling_is_the_same_event():
    """Sensitivities scale with L, so noise L * sigma(L=1) at clip L certifies the same epsilon."""
    cfg = _cfg(algorithm="isrl-spider", params={"period": 2}, clip=5.0)
    request = ex.calibration_request(cfg)
    assert request["transcript"]["clip"] == 1.0
    cal = ex.calibrate_request(request)
    prep = ex.prepare(cfg)
    real = prep.algorithm_class(**prep.params).plan.transcript_config(prep.problem, prep.train)
    assert real.clip == 5.0
    unit = transcripts.algorithm_class("isrl-spider").plan.transcript(**request["transcript"])
    scaled = {k: v * 5.0 for k, v in cal["sigmas"].items()}
    eps, _ = transcripts.certify("isrl-spider", real, scaled, request["delta"], "rdp")
    eps_unit, _ = transcripts.certify("isrl-spider", unit, cal["sigmas"], request["delta"], "rdp")
    assert eps == pytest.approx(eps_unit, rel=1e-9)  # the same event, up to rounding
    assert cal["epsilon"] <= 2.0 <= eps * 1.15  # PLD-calibrated; RDP agrees within 15%


@pytest.mark.parametrize("calibration", ["tight", "paper"])
def test_shuffle_runs_use_the_sweeps_calibration(calibration, monkeypatch):
    """SDP runs take the binomial protocol's (g, b, p) from the clip-1 calibration as they are (P_vec
    normalizes each message by its bound, so they do not depend on the clip) and do not calibrate
    again: the run certifies exactly what the calibration did, under its method."""
    cfg = _cfg(algorithm="sdp-prox-sgd", calibration=calibration, clip=5.0)
    cal = ex.calibrate_request(ex.calibration_request(cfg))
    prep = ex.prepare(cfg)
    real = prep.algorithm_class(**prep.params).plan.transcript_config(prep.problem, prep.train)
    direct = transcripts.calibrate_algorithm("sdp-prox-sgd", real, cfg.epsilon, prep.delta, method=calibration)
    protocol = [{g: (p["g"], p["b"], p["p"], p["rotate"]) for g, p in s.items()}
                for s in (direct.shuffle, cal["shuffle"])]
    assert real.clip == 5.0 and protocol[0] == protocol[1] and direct.epsilon == cal["epsilon"]
    monkeypatch.setattr(transcripts, "calibrate_algorithm", None)  # a second calibration would fail
    out = ex.execute(cfg, cal)
    assert out["status"] == "ok" and out["certified_epsilon"] == cal["epsilon"]
    old = ex.execute_safely(cfg, {k: v for k, v in cal.items() if k != "shuffle"})  # stored by an older silodp
    assert old["status"] == "failed" and "without protocol parameters" in old["error"]


def _exact_gaussian_epsilon(mu: float, delta: float) -> float:
    """Exact (eps, delta) of a Gaussian mechanism with sensitivity / sigma = mu (Balle & Wang 2018)."""
    def gap(eps):
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta
    return brentq(gap, 0.0, 100.0)


@pytest.mark.parametrize("algorithm, extra, key, releases", [
    ("isrl-mb-sgd", {}, "sigma", 5),            # R = 5 full-batch releases
    ("isrl-spider", {"params": {"period": 1}}, "sigma1", 5),  # Alg 3 with q = 1: one anchor gradient per round
])
def test_certified_epsilon_against_the_exact_gaussian(algorithm, extra, key, releases):
    """Full batches (K = n, no subsampling): the transcript is `releases` Gaussian mechanisms of
    sensitivity 2L/n, i.e. one Gaussian with mu = sqrt(releases) * (2L/n) / sigma. The recorded
    certified epsilon must be at least the exact one (it is an upper bound) and within 1% of it
    (PLD discretization), and at most the target."""
    cfg = _cfg(algorithm=algorithm, batch_size=N_MALIGNANT, **extra)
    out = _run(cfg)
    assert out["status"] == "ok" and out["metrics"]["n"] == N_MALIGNANT
    mu = math.sqrt(releases) * (2.0 / N_MALIGNANT) / out["sigmas"][key]
    exact = _exact_gaussian_epsilon(mu, out["delta"])
    assert exact <= out["certified_epsilon"] <= 1.01 * exact
    assert out["certified_epsilon"] <= cfg.epsilon
    assert out["delta"] == pytest.approx(1 / N_MALIGNANT ** 2)


def test_a_run_reports_metrics_and_its_noise():
    out = _run(_cfg(clip=2.0))
    m = out["metrics"]
    assert 0 <= m["test_error"] <= 1 and 0 <= m["val_error"] <= 1 and m["train_loss"] > 0
    assert m["batch_size"] == ex.paper_batch_size(N_MALIGNANT, 5) and out["wall_s"] > 0
    sigma_at_clip_one = _run(_cfg(clip=1.0))["sigmas"]["sigma"]
    assert out["sigmas"]["sigma"] == pytest.approx(2.0 * sigma_at_clip_one, rel=1e-12)


def test_last_iterate_metrics():
    spider = _run(_cfg(algorithm="isrl-spider", params={"period": 2}))["metrics"]
    mb = _run(_cfg())["metrics"]
    assert {"last_test_error", "last_val_error", "last_train_loss"} <= set(spider)
    assert spider["last_train_loss"] != spider["train_loss"]  # a uniformly random iterate, not the last
    assert mb["last_test_error"] == mb["test_error"] and mb["last_val_loss"] == mb["val_loss"]


def test_runs_are_deterministic_and_trials_differ():
    a, b, c = _run(_cfg()), _run(_cfg()), _run(_cfg(trial=1))
    assert a["metrics"] == b["metrics"] and a["metrics"] != c["metrics"]


def test_local_sgd_spreads_the_rule_batch_over_local_steps():
    out = _run(_cfg(algorithm="isrl-local-sgd", params={"local_steps": 4}))
    assert out["metrics"]["batch_size"] == ex.paper_batch_size(N_MALIGNANT, 5) // 4


def test_non_private_runs_have_no_epsilon():
    out = _run(_cfg(algorithm="mb-sgd", epsilon=None, calibration="none"))
    assert out["status"] == "ok" and out["certified_epsilon"] is None and out["delta"] is None


def test_paper_calibration_without_a_formula_is_skipped():
    result = ex.calibrate_request(ex.calibration_request(_cfg(calibration="paper")))
    assert result["status"] == "skipped" and "closed-form" in result["error"]
    out = ex.execute_safely(_cfg(calibration="paper"), result)
    assert out["status"] == "skipped"


def test_unregistered_algorithm_is_skipped_and_bad_config_fails():
    out = ex.execute_safely(_cfg(algorithm="no-such-algorithm"))
    assert out["status"] == "skipped" and "not registered" in out["error"]
    bad = _cfg(batch_size=500)  # larger than the smallest silo, sampled without replacement
    out = ex.execute_safely(bad, {"status": "ok", "sigmas": {"sigma": 1.0}, "epsilon": 1.0, "delta": 1e-5})
    assert out["status"] == "failed" and "batch_size" in out["error"] and "Traceback" in out["traceback"]
    out = ex.execute_safely(_cfg(params={"no_such_option": 1}), {"status": "ok", "sigmas": {"sigma": 1.0},
                                                                 "epsilon": 1.0, "delta": 1e-5})
    assert out["status"] == "failed" and "no_such_option" in out["error"]


def test_a_family_with_its_own_hooks_is_calibrated_once_through_them(monkeypatch):
    """An algorithm whose plan overrides ``calibrate`` / ``certify_noise`` and reads a parameter of
    its own (``calibration_settings``) goes through the same request path as the others: the
    request carries the setting (so runs differing in it do not share), the hook calibrates, the
    run and the re-certification certify through its ``certify_noise``."""
    from silodp.algorithms.plan import GaussianPlan

    seen = []

    class OwnPlan(GaussianPlan):
        def calibration_settings(self):
            return {"output": self.algo.output}

        def calibrate(self, cfg, epsilon, delta):
            seen.append((self.algo.output, cfg.clip))
            return super().calibrate(cfg, epsilon, delta)

        def certify_noise(self, cfg, sigmas, delta):
            return 2 * super().certify_noise(cfg, sigmas, delta)  # a different (looser) certificate

    class OwnHooks(IsrlMBSGD):
        name = "own-hooks"
        Plan = OwnPlan

    monkeypatch.setitem(registry.ALGORITHMS, OwnHooks.name, OwnHooks)
    cfg = _cfg(algorithm=OwnHooks.name, params={"output": "last"})
    request = ex.calibration_request(cfg)
    assert request["settings"] == {"output": "last"}
    assert ex.request_key(request) != ex.request_key(ex.calibration_request(_cfg(algorithm=OwnHooks.name)))
    cal = ex.calibrate_request(request)
    assert cal["status"] == "ok" and seen == [("last", 1.0)]
    with pytest.warns(UserWarning, match="above the requested"):  # its run certifies by its own hook
        out = ex.execute(cfg, cal)
    assert out["certified_epsilon"] == pytest.approx(2 * cal["epsilon"], rel=1e-6)
    assert "certifies epsilon" in ex.recertify(request, cal)  # and so does the re-certification


def test_dp_scaffold_is_calibrated_like_the_others():
    """DP-SCAFFOLD's request carries its observer; the shared calibration is the run's own
    (sigma_g toward the server), and the run reports the same certificate."""
    from silodp.algorithms.scaffold import DpScaffold

    cfg = _cfg(algorithm="dp-scaffold", rounds=2, batch_size=20, params={"local_steps": 2})
    request = ex.calibration_request(cfg)
    assert request["settings"] == {"privacy_against": "server", "participation": "worst-case"}
    cal = ex.calibrate_request(request)
    assert cal["status"] == "ok" and cal["epsilon"] <= 2.0 and ex.recertify(request, cal) is None
    prep = ex.prepare(cfg)
    own = DpScaffold(**prep.params, epsilon=2.0, delta=prep.delta).plan.resolve(prep.problem, prep.train)
    assert cal["sigmas"]["sigma"] == pytest.approx(own[0]["sigma"], rel=1e-9) and cal["epsilon"] == pytest.approx(own[1])
    out = ex.execute(cfg, cal)
    assert out["status"] == "ok" and out["certified_epsilon"] == pytest.approx(cal["epsilon"], rel=1e-9)


def test_a_dp_scaffold_calibration_toward_a_third_party_is_reused():
    """Calibrated toward a third party (user sampling 1/2), the stored certificate is the server's
    (above the target); the re-certification checks the third party's guarantee against the
    target, so the cached calibration is reused, and refused once that guarantee exceeds it."""
    params = {"local_steps": 2, "privacy_against": "third-party", "user_sampling": 0.5}
    request = ex.calibration_request(_cfg(algorithm="dp-scaffold", rounds=2, batch_size=20, params=params))
    cal = ex.calibrate_request(request)
    assert cal["status"] == "ok" and cal["epsilon"] > 2.0 and ex.recertify(request, cal) is None
    assert "above the target" in ex.recertify({**request, "epsilon": 1.0}, cal)


def test_run_chunk_restores_the_thread_count():
    import torch

    before = torch.get_num_threads()
    [out] = ex.run_chunk([(_cfg(algorithm="mb-sgd", epsilon=None, calibration="none").to_dict(), None)])
    assert out["status"] == "ok" and torch.get_num_threads() == before


def test_evaluate_agrees_with_the_problem_and_handles_images():
    import torch

    from silodp.algorithms import Federation, Problem, lenet
    from silodp.algorithms.prox import L2Squared

    prep = ex.prepare(_cfg(regularizer="l2:0.1"))
    w = prep.problem.model.init(torch.Generator().manual_seed(0), dtype=torch.float64)
    error, loss = ex.evaluate(prep.problem, w, prep.data.test)
    assert error == pytest.approx(1 - prep.problem.accuracy(w, prep.data.test), abs=1e-12)
    assert loss == pytest.approx(prep.problem.objective(w, prep.data.test), rel=1e-12)
    assert isinstance(prep.problem.regularizer, L2Squared)
    gen = torch.Generator().manual_seed(1)
    fed = Federation.from_silos([torch.randn(3, 3, 32, 32, generator=gen) for _ in range(2)],
                                [torch.tensor([0.0, 1, 2]), torch.tensor([3.0, 4, 5])])
    cnn = Problem(lenet(), "softmax")
    error, loss = ex.evaluate(cnn, cnn.model.init(gen, dtype=torch.float32), fed)
    assert 0 <= error <= 1 and loss > 0
    with pytest.raises(ValueError, match="regularizer"):
        ex.regularizer("l3:1")
