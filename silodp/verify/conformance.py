"""Named conformance checks run over every registered entry: what any accountant and any
algorithm of silodp must satisfy, whoever wrote it (scikit-learn's ``check_estimator``: one
function per property, every one run, failures collected, expected failures explicit).

Accountants (:data:`ACCOUNTANT_CHECKS`, run by :func:`check_accountant` on a factory
``(relation) -> Accountant``) are probed with the events of :data:`PROBES` they support:

* ``check_supports_never_raises`` -- ``supports()`` answers a bool for malformed and foreign input.
* ``check_supports_a_probe`` -- it certifies at least one probe (else the rest cannot run).
* ``check_not_below_exact`` -- every certificate is sound: at least the exact Gaussian epsilon
  (Balle & Wang 2018's analytic curve of the composed Gaussian, a T-fold composition of multiplier
  z being one Gaussian of multiplier z / sqrt(T)), at least dp-accounting's *optimistic* PLD of a
  Poisson-subsampled Gaussian (a lower bound of the exact epsilon), and for P_vec invocations
  (:class:`~silodp.accounting.events.PvecDpEvent`) at least the exact epsilon of one coordinate's
  pair (Bin(m, 1/2) + g, Bin(m, 1/2)), summed by scipy's binomial pmf.
* ``check_monotone_in_noise`` / ``check_monotone_in_steps`` -- no less epsilon for less noise
  (fewer trials) or more steps (uses).
* ``check_count_equals_repeats`` -- ``compose(e, k)`` certifies what ``k`` calls of ``compose(e)``
  and ``compose(SelfComposed(e, k))`` certify, and counts ``k`` steps: an accountant that drops
  the count fails here.
* ``check_split_equals_whole`` -- ``compose(Composed(a, b))`` equals ``compose(a); compose(b)``.
* ``check_incremental_equals_batch`` -- querying between composes changes nothing: the final
  certificate is the one of everything composed at once.
* ``check_delta_inverts_epsilon`` -- ``get_delta(get_epsilon(delta))`` is ``delta`` (at most, and
  within :data:`INVERSE_RTOL` in log), and ``get_epsilon`` of that delta gives the epsilon back.
* ``check_atomic_failure`` -- a refused ``compose`` (a tree with an unknown part, a count of 0)
  leaves the steps, the certificate and the ledger as they were.
* ``check_ledger_recomposes`` -- a fresh accountant composing :attr:`ledger` certifies the same.

Algorithms (:data:`ALGORITHM_CHECKS`, run by :func:`check_algorithm` on one small run):

* ``check_ledger_equals_declaration`` -- the run sent exactly what it declared (every group, its
  count), the ledger having checked every release while the run went on.
* ``check_calibration_meets_target`` -- the calibrated run certifies at most the target epsilon.
* ``check_refuses_halved_noise`` -- the ledger refuses the run whose noise is halved (Gaussian).
* ``check_refuses_one_more_message`` -- and one message beyond each group's declared count.
* ``check_reproducible_by_seed`` -- the same seed gives the same output bit for bit; a private
  run's output changes with the seed.
* ``check_message_sensitivity`` -- replacing one record of one silo moves that silo's released
  messages (noiseless, at the same iterates: replayed transcript) by at most the sensitivity the
  accountant assumes, 2 * bound / K for a batch of K (twice per use of the record), and no other
  silo's at all (Gaussian algorithms; the shuffle ones' totals move only where the record is used).

A check that does not apply to an entry (a Gaussian check on the P_vec accountant, a noise check
on a non-private algorithm) says so (:class:`NotApplicable`, reported as ``"not applicable"``),
never passes silently. Expected failures are named with a reason: the ``expected_failed_checks``
argument, or the entry's own ``expected_failed_checks`` class attribute; one that passes is
reported too (``"xpass"``: remove it).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from silodp.accounting import events as ev
from silodp.accounting.calibration import AccountantFactory

if TYPE_CHECKING:
    from silodp.algorithms.base import FederatedAlgorithm

#: (noise multiplier, steps) of the battery's Gaussian compositions, and its delta; the
#: monotonicity checks compare its points (more noise, same steps; more steps, same noise)
GAUSSIAN_BATTERY = ((0.8, 1), (2.0, 10), (4.0, 10), (4.0, 50))
MONOTONE_IN_NOISE = ((2.0, 10), (4.0, 10))
MONOTONE_IN_STEPS = ((4.0, 10), (4.0, 50))
DELTA = 1e-5
#: a Poisson-subsampled Gaussian (q, z, steps) compared with dp-accounting's optimistic PLD
SUBSAMPLED = (0.05, 1.0, 40)
#: the accountant of :func:`check_algorithm`'s refused runs (their certificate is computed before
#: the ledger refuses them and then discarded: the cheapest sound one serves; shuffle-DP runs keep
#: their own, cached with the calibration's)
REFUSED_RUN_ACCOUNTANT = "rdp"
#: P_vec invocations (levels g, trials b, messages m) of one coordinate, compared with the exact pair
PVEC_BATTERY = ((2, 4, 100), (4, 2, 200))
#: repetitions of the count checks: a count dropped (1 step for 8) moves epsilon several-fold
REPEATS = 8
#: relative tolerance of the equivalence checks (count, split, incremental, ledger): the PLD
#: engine rounds each composition's grid pessimistically, so k compositions of one step and one
#: k-fold self-composition differ by its discretization (measured below 1e-3 at these probes)
EQUIVALENCE_RTOL = 5e-3
#: relative tolerance of ``get_delta(get_epsilon(delta))`` against ``delta`` (bisections stop at
#: rtol 1e-6 in log(1/delta) or epsilon; a grid's epsilon is a step function of delta)
INVERSE_RTOL = 0.05


class NotApplicable(Exception):
    """Raised by a check that does not apply to the entry (the message says why)."""


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One named check on one entry: ``status`` is ``"passed"``, ``"failed"``, ``"xfail"`` (an
    expected failure that failed), ``"xpass"`` (an expected failure that passed) or
    ``"not applicable"``; ``detail`` the failure's or the inapplicability's message."""

    check: str
    status: str
    detail: str = ""


