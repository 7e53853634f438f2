"""Alg 10's budget split (docs/paper-notes.md, accounting note 8): as printed and as Thm F.2's
proof needs it, against the closed forms of the paper's line 8 / line 12 and the proof's
eps'' = eps' sqrt(q)."""

import math

import pytest

from silodp.accounting import papers
from silodp.algorithms.spider import SdpSpider

EPS, DELTA, N, M, n = 1.0, 1e-5, 4, 4, 250


def _budgets(rounds, q, split, k1=n, k2=n):
    return papers.alg10_pvec(EPS, DELTA, N, M, n, k1, k2, rounds, q, split)


def test_printed_anchor_budget_is_sqrt_r_over_q_times_the_proofs():
    printed, proof = _budgets(20, 4, "printed"), _budgets(20, 4, "proof")
    assert printed["epsilon1"] / proof["epsilon1"] == pytest.approx(math.sqrt(20 / 4), rel=1e-12)  # 2.236
    assert printed["epsilon2"] == proof["epsilon2"] and printed["delta2"] == proof["delta2"]
    li = math.log(1 / DELTA)
    eps_prime = EPS * N / (4 * M * math.sqrt(2 * 20 * li))  # the proof's eps' (K1 = K2 = n)
    assert proof["epsilon1"] == pytest.approx(eps_prime * math.sqrt(4), rel=1e-12)
    assert proof["epsilon2"] == pytest.approx(eps_prime, rel=1e-12)


@pytest.mark.parametrize("rounds,q", [(20, 4), (40, 5), (12, 3)])
def test_proof_split_gives_anchors_the_differences_share(rounds, q):
    """sum of squared budgets (what advanced composition charges, Thm D.1): the R/q anchors spend
    what the R differences spend under the proof's split; R/q times more as printed."""
    anchors = rounds // q
    for split, factor in (("proof", 1.0), ("printed", rounds / q)):
        b = _budgets(rounds, q, split)
        assert anchors * b["epsilon1"] ** 2 == pytest.approx(factor * rounds * b["epsilon2"] ** 2, rel=1e-12)
        assert anchors * b["delta1"] == pytest.approx(DELTA / 2, rel=1e-12)


def test_splits_agree_at_q_equal_r_and_proof_caps_a_single_anchor():
    assert _budgets(20, 20, "printed") == pytest.approx(_budgets(20, 20, "proof"), rel=1e-12)
    one = _budgets(20, 50, "proof")  # q > R: one anchor, the differences' whole share
    assert one["epsilon1"] ** 2 == pytest.approx(20 * one["epsilon2"] ** 2, rel=1e-12)
    assert one["delta1"] == pytest.approx(DELTA / 2, rel=1e-12)
    assert _budgets(20, 50, "printed")["delta1"] > DELTA / 2  # as printed: delta q / (2R)


def test_split_is_validated_and_sdp_spider_uses_it():
    with pytest.raises(ValueError, match="split"):
        papers.alg10_pvec(EPS, DELTA, N, M, n, n, n, 20, 4, "tight")
    with pytest.raises(ValueError, match="split"):
        SdpSpider.with_split("nope")
    assert SdpSpider.with_split("printed") is SdpSpider and SdpSpider.alg10_split == "printed"
    proof = SdpSpider.with_split("proof")
    assert proof is SdpSpider.with_split("proof") and issubclass(proof, SdpSpider) and proof.name == "sdp-spider"
    cfg = SdpSpider.plan.transcript(n=n, rounds=20, batch_size=n, period=4, num_silos=N, dimension=3)
    plans = {cls.alg10_split: {r.group: r for r in cls.declare_shuffle(cfg, EPS, DELTA)} for cls in (SdpSpider, proof)}
    assert plans["proof"]["grad"].epsilon == pytest.approx(_budgets(20, 4, "proof")["epsilon1"])
    assert plans["printed"]["grad"].epsilon == pytest.approx(_budgets(20, 4, "printed")["epsilon1"])
    assert plans["proof"]["diff"] == plans["printed"]["diff"]
