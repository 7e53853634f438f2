"""Deliberately broken variants of the rates algorithms: the utility bugs a rate check must catch.

The privacy audits have their mutations (:mod:`silodp.verify.audit.mutations`); these are their
utility counterpart (issue 25). Each :class:`Mutation` keeps the *declaration* of the correct run
(the plan's step size, the calibrated noise the explicit bounds are evaluated at, the certified
epsilon) and changes what the run does, from outside the algorithms: a
:class:`~silodp.verify.rates.trials.TrialContext` subclass (step size, prox, noise) or a subclass of
the algorithm whose ``_run`` alters one rule (output, snapshot schedule).

==================== ===============================================================================
``step-x3``           the server steps with 3 eta (eta of the plan: 1/(2 beta), Thm E.2's eta)
``step-x0.1``         the server steps with eta / 10
``no-prox``           the prox of f1 is dropped (w <- w - eta h, the regularizer ignored)
``noise-x10``         every message's Gaussian noise std is 10 times the calibrated one
``noise-x0.1``        every message's noise std is a tenth of the calibrated one (not private)
``wrong-output``      the iterate after the first round is output (instead of the last, Thm 2.1, or a
                      uniform one, Alg 1 line 15 / Alg 3 line 17)
``wrong-snapshot``    the snapshot is never refreshed: PL-SVRG takes its full gradient once per
                      restart (one epoch of E Q inner steps), SPIDER its anchor only at r = 0
==================== ===============================================================================

Each preset of :data:`PRESETS` is a rates setup with its pass/fail criteria (:data:`CRITERIA`):

* ``slope``: the log-log slope's interval contains the theorem's exponent (or, where the preset
  states an interval, lies inside it);
* ``floor``: every point's mean is at most twice the non-private floor of the same algorithm,
  plan and batches (where the rate bound's statistical term dominates, privacy is almost free:
  Remark 2.1);
* ``improves``: the upper end of every point's interval is below the metric at w0;
* ``explicit``: every point's mean + interval is below the explicit bound evaluated at the noise the
  calibration *declared* (not the noise a broken run used), with its hypotheses holding;
* ``epsilon``: the certificate of the messages really sent (their smallest noise multiplier per
  message group, the tightest accountant) is <= the target epsilon at every point.

:func:`run_suite` runs every preset correct and under every mutation; a mutation is caught by a
preset when one of its criteria fails. The target: every mutation caught by at least one preset,
every correct run passing.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from silodp.verify.rates import runs
from silodp.verify.rates.trials import stacks_trials

#: the criteria a preset can state (see module docstring)
CRITERIA = ("slope", "floor", "improves", "explicit", "epsilon")


@dataclasses.dataclass(frozen=True)
class Mutation:
    """One utility bug: ``step`` and ``noise`` factors, ``prox`` kept or dropped, ``output``
    ("first": the first round's iterate) and ``snapshot`` (never refreshed)."""

    name: str
    step: float = 1.0
    noise: float = 1.0
    prox: bool = True
    output: str | None = None
    snapshot: bool = False

    def context(self, base: type) -> type:
        """A stacked-trials channel that runs the bug and records the messages really sent
        (:func:`silodp.verify.instruments.rate_mutated_trials`)."""
        from silodp.verify.instruments import rate_mutated_trials

        return rate_mutated_trials(self, _CONTEXTS, base)

    def algorithm(self, algo):
        """``algo`` itself, or an instance of a subclass whose ``_run`` breaks the output rule or
        the snapshot schedule (same name, parameters and declared noise)."""
        if self.output is None and not self.snapshot:
            return algo
        cls, mut = type(algo), self

        def _run(self, ctx, w):
            saved = dict(vars(self))
            if mut.snapshot and hasattr(self, "period"):  # SPIDER: the anchor only at r = 0
                self.period = int(self.rounds) + 1
            elif mut.snapshot and hasattr(self, "inner_steps"):  # SVRG: one epoch of E Q steps
                self.inner_steps, self.rounds = self._q(ctx) * int(self.rounds), 1
            try:
                last = cls._run(self, ctx, w)
            finally:
                vars(self).update(saved)
            return ctx.first if mut.output == "first" else last

        # the wrapper runs cls._run itself: it stacks trials exactly when cls does
        broken = type(cls.__name__, (cls,), {"_run": _run, "uniform_output": cls.uniform_output and mut.output is None,
                                             "stacked_trials": stacks_trials(cls)})
        out = broken.__new__(broken)
        out.__dict__.update(vars(algo))
        return out


MUTATIONS: dict[str, Mutation] = {m.name: m for m in (
    Mutation("step-x3", step=3.0), Mutation("step-x0.1", step=0.1), Mutation("no-prox", prox=False),
    Mutation("noise-x10", noise=10.0), Mutation("noise-x0.1", noise=0.1), Mutation("wrong-output", output="first"),
    Mutation("wrong-snapshot", snapshot=True),
)}
#: the correct run through the same instrumented context (its messages are certified too)
CORRECT = Mutation("correct")

_CONTEXTS: list = []


@dataclasses.dataclass(frozen=True)
class Preset:
    """A rates setup (``make(quick)``) and its pass/fail criteria; ``slope``: the interval the
    slope's interval must lie in (None: it must contain the theorem's exponent)."""

    name: str
    make: Callable[[bool], runs.RateSetup]
    criteria: tuple[str, ...]
    slope: tuple[float, float] | None = None
    #: mutations that do not apply (no snapshot in Prox-SGD)
    skip: tuple[str, ...] = ()


def _sgd_eps(quick: bool) -> runs.RateSetup:
    return runs.noise_dominated_setup("isrl-prox-sgd", "eps", values=(0.05, 0.4) if quick else (0.05, 0.1, 0.2, 0.4),
                            trials=32 if quick else 64, bootstrap=500)


def _sgd_n(quick: bool) -> runs.RateSetup:
    return runs.prescribed_setup("isrl-prox-sgd", "n", quick=True, noise="tight", trials=32 if quick else 64,
                                 bootstrap=500)


def _svrg_kappa(quick: bool) -> runs.RateSetup:
    return runs.prescribed_setup("isrl-pl-svrg", "kappa", quick=True, trials=4 if quick else 6, bootstrap=500)


def _spider_eps(quick: bool) -> runs.RateSetup:
    return runs.prescribed_setup("isrl-spider", "eps", quick=True, trials=4 if quick else 8, bootstrap=500)


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("prox-sgd-eps", _sgd_eps, ("slope", "explicit", "epsilon"), None, ("wrong-snapshot",)),
    Preset("prox-sgd-n-prescribed", _sgd_n, ("slope", "floor", "improves", "explicit", "epsilon"), None,
           ("wrong-snapshot",)),
    Preset("pl-svrg-kappa-prescribed", _svrg_kappa, ("improves", "explicit", "epsilon")),
    Preset("spider-eps-prescribed", _spider_eps, ("slope", "improves", "explicit", "epsilon")),
)}