#: the accountant checks by name, in the order they run
ACCOUNTANT_CHECKS: dict[str, Callable[["_AccountantSubject"], dict | None]] = {}
#: the algorithm checks by name, in the order they run
ALGORITHM_CHECKS: dict[str, Callable[["_AlgorithmSubject"], None]] = {}


def _accountant_check(fn: Callable) -> Callable:
    ACCOUNTANT_CHECKS[fn.__name__] = fn
    return fn


def _algorithm_check(fn: Callable) -> Callable:
    ALGORITHM_CHECKS[fn.__name__] = fn
    return fn


class _Foreign(ev.DpEvent):
    """An event no accountant knows."""


def _pvec(g: int, b: int, m: int, uses: int = 1) -> ev.DpEvent:
    one = ev.PvecDpEvent(g, b, m, 1, float(g))  # one coordinate: the l2 shift is g
    return ev.SelfComposedDpEvent(one, uses) if uses > 1 else one


#: one step of each kind an accountant may certify; the equivalence checks use those it supports
PROBES: tuple[ev.DpEvent, ...] = (
    ev.GaussianDpEvent(2.0),
    ev.PoissonSampledDpEvent(0.05, ev.GaussianDpEvent(1.0)),
    _pvec(2, 4, 100),
)


@dataclasses.dataclass
class _AccountantSubject:
    make: AccountantFactory
    relation: ev.NeighboringRelation

    def fresh(self) -> Any:
        return self.make(self.relation)

    def epsilon(self, event: ev.DpEvent, count: int = 1) -> float | None:
        acc = self.fresh()
        if not acc.supports(event):
            return None
        return acc.compose(event, count).get_epsilon(DELTA)

    @functools.cached_property
    def probes(self) -> list[ev.DpEvent]:
        return [e for e in PROBES if self.fresh().supports(e)]

    def probe(self) -> ev.DpEvent:
        if not self.probes:
            raise NotApplicable("it certifies none of the probes")
        return self.probes[0]


