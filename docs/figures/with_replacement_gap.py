"""How far the with-replacement certificate can be from the truth: silodp's default certificate
(the best of pld's multiplicity-hiding bound, rdp and advanced) against the rigorous lower bound of
one concrete neighbouring pair (:mod:`silodp.accounting.replacement_lower`), for issue 23's case
and the regimes of accounting_with_replacement.png. The table of docs/accounting.md
(``silodp report --generated with_replacement_gap --into docs/accounting.md``).

    python docs/figures/with_replacement_gap.py
    python docs/figures/with_replacement_gap.py --decompose   # where the gap comes from (issue 38 item 3)

``--decompose``: per row of the table, the pld certificate (the theorem's f(e) = gamma [(1 - beta)
T(alpha) + beta L(alpha)], charged as a symmetric pair), the same charge with the labelled term
L replaced by T (f_T = gamma T(alpha): exactly the one-step curve H_e(P || Q) of the lower bound's
collinear pair, every other record at -C, so what is left is the symmetric charge of that pair's
own curve), and the rigorous lower bound (that pair, one orientation, composed): the first ratio
is what the labelled term costs, the second what covering both orientations with one curve costs.
"""

import argparse
import math

from silodp.experiments.doctables import WITH_REPLACEMENT_CASES, with_replacement_gap


def decompose(cases=WITH_REPLACEMENT_CASES, interval: float = 1e-4) -> str:
    """The ``--decompose`` table (module docstring)."""
    import numpy as np

    from silodp.accounting import pld, pld_pairs, replacement_lower, with_replacement

    bound = pld.LOG_TAIL_MASS
    lines = ["| n | m | z | T | delta | certificate f | charge of f_T | lower bound | f / f_T | f_T / lower |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for n, m, z, steps, delta in cases:
        full = with_replacement.gaussian_pld(z, m, n, interval).self_compose(steps).get_epsilon_for_delta(delta)
        profile, tail, top = with_replacement._profile(z, m, n, interval, bound)

        def mixture_only(eps, profile=profile, tail=tail):
            e = np.exp(np.asarray(eps, dtype=float))
            alpha = 1.0 + (e - 1.0) / profile.gamma
            own = profile.gamma * profile.mixture_curve(alpha) * (1.0 + with_replacement._SLACK)
            return (1.0 - tail) * own + tail

        stride = with_replacement._STRIDE if top / interval > with_replacement._FINE_POINTS else 1
        one = pld.PrivacyLossDistribution(pld_pairs.symmetric_loss_pmf(mixture_only, top, interval, stride), None, bound)
        only_t = one.self_compose(steps).get_epsilon_for_delta(delta)
        lower = replacement_lower.lower_bound_epsilon(z, m, n, steps, delta)
        lines.append(f"| {n} | {m} | {z:g} | {steps} | {delta:g} | {math.ceil(full * 1e4) / 1e4:.4f} | "
                     f"{math.ceil(only_t * 1e4) / 1e4:.4f} | {math.floor(lower * 1e4) / 1e4:.4f} | "
                     f"{full / only_t:.3f}x | {only_t / lower:.3f}x |")
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--decompose", action="store_true", help="the gap's two parts (module docstring)")
    print(decompose() if ap.parse_args().decompose else with_replacement_gap())