#: the presets of ``silodp rates --mutations --quick`` (Prox-SGD at Thm E.1's prescriptions: it catches
#: every mutation that applies to it; 7 runs of 13-36 s wall each on the shared cores)
QUICK_PRESETS = ("prox-sgd-n-prescribed",)


def sent_epsilon(ctx) -> float:
    """The tightest certificate of what one context's runs (a chunk of stacked trials) really sent:
    per message group its count and smallest noise multiplier, at the run's delta."""
    from silodp.accounting import REPLACE_ONE, tightest_epsilon
    from silodp.accounting.releases import GaussianRelease, releases_event

    groups: dict[str, list] = {}
    for s in ctx.sent:
        groups.setdefault(s.group, []).append(s)
    releases = [GaussianRelease(g, len(v), min(s.noise_multiplier for s in v), v[0].sampling, v[0].batch_size,
                                min(s.dataset_size for s in v)) for g, v in groups.items()]
    return float(tightest_epsilon(releases_event(releases), ctx.target[1], REPLACE_ONE)[0])


def verdict(preset: Preset, result: runs.RateResult, sent: list[tuple[float, float]]) -> dict[str, bool]:
    """Each of the preset's criteria: True when it passes (``sent``: (certificate of the messages
    sent, target epsilon) per chunk of trials)."""
    checks = {
        "slope": lambda: (result.slope_agrees if preset.slope is None else
                          preset.slope[0] <= result.fit.slope_ci[0] and result.fit.slope_ci[1] <= preset.slope[1]),
        "floor": lambda: all(r["mean"] <= 2 * r["nonprivate_mean"] for r in result.rows),
        "improves": lambda: result.improves_on_start,
        "explicit": lambda: result.explicit_bound_holds is True and result.explicit_conditions_hold is not False,
        "epsilon": lambda: bool(sent) and all(e <= target for e, target in sent),
    }
    return {c: bool(checks[c]()) for c in preset.criteria}