def _close(a: float, b: float, rtol: float = EQUIVALENCE_RTOL) -> bool:
    return a == b or abs(a - b) <= rtol * max(abs(a), abs(b))


@_accountant_check
def check_supports_never_raises(s: _AccountantSubject) -> None:
    acc = s.fresh()
    for odd in (None, object(), "gaussian", _Foreign(), ev.NonPrivateDpEvent(),
                ev.ComposedDpEvent((ev.GaussianDpEvent(1.0), _Foreign()))):
        answer = acc.supports(odd)  # must not raise
        assert isinstance(answer, bool), f"supports({odd!r}) returned {answer!r}"
    assert not acc.supports(_Foreign()), "supports() accepted an event no one defined"


@_accountant_check
def check_supports_a_probe(s: _AccountantSubject) -> None:
    assert s.probes, f"it certifies none of the probes {PROBES}"


@_accountant_check
def check_not_below_exact(s: _AccountantSubject) -> dict:
    from silodp.accounting.gaussian import epsilon_for_delta

    out: dict = {}
    for z, steps in GAUSSIAN_BATTERY:
        eps = s.epsilon(ev.GaussianDpEvent(z), steps)
        if eps is None:
            continue
        exact = epsilon_for_delta(z / math.sqrt(steps), DELTA, ev.sensitivity(s.relation))
        assert eps >= exact * (1 - 1e-9), f"gaussian z={z}, steps={steps}: {eps} below the exact {exact}"
        out[("gaussian", z, steps)] = eps
    q, z, steps = SUBSAMPLED
    eps = s.epsilon(ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(z)), steps)
    if eps is not None:
        lower = _dp_accounting_lower(s.relation)
        assert eps >= lower * (1 - 1e-6), f"poisson q={q}, z={z}, steps={steps}: {eps} below dp-accounting's {lower}"
        out[("poisson", q, z, steps)] = eps
    for g, b, m in PVEC_BATTERY:
        eps = s.epsilon(_pvec(g, b, m))
        if eps is None:
            continue
        exact = _exact_pvec_epsilon(g, m * b)
        assert eps >= exact * (1 - 1e-6), f"pvec g={g}, b={b}, m={m}: {eps} below the exact {exact}"
        out[("pvec", g, b, m)] = eps
    if not out:
        raise NotApplicable("it certifies none of the battery's events")
    return out


def _monotone(s: _AccountantSubject, pairs: list[tuple[ev.DpEvent, ev.DpEvent]], what: str) -> None:
    """Each pair (weaker, stronger): epsilon of the first at least the second's."""
    compared = 0
    for weak, strong in pairs:
        a, b = s.epsilon(weak), s.epsilon(strong)
        if a is None or b is None:
            continue
        compared += 1
        assert a >= b * (1 - 1e-9), f"not monotone in {what}: {weak} certifies {a} < {b} of {strong}"
    if not compared:
        raise NotApplicable(f"it certifies no pair of the {what} battery")


@_accountant_check
def check_monotone_in_noise(s: _AccountantSubject) -> None:
    (z1, t), (z2, _) = MONOTONE_IN_NOISE
    _monotone(s, [(ev.SelfComposedDpEvent(ev.GaussianDpEvent(z1), t), ev.SelfComposedDpEvent(ev.GaussianDpEvent(z2), t)),
                  (_pvec(2, 2, 100, 3), _pvec(2, 8, 100, 3))], "noise")


@_accountant_check
def check_monotone_in_steps(s: _AccountantSubject) -> None:
    (z, t1), (_, t2) = MONOTONE_IN_STEPS
    _monotone(s, [(ev.SelfComposedDpEvent(ev.GaussianDpEvent(z), t2), ev.SelfComposedDpEvent(ev.GaussianDpEvent(z), t1)),
                  (_pvec(2, 4, 100, 8), _pvec(2, 4, 100, 2))], "steps")


