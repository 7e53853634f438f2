"""Every encoded expression against the paper's formula, computed by hand (math module).

Each entry re-types the formula from the paper (equation cited) independently of the sympy
encoding and compares at two parameter points (conftest P1, P2; kappa = beta/mu).
"""

from math import ceil, floor, log, log2, sqrt

import pytest

from silodp.bounds import get_bound, list_bounds


def _k(p):
    return p["beta"] / p["mu"]


def _ind(a, b):
    return 1.0 if a < b else 0.0


def thm21_isrl(p):  # eq. (4)
    k = _k(p)
    return p["L"] ** 2 / p["mu"] * (k**2 * p["d"] * log(1 / p["delta"]) / (p["eps"] ** 2 * p["n"] ** 2 * p["M"])
                                     + k / (p["M"] * p["n"]))


def thm21_sdp(p):  # eq. (5)
    k = _k(p)
    return p["L"] ** 2 / p["mu"] * (k**2 * p["d"] * log(p["d"] / p["delta"]) ** 2
                                     / (p["eps"] ** 2 * p["n"] ** 2 * p["N"] ** 2) + k / (p["M"] * p["n"]))


def _opt(p):
    return p["Delta"] * (1 - p["mu"] / (2 * p["beta"])) ** p["R"]


def eq20(p):
    return _opt(p) + p["L"] ** 2 / p["mu"] * (16 * p["d"] * log(1 / p["delta"]) / (p["eps"] ** 2 * p["K"] ** 2 * p["M"])
                                              + 1 / (p["M"] * p["K"]))


def eq20_corrected(p):
    # eq. (19): e_{r+1} <= (1 - mu/2beta) e_r + 2 d sigma^2/(beta M) + 2 L^2/(beta M K),
    # sigma^2 = 4 (2L/K)^2 ln(1/delta)/eps^2 (Prop D.2); geometric sum <= 2 beta/mu.
    sigma_sq = 4 * (2 * p["L"] / p["K"]) ** 2 * log(1 / p["delta"]) / p["eps"] ** 2
    per_step = 2 * p["d"] * sigma_sq / (p["beta"] * p["M"]) + 2 * p["L"] ** 2 / (p["beta"] * p["M"] * p["K"])
    return _opt(p) + 2 * p["beta"] / p["mu"] * per_step


def eq22(p):
    return _opt(p) + p["L"] ** 2 / p["mu"] * (p["d"] * p["L"] ** 2 * log(p["d"] / p["delta"]) ** 2
                                              / (p["eps"] ** 2 * p["K"] ** 2 * p["N"] ** 2) + 1 / (p["M"] * p["K"]))


def eq22_corrected(p):
    return _opt(p) + p["L"] ** 2 / p["mu"] * (p["d"] * log(p["d"] / p["delta"]) ** 2
                                              / (p["eps"] ** 2 * p["K"] ** 2 * p["N"] ** 2) + 1 / (p["M"] * p["K"]))


def _pl_erm(p, silos):
    return _k(p) * p["L"] ** 2 * p["d"] * log(1 / p["delta"]) / (p["mu"] * p["eps"] ** 2 * p["n"] ** 2 * silos)


def _het(p):
    n_, m_ = p["N"], p["M"]
    return (n_ - m_) * p["upsilon"] ** 2 / (m_ * (n_ - 1)) if n_ > 1 else 0.0


def _g(p, silos_sqrt, log_term):
    return (sqrt(p["L"] * p["beta"] * p["Delta"] * p["d"] * log_term) / (p["eps"] * p["n"] * silos_sqrt)) ** (4 / 3)


def thm31(p):
    li = log(1 / p["delta"])
    return _g(p, sqrt(p["N"]), li) + p["L"] ** 2 * p["d"] * li / (p["eps"] ** 2 * p["n"] ** 2 * p["N"])


def thmf1(p):  # eq. (44)
    li, ind = log(1 / p["delta"]), _ind(p["M"], p["N"])
    return (_g(p, sqrt(p["M"]), li) + p["L"] ** 2 * p["d"] * li / (p["eps"] ** 2 * p["n"] ** 2 * p["M"])
            + ind * (p["L"] * sqrt(p["beta"] * p["Delta"] * p["d"] * li) / (p["eps"] * p["n"] ** 1.5 * p["M"])
                     + p["L"] ** 2 / (p["M"] * p["n"])))


