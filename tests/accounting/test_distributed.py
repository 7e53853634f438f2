"""Distributed noise under secure aggregation (silodp.accounting.distributed) against independent
references: the exact Renyi divergences of the Skellam and of sums of discrete Gaussians, the
continuous Gaussian limit, Monte Carlo wrap-around and decoding, the accountants' allow-list."""

import json
import math

import numpy as np
import pytest
import torch
from scipy.special import ive, logsumexp

from silodp.accounting import distributed as D
from silodp.accounting import rdp


def _renyi(log_p, log_q, a):
    keep = np.isfinite(log_p) & np.isfinite(log_q)
    return float(logsumexp(a * log_p[keep] + (1 - a) * log_q[keep]) / (a - 1))


def _both(log_p, log_q, a):
    return max(_renyi(log_p, log_q, a), _renyi(log_q, log_p, a))


@pytest.mark.parametrize("mu", [2.0, 10.0, 100.0])
def test_skellam_rdp_bounds_the_exact_divergence(mu):
    """One coordinate, shift s (Delta1 = Delta2 = s): AKL21's bound is at least the exact Renyi
    divergence of Sk(mu) (pmf e^-mu I_|k|(mu)) and its shift, both directions; at mu = 100 it is
    within 5% of it up to order 8."""
    ks = np.arange(-3000, 3001)
    with np.errstate(divide="ignore"):
        log_q = np.log(ive(np.abs(ks), mu))
        for s in (1, 3):
            log_p = np.log(ive(np.abs(ks - s), mu))
            for a in (2, 4, 8, 32):
                exact = _both(log_p, log_q, a)
                bound = float(D.skellam_rdp([a], s, s, mu)[0])
                assert bound >= exact * (1 - 1e-9)
                if mu == 100.0 and a <= 8:
                    assert bound <= 1.05 * exact


def _ddg_sum_log_pmf(sigma, n, half=400):
    ks = np.arange(-half, half + 1)
    one = np.exp(-ks ** 2 / (2 * sigma ** 2))
    one /= one.sum()
    pmf = one
    for _ in range(n - 1):
        pmf = np.convolve(pmf, one)
    with np.errstate(divide="ignore"):
        return np.log(np.clip(pmf, 0, None))


@pytest.mark.parametrize("sigma,n", [(0.6, 2), (1.0, 2), (1.0, 3), (2.0, 2)])
def test_discrete_gaussian_sum_rho_bounds_the_exact_divergence(sigma, n):
    """The sum of n discrete Gaussians N_Z(0, sigma^2) (exact convolution) and its shift by s:
    the exact Renyi divergence is at most alpha rho (KLS21 Thm 1 as charged, d = 1)."""
    log_q = _ddg_sum_log_pmf(sigma, n)
    for s in (1, 4):
        log_p = np.concatenate([np.full(s, -np.inf), log_q[:-s]])
        rho = D.ddg_rho(s, sigma, n, 1)
        for a in (2, 4, 16):
            assert _both(log_p, log_q, a) <= a * rho * (1 + 1e-9)


def test_discrete_gaussian_reaches_the_continuous_limit():
    """At sigma = 50 tau vanishes: rho is the Gaussian's Delta^2 / (2 n sigma^2) to 1e-12, and
    at 24 bits both integer mechanisms' variance is within 1% of the continuous Gaussian that the
    same RDP conversion calibrates (rounding and the norm inflation vanish as gamma -> 0)."""
    assert D.ddg_rho(3.0, 50.0, 4, 64) == pytest.approx(9.0 / (2 * 4 * 2500), rel=1e-12)
    eps, dl, rounds = 2.0, 1e-5, 4
    orders = np.asarray(D.ORDERS, dtype=float)

    def gauss(z):  # z = sigma / (2 C) of the central sum
        return rdp.epsilon_from_rdp(orders, rounds * orders / (2 * z * z), (1 - D.WRAP_SHARE) * dl) - eps

    lo, hi = 0.1, 100.0
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if gauss(mid) > 0 else (lo, mid)
    continuous = (2.0 * hi) ** 2
    for mech in ("skellam", "discrete-gaussian"):
        p = D.calibrate(mech, 16, 1.0, 4, 24, eps, dl, rounds)
        assert continuous <= p.variance() <= 1.01 * continuous