@_accountant_check
def check_count_equals_repeats(s: _AccountantSubject) -> None:
    for event in s.probes or [s.probe()]:
        counted = s.fresh().compose(event, REPEATS)
        repeated = s.fresh()
        for _ in range(REPEATS):
            repeated.compose(event)
        nested = s.fresh().compose(ev.SelfComposedDpEvent(event, REPEATS))
        lengths = [len(counted), len(repeated), len(nested)]
        assert len(set(lengths)) == 1, f"{event}: compose(e, {REPEATS}), {REPEATS} x compose(e) and " \
                                       f"compose(SelfComposed(e, {REPEATS})) count {lengths} steps"
        eps = [a.get_epsilon(DELTA) for a in (counted, repeated, nested)]
        assert _close(eps[0], eps[1]) and _close(eps[0], eps[2]), \
            f"{event}: compose(e, {REPEATS}), {REPEATS} x compose(e) and compose(SelfComposed(e, {REPEATS})) " \
            f"certify {eps}"


@_accountant_check
def check_split_equals_whole(s: _AccountantSubject) -> None:
    a = s.probe()
    b = s.probes[-1] if len(s.probes) > 1 else ev.SelfComposedDpEvent(a, 3)
    whole = s.fresh().compose(ev.ComposedDpEvent((a, b)), 4)
    split = s.fresh()
    for _ in range(4):
        split.compose(a).compose(b)
    assert len(whole) == len(split), f"Composed(a, b) x 4 counts {len(whole)} steps, a; b four times {len(split)}"
    e1, e2 = whole.get_epsilon(DELTA), split.get_epsilon(DELTA)
    assert _close(e1, e2), f"compose(Composed({a}, {b}), 4) certifies {e1}, composing them one by one {e2}"


@_accountant_check
def check_incremental_equals_batch(s: _AccountantSubject) -> None:
    events = [s.probe(), ev.SelfComposedDpEvent(s.probes[-1], 3), s.probe()]
    incremental = s.fresh()
    seen = []
    for e in events:
        incremental.compose(e, 2)
        seen.append(incremental.get_epsilon(DELTA))
        incremental.get_epsilon(10 * DELTA)
    batch = s.fresh().compose(ev.ComposedDpEvent(tuple(events)), 2)
    e1, e2 = incremental.get_epsilon(DELTA), batch.get_epsilon(DELTA)
    assert seen == sorted(seen), f"the certificate decreased as steps were composed: {seen}"
    assert _close(seen[-1], e1, 0.0), f"asking twice gave {seen[-1]} then {e1}"
    # the batch composes the same steps in another order (a, b, c, a, b, c): equal up to the grid
    assert _close(e1, e2), f"composed one at a time (queried between) {e1}, all at once {e2}"


@_accountant_check
def check_delta_inverts_epsilon(s: _AccountantSubject) -> None:
    acc = s.fresh().compose(s.probe(), 3)
    eps = acc.get_epsilon(DELTA)
    if not math.isfinite(eps) or eps <= 0:
        raise NotApplicable(f"the probe certifies epsilon {eps}")
    back = acc.get_delta(eps)
    assert back <= DELTA * (1 + INVERSE_RTOL), f"get_delta(get_epsilon({DELTA})) = {back} > {DELTA}: unsound pair"
    assert abs(math.log(back / DELTA)) <= INVERSE_RTOL * math.log(1 / DELTA), \
        f"get_delta(get_epsilon({DELTA})) = {back}: not the inverse"
    again = acc.get_epsilon(back)
    assert again >= eps * (1 - 1e-5) and _close(again, eps, INVERSE_RTOL), \
        f"get_epsilon(get_delta({eps})) = {again}, not {eps}"


def _state(acc: Any) -> tuple:
    return len(acc), acc.get_epsilon(DELTA), acc.ledger


