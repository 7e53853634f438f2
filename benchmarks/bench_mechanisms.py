"""Held-out-style accounting benchmark: 30 mechanisms, silodp's tightest certificate against
dp-accounting's fine PLD and its optimistic PLD (a lower estimate), with wall times against
dp-accounting and (Poisson add/remove Gaussians) Opacus' PRV accountant, in one run.

For each mechanism: silodp's epsilon (``tightest_epsilon``: the smaller of its pld and rdp
certificates), dp-accounting's pessimistic PLD at value_discretization_interval 1e-4 ("fine"),
a lower reference -- for Gaussian and Poisson-subsampled Gaussian steps a *rigorous* lower bound
(the larger of :func:`silodp.accounting.pld_lower.lower_bound_epsilon`, a dominated PLD with its
round-off, wrapped and moved tails subtracted from delta, whose grid bias grows with the steps,
and :func:`~silodp.accounting.pld_lower.count_test_lower_bound`, a closed-form hypothesis test; for
balls-in-bins epochs, which dp-accounting does not offer, :func:`silodp.accounting.allocation.lower_bound_epsilon`), elsewhere dp-accounting's *optimistic* PLD (below the true epsilon only up to its own
round-off; marked ``~``) -- the excess of silodp over the tighter of dp-accounting's fine
PLD and silodp's own lower reference, and the times (wall, and CPU time of each side, ``time.process_time``: this process only, so a loaded
machine moves the wall times, not these). Printed: median and worst excess, the slowest silodp call
(wall and CPU), per case the CPU ratio dp-accounting / silodp and whether it is >= 3x (issue 38), and
the median and worst ratios.

    python benchmarks/bench_mechanisms.py [--quick]
    python benchmarks/bench_mechanisms.py --sweep   # silodp's default against dp-accounting's fine PLD
    python benchmarks/bench_mechanisms.py --allocation   # balls-in-bins against pld-accounting (issue 38)

``--sweep``: the 1% claim of issue 23 over its range, Poisson-subsampled Gaussians (z = 1, add/remove)
at every q in {1e-6, 1e-4, 1e-2}, steps in {1e2, 1e4, 1e6}, delta in {1e-6, 1e-9, 1e-12}: silodp's
``tightest_epsilon`` against dp-accounting's pessimistic PLD at discretization 1e-4 (which charges no
round-off, so where it is the smaller it may itself be below the true epsilon).
"""

from __future__ import annotations

import one_thread  # noqa: F401  (first: numpy's BLAS on one thread)
import argparse
import logging
import statistics
import time
import warnings

from dp_accounting import NeighboringRelation as NR, dp_event as dpe
from dp_accounting.pld import pld_privacy_accountant, privacy_loss_distribution as dpa_pld

from silodp.accounting import allocation, events as ev, pld_lower, pld_pairs
from silodp.accounting.calibration import tightest_epsilon

R1, AR = ev.REPLACE_ONE, ev.ADD_OR_REMOVE_ONE
_NR = {R1: NR.REPLACE_ONE, AR: NR.ADD_OR_REMOVE_ONE}


def _poisson(q, z, steps, rel, delta):
    return (f"poisson q={q:g} z={z:g} T={steps} {'r1' if rel is R1 else 'ar'} d={delta:g}",
            ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(z)), steps),
            dpe.SelfComposedDpEvent(dpe.PoissonSampledDpEvent(q, dpe.GaussianDpEvent(z)), steps),
            lambda: dpa_pld.from_gaussian_mechanism(z, sampling_prob=q, value_discretization_interval=1e-4,
                                                    pessimistic_estimate=False,
                                                    neighboring_relation=_NR[rel]).self_compose(steps),
            rel, delta, (z, q, steps) if rel is AR else None,
            [(pld_pairs.GaussianPair(q, q, z), steps)] if rel is R1 else
            [[(pld_pairs.GaussianPair(q, 0.0, z), steps)], [(pld_pairs.GaussianPair(0.0, q, z), steps)]])