def thm32(p):
    li = log(1 / p["delta"])
    return _g(p, p["N"], li) + p["d"] * p["L"] ** 2 * li / (p["eps"] ** 2 * p["n"] ** 2 * p["N"] ** 2)


def thmf2(p):
    l3 = log(p["d"] * p["n"] * p["N"] / p["delta"]) ** 3
    lr = log(p["R"] * p["d"] / (p["q"] * p["delta"])) ** 3
    ind = _ind(p["M"], p["N"])
    return (_g(p, p["N"], l3) + p["d"] * p["L"] ** 2 * lr / (p["eps"] ** 2 * p["n"] ** 2 * p["N"] ** 2)
            + ind * (p["L"] * sqrt(p["beta"] * p["Delta"] * p["d"] * l3)
                     / (p["eps"] * p["n"] ** 1.5 * p["N"] * sqrt(p["M"])) + p["L"] ** 2 / (p["M"] * p["n"])))


def _tau1_sq(p):
    return 2 * p["L"] ** 2 / (p["M"] * p["n"]) * _ind(p["M"], p["N"]) + p["d"] * p["sigma1"] ** 2 / p["M"]


def eq45(p):
    return 16 * (p["Delta"] / (p["eta"] * p["R"]) + _tau1_sq(p))


def eq45_corrected(p):
    return 20 * (p["Delta"] / (p["eta"] * p["R"]) + _tau1_sq(p))


def eq40_restarts(p):  # Thm E.2's summed recursion (37) with the 8 of eta kept, restarted S times
    rho = 3 / (p["eta"] * p["mu"] * p["R"])
    c = 3 * _het(p) / p["mu"] + 3 * p["d"] * (p["sigma1"] ** 2 + p["sigma2"] ** 2) / (2 * p["mu"] * p["M"])
    return rho ** p["S"] * p["Delta"] + c / (1 - rho)


def _lower(p, silos):
    return p["L"] ** 2 * min(1.0, p["d"] * log(1 / p["delta"]) / (p["eps"] ** 2 * p["n"] ** 2 * silos))


def lr2021b(p, n=None):
    n = p["n"] if n is None else n
    return p["L"] ** 2 / p["mu"] * (p["d"] * log(1 / p["delta"]) / (p["eps"] ** 2 * n**2 * p["N"]) + 1 / (n * p["N"]))


def appg_pl(p):  # eq. (49), middle line, delta_0 = delta/(4n)
    ld0 = log(4 * p["n"] / p["delta"])
    k = _k(p)
    return p["L"] ** 2 / p["mu"] * (k**2 * sqrt(p["d"] * ld0) / (p["eps"] ** 2 * sqrt(p["N"]))
                                     + k / sqrt(p["N"] * p["n"]))


def _hybrid(p):
    return {**p, "eps": p["eps"] / p["n"], "delta": p["delta"] / (4 * p["n"]), "M": p["N"]}