@pytest.fixture(scope="module")
def calibrated():
    return {m: D.calibrate(m, 20, 1.0, 4, 14, 3.0, 1e-5, 3) for m in D.MECHANISMS}


def test_calibration_certifies_the_target_and_is_minimal(calibrated):
    for mech, p in calibrated.items():
        assert D.certified_epsilon(p, 1e-5) <= 3.0
        assert D.wrap_probability(p) <= D.WRAP_SHARE * 1e-5
        if mech != "binomial":
            less = D.DistributedParams(**{**vars(p), "noise": p.noise * 0.99})
            assert D._rdp_epsilon(less, (1 - D.WRAP_SHARE) * 1e-5) > 3.0


def test_fewer_summed_silos_need_more_noise_each():
    """The certificate counts the noise of the 3 summed silos only: their aggregate noise (real
    units) is what all 6 give without dropouts, so each silo adds about twice as much."""
    full = D.calibrate("skellam", 20, 1.0, 6, 16, 3.0, 1e-5, 2)
    floor = D.calibrate("skellam", 20, 1.0, 6, 16, 3.0, 1e-5, 2, summed=3)
    def aggregate(p):
        return p.scale ** 2 * p.noise * p.summed

    assert floor.summed == 3 and aggregate(floor) == pytest.approx(aggregate(full), rel=0.05)
    assert floor.variance() > 1.8 * full.variance()
    assert D.certified_epsilon(floor, 1e-5) <= 3.0


def _decoding_errors(x, p, gen, trials: int = 200) -> torch.Tensor:
    """``trials`` rounds of encode (fresh rotation) -> modular sum -> decode of the silos' rows ``x``,
    minus their true sum: ``[trials, d]``."""
    from silodp.algorithms import distributed as E
    from silodp.algorithms.shuffle import rotation_signs

    errs = []
    for _ in range(trials):
        signs = rotation_signs(x.shape[1], gen)
        errs.append(E.decode(E.modular_sum(E.encode(x, p, signs, gen), p.modulus), p, x.shape[0], signs) - x.sum(0))
    return torch.stack(errs)


@pytest.mark.parametrize("mech", D.MECHANISMS)
def test_monte_carlo_wrap_and_decoding(mech):
    """Encode, sum modulo 2^bits, decode: (a) at the calibrated bits the decoded sum is unbiased
    with the stated variance (5 standard errors; the bound's extra 1/4 per silo for rounding
    allows 10% above); (b) with the noise raised until the wrap bound is 0.05-0.5, the wrap frequency over 400
    releases is at most the bound (plus 4 binomial standard errors)."""
    from silodp.algorithms import distributed as E
    from silodp.algorithms.shuffle import rotation_signs

    gen = torch.Generator().manual_seed(7)
    x = torch.randn(4, 20, generator=gen, dtype=torch.float64)
    x = x / x.norm(dim=1, keepdim=True)
    p = D.calibrate(mech, 20, 1.0, 4, 14, 3.0, 1e-5, 3)
    err = _decoding_errors(x, p, gen)
    assert torch.all(err.mean(0).abs() < 5 * err.std(0) / 200 ** 0.5)
    assert 0.9 * p.variance() <= float((err ** 2).mean()) <= 1.1 * p.variance()

    small = _wrapping_bits(p)
    bound = D.wrap_probability(small)
    assert 0.05 <= bound <= 0.5
    hits = 0
    for _ in range(400):
        signs = rotation_signs(20, gen)
        total = E.integers(x, small, signs, gen).sum(0)
        decoded = E.centred(torch.remainder(total, small.modulus), small.modulus, E.centre(small, 4))
        hits += int((decoded != total).any())
    assert hits / 400 <= bound + 4 * math.sqrt(bound * (1 - bound) / 400)


def _wrapping_bits(p):
    """One release of ``p`` with its noise scaled so that the wrap bound is 0.05-0.5."""
    lo, hi = 1.0, 2.0
    while D.wrap_probability(_scaled(p, hi)) < 0.05:
        lo, hi = hi, hi * 2
    for _ in range(30):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if D.wrap_probability(_scaled(p, mid)) < 0.05 else (lo, mid)
    return _scaled(p, hi)


def _scaled(p, factor):
    noise = p.noise * factor
    return D.DistributedParams(**{**vars(p), "rounds": 1, "noise": round(noise) if p.mechanism == "binomial" else noise})