def _balls(z, batches, epochs, delta):
    """Balls-in-bins epochs (add/remove): no dp-accounting event; the rigorous lower bound only."""
    return (f"balls-in-bins z={z:g} t={batches} E={epochs} ar d={delta:g}",
            ev.SelfComposedDpEvent(ev.BallsInBinsDpEvent(batches, ev.GaussianDpEvent(z)), epochs), None, None,
            AR, delta, None, lambda: allocation.lower_bound_epsilon(z, batches, epochs, delta))


def _simple(name, ours, theirs, optimistic, rel, delta, steps):
    if theirs is None:  # no dp-accounting event (EpsilonDeltaDpEvent): the lower reference only
        wrapped = None
    elif isinstance(theirs, dpe.RandomizedResponseDpEvent):  # its PLD ignores a self-composed count
        wrapped = dpe.ComposedDpEvent([theirs] * steps)
    else:
        wrapped = dpe.SelfComposedDpEvent(theirs, steps)
    return (name, ev.SelfComposedDpEvent(ours, steps), wrapped,
            lambda: optimistic().self_compose(steps), rel, delta, None, None)


CASES = [
    _poisson(0.01, 1.0, 1000, R1, 1e-5), _poisson(0.01, 1.0, 1000, AR, 1e-5), _poisson(0.03, 1.5, 700, AR, 1e-5),
    _poisson(0.001, 0.8, 10000, AR, 1e-6), _poisson(0.1, 0.8, 100, R1, 1e-6), _poisson(0.25, 2.0, 80, R1, 1e-10),
    _poisson(0.25, 2.0, 80, AR, 1e-10), _poisson(6e-4, 1.1, 300000, R1, 1e-9), _poisson(1e-5, 0.8, 1000000, AR, 1e-9),
    _poisson(0.05, 3.0, 2000, AR, 1e-8), _poisson(0.002, 0.6, 5000, R1, 1e-5), _poisson(0.5, 5.0, 200, AR, 1e-6),
    _poisson(0.01, 2.0, 20000, AR, 1e-12), _poisson(0.2, 1.2, 300, R1, 1e-7),
    ("gaussian z=2 T=50 r1", ev.SelfComposedDpEvent(ev.GaussianDpEvent(2.0), 50),
     dpe.SelfComposedDpEvent(dpe.GaussianDpEvent(2.0), 50),  # dp-accounting's REPLACE_ONE shifts by 2C too
     lambda: dpa_pld.from_gaussian_mechanism(2.0, sensitivity=2.0, value_discretization_interval=1e-4,
                                             pessimistic_estimate=False).self_compose(50), R1, 1e-5, None,
     [(pld_pairs.GaussianPair(1.0, 0.0, 1.0), 50)]),
    ("gaussian z=10 T=1000 ar", ev.SelfComposedDpEvent(ev.GaussianDpEvent(10.0), 1000),
     dpe.SelfComposedDpEvent(dpe.GaussianDpEvent(10.0), 1000),
     lambda: dpa_pld.from_gaussian_mechanism(10.0, value_discretization_interval=1e-4,
                                             pessimistic_estimate=False).self_compose(1000), AR, 1e-8, None,
     [(pld_pairs.GaussianPair(1.0, 0.0, 10.0), 1000)]),
]
for b, steps, delta in [(2.0, 50, 1e-6), (10.0, 400, 1e-6), (1.0, 5, 1e-9)]:
    CASES.append(_simple(f"laplace b={b:g} T={steps} d={delta:g}", ev.LaplaceDpEvent(b), dpe.LaplaceDpEvent(b),
                         lambda b=b: dpa_pld.from_laplace_mechanism(b, value_discretization_interval=1e-4,
                                                                    pessimistic_estimate=False), AR, delta, steps))