@_accountant_check
def check_atomic_failure(s: _AccountantSubject) -> None:
    event = s.probe()
    acc = s.fresh().compose(event, 3)
    before = _state(acc)
    for bad, count in ((ev.ComposedDpEvent((event, _Foreign())), 5), (ev.ComposedDpEvent((event, event)), 0)):
        try:
            acc.compose(bad, count)
        except (ValueError, TypeError):
            pass
        else:
            raise AssertionError(f"compose({bad}, {count}) was accepted")
        after = _state(acc)
        assert after == before, f"a refused compose({bad}, {count}) changed (steps, epsilon, ledger) " \
                                f"from {before} to {after}"


@_accountant_check
def check_ledger_recomposes(s: _AccountantSubject) -> None:
    acc = s.fresh()
    for e in s.probes or [s.probe()]:
        acc.compose(e, 3)
    again = s.fresh().compose(acc.ledger)
    e1, e2 = acc.get_epsilon(DELTA), again.get_epsilon(DELTA)
    assert len(again) == len(acc) and _close(e1, e2), \
        f"the ledger recomposed certifies {e2} over {len(again)} steps, the accountant {e1} over {len(acc)}"


def _expected(entry: Any, given: Mapping[str, str] | None) -> dict[str, str]:
    out = dict(getattr(entry, "expected_failed_checks", None) or {})
    out.update(given or {})
    return out


def _run_checks(checks: Mapping[str, Callable], subject: Any, expected: Mapping[str, str],
                only: tuple[str, ...] | None) -> tuple[list[CheckResult], dict]:
    unknown = sorted(set(expected) - set(checks))
    if unknown:
        raise ValueError(f"expected_failed_checks: no such checks {unknown} (checks: {list(checks)})")
    results, out = [], {}
    for name, check in checks.items():
        if only is not None and name not in only:
            continue
        try:
            got = check(subject)
        except NotApplicable as exc:
            results.append(CheckResult(name, "not applicable", str(exc)))
            continue
        except AssertionError as exc:
            results.append(CheckResult(name, "xfail" if name in expected else "failed", str(exc)))
            continue
        if isinstance(got, dict):
            out.update(got)
        results.append(CheckResult(name, "xpass" if name in expected else "passed",
                                   expected.get(name, "")))
    return results, out


def _raise_failures(what: str, results: list[CheckResult]) -> None:
    bad = [r for r in results if r.status in ("failed", "xpass")]
    if bad:
        raise AssertionError(f"{what} fails conformance: " + "; ".join(
            f"{r.check}: {r.detail}" if r.status == "failed" else f"{r.check}: expected to fail ({r.detail}) but passed"
            for r in bad))


def run_accountant_checks(make: AccountantFactory, relation: ev.NeighboringRelation = ev.REPLACE_ONE, *,
                          expected_failed_checks: Mapping[str, str] | None = None,
                          checks: tuple[str, ...] | None = None) -> list[CheckResult]:
    """Every check of :data:`ACCOUNTANT_CHECKS` (or those named in ``checks``) on ``make``, each
    one's :class:`CheckResult` (none raises)."""
    return _run_checks(ACCOUNTANT_CHECKS, _AccountantSubject(make, relation),
                       _expected(make, expected_failed_checks), checks)[0]


def check_accountant(make: AccountantFactory, relation: ev.NeighboringRelation = ev.REPLACE_ONE, *,
                     expected_failed_checks: Mapping[str, str] | None = None,
                     checks: tuple[str, ...] | None = None) -> dict:
    """Run the accountant checks on the factory ``make`` (``(relation) -> Accountant``, e.g. a
    registered class); AssertionError naming every failed check (and every expected failure that
    passed); returns the certificates :func:`check_not_below_exact` computed."""
    results, out = _run_checks(ACCOUNTANT_CHECKS, _AccountantSubject(make, relation),
                               _expected(make, expected_failed_checks), checks)
    _raise_failures(getattr(make, "name", None) or repr(make), results)
    return out


