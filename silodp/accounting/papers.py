"""The papers' closed-form noise formulas, as published (so users can see what they cost).

Each function returns the noise *standard deviations* (square roots of the printed sigma^2) of
the released per-silo message, with the formula's source. Use
:func:`silodp.algorithms.privacy.paper_vs_tight` to see what a tight accountant certifies for
the same transcript (wasted noise, or a formula that falls short of its claim).

Lowy, Ghafelebashi & Razaviyayn (2023):
* Thm E.1 (proof): ISRL-DP Prox-SGD, sigma^2 = 8 L^2 ln(1/delta) / (eps^2 K^2).
* Thm E.2: ISRL-DP Prox-PL-SVRG, sigma_1^2 = 256 L^2 S E ln(2/delta) ln(5E/delta) / (eps^2 n^2),
  sigma_2^2 = 1024 L^2 S R ln(2/delta) ln(2.5R/delta) / (eps^2 n^2), K >= eps n / (4 sqrt(2 S R ln(2/delta))).
* Thm F.1 (proof): ISRL-DP FedProx-SPIDER, sigma_1^2 = 16 L^2 ln(1/delta) max(R/q, 1) / (eps^2 n^2),
  sigma_2^2 = 16 beta^2 R ln(1/delta) / (eps^2 n^2), sigma_hat_2^2 = 64 L^2 R ln(1/delta) / (eps^2 n^2).
* Appendix H.2: the experiments' SPIDER (sigma_2 = inf) and Fed-SPIDER (Alg 11):
  sigma_1^2 = 32 L^2 ln(2/delta) R / (n^2 eps^2), sigma_2^2 = 8 L^2 ln(2/delta) R / (n^2 eps^2),
  K_1 = K_2 = n sqrt(eps) / (2 sqrt(R)).
* Alg 7, 8, 10: the (eps~, delta~) each P_vec invocation is run at (Alg 10: as printed, or the
  split Thm F.2's proof needs, ``split="proof"``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from silodp._validation import check_count, check_delta, check_positive


def _log_inv(delta: float) -> float:
    return math.log(1.0 / check_delta("delta", delta))


# -- the formulas, once: plain arithmetic, evaluated on numbers here and on sympy symbols by
# -- silodp.bounds (which passes sympy's log and Max) -----------------------------------------------
def e1_variance(eps: Any, ln_inv_delta: Any, clip: Any, batch_size: Any, constant: Any = 8) -> Any:
    """Thm E.1 proof: sigma^2 = 8 L^2 ln(1/delta) / (eps^2 K^2) (``constant`` 16: Prop D.2 at 2L/K)."""
    return constant * clip**2 * ln_inv_delta / (eps**2 * batch_size**2)


def e2_variances(eps: Any, delta: Any, clip: Any, n: Any, epochs: Any, rounds: Any, restarts: Any,
                 log: Callable[[Any], Any] = math.log, sigma2_constant: Any = 1024,
                 sigma2_log_argument: Any = None) -> tuple[Any, Any]:
    """Thm E.2 (Alg 2), R = E Q: sigma_1^2 = 256 L^2 S E ln(2/delta) ln(5E/delta) / (eps n)^2 and
    sigma_2^2 = 1024 L^2 S R ln(2/delta) ln(2.5 R/delta) / (eps n)^2 (``sigma2_log_argument`` replaces
    2.5 R, ``sigma2_constant`` 1024: the corrected form)."""
    ln2 = log(2 / delta)
    arg = 5 * rounds / 2 if sigma2_log_argument is None else sigma2_log_argument
    s1 = 256 * clip**2 * restarts * epochs * ln2 * log(5 * epochs / delta) / (eps**2 * n**2)
    s2 = sigma2_constant * clip**2 * restarts * rounds * ln2 * log(arg / delta) / (eps**2 * n**2)
    return s1, s2


def f1_variances(eps: Any, ln_inv_delta: Any, clip: Any, beta: Any, n: Any, rounds: Any, q: Any,
                 maximum: Callable[..., Any] = max, constant: Any = 16) -> tuple[Any, Any, Any]:
    """Thm F.1 proof (Alg 3, K_1 = K_2 = n), with c = ``constant`` (16; 32 with the doubled zCDP
    budget): sigma_1^2 = c L^2 ln(1/delta) max(R/q, 1) / (eps n)^2, sigma_2^2 = c beta^2 R ln(1/delta)
    / (eps n)^2 (per unit ||w_r - w_{r-1}||), sigma_hat_2^2 = 4 c L^2 R ln(1/delta) / (eps n)^2."""
    scale = constant * ln_inv_delta / (eps**2 * n**2)
    return scale * clip**2 * maximum(rounds / q, 1), scale * beta**2 * rounds, 4 * scale * clip**2 * rounds


def thm_e1(epsilon: float, delta: float, clip: float, batch_size: int) -> dict[str, float]:
    """Thm E.1 proof: sigma = sqrt(8 L^2 ln(1/delta)) / (eps K)."""
    eps, L, K = check_positive("epsilon", epsilon), check_positive("clip", clip), check_count("batch_size", batch_size)
    return {"sigma": math.sqrt(e1_variance(eps, _log_inv(delta), L, K))}


def thm_e2(epsilon: float, delta: float, clip: float, n: int, epochs: int, inner_steps: int,
           restarts: int = 1) -> dict[str, float]:
    """Thm E.2 (Alg 2): sigma_1, sigma_2 and the minimum batch size K. R = E Q."""
    eps, L = check_positive("epsilon", epsilon), check_positive("clip", clip)
    n, E, Q, S = (check_count(k, v) for k, v in (("n", n), ("epochs", epochs), ("inner_steps", inner_steps), ("restarts", restarts)))
    dl = check_delta("delta", delta)
    R = E * Q
    l2 = math.log(2.0 / dl)
    s1, s2 = e2_variances(eps, dl, L, n, E, R, S)
    return {"sigma1": math.sqrt(s1), "sigma2": math.sqrt(s2),
            "min_batch_size": eps * n / (4.0 * math.sqrt(2.0 * S * R * l2))}


def thm_f1(epsilon: float, delta: float, clip: float, beta: float, n: int, rounds: int, q: int) -> dict[str, float]:
    """Thm F.1 proof (Alg 3 with K_1 = K_2 = n)."""
    eps, L, b = check_positive("epsilon", epsilon), check_positive("clip", clip), check_positive("beta", beta)
    n, R, q = check_count("n", n), check_count("rounds", rounds), check_count("q", q)
    s1, s2, s2_hat = f1_variances(eps, _log_inv(delta), L, b, n, R, q)
    return {"sigma1": math.sqrt(s1), "sigma2": math.sqrt(s2), "sigma2_hat": math.sqrt(s2_hat)}


def h2_spider(epsilon: float, delta: float, clip: float, n: int, rounds: int, q: int) -> dict[str, float]:
    """Appendix H.2, ISRL-DP FedProx-SPIDER as run in the experiments: F.1 with sigma_2 = inf."""
    out = thm_f1(epsilon, delta, clip, 1.0, n, rounds, q)
    out["sigma2"] = math.inf
    return out


def h2_fed_spider(epsilon: float, delta: float, clip: float, n: int, rounds: int) -> dict[str, float]:
    """Appendix H.2, ISRL-DP Fed-SPIDER (Alg 11): sigma_1 (difference step), sigma_2 (gradient step)."""
    eps, L = check_positive("epsilon", epsilon), check_positive("clip", clip)
    n, R = check_count("n", n), check_count("rounds", rounds)
    l2 = math.log(2.0 / check_delta("delta", delta))
    return {"sigma1": math.sqrt(32.0 * L * L * l2 * R / (n * n * eps * eps)),
            "sigma2": math.sqrt(8.0 * L * L * l2 * R / (n * n * eps * eps)),
            "batch_size": n * math.sqrt(eps) / (2.0 * math.sqrt(R))}


def alg7_pvec(epsilon: float, delta: float, num_silos: int, silos_per_round: int) -> dict[str, float]:
    """Alg 7 line 7: each round's P_vec runs at (N eps / (2 M), delta)."""
    eps = check_positive("epsilon", epsilon)
    N, M = check_count("num_silos", num_silos), check_count("silos_per_round", silos_per_round)
    return {"epsilon": N * eps / (2.0 * M), "delta": check_delta("delta", delta)}


