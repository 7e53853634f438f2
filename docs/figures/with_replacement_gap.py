"""How loose the with-replacement certificate can be: silodp's default certificate (the better of
the labelled-multiplicity pld / rdp and advanced) against the rigorous lower bound of one concrete
neighbouring pair (:mod:`silodp.accounting.replacement_lower`: every other record contributes -C,
the changed one +C vs -C), for issue 23's case and the regimes of accounting_with_replacement.png.

    python docs/figures/with_replacement_gap.py

The true epsilon lies between the two columns; the ratio is how much the labelling may cost at
most (it may cost less: the worst pair is not known).
"""

from silodp.accounting import GaussianDpEvent, SampledWithReplacementDpEvent, SelfComposedDpEvent, tightest_epsilon
from silodp.accounting import events as ev
from silodp.accounting import replacement_lower

#: (n records, batch m, z = sigma / C, steps, delta): issue 23's case, then the figure's two panels
CASES = [(40, 8, 6.0, 25, 1e-6)] + [(1000, 100, 4.0, t, 1e-5) for t in (10, 100, 1000)] + \
        [(100_000, 10, 2.0, t, 1e-5) for t in (10, 100, 1000)]


def main() -> None:
    print(f"{'n':>7} {'m':>4} {'z':>4} {'T':>5} {'delta':>6} | {'certified':>9} {'by':>8} {'lower':>8} {'ratio':>6}")
    for n, m, z, steps, delta in CASES:
        event = SelfComposedDpEvent(SampledWithReplacementDpEvent(n, m, GaussianDpEvent(z)), steps)
        upper, name = tightest_epsilon(event, delta, ev.REPLACE_ONE)
        lower = replacement_lower.lower_bound_epsilon(z, m, n, steps, delta)
        print(f"{n:>7} {m:>4} {z:>4g} {steps:>5} {delta:>6g} | {upper:9.4f} {name:>8} {lower:8.4f} "
              f"{upper / lower if lower > 0 else float('inf'):5.2f}x", flush=True)


if __name__ == "__main__":
    main()