def accountant_checks(make: AccountantFactory, relation: ev.NeighboringRelation = ev.REPLACE_ONE
                      ) -> Iterator[tuple[str, Callable[[], dict | None]]]:
    """(name, callable) for each accountant check on ``make``, to parametrize a test with (as
    scikit-learn's ``parametrize_with_checks``); a callable raises AssertionError or
    :class:`NotApplicable`."""
    subject = _AccountantSubject(make, relation)
    for name, check in ACCOUNTANT_CHECKS.items():
        yield name, functools.partial(check, subject)


@functools.lru_cache(maxsize=8)
def _exact_pvec_epsilon(shift: int, trials: int) -> float:
    """The exact epsilon at :data:`DELTA` of the pair (Bin(trials, 1/2) + shift, Bin(trials, 1/2))
    (symmetric, so either order): delta(eps) = sum_x max(0, P(x) - e^eps Q(x)), bisected on eps."""
    import numpy as np
    from scipy.stats import binom

    x = np.arange(trials + shift + 1)
    p, q = binom.pmf(x - shift, trials, 0.5), binom.pmf(x, trials, 0.5)

    def delta(eps: float) -> float:
        return float(np.sum(np.maximum(0.0, p - math.exp(eps) * q)))

    lo, hi = 0.0, 50.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if delta(mid) > DELTA else (lo, mid)
    return lo


@functools.lru_cache(maxsize=4)
def _dp_accounting_lower(relation: ev.NeighboringRelation) -> float:
    """dp-accounting's optimistic PLD epsilon of :data:`SUBSAMPLED` under ``relation`` (a lower
    bound of the exact one: the optimistic estimate rounds every privacy loss down)."""
    import dp_accounting as dpa
    from dp_accounting.pld import privacy_loss_distribution as pld

    q, z, steps = SUBSAMPLED
    rel = getattr(dpa.NeighboringRelation, relation.name)
    one = pld.from_gaussian_mechanism(z, pessimistic_estimate=False, value_discretization_interval=1e-3,
                                      sampling_prob=q, neighboring_relation=rel)
    return one.self_compose(steps).get_epsilon_for_delta(DELTA)


@dataclasses.dataclass
class _AlgorithmSubject:
    cls: type[FederatedAlgorithm]
    problem: Any
    federation: Any
    params: dict
    epsilon: float
    delta: float
    #: the channel class of the subject's own runs (None: the honest Context; an instrument of
    #: silodp.verify.instruments shows that a check catches its bug)
    context: type | None = None

    @functools.cached_property
    def algorithm(self) -> Any:
        return self.cls(**self.params, epsilon=self.epsilon, delta=self.delta)

    @functools.cached_property
    def result(self) -> Any:
        """The calibrated run (seed 0) every check reads."""
        return self.algorithm.run(self.problem, self.federation, context=self.context)

    def private(self, what: str) -> None:
        if not self.cls.private:
            raise NotApplicable(f"{self.cls.name} is not private: no {what}")

    def explicit_noise(self) -> dict:
        """The calibrated run's noise, explicit, certified cheaply (:data:`REFUSED_RUN_ACCOUNTANT`)."""
        result = self.result
        noise = self.cls.plan.noise_arguments(result.sigmas, result.shuffle)
        if "sigmas" in noise and "accountant" not in self.params:  # standard deviations: certified cheaply
            noise["accountant"] = REFUSED_RUN_ACCOUNTANT
        return noise


@_algorithm_check
def check_ledger_equals_declaration(s: _AlgorithmSubject) -> None:
    from silodp.algorithms.shuffle import as_params

    result = s.result
    assert result.ledger, f"{s.cls.name}: the ledger recorded nothing"
    s.private("declaration")
    shuffle = None if result.shuffle is None else {g: as_params(p) for g, p in result.shuffle.items()}
    declared = {r.group: r.count for r in s.algorithm.plan.run_declaration(s.problem, s.federation, result.sigmas, shuffle)}
    sent: dict[str, int] = {}
    for message in result.ledger:
        sent[message.group] = sent.get(message.group, 0) + 1
    assert sent == {g: c for g, c in declared.items() if c}, \
        f"{s.cls.name}: sent {sent} messages per group, declared {declared}"


