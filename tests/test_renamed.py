"""One meaning per name (issue 36 item 7): SPIDER's period is ``period`` (``q`` is a sampling rate),
FedProx's heterogeneity flags of ``silodp run`` are ``--model-heterogeneity`` / ``--input-heterogeneity``
(``--beta`` is the smoothness of ``silodp noise``), the audit's level is ``--confidence`` (``alpha``
is an RDP order). The old spellings are refused with the new ones named; a stored transcript that
spells the period ``q`` is read through one migration (``privacy.stored_transcript``)."""

import dataclasses

import pytest

from silodp.algorithms import get_algorithm
from silodp.algorithms.privacy import algorithm_class, calibrate_algorithm, stored_transcript
from silodp.algorithms.spider import SdpSpider, SpiderConfig, anchors
from silodp.cli import main
from silodp.service.plan import Settings


def _cli(capsys, argv):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("make", [
    lambda: get_algorithm("isrl-spider", rounds=4, batch_size=8, q=2),
    lambda: get_algorithm("sdp-spider", rounds=4, batch_size=8, q=2),
    lambda: SpiderConfig(q=2),
    lambda: SdpSpider.plan.transcript(n=100, rounds=4, batch_size=100, q=2),
    lambda: algorithm_class("isrl-spider").plan.transcript(n=100, rounds=4, batch_size=100, q=2),
    lambda: Settings.from_run_config({"algorithm": "isrl-spider", "q": 3}),
])
def test_the_old_period_name_is_refused_naming_the_new_one(make):
    with pytest.raises(ValueError, match=r"^q: renamed to period"):
        make()


def test_period_sets_the_anchors():
    """R = 10 rounds with period 4: fresh gradients at r = 0, 4, 8 (ceil(10 / 4) = 3), as Alg 3."""
    cfg = SdpSpider.plan.transcript(n=100, rounds=10, batch_size=100, period=4)
    assert anchors(cfg) == 3 and anchors(dataclasses.replace(cfg, period=1)) == 10
    algo = get_algorithm("isrl-spider", rounds=10, batch_size=8, period=4)
    assert algo.get_params()["period"] == 4 and "q" not in algo.get_params()
    assert Settings.from_run_config({"algorithm": "isrl-spider", "period": 3}).period == 3


#: a calibration request's transcript as stored before round 8 (the shared TranscriptConfig carried
#: every family's fields) and before round 7 (SPIDER's period spelled ``q``)
OLD_STORED = {"n": 500, "rounds": 20, "batch_size": 500, "clip": 1.0, "batch_size2": 500, "q": 4, "inner_steps": 1,
              "restarts": 1, "local_steps": 1, "beta": 1.0, "num_silos": 1, "silos_per_round": None, "dimension": 1,
              "replacement": False, "balls_in_bins": False, "charged_delta": 0.0}


def test_a_stored_transcript_with_q_is_read_through_the_one_migration():
    """A calibration request stored before the rename spells the period ``q``: stored_transcript reads it as
    ``period`` (the same certificate as the current spelling), while users' ``q`` stays refused."""
    spider = SdpSpider.Transcript
    old = stored_transcript(OLD_STORED, spider)
    new = SdpSpider.plan.transcript(n=500, rounds=20, batch_size=500, batch_size2=500, period=4, beta=1.0,
                                    replacement=False)
    assert old == new and anchors(old) == 5
    a = calibrate_algorithm("isrl-spider", old, 1.0, 1e-5, "tight")
    b = calibrate_algorithm("isrl-spider", new, 1.0, 1e-5, "tight")
    assert a.sigmas == b.sigmas and a.epsilon == b.epsilon <= 1.0
    with pytest.raises(ValueError, match="both a stored name and its current one"):
        stored_transcript({**OLD_STORED, "period": 4}, spider)


def test_the_experiments_read_stored_requests_through_the_migration():
    from silodp.experiments.execute import _requested

    stored = {**OLD_STORED, "n": 60, "rounds": 6, "batch_size": 60, "batch_size2": 60, "q": 3}
    _, cfg = _requested({"algorithm": "isrl-spider", "method": "tight", "transcript": stored})
    assert cfg.period == 3 and type(cfg) is SdpSpider.Transcript


@pytest.mark.parametrize("argv, old, new", [
    (["run", "--algorithm", "isrl-mb-sgd", "--dataset", "synthetic", "--epsilon", "1", "--alpha", "1"],
     "--alpha", "--model-heterogeneity"),
    (["run", "--algorithm", "isrl-mb-sgd", "--dataset", "synthetic", "--epsilon", "1", "--beta=1"],
     "--beta", "--input-heterogeneity"),
    (["audit", "--mechanism", "gaussian", "--noise-multiplier", "2", "--alpha", "0.05"], "--alpha", "--confidence"),
    (["noise", "--epsilon", "1", "--delta", "1e-5", "--algorithm", "isrl-spider", "--spider-q", "2"],
     "--spider-q", "--spider-period"),
    (["run", "--algorithm", "isrl-spider", "--dataset", "wbcd", "--epsilon", "1", "--spider-q", "2"],
     "--spider-q", "--spider-period"),
])
def test_old_flags_are_one_line_naming_the_new_flag(capsys, argv, old, new):
    code, out, err = _cli(capsys, argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and f"{old}: renamed to {new}" in err


def test_noise_beta_is_still_the_smoothness(capsys):
    """``--beta`` keeps its one meaning where it belongs: the smoothness of ``silodp noise``."""
    base = ["noise", "--epsilon", "1", "--delta", "1e-5", "--algorithm", "isrl-spider", "--n", "500", "--rounds", "20",
            "--batch-size", "500", "--spider-period", "4", "--without-replacement", "--method", "paper", "--json"]
    code, smooth, _ = _cli(capsys, base + ["--beta", "1"])
    code2, rough, _ = _cli(capsys, base)
    assert code == code2 == 0 and smooth != rough


def test_audit_confidence_is_the_level_of_the_lower_bound(capsys):
    """The same scores at two confidences: the more confident lower bound is the smaller one."""
    import json

    argv = ["audit", "--mechanism", "gaussian", "--noise-multiplier", "1", "--trials", "1000", "--json"]
    lows = []
    for level in ("0.5", "0.99"):
        code, out, _ = _cli(capsys, argv + ["--confidence", level])
        assert code == 0
        lows.append(json.loads(out)["epsilon_lower"])
    assert lows[1] < lows[0]
    code, _, err = _cli(capsys, argv + ["--confidence", "1"])
    assert code == 2 and "--confidence" in err


def test_library_audit_takes_confidence_and_refuses_alpha():
    from silodp.verify.audit.testing import audit

    def gaussian(world, trials, gen):
        import torch

        return torch.randn(trials, 1, generator=gen, dtype=torch.float64) + float(world)

    with pytest.raises(ValueError, match=r"^alpha: renamed to confidence"):
        audit(gaussian, 1.0, 1e-5, 200, alpha=0.05)
    low = audit(gaussian, 1.0, 1e-5, 2000, confidence=0.5, estimator="clopper-pearson").epsilon_lower
    high = audit(gaussian, 1.0, 1e-5, 2000, confidence=0.99, estimator="clopper-pearson").epsilon_lower
    assert high < low