HAND = {
    "thm2.1-isrl": thm21_isrl,
    "thm2.1-sdp": thm21_sdp,
    "eq20": eq20,
    "eq20-corrected": eq20_corrected,
    "eq22": eq22,
    "eq22-corrected": eq22_corrected,
    # Lemma E.3's silo-sampling variance, missing from eqs. (11)-(13) for M < N (paper-notes 28)
    "thm2.1-isrl-sampling": lambda p: thm21_isrl(p) + _het(p) / p["mu"],
    "thm2.1-sdp-sampling": lambda p: thm21_sdp(p) + _het(p) / p["mu"],
    "eq20-sampling": lambda p: eq20_corrected(p) + 2 * _het(p) / p["mu"],
    "eq22-sampling": lambda p: eq22_corrected(p) + 2 * _het(p) / p["mu"],
    "thm2.2-isrl": lambda p: _pl_erm(p, p["N"]),
    "thm2.2-sdp": lambda p: _pl_erm(p, p["N"] ** 2),
    "thmE.2-isrl": lambda p: _pl_erm(p, p["M"]) + _het(p),
    "thmE.2-isrl-corrected": lambda p: _pl_erm(p, p["M"]) + _het(p) / p["mu"],
    "thmE.2-sdp": lambda p: _pl_erm(p, p["N"] ** 2) + _het(p) / p["mu"],
    "thm3.1": thm31,
    "thmF.1": thmf1,
    "thm3.2": thm32,
    "thmF.2": thmf2,
    "eq45": eq45,
    "eq45-corrected": eq45_corrected,
    "eq40-restarts": eq40_restarts,
    "thm3.3-isrl": lambda p: _lower(p, p["N"]),
    "thm3.3-sdp": lambda p: _lower(p, p["N"] ** 2),
    "wang2019": lambda p: sqrt(p["d"]) / (p["eps"] * p["n"] * p["N"]),
    "noble2022": lambda p: sqrt(p["d"]) / (p["eps"] * p["n"] * p["N"]),
    "arora2022": lambda p: (sqrt(p["d"] * log(1 / p["delta"])) / (p["eps"] * p["n"])) ** (4 / 3),
    "arora2022-pooled": lambda p: (sqrt(p["d"] * log(1 / p["delta"])) / (p["eps"] * p["n"] * p["N"])) ** (4 / 3),
    "lr2021b-sc-lower": lr2021b,
    "bassily2019-sc-lower": lambda p: p["L"] ** 2 / p["mu"] * (p["d"] / (p["eps"] * p["n"] * p["N"]) ** 2
                                                               + 1 / (p["n"] * p["N"])),
    "bassily2014-sc-lower": lambda p: p["L"] ** 2 * p["d"] / (p["mu"] * (p["eps"] * p["n"] * p["N"]) ** 2),
    "agarwal2012-lower": lambda p: p["L"] ** 2 / (p["mu"] * p["n"] * p["N"]),
    "hu2021": lambda p: (p["d"] * sqrt(p["N"] * p["T"]) * p["K"] / (p["eps"] ** 2 * p["n"] * p["N"])
                         + p["N"] * p["K"] ** 2 / p["T"] + sqrt(p["N"] / p["T"])
                         + p["d"] * p["K"] ** 2 / (p["eps"] ** 2 * p["n"])),
    "appG-pl": appg_pl,
    "appG-pl-derived": lambda p: thm21_isrl(_hybrid(p)),
    "appG-spider": lambda p: thm31(_hybrid(p)),
    "appG-nonconvex-lower": lambda p: _lower(_hybrid(p), p["N"]),
    "appG-lower": lambda p: lr2021b(p, n=1),
}


def test_every_registered_bound_has_a_hand_formula():
    assert set(HAND) == {b.id for b in list_bounds()}


@pytest.mark.parametrize("bound_id", sorted(HAND))
def test_value_matches_paper_formula(bound_id, point):
    b = get_bound(bound_id)
    p = {k: v for k, v in point.items() if k != "kappa"}
    assert b.evaluate(p) == pytest.approx(HAND[bound_id](p), rel=1e-10)


def test_term_values_sum_to_value(point):
    for b in list_bounds():
        assert sum(b.term_values(point).values()) == pytest.approx(b.evaluate(point), rel=1e-12)


# ------------------------------------------------------------------ prescriptions by hand
BASE = dict(n=20000, N=10, M=10, d=20, eps=1.0, delta=1e-6, L=1.0, beta=2.0, mu=0.1, Delta=5.0)


def test_thm21_prescribed_rounds_batch_and_noise():
    p, k = BASE, BASE["beta"] / BASE["mu"]
    r = ceil(2 * k * log(p["mu"] * p["Delta"] / p["L"] ** 2
                         * min(p["M"] * p["n"], p["eps"] ** 2 * p["n"] ** 2 * p["M"] / (p["d"] * log(1 / p["delta"])))))
    kb = floor(p["n"] / r)
    got = get_bound("thm2.1-isrl").prescribe(p)
    assert (got["R"], got["K"]) == (r, kb)
    assert got["sigma"] ** 2 == pytest.approx(8 * log(1 / p["delta"]) / (p["eps"] ** 2 * kb**2))
    fixed = get_bound("thm2.1-isrl").prescribe(p, variant="corrected")
    assert fixed["sigma"] ** 2 == pytest.approx(2 * got["sigma"] ** 2)
    # eq20 evaluated without R, K uses the same prescription
    assert get_bound("eq20").evaluate(p) == pytest.approx(eq20({**p, "R": r, "K": kb}))