@_algorithm_check
def check_calibration_meets_target(s: _AlgorithmSubject) -> None:
    s.private("calibration")
    eps = s.result.epsilon
    assert eps <= s.epsilon * (1 + 1e-9), f"{s.cls.name}: certified {eps} above the target {s.epsilon}"


@_algorithm_check
def check_refuses_halved_noise(s: _AlgorithmSubject) -> None:
    from silodp.verify.audit.mutations import get_mutation

    s.private("noise")
    if not s.cls.plan.releases_gaussian_messages():
        raise NotApplicable(f"{s.cls.name} releases through P_vec: no Gaussian noise to halve")
    channel = get_mutation("halve-noise").context(checked=True)
    halved = s.cls(**s.params, **s.explicit_noise(), delta=s.delta)
    _refused(lambda: halved.run(s.problem, s.federation, context=channel), "below the declared",
             f"{s.cls.name}: halved noise")


@_algorithm_check
def check_refuses_one_more_message(s: _AlgorithmSubject) -> None:
    s.private("declaration")
    for group in sorted({m.group for m in s.result.ledger}):
        extra = type(f"Extra{s.cls.__name__}", (s.cls,), {"_run": _one_too_many(group)})(
            **s.params, **s.explicit_noise(), delta=s.delta)
        _refused(functools.partial(extra.run, s.problem, s.federation), "were declared",
                 f"{s.cls.name}: one more {group!r}")


@_algorithm_check
def check_reproducible_by_seed(s: _AlgorithmSubject) -> None:
    import torch

    again = s.algorithm.run(s.problem, s.federation, context=s.context)
    assert torch.equal(again.w_priv, s.result.w_priv) and torch.equal(again.w_last, s.result.w_last), \
        f"{s.cls.name}: two runs with seed 0 gave different outputs"
    if s.cls.private:
        other = s.algorithm.run(s.problem, s.federation, seed=1, context=s.context)
        assert not torch.equal(other.w_last, s.result.w_last), f"{s.cls.name}: seeds 0 and 1 gave the same output"


#: the silo and the slot of the record :func:`check_message_sensitivity` replaces, and the noise
#: (in units of the clip) of its runs: small, so that the noise's rounding stays far below the bound
SENSITIVITY_SILO, SENSITIVITY_NOISE = 1, 1e-3


@_algorithm_check
def check_message_sensitivity(s: _AlgorithmSubject) -> None:
    """Replace one record of one silo (an outlier with the other label) and replay the transcript:
    each message of that silo moves by at most ``multiplicity * 2 C`` (C = std / noise multiplier,
    the contribution bound the ledger divided the noise by: the accountant's replace-one
    sensitivity), no other silo's moves, and the bound is not vacuous (some message moves by more
    than 0.3 of it). The noise is the same draw in both runs (same seed), so it cancels."""
    import torch

    from silodp.algorithms import Federation

    s.private("noise")
    if not s.cls.plan.releases_gaussian_messages():
        raise NotApplicable(f"{s.cls.name} releases through P_vec: tests/algorithms/test_sensitivity.py "
                            "checks its totals")
    fed, silo = s.federation, SENSITIVITY_SILO
    keys = s.cls.noise_keys
    kw = dict(s.params, record_transcript=True, sigmas={k: SENSITIVITY_NOISE * s.problem.clip for k in keys},
              **({} if "accountant" in s.params else {"accountant": REFUSED_RUN_ACCOUNTANT}))
    ref = s.cls(**kw).run(s.problem, fed, seed=1, context=s.context)
    assert ref.transcript is not None, f"{s.cls.name}: no transcript recorded"
    drawn = [e["batch"][silo, 0] for e in ref.transcript if e["batch"] is not None]
    record = int(drawn[0]) if drawn else 0
    x, y = fed.x.clone(), fed.y.clone()
    x[silo, record] = 8.0 * torch.ones_like(x[silo, record])
    y[silo, record] = 1.0 - y[silo, record]
    other = s.cls(**kw).run(s.problem, Federation(x, y, fed.counts), seed=1, replay=ref, context=s.context)
    assert other.transcript is not None, f"{s.cls.name}: no transcript recorded"
    assert len(ref.transcript) == len(other.transcript) == len(ref.ledger) > 0
    worst = 0.0
    for a, b, sent in zip(ref.transcript, other.transcript, ref.ledger):
        moved = (a["messages"] - b["messages"]).norm(dim=-1)
        others = torch.arange(moved.shape[0]) != silo
        assert torch.all(moved[others] <= 1e-9 * SENSITIVITY_NOISE), \
            f"{s.cls.name}: group {a['group']!r} of another silo moved by {float(moved[others].max())}"
        mult = 1 if a["batch"] is None else int((a["batch"][silo] == record).sum())
        contribution = float(torch.as_tensor(a["std"]).max()) / sent.noise_multiplier
        bound = mult * 2 * contribution
        assert moved[silo] <= bound * (1 + 1e-6) + 1e-12, \
            f"{s.cls.name}: group {a['group']!r} moved by {float(moved[silo])}, the accountant assumes {bound}"
        if bound > 0:
            worst = max(worst, float(moved[silo]) / bound)
    assert worst > 0.3, f"{s.cls.name}: the replaced record moved no message by more than {worst} of its bound"