for a, d, steps in [(0.3, 2, 30), (0.05, 1, 200)]:
    CASES.append(_simple(f"dlaplace a={a:g} D={d} T={steps}", ev.DiscreteLaplaceDpEvent(a, d),
                         dpe.DiscreteLaplaceDpEvent(a, d),
                         lambda a=a, d=d: dpa_pld.from_discrete_laplace_mechanism(
                             a, d, value_discretization_interval=1e-4, pessimistic_estimate=False), AR, 1e-6, steps))
for p, k, steps in [(0.5, 4, 20), (0.9, 2, 30)]:
    CASES.append(_simple(f"rr p={p:g} k={k} T={steps}", ev.RandomizedResponseDpEvent(p, k),
                         dpe.RandomizedResponseDpEvent(p, k),
                         lambda p=p, k=k: dpa_pld.from_randomized_response(
                             p, k, value_discretization_interval=1e-4, pessimistic_estimate=False), R1, 1e-6, steps))
for sigma, d, steps in [(2.0, 1, 20), (5.0, 2, 40)]:
    CASES.append((f"dgauss s={sigma:g} D={d} T={steps}", ev.SelfComposedDpEvent(ev.DiscreteGaussianDpEvent(sigma, d), steps),
                  None, lambda sigma=sigma, d=d, steps=steps: dpa_pld.from_discrete_gaussian_mechanism(
                      sigma, d, value_discretization_interval=1e-4, pessimistic_estimate=False).self_compose(steps),
                  AR, 1e-6, None, None))
for e, d, steps in [(0.5, 1e-8, 100), (1.0, 0.0, 30)]:
    CASES.append(_simple(f"eps-delta ({e:g}, {d:g}) T={steps}", ev.EpsilonDeltaDpEvent(e, d), None,
                         lambda e=e, d=d: dpa_pld.from_privacy_parameters(
                             dpa_pld.common.DifferentialPrivacyParameters(e, d), value_discretization_interval=1e-4),
                         R1, 1e-5, steps))
CASES += [_balls(1.0, 100, 10, 1e-5), _balls(1.5, 10, 100, 1e-5), _balls(0.8, 1000, 5, 1e-6)]
QUICK = [0, 1, 14, 16, 19, 21, 23, 27]


def timed(fn):
    """``fn()``, its wall time and its CPU time (``time.process_time``: this process only, so a
    loaded machine moves the wall time, not this one)."""
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t, time.process_time() - c


def _met(r: dict) -> str:
    """Whether silodp took at most a third of dp-accounting's CPU time ('' where dp-accounting has no event)."""
    return "" if r["cpu_dpa"] != r["cpu_dpa"] else ("yes" if r["speedup"] >= 3.0 else "no")


def run(case) -> dict:
    name, ours, theirs, optimistic, rel, delta, prv, pairs = case
    mine, t_ours, cpu_ours = timed(lambda: tightest_epsilon(ours, delta, rel)[0])
    fine = t_fine = float("nan")
    cpu_fine = float("nan")
    if theirs is not None:
        acc = pld_privacy_accountant.PLDAccountant(_NR[rel], value_discretization_interval=1e-4)
        fine, t_fine, cpu_fine = timed(lambda: acc.compose(theirs).get_epsilon(delta))
    rigorous = pairs is not None
    if callable(pairs):  # a closed-form rigorous lower bound
        lower = pairs()
    elif rigorous:  # one direction, or the larger of two (add/remove); the better of two rigorous bounds
        groups = pairs if isinstance(pairs[0], list) else [pairs]
        try:
            lower = max(max(pld_lower.lower_bound_epsilon(g, delta), pld_lower.count_test_lower_bound(*g[0], delta))
                        for g in groups)
        except ValueError:  # beyond the grid: dp-accounting's optimistic PLD instead
            rigorous, lower = False, optimistic().get_epsilon_for_delta(delta)
    else:
        lower = optimistic().get_epsilon_for_delta(delta)
    t_prv = float("nan")
    if prv is not None:
        from opacus.accountants import PRVAccountant

        z, q, steps = prv
        acc_prv = PRVAccountant()
        acc_prv.history = [(z, q, steps)]
        _, t_prv, _ = timed(lambda: acc_prv.get_epsilon(delta))
    best_ref = min(x for x in (fine, mine) if x == x)  # the tightest sound certificate in the run
    return {"name": name, "silodp": mine, "dpa_fine": fine, "lower": lower, "rigorous": rigorous, "excess": mine / best_ref - 1.0,
            "over_lower": mine / lower - 1.0 if lower > 0 else float("nan"),
            "t_silodp": t_ours, "cpu_silodp": cpu_ours, "t_dpa": t_fine, "cpu_dpa": cpu_fine, "t_prv": t_prv,
            "speedup": cpu_fine / max(cpu_ours, 1e-6)}