def test_thm21_sdp_prescribed_rounds_use_n_squared():
    p, k = BASE, BASE["beta"] / BASE["mu"]
    r = ceil(2 * k * log(p["mu"] * p["Delta"] / p["L"] ** 2
                         * min(p["M"] * p["n"], p["eps"] ** 2 * p["n"] ** 2 * p["N"] ** 2 / (p["d"] * log(1 / p["delta"])))))
    assert get_bound("thm2.1-sdp").prescribe(p)["R"] == r


def test_rounds_clamped_to_one_when_log_is_negative():
    p = {**BASE, "Delta": 1e-9}
    assert get_bound("thm2.1-isrl").prescribe(p)["R"] == 1


def test_thmE2_prescription():
    p = {**BASE, "M": 5}
    k = p["beta"] / p["mu"]
    got = get_bound("thmE.2-isrl").prescribe(p)
    s = ceil(log2(p["Delta"] * p["mu"] * p["M"] * p["eps"] ** 2 * p["n"] ** 2 / (k * p["d"] * p["L"] ** 2)))
    r = 12 * k
    kb = ceil(max((p["n"] ** 2 / p["M"]) ** (1 / 3), p["eps"] * p["n"] / (4 * sqrt(2 * s * r * log(2 / p["delta"])))))
    e = ceil(r / floor(p["n"] / kb))
    assert (got["R"], got["S"], got["K"], got["E"]) == (r, s, kb, e)
    assert got["eta"] == pytest.approx(min(1, kb**1.5 * sqrt(p["M"]) / p["n"]) / (8 * p["beta"]))
    assert got["sigma1"] ** 2 == pytest.approx(
        256 * s * e * log(2 / p["delta"]) * log(5 * e / p["delta"]) / (p["eps"] ** 2 * p["n"] ** 2))
    assert got["sigma2"] ** 2 == pytest.approx(
        1024 * s * r * log(2 / p["delta"]) * log(2.5 * r / p["delta"]) / (p["eps"] ** 2 * p["n"] ** 2))
    fixed = get_bound("thmE.2-isrl").prescribe(p, variant="corrected")
    assert fixed["sigma2"] ** 2 == pytest.approx(
        4096 * s * r * log(2 / p["delta"]) * log(5 * r / p["delta"]) / (p["eps"] ** 2 * p["n"] ** 2))


def test_thmF1_prescription():
    p = {**BASE, "M": 5}
    li = log(1 / p["delta"])
    y = p["eps"] * p["n"] * p["L"] * sqrt(p["M"]) / sqrt(p["d"] * li * p["Delta"] * p["beta"])
    q = floor(min(y ** (2 / 3), p["n"] * p["M"]))
    r = p["eps"] * p["n"] * sqrt(p["M"] * q) * sqrt(p["Delta"] * p["beta"]) / (p["L"] * sqrt(p["d"] * li))
    got = get_bound("thmF.1").prescribe(p)
    assert got["q"] == q and got["R"] == pytest.approx(r)
    assert got["eta"] == pytest.approx(1 / (2 * p["beta"])) and got["K"] == p["n"]
    assert got["sigma1"] ** 2 == pytest.approx(16 * li / (p["eps"] * p["n"]) ** 2 * max(r / q, 1))
    assert got["sigma2"] ** 2 == pytest.approx(16 * p["beta"] ** 2 * r * li / (p["eps"] * p["n"]) ** 2)
    assert got["sigma2_hat"] ** 2 == pytest.approx(64 * r * li / (p["eps"] * p["n"]) ** 2)


def test_thm32_paper_prescription():
    p = BASE
    l3 = log(p["d"] * p["n"] * p["N"] / p["delta"]) ** 3
    x = p["eps"] * p["n"] * p["N"] * p["L"] / sqrt(p["Delta"] * p["beta"] * p["d"] * l3)
    r = ceil(p["eps"] * p["n"] * p["N"] / p["L"] * sqrt(p["Delta"] * p["beta"] / (p["d"] * l3)) * x)
    q = floor(0.5 * p["eps"] * p["n"] * p["N"] * p["L"]
              / sqrt(p["Delta"] * p["beta"] * p["d"] * log(r * p["d"] / p["delta"]) ** 3))
    got = get_bound("thm3.2").prescribe(p)
    assert (got["R"], got["q"]) == (r, q)