def run_preset(preset: Preset, mutation: Mutation, quick: bool = False) -> dict:
    """``preset`` under ``mutation`` (:data:`CORRECT`: the correct run): whether each criterion
    passes, and the largest ratio of the sent certificate to the target."""
    _CONTEXTS.clear()
    result = runs.run_rates(dataclasses.replace(preset.make(quick), mutation=mutation))
    cache: dict = {}
    sent = []
    for ctx in _CONTEXTS:
        key = (ctx.target[0], ctx.sent)
        sent.append((cache[key] if key in cache else cache.setdefault(key, sent_epsilon(ctx)), ctx.target[0]))
    _CONTEXTS.clear()
    criteria = verdict(preset, result, sent)
    return {"criteria": criteria, "passes": all(criteria.values()),
            "sent_over_target": max(e / t for e, t in sent) if sent else None,
            "slope": result.fit.slope, "slope_ci": list(result.fit.slope_ci)}


def run_suite(quick: bool = False, presets: tuple[str, ...] | None = None,
              mutations: tuple[str, ...] | None = None, details: dict | None = None,
              on_run: Callable[[dict], None] | None = None) -> dict:
    """Every preset correct and under every mutation: ``{"mutations": {NAME: [presets that catch
    it]}, "correct_pass": bool}`` (``details``, if given, receives each run's criteria, keyed by
    (preset, mutation); ``on_run(details)`` is called after each run, e.g. to save partial results)."""
    chosen = [PRESETS[p] for p in (presets or (QUICK_PRESETS if quick else tuple(PRESETS)))]
    names = mutations or tuple(MUTATIONS)
    caught: dict[str, list[str]] = {m: [] for m in names}
    correct = True
    for preset in chosen:
        details = {} if details is None else details
        base = run_preset(preset, CORRECT, quick)
        correct = correct and base["passes"]
        details[(preset.name, CORRECT.name)] = base
        if on_run is not None:
            on_run(details)
        for m in names:
            if m in preset.skip:
                continue
            out = run_preset(preset, MUTATIONS[m], quick)
            details[(preset.name, m)] = out
            if on_run is not None:
                on_run(details)
            if not out["passes"]:
                caught[m].append(preset.name)
    return {"mutations": caught, "correct_pass": bool(correct)}


def suite_size(quick: bool = False) -> int:
    """How many runs :func:`run_suite` makes (each preset correct and under each mutation it does
    not skip): the total of the CLI's progress count."""
    chosen = [PRESETS[p] for p in (QUICK_PRESETS if quick else tuple(PRESETS))]
    return sum(1 + sum(m not in p.skip for m in MUTATIONS) for p in chosen)


def human(table: dict) -> str:
    """The suite's table as text: each mutation and the presets that catch it."""
    lines = [f"{'mutation':<16} caught by"]
    lines += [f"{name:<16} {', '.join(found) if found else '(none)'}" for name, found in table["mutations"].items()]
    lines.append(f"every correct run passes: {table['correct_pass']}")
    return "\n".join(lines)


def markdown(runs: dict, quick: dict | None = None) -> str:
    """The markdown table of a suite's runs (``{"PRESET|MUTATION": {"criteria": {NAME: ok}}}``, as
    ``docs/figures/rates_mutations.json`` stores them): each preset's verdict and the failed
    criteria, per mutation; a preset run in its quick variant is headed "(quick)"."""
    presets = list(dict.fromkeys(p for p, _ in (k.split("|") for k in runs)))
    names = list(MUTATIONS)
    heads = [f"`{p}`" + (" (quick)" if (quick or {}).get(p) else "") for p in presets]
    lines = ["| mutation | " + " | ".join(heads) + " | caught |",
             "|---|" + "---|" * (len(presets) + 1)]
    for m in ["correct", *names]:
        cells, caught = [], False
        for p in presets:
            run = runs.get(f"{p}|{m}")
            if run is None:  # n/a: the mutation does not apply; not run: a stopped (partial) run
                cells.append("n/a" if m in PRESETS[p].skip else "not run")
                continue
            failed = [c for c, ok in run["criteria"].items() if not ok]
            caught = caught or bool(failed)
            cells.append("pass" if not failed else "**fails** " + ", ".join(failed))
        verdict = ("all pass" if not caught else "no: a correct run fails") if m == "correct" else \
            ("yes" if caught else "**no**")
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {verdict} |")
    return "\n".join(lines)