SWEEP = [(q, steps, delta) for q in (1e-6, 1e-4, 1e-2) for steps in (100, 10_000, 1_000_000)
         for delta in (1e-6, 1e-9, 1e-12)]


def sweep() -> None:
    """The ``--sweep`` table and its summary (module docstring)."""
    print(f"{'q':>6} {'steps':>8} {'delta':>6} {'silodp':>9} {'dpa-fine':>9} {'excess':>8} {'t silodp':>8} {'cpu':>6} "
          f"{'t dpa':>7}")
    rows = []
    for q, steps, delta in SWEEP:
        ours = ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(1.0)), steps)
        theirs = dpe.SelfComposedDpEvent(dpe.PoissonSampledDpEvent(q, dpe.GaussianDpEvent(1.0)), steps)
        mine, t_ours, cpu_ours = timed(lambda: tightest_epsilon(ours, delta, AR)[0])
        acc = pld_privacy_accountant.PLDAccountant(NR.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4)
        fine, t_fine, _ = timed(lambda: acc.compose(theirs).get_epsilon(delta))
        excess = mine / fine - 1.0 if fine > 0 else (0.0 if mine == 0 else float("inf"))
        rows.append((excess, t_ours, cpu_ours))
        print(f"{q:6g} {steps:8d} {delta:6g} {mine:9.4f} {fine:9.4f} {100 * excess:+7.2f}% {t_ours:8.2f} {cpu_ours:6.2f} "
              f"{t_fine:7.2f}", flush=True)
    excess = [r[0] for r in rows]
    print(f"\n{len(rows)} cases: excess over dp-accounting's fine PLD median {100 * statistics.median(excess):+.3f}%, "
          f"worst {100 * max(excess):+.3f}%, {sum(e > 0.01 for e in excess)} above +1%; "
          f"slowest silodp call {max(r[1] for r in rows):.2f} s wall, {max(r[2] for r in rows):.2f} s CPU")


#: Issue 38's random-allocation grid: one epoch of t batches, z 0.9, delta 1e-6.
ALLOCATION_GRID = (50, 200, 500, 1000)