def test_events_are_validated_and_allow_listed(calibrated):
    from silodp.accounting.accountants import PldAccountant, RdpAccountant, ZcdpAccountant

    for mech in ("skellam", "discrete-gaussian"):
        p = calibrated[mech]
        event = D.release_event(p)
        for acc in (RdpAccountant(), ZcdpAccountant()):
            got = acc.compose(event, p.rounds).get_epsilon(1e-5)
            assert math.isfinite(got) and got >= 0.9 * D.certified_epsilon(p, 1e-5)
        assert not PldAccountant().supports(event)
    with pytest.raises(ValueError, match="l1_sensitivity"):
        D.SkellamSumDpEvent(2.0, 1.0, 10.0)
    with pytest.raises(ValueError, match="sigma"):
        D.DiscreteGaussianSumDpEvent(1.0, 0.3, 2, 4)
    with pytest.raises(ValueError, match="variance"):
        D.SkellamSumDpEvent(1.0, 1.0, math.nan)
    with pytest.raises(ValueError, match="mechanism"):
        D.release_event(calibrated["binomial"])


def test_cli_prints_the_contract_keys(capsys):
    from silodp.cli import main

    code = main(["distributed", "--mechanism", "discrete-gaussian", "--dimension", "20", "--clip", "1",
                 "--silos", "4", "--bits", "14", "--epsilon", "3", "--delta", "1e-5", "--rounds", "3", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert {"noise_parameter", "bits", "modulus", "wrap_probability", "variance", "central_variance", "ratio",
            "epsilon"} <= set(out)
    assert out["modulus"] == 2 ** 14 and out["epsilon"] <= 3.0 and out["ratio"] == pytest.approx(
        out["variance"] / out["central_variance"])
    assert main(["distributed", "--mechanism", "skellam", "--dimension", "20", "--clip", "1", "--silos", "4",
                 "--bits", "3", "--epsilon", "3", "--delta", "1e-5", "--json"]) == 2
    assert "bits" in capsys.readouterr().err


def test_bad_input_raises_naming_the_argument():
    with pytest.raises(ValueError, match="mechanism"):
        D.calibrate("laplace", 4, 1.0, 2, 16, 1.0, 1e-5)
    with pytest.raises(ValueError, match="summed"):
        D.calibrate("skellam", 4, 1.0, 2, 16, 1.0, 1e-5, summed=3)
    with pytest.raises(ValueError, match="orders"):
        D.skellam_rdp([1.5], 1.0, 1.0, 1.0)


def test_record_level_coupled_rounding_moves_at_most_the_charged_shift():
    """Record level: with the silo's private uniform V shared by both neighbours, floor(z + V)
    and floor(z' + V) differ by less than ||z - z'|| + sqrt(d') in l2 (the Delta2 charged), and
    the worst case nearly reaches it; the decoded record-level sum is unbiased."""
    gen = torch.Generator().manual_seed(11)
    d, c = 16, 3.0
    l2, l1 = D.sensitivities(c, d, record=True)
    assert l2 == 2 * c + 4.0 and l1 == min(4.0 * l2, l2 * l2)
    z = torch.randn(20000, d, generator=gen, dtype=torch.float64) * 10
    step = torch.randn(20000, d, generator=gen, dtype=torch.float64)
    step = step / step.norm(dim=1, keepdim=True) * 2 * c
    v = torch.rand(20000, d, generator=gen, dtype=torch.float64)
    moved = (torch.floor(z + v) - torch.floor(z + step + v)).norm(dim=1)
    assert float(moved.max()) < l2 and float(moved.max()) > 2 * c
    p = D.calibrate("skellam", 16, 1.0, 3, 18, 3.0, 1e-5, 2, vector_norm=20.0)
    assert D.certified_epsilon(p, 1e-5) <= 3.0 and p.bound == 20.0
    x = torch.randn(3, 16, generator=gen, dtype=torch.float64) * 4
    err = _decoding_errors(x, p, gen)
    assert torch.all(err.mean(0).abs() < 5 * err.std(0) / 200 ** 0.5)
    with pytest.raises(ValueError, match="vector_norm"):
        D.calibrate("binomial", 16, 1.0, 3, 18, 3.0, 1e-5, vector_norm=20.0)