def alg8_pvec(epsilon: float, delta: float, num_silos: int, silos_per_round: int, n: int, batch_size: int,
              epochs: int, inner_steps: int) -> dict[str, float]:
    """Alg 8 line 1: eps~ = eps N n / (8 M K sqrt(4 E Q ln(2/delta))), delta~ = delta / (2 E Q)."""
    eps, dl = check_positive("epsilon", epsilon), check_delta("delta", delta)
    N, M, n, K, E, Q = (check_count(k, v) for k, v in (("num_silos", num_silos), ("silos_per_round", silos_per_round),
                                                        ("n", n), ("batch_size", batch_size), ("epochs", epochs),
                                                        ("inner_steps", inner_steps)))
    return {"epsilon": eps * N * n / (8.0 * M * K * math.sqrt(4.0 * E * Q * math.log(2.0 / dl))),
            "delta": dl / (2.0 * E * Q)}


#: Budget splits of Alg 10 between its two invocation kinds (docs/paper-notes.md, accounting note 8):
#: "printed" (line 8 as printed) and "proof" (Thm F.2's proof: anchor = difference budget x sqrt(q)).
ALG10_SPLITS = ("printed", "proof")


def alg10_pvec(epsilon: float, delta: float, num_silos: int, silos_per_round: int, n: int, batch_size: int,
               batch_size2: int, rounds: int, q: int, split: str = "printed") -> dict[str, float]:
    """Alg 10 lines 8 and 12: the budgets of the full-gradient and the difference invocations.

    Line 12 (difference): eps~_2 = eps N n / (4 M K_2 sqrt(2 R ln(1/delta))), delta~_2 = delta / (2R).
    Line 8 (anchor), ``split``:

    * ``"printed"``: eps~_1 = eps n N / (4 K_1 M sqrt(2 ln(1/delta)) max(1, sqrt(q/R))),
      delta~_1 = delta q / (2R), as Alg 10 prints it;
    * ``"proof"``: what the privacy proof of Thm F.2 needs for its ceil(R/q) anchors to spend what the
      R differences spend, eps'' = eps' sqrt(q) (eps' the difference budget with K_1 for K_2):
      eps~_1 = eps n N sqrt(min(q, R)) / (4 K_1 M sqrt(2 R ln(1/delta))), delta~_1 =
      delta min(q, R) / (2R) (q > R: a single anchor, given the R differences' whole share; the
      proof's "delta'' = delta' sqrt(q)" contradicts its own delta q / (2R) and is not used).

    For q <= R the printed anchor budget is sqrt(R/q) times the proof's (2.24x at R = 20, q = 4).
    """
    eps, dl = check_positive("epsilon", epsilon), check_delta("delta", delta)
    N, M, n, K1, K2, R, q = (check_count(k, v) for k, v in (
        ("num_silos", num_silos), ("silos_per_round", silos_per_round), ("n", n), ("batch_size", batch_size),
        ("batch_size2", batch_size2), ("rounds", rounds), ("q", q)))
    if split not in ALG10_SPLITS:
        raise ValueError(f"split: must be one of {ALG10_SPLITS}, got {split!r}")
    li = math.log(1.0 / dl)
    if split == "printed":
        eps1 = eps * n * N / (4.0 * K1 * M * math.sqrt(2.0 * li) * max(1.0, math.sqrt(q / R)))
        delta1 = dl * q / (2.0 * R)
    else:
        eps1 = eps * n * N * math.sqrt(min(q, R)) / (4.0 * K1 * M * math.sqrt(2.0 * R * li))
        delta1 = dl * min(q, R) / (2.0 * R)
    return {"epsilon1": eps1, "delta1": delta1,
            "epsilon2": eps * N * n / (4.0 * M * K2 * math.sqrt(2.0 * R * li)),
            "delta2": dl / (2.0 * R)}