def allocation_grid(batches=ALLOCATION_GRID, z: float = 0.9, delta: float = 1e-6) -> bool:
    """Balls-in-bins against Feldman & Shenfeld's ``pld-accounting`` (the dev extra): silodp's epsilon
    beside its (lower, upper) range and silodp's rigorous lower bound, CPU seconds of both, and
    whether silodp is within 1% of its upper bound (never above 1.01 x) and >= 10x faster."""
    import PLD_accounting as pla

    ok = True
    allocation.epsilon(z, 2, 1, delta)  # warm both up (lazy imports), outside the timings
    pla.gaussian_allocation_epsilon_range(delta=delta, sigma=z, num_steps=2)
    print(f"{'batches':>7} {'silodp':>9} {'pla upper':>9} {'pla lower':>9} {'our lower':>9} {'/upper':>8} "
          f"{'cpu silodp':>10} {'cpu pla':>8} {'speedup':>8}")
    for t in batches:
        allocation._epoch_pld.cache_clear()
        c0 = time.process_time()
        ours = allocation.epsilon(z, t, 1, delta)
        c1 = time.process_time()
        upper, lower = pla.gaussian_allocation_epsilon_range(delta=delta, sigma=z, num_steps=t)
        c2 = time.process_time()
        floor = allocation.lower_bound_epsilon(z, t, 1, delta)
        within, fast = ours <= 1.01 * upper, (c2 - c1) >= 10 * (c1 - c0)
        ok &= within and fast
        print(f"{t:7d} {ours:9.4f} {upper:9.4f} {lower:9.4f} {floor:9.4f} {100 * (ours / upper - 1):+7.2f}% "
              f"{c1 - c0:10.2f} {c2 - c1:8.1f} {(c2 - c1) / (c1 - c0):7.0f}x", flush=True)
    print(f"all within 1% of pld-accounting's upper bound and >= 10x faster: {ok}")
    return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sweep", action="store_true", help="the 1%% sweep against dp-accounting's fine PLD")
    ap.add_argument("--allocation", action="store_true",
                    help="balls-in-bins against pld-accounting at 50-1000 batches (about 100 s of its CPU)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)  # dp-accounting's notice that optimistic PLDs use privacy buckets
    if args.sweep:
        return sweep()
    if args.allocation:
        allocation_grid()
        return None
    cases = [CASES[i] for i in QUICK] if args.quick else CASES
    # both libraries warmed up on an event of no case (lazy imports out of the first row's time)
    tightest_epsilon(ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(0.5, ev.GaussianDpEvent(7.0)), 3), 1e-5, AR)
    pld_privacy_accountant.PLDAccountant(NR.ADD_OR_REMOVE_ONE).compose(
        dpe.SelfComposedDpEvent(dpe.PoissonSampledDpEvent(0.5, dpe.GaussianDpEvent(7.0)), 3)).get_epsilon(1e-5)
    rows = []
    print(f"{'mechanism':<40} {'silodp':>9} {'dpa-fine':>9} {'lower':>9} {'excess':>8} {'>lower':>8} "
          f"{'t silodp':>8} {'cpu':>6} {'t dpa':>7} {'cpu dpa':>7} {'t prv':>7} {'cpu x':>7} {'>=3x':>4}")
    for case in cases:
        r = run(case)
        rows.append(r)
        print(f"{r['name']:<40} {r['silodp']:9.4f} {r['dpa_fine']:9.4f} {'' if r['rigorous'] else '~'}{r['lower']:8.4f} {100 * r['excess']:+7.2f}% "
              f"{100 * r['over_lower']:+7.2f}% {r['t_silodp']:8.2f} {r['cpu_silodp']:6.3f} {r['t_dpa']:7.2f} {r['cpu_dpa']:7.3f} "
              f"{r['t_prv']:7.2f} {r['speedup']:6.1f}x {_met(r):>4}", flush=True)
    excess = [r["excess"] for r in rows]
    ratios = [r["speedup"] for r in rows if r["cpu_dpa"] == r["cpu_dpa"]]
    slow = [r["name"] for r in rows if _met(r) == "no"]
    prv = [r["t_prv"] / r["t_silodp"] for r in rows if r["t_prv"] == r["t_prv"]]
    print(f"\n{len(rows)} mechanisms: excess over dp-accounting's fine PLD (where it is tighter) median "
          f"{100 * statistics.median(excess):+.3f}%, worst {100 * max(excess):+.3f}%; "
          f"slowest silodp call {max(r['t_silodp'] for r in rows):.2f} s wall, "
          f"{max(r['cpu_silodp'] for r in rows):.2f} s CPU; CPU time ratio dp-accounting / silodp median "
          f"{statistics.median(ratios):.2f}x, worst {min(ratios):.2f}x" +
          (f"; wall time ratio Opacus PRV / silodp {statistics.median(prv):.2f}x" if prv else ""))
    print(f">= 3x dp-accounting's CPU time on every case it supports: {'met' if not slow else 'MISSED'}"
          + (f" ({len(slow)} below: {', '.join(slow)})" if slow else "")
          + f"; every silodp call under 1 s CPU: {'met' if max(r['cpu_silodp'] for r in rows) < 1.0 else 'MISSED'}")


if __name__ == "__main__":
    main()