def run_algorithm_checks(cls: type[FederatedAlgorithm], problem: Any, federation: Any, params: dict, epsilon: float = 4.0,
                         delta: float = 1e-4, *, expected_failed_checks: Mapping[str, str] | None = None,
                         checks: tuple[str, ...] | None = None, context: type | None = None) -> list[CheckResult]:
    """Every check of :data:`ALGORITHM_CHECKS` (or those named in ``checks``) on small runs of
    ``cls(**params)`` at the target (``epsilon``, ``delta``), each one's :class:`CheckResult`
    (``context``: the channel instrument of the subject's own runs, None: the honest channel)."""
    subject = _AlgorithmSubject(cls, problem, federation, params, epsilon, delta, context)
    return _run_checks(ALGORITHM_CHECKS, subject, _expected(cls, expected_failed_checks), checks)[0]


def check_algorithm(cls: type[FederatedAlgorithm], problem: Any, federation: Any, params: dict, epsilon: float = 4.0,
                    delta: float = 1e-4, *, expected_failed_checks: Mapping[str, str] | None = None,
                    checks: tuple[str, ...] | None = None, context: type | None = None) -> None:
    """Run the algorithm checks on small runs of ``cls(**params)`` at the target (``epsilon``,
    ``delta``; ``context`` as :func:`run_algorithm_checks`); AssertionError naming every failed
    check (and every expected failure that passed)."""
    results = run_algorithm_checks(cls, problem, federation, params, epsilon, delta,
                                   expected_failed_checks=expected_failed_checks, checks=checks, context=context)
    _raise_failures(cls.name, results)

def _refused(run: Callable[[], Any], match: str, what: str) -> None:
    try:
        run()
    except ValueError as exc:
        assert match in str(exc), f"{what}: refused for another reason: {exc}"
        return
    raise AssertionError(f"{what}: the ledger did not refuse it")


def _one_too_many(group: str) -> Callable:
    """A ``_run`` sending ``group`` once more than declared, at ample noise and the declared batches."""
    import torch

    from silodp.accounting.releases import BatchSampling

    def run(self, ctx, w):
        decl = ctx._ledger.declaration[group]
        everyone = torch.ones(ctx.num_silos, dtype=torch.bool)
        if decl.sampling == BatchSampling.FULL:
            draw = ctx.full
        else:
            sampler = ctx.sampler(decl.batch_size, subset=decl.sampling == BatchSampling.SUBSET,
                                  replacement=decl.sampling == BatchSampling.WITH_REPLACEMENT)
            draw = lambda: ctx.batch(sampler)  # noqa: E731
        for _ in range(decl.count + 1):
            ctx.send(group, ctx.term(draw(), w), everyone, std=1e6)
        return w

    return run
