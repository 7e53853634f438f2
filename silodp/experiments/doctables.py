"""The docs' tables that a command other than ``silodp reproduce`` produces, each regenerable.

Every table here is written between markers by ``silodp report --generated NAME --into FILE``::

    <!-- silodp:table name=accounting_units kind=generated hash=9c1e... accounting=1 -->
    | library | ... |
    <!-- /silodp:table -->

``hash`` is :func:`.stamp.generated_hash`: SHA-256 of the table's name, its command, its ``config``
(every argument that determines its numbers) and ``ACCOUNTING_VERSION``. A ``cheap`` table (a
second or so) is rebuilt by ``tests/test_stale_tables.py`` and ``silodp report --check`` and must
match the doc byte for byte; an expensive one is checked by its hash (a change of its config or of
the accounting version stales it), and rebuilt exactly by ``silodp report --check --full``.

:data:`RECORDED` lists the tables no check can rebuild: audits (minutes to hours) and timings
(measurements). Their body is what their command printed, pasted by hand; their stamp
(``kind=recorded``, :func:`.stamp.recorded_attrs`) is the hash of name, command and
``ACCOUNTING_VERSION``, plus, for a measurement, the machine and the date it was measured on.
Neither kind sees code changes that keep the command, config and accounting version.

Printed epsilons and noise scales round up (toward more privacy loss / more noise,
:func:`silodp._validation.round_up`).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import shlex
from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class DocTable:
    """A generated table: ``render(**config)`` returns its markdown body."""

    name: str
    doc: str
    render: Callable[..., str]
    config: dict = field(default_factory=dict)
    cheap: bool = True
    #: separately versioned certificates its numbers use (:data:`silodp.accounting.version.CERTIFICATE_VERSIONS`)
    certificates: tuple = ()

    @property
    def command(self) -> str:
        return f"silodp report --generated {self.name} --into {self.doc}"

    def body(self) -> str:
        return self.render(**self.config).rstrip()


def cli_json(command: str) -> dict:
    """The JSON that ``silodp COMMAND --json`` prints, run in-process (exactly the CLI's numbers)."""
    from silodp.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*shlex.split(command), "--json"])
    if code != 0:
        raise ValueError(f"generated table: `silodp {command}` exited {code}")
    return json.loads(out.getvalue())


def _up(value, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits rounded up (an integer above 10**digits)."""
    import math

    from silodp._validation import round_up

    if value is None:
        return "null"
    return f"{math.ceil(value):,}" if value >= 10 ** digits else round_up(value, digits)


def _accountant(payload: dict) -> str:
    """The registry name of the accountant that certified a CLI answer: ``noise`` prints a label
    (``pld(value_discretization_interval=...)``) and the spec it came from, ``epsilon`` the name."""
    spec = payload.get("accountant_spec")
    return spec["name"] if spec else payload["accountant"]


def accounting_units(q: float, steps: int, delta: float, noise_multiplier: float) -> str:
    """docs/accounting.md, "Units, side by side": one Poisson-subsampled Gaussian under both
    relations, by silodp's CLI and by dp-accounting's own PLD accountant; the last row is the old
    convention (sigma / (2C) under replace-one), i.e. the replace-one epsilon at twice the multiplier."""
    import dp_accounting as dpa

    base = f"epsilon --sampling poisson --q {q:g} --steps {steps} --delta {delta:g} --accountant pld"
    ours = {rel: cli_json(f"{base} --noise-multiplier {noise_multiplier:g} --relation {rel}")["epsilon"]
            for rel in ("replace-one", "add-remove")}
    theirs = {}
    for rel, relation in (("replace-one", dpa.NeighboringRelation.REPLACE_ONE),
                          ("add-remove", dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)):
        acc = dpa.pld.PLDAccountant(relation, value_discretization_interval=1e-4)
        acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(noise_multiplier)), steps)
        theirs[rel] = acc.get_epsilon(delta)
    old = cli_json(f"{base} --noise-multiplier {2 * noise_multiplier:g} --relation replace-one")["epsilon"]
    ratio = ours["replace-one"] / old
    return "\n".join([
        "| library | what `noise_multiplier` means | replace-one epsilon | add/remove epsilon |",
        "|---|---|---|---|",
        f"| silodp (now) | sigma / C | {_up(ours['replace-one'])} (`pld`) | {_up(ours['add-remove'])} (`pld`) |",
        f"| dp-accounting `PLDAccountant` | sigma / C | {_up(theirs['replace-one'])} | {_up(theirs['add-remove'])} |",
        "| dp-accounting `RdpAccountant`, fixed-size batches (`SampledWithoutReplacementDpEvent`) | sigma / (2C) "
        "under replace-one: silodp's multiplier is twice its own | compared under \"Comparing with dp-accounting\" "
        "below | fixed-size batches: replace-one only |",
        "| Opacus (`rdp`, `prv`) | sigma / C | not offered | Poisson, add/remove only |",
        "| Flower DP strategies | sigma / C (clipping norm) | not offered | RDP only |",
        f"| silodp before 2026-12 | sigma / (2C) under replace-one | {_up(old)} (a {ratio:.1f}x under-report) "
        f"| {_up(ours['add-remove'])} |",
    ])


#: the issue's examples (docs/accounting.md, "Soundness"): command, what silodp printed before the fix
SOUNDNESS_ROWS = (
    ("epsilon --noise-multiplier 100 --steps 1000000 --delta 1e-12 --relation add-remove", "117.17 (pld)"),
    ("epsilon --noise-multiplier 100 --steps 1000000 --delta 1e-10 --relation add-remove", "112.64"),
    ("epsilon --noise-multiplier 5 --steps 1000000 --delta 1e-12 --relation replace-one", "null"),
    ("epsilon --noise-multiplier 0.3 --steps 1000000 --delta 1e-6 --relation replace-one", "error"),
    ("epsilon --sampling poisson --q 1e-6 --steps 1000000 --delta 1e-12 --relation add-remove "
     "--noise-multiplier {0.70,0.72,0.73,0.74,0.76}", "0.129, 0.090, 0.176, 0.113, 0.061"),
    ("noise --epsilon 1 --delta 1e-12 --steps 1000000 --sampling poisson --q 1e-6 --relation replace-one", "0.936"),
    ("noise --epsilon 50 --delta 1e-12 --steps 100000 --sampling poisson --q 0.3 --relation replace-one", "46.2"),
)


def _expand(command: str) -> list[str]:
    """``a {x,y} b`` -> ``a x b``, ``a y b`` (one brace group)."""
    if "{" not in command:
        return [command]
    head, rest = command.split("{", 1)
    values, tail = rest.split("}", 1)
    return [f"{head}{v}{tail}" for v in values.split(",")]


def accounting_soundness(rows=SOUNDNESS_ROWS) -> str:
    """docs/accounting.md, the issue's examples: each command's output today beside the old one."""
    lines = ["| command (`silodp …`) | before | now |", "|---|---|---|"]
    for command, before in rows:
        outs = [cli_json(c) for c in _expand(command)]
        names = ", ".join(sorted({_accountant(o) for o in outs}))
        if command.startswith("noise"):
            [o] = outs
            now = f"z = {_up(o['noise_multiplier'], 4)} ({names}, certified epsilon {_up(o['epsilon'], 4)})"
        else:
            now = f"{', '.join(_up(o['epsilon'], 4) for o in outs)} ({names})"
        lines.append(f"| `{command}` | {before} | {now} |")
    return "\n".join(lines)


def shuffle_example(eps0: float, n: int, delta: float) -> str:
    """docs/accounting.md: the shuffle amplification bounds of the issue's example."""
    command = f"shuffle --eps0 {eps0:g} --n {n} --delta {delta:g}"
    out = cli_json(command)
    return "\n".join(["| command (`silodp …`) | before | now |", "|---|---|---|",
                      f"| `{command}` | error | " + ", ".join(f"{k} {_up(v, 3)}" for k, v in out.items()) + " |"])


#: docs/scaffold.md, "Tight sigma_g versus the paper's formula": (setting, eps, delta, M, n, T, K, l, s)
SCAFFOLD_ROWS = (
    ("authors' `get_epsilon_bound.py`", 1, 2.5e-6, 100, 4000, 100, 5, 0.05, 0.2),
    ("authors' `get_epsilon_bound.py`", 5, 2.5e-6, 100, 4000, 100, 5, 0.05, 0.2),
    ("paper synthetic (K = 100)", 13, 2.5e-6, 100, 4000, 400, 100, 0.2, 0.2),
    ("small silos", 5, 1e-5, 40, 250, 50, 20, 0.2, 0.2),
    ("small silos", 1, 1e-5, 40, 250, 50, 20, 0.2, 0.2),
    ("headline grid (K = 5)", 10, 1e-5, 20, 200, 200, 5, 1, 0.2),
    ("headline grid (K = 5)", 2, 1e-5, 20, 200, 200, 5, 1, 0.2),
)


def scaffold_sigma_g(rows=SCAFFOLD_ROWS) -> str:
    """docs/scaffold.md: tight sigma_g toward the server (worst case and expected participation)
    and toward a third party beside the paper's closed form and what that certifies
    (:func:`silodp.accounting.scaffold.noise_report`)."""
    from silodp.accounting.scaffold import noise_report

    lines = ["| setting | eps | delta | M | n | T | K | l | s | server (worst) | server (expected) | third party "
             "| paper | eps_server(paper) | eps_third(paper) |", "|" + "---|" * 15]
    for label, *args in rows:
        worst = noise_report(*args)
        expected = noise_report(*args, participation="expected")
        cells = [label, *(f"{a:g}" for a in args)]
        cells += [_up(worst[k]) for k in ("sigma_g_server",)] + [_up(expected["sigma_g_server"])]
        cells += [_up(worst[k]) for k in ("sigma_g_third_party", "sigma_g_paper", "epsilon_server_at_paper_sigma_g",
                                          "epsilon_third_party_at_paper_sigma_g")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def distributed_mechanisms(**kwargs) -> str:
    """docs/shuffle.md: binomial, Skellam and distributed discrete Gaussian at equal epsilon
    (:func:`silodp.accounting.distributed.comparison_table`)."""
    from silodp.accounting.distributed import comparison_table

    return comparison_table(**kwargs)


def rates_mutations(path: str) -> str:
    """docs/rates.md: the utility mutation suite's payload (``silodp rates --mutations --json``) and
    table, from the runs ``docs/figures/rates_mutations.py`` stored in ``path`` (relative to the
    repository): the doc shows exactly what the stored runs say."""
    from pathlib import Path

    from silodp.verify.rates.mutations import markdown

    stored = json.loads((Path(__file__).resolve().parents[2] / path).read_text())
    return f"`{json.dumps(stored['suite'])}`\n\n{markdown(stored['runs'], stored.get('quick'))}"


def _fixed(setup: dict) -> str:
    """The parameters a prescribed-setting experiment holds fixed (all but the one it varies)."""
    shown = {"eps": "eps", "n": "n", "M": "M", "N": "N", "d": "d", "kappa": "kappa"}
    return ", ".join(f"{label} = {setup[k]:g}" for k, label in shown.items()
                     if k != setup["vary"] and setup.get(k) is not None)


def _where(points: list[dict], vary: str, ok) -> str:
    """"all" when ``ok`` holds at every point, else the values of ``vary`` where it fails."""
    bad = [f"{p['value']:g}" for p in points if not ok(p)]
    return "yes, all" if not bad else f"no at {vary} = {', '.join(bad)}; yes at the others" if len(bad) < len(
        points) else "no, none"


def rates_prescribed(path: str) -> str:
    """docs/rates.md, "At the theorems' prescriptions": every experiment of ``path`` (relative to
    the repository; written by ``python docs/figures/rates_figures.py --prescribed``): the grid,
    the fitted slope and its 95% interval, the theorem's exponent and dominant term at the centre,
    whether each point improves on w0, the explicit bound (and its hypotheses) per point, and the
    largest certified epsilon of the noise used over its target (rounded up)."""
    from pathlib import Path

    stored = json.loads((Path(__file__).resolve().parents[2] / path).read_text())
    lines = ["| experiment | grid | trials | slope [95% CI] | theory (dominant term) | improves on w0 "
             "| explicit bound | certified eps / target (max) |", "|" + "---|" * 8]
    for r in stored.values():
        setup, points = r["setup"], r["points"]
        vary = setup["vary"]
        explicit = f"`{r['explicit_bound']}` " + ("holds" if r["explicit_bound_holds"] else "**fails**")
        explicit += (f" (by {min(p['explicit_bound'] / p['mean'] for p in points):.0f}"
                     f"-{max(p['explicit_bound'] / p['mean'] for p in points):.0f}x)" if r["explicit_bound_holds"] else "")
        explicit += "; its hypotheses " + ("hold" if r["explicit_conditions_hold"] else "**fail** somewhere")
        ratio = max(p["certified_epsilon"] / p["eps"] for p in points)
        lo, hi = r["slope_ci"]
        lines.append(f"| {r['theorem']} `{r['algorithm']}`, {setup['noise']} noise; {_fixed(setup)} "
                     f"| {vary} = {', '.join(f'{v:g}' for v in setup['values'])} | {setup['trials']} "
                     f"| **{r['slope']:+.2f} [{lo:+.2f}, {hi:+.2f}]** | {r['theory_exponent']:+.2f} ({r['dominant_term']}) "
                     f"| {_where(points, vary, lambda p: p['improves_on_start'])} | {explicit} | {_up(ratio, 5)} |")
    return "\n".join(lines)


#: docs/accounting.md, "What the papers' formulas really certify": (algorithm, formula, transcript
#: fields) at MNIST-sized silos, batches without replacement (each record once per epoch; SPIDER
#: at the full batch, Thm F.1's setting)
PAPER_ROWS = (
    ("isrl-prox-sgd", "Thm E.1 (R = 25, K = 49)", {"rounds": 25, "batch_size": 49}),
    ("isrl-prox-svrg", "Thm E.2 (E = 5, Q = 20, K = 60)", {"rounds": 5, "inner_steps": 20, "batch_size": 60}),
    ("isrl-spider", "Thm F.1 (R = 50, q = 4, β = 1, K = n)", {"rounds": 50, "period": 4, "beta": 1.0, "batch_size": 1234}),
)


def paper_vs_tight(n: int, epsilons, rows=PAPER_ROWS) -> str:
    """docs/accounting.md: the paper's noise, what a tight accountant certifies for it, and the
    tight noise over the paper's (:func:`silodp.algorithms.privacy.paper_vs_tight`, delta = 1/n^2)."""
    from silodp.algorithms.privacy import algorithm_class, paper_vs_tight as compare

    lines = ["| algorithm | formula | target ε | certified ε of the paper's noise | tight noise / paper noise "
             "| accountant |", "|---|---|---|---|---|---|"]
    for eps in epsilons:
        for algorithm, formula, fields in rows:
            cfg = algorithm_class(algorithm).plan.transcript(n=n, replacement=False, **fields)
            r = compare(algorithm, cfg, eps, 1.0 / n ** 2)
            ratios = sorted({_up(v) for v in r["tight_over_paper"].values()})
            ratio = ratios[0] if len(ratios) == 1 else ", ".join(f"{k} {_up(v)}" for k, v in r["tight_over_paper"].items())
            lines.append(f"| {algorithm} | {formula} | {eps:g} | {_up(r['paper_certified_epsilon'])} | {ratio} "
                         f"| {r['accountant']} |")  # the certifying accountant's label
    return "\n".join(lines)


def local_dp_mod(epsilon: float, delta: float) -> str:
    """docs/integrations.md: Flower's ``LocalDpMod`` noise (the classical Gaussian, Dwork-Roth Thm
    A.1: sqrt(2 ln(1.25/delta)) / epsilon per unit shift) beside silodp's exact analytic Gaussian
    (``silodp noise --accountant gdp``), as noise multipliers per clip C under both relations."""
    import math

    classical = math.sqrt(2 * math.log(1.25 / delta)) / epsilon
    lines = ["| relation | `LocalDpMod` (classical) | silodp (analytic Gaussian, exact) |", "|---|---|---|"]
    for label, relation, shift in (("add/remove (shift C)", "add-remove", 1),
                                   ("replace-one (shift 2C, ISRL-DP)", "replace-one", 2)):
        ours = cli_json(f"noise --epsilon {epsilon:g} --delta {delta:g} --relation {relation} --accountant gdp")
        z = ours["noise_multiplier"]
        less = math.floor(100 * (1 - z / (shift * classical)))
        lines.append(f"| {label} | {_up(shift * classical, 4)} | {_up(z, 4)} ({less}% less noise) |")
    return "\n".join(lines)


def audit_gaussian(noise_multipliers, delta: float, trials: int, seed: int) -> str:
    """docs/audit.md: one Gaussian release, the exact epsilon (rounded up) against the audit's lower
    bounds (:func:`silodp.verify.audit.audits.audit_gaussian`, likelihood-ratio statistic, seeded);
    the ratio at noise multiplier 1 (the issue's target row) in bold."""
    from silodp.verify.audit.audits import audit_gaussian as audit

    lines = ["| noise multiplier | exact epsilon | Clopper-Pearson | ratio | Gaussian-DP | ratio |",
             "|---|---|---|---|---|---|"]
    for z in noise_multipliers:
        r = audit(z, delta, trials, seed=seed)
        cp, gdp = r.bounds["clopper-pearson"].epsilon, r.bounds["gdp"].epsilon
        bold = "**" if z == 1 else ""
        lines.append(f"| {z:.1f} | {_up(r.epsilon_claimed, 4)} | {cp:.3f} | {cp / r.epsilon_claimed:.2f} | {gdp:.3f} "
                     f"| {bold}{gdp / r.epsilon_claimed:.2f}{bold} |")
    return "\n".join(lines)


#: what each formula of ``silodp audit --papers`` is, in the table's words
PAPER_FORMULAS = {"Thm E.1": "Thm E.1 (sigma^2 = 8 L^2 ln(1/delta) / (eps K)^2)",
                  "App. H.2 (SPIDER)": "App. H.2 (SPIDER, sigma_2 = inf)",
                  "App. H.2 (Fed-SPIDER)": "App. H.2 (Fed-SPIDER, Alg 11)"}


def audit_papers() -> str:
    """docs/audit.md: ``silodp audit --papers``: each paper formula's noise, what a tight accountant
    certifies for it (rounded up; bold above the target) and the audit's lower bounds."""
    lines = ["| formula | algorithm | certified epsilon | CP | GDP |", "|---|---|---|---|---|"]
    for r in cli_json("audit --papers")["papers"]:
        eps = _up(r["certified_epsilon"], 4)
        eps = f"**{eps}**" if r["certified_epsilon"] > r["target_epsilon"] else eps
        lines.append(f"| {PAPER_FORMULAS.get(r['formula'], r['formula'])} | {r['algorithm']} | {eps} "
                     f"| {r['epsilon_lower_clopper_pearson']:.3f} | {r['epsilon_lower_gdp']:.3f} |")
    return "\n".join(lines)


#: (n records, batch m, z = sigma / C, steps, delta): issue 23's case, the paper's regime, rare records
WITH_REPLACEMENT_CASES = ((40, 8, 6.0, 25, 1e-6),) + tuple((1000, 100, 4.0, t, 1e-5) for t in (10, 100, 1000)) + \
    tuple((100_000, 10, 2.0, t, 1e-5) for t in (10, 100, 1000))


def with_replacement_gap(cases=WITH_REPLACEMENT_CASES) -> str:
    """silodp's default with-replacement certificate (rounded up) against the rigorous lower bound
    of :mod:`silodp.accounting.replacement_lower` (rounded down), and their ratio."""
    from silodp.accounting import GaussianDpEvent, SampledWithReplacementDpEvent, SelfComposedDpEvent, tightest_epsilon
    from silodp.accounting import events as ev
    from silodp.accounting import replacement_lower

    lines = ["| n | m | z | T | delta | certified | by | lower bound | ratio |", "|---|---|---|---|---|---|---|---|---|"]
    for n, m, z, steps, delta in cases:
        event = SelfComposedDpEvent(SampledWithReplacementDpEvent(n, m, GaussianDpEvent(z)), steps)
        upper, name = tightest_epsilon(event, delta, ev.REPLACE_ONE)
        lower = replacement_lower.lower_bound_epsilon(z, m, n, steps, delta)
        ratio = f"{math.ceil(upper / lower * 100) / 100:.2f}x" if lower > 0 else "-"
        lines.append(f"| {n} | {m} | {z:g} | {steps} | {delta:g} | {_up(upper, 4)} | {name} | "
                     f"{math.floor(lower * 1e4) / 1e4:.4f} | {ratio} |")
    return "\n".join(lines)


def without_replacement_compare(n: int, m: int, noise_multiplier: float, steps: int, delta: float) -> str:
    """docs/accounting.md, "Sampling without replacement against dp-accounting": silodp's two proven
    certificates, the unproven charge, dp-accounting's fixed-orientation PLD and its RDP in its own
    units, and a rigorous lower bound (every step the same orientation, an attainable instance)."""
    import dp_accounting as dpa
    import numpy as np

    from silodp.accounting import pld_lower, pld_pairs, rdp
    from silodp.accounting.accountants import RDP_ORDERS

    base = (f"epsilon --sampling without-replacement --q {m / n:g} --dataset-size {n} --steps {steps} "
            f"--delta {delta:g} --relation replace-one --noise-multiplier {noise_multiplier:g}")
    default = cli_json(base)
    pld_eps, rdp_eps = (cli_json(f"{base} --accountant pld")["epsilon"], cli_json(f"{base} --accountant rdp")["epsilon"])
    orders, z2 = np.asarray(RDP_ORDERS), noise_multiplier / 2.0  # z2: sigma / (2C), the shift 2C
    conj = rdp.epsilon_from_rdp(orders, steps * np.minimum(rdp.without_replacement_conjectured_rdp(m / n, z2, orders),
                                                           rdp.gaussian_rdp(z2, orders)), delta)
    fixed = dpa.pld.PLDAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4)
    fixed.compose(dpa.PoissonSampledDpEvent(m / n, dpa.GaussianDpEvent(z2)), steps)

    def dpa_rdp(z: float) -> float:
        acc = dpa.rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
        acc.compose(dpa.SampledWithoutReplacementDpEvent(n, m, dpa.GaussianDpEvent(z)), steps)
        return acc.get_epsilon(delta)

    lower = pld_lower.lower_bound_epsilon([(pld_pairs.GaussianPair(m / n, 0.0, z2), steps)], delta)
    z = f"{noise_multiplier:g}"
    return "\n".join([
        "| what | `noise_multiplier` read as | certifies? | epsilon |",
        "|---|---|---|---|",
        f"| silodp default (`silodp epsilon`, {default['accountant']}) | sigma / C = {z} | yes | {_up(default['epsilon'], 4)} |",
        f"| silodp `pld`: the symmetric pair, either orientation per step | sigma / C = {z} | yes | {_up(pld_eps, 4)} |",
        f"| silodp `rdp`: the symmetric pair's RDP | sigma / C = {z} | yes | {_up(rdp_eps, 4)} |",
        f"| MTZ19 at shift 2C (the old `rdp` charge) | sigma / C = {z} | no: unproven | {_up(conj, 4)} |",
        f"| dp-accounting PLD, Poisson pair at 2C, one fixed orientation | sigma / C = {z} | no: fixed orientation "
        f"| {_up(fixed.get_epsilon(delta), 4)} |",
        f"| rigorous lower bound, every step the same orientation | sigma / C = {z} | (a lower bound) "
        f"| {math.floor(lower * 1e4) / 1e4:.4f} |",
        f"| dp-accounting `RdpAccountant`, `SampledWithoutReplacementDpEvent`, `REPLACE_ONE` | sigma / (2C) = {z} "
        f"(sigma = {2 * noise_multiplier:g} C) | its own | {_up(dpa_rdp(noise_multiplier), 4)} |",
        f"| the same at silodp's sigma | sigma / (2C) = {z2:g} (sigma = {z} C) | its own | {_up(dpa_rdp(z2), 4)} |",
    ])


TABLES = {t.name: t for t in (
    DocTable("accounting_units", "docs/accounting.md", accounting_units,
             {"q": 0.01, "steps": 1000, "delta": 1e-5, "noise_multiplier": 1.0}),
    DocTable("accounting_soundness", "docs/accounting.md", accounting_soundness, {"rows": SOUNDNESS_ROWS}),
    DocTable("without_replacement_compare", "docs/accounting.md", without_replacement_compare,
             {"n": 5000, "m": 500, "noise_multiplier": 4.5, "steps": 300, "delta": 1e-5}, cheap=False,
             certificates=("without-replacement",)),
    DocTable("accounting_paper_vs_tight", "docs/accounting.md", paper_vs_tight, {"n": 1234, "epsilons": (1, 6)}),
    DocTable("integrations_local_dp_mod", "docs/integrations.md", local_dp_mod, {"epsilon": 1.0, "delta": 1e-5}),
    DocTable("audit_gaussian", "docs/audit.md", audit_gaussian,
             {"noise_multipliers": (0.5, 1.0, 2.0, 4.0), "delta": 1e-5, "trials": 100_000, "seed": 0}),
    DocTable("audit_papers", "docs/audit.md", audit_papers, cheap=False),
    DocTable("accounting_shuffle_example", "docs/accounting.md", shuffle_example,
             {"eps0": 2.0, "n": 1000000, "delta": 1e-12}, cheap=False),
    DocTable("scaffold_sigma_g", "docs/scaffold.md", scaffold_sigma_g, {"rows": SCAFFOLD_ROWS}, cheap=False,
             certificates=("without-replacement",)),
    DocTable("with_replacement_gap", "docs/accounting.md", with_replacement_gap, {"cases": WITH_REPLACEMENT_CASES},
             cheap=False, certificates=("with-replacement",)),
    DocTable("distributed_mechanisms", "docs/shuffle.md", distributed_mechanisms,
             {"dimension": 1024, "clip": 1.0, "silos": 10, "rounds": 50, "epsilon": 3.0, "delta": 1e-5,
              "bits": tuple(range(8, 25, 2))}, cheap=False),
    DocTable("rates_mutations", "docs/rates.md", rates_mutations, {"path": "docs/figures/rates_mutations.json"},
             certificates=("with-replacement",)),  # the PL-SVRG preset draws with replacement
    DocTable("rates_prescribed", "docs/rates.md", rates_prescribed, {"path": "docs/figures/rates_prescribed.json"},
             certificates=("with-replacement",)),  # PL-SVRG's batches are drawn with replacement
)}


@dataclass(frozen=True)
class Recorded:
    """A table too expensive to rebuild in a check (audits: minutes to hours) or a measurement
    (timings): its body is what ``command`` printed when it was last run, pasted by hand; its stamp
    (``kind=recorded``) is the hash of name, command and ``ACCOUNTING_VERSION``, so a version
    bump stales it, and a ``measured`` one also names the machine and the date it was measured on."""

    name: str
    doc: str
    command: str
    measured: bool = False
    config: dict = field(default_factory=dict)
    #: separately versioned certificates its numbers use (as :attr:`DocTable.certificates`)
    certificates: tuple = ()


RECORDED = {t.name: t for t in (
    Recorded("accounting_calibration_speed", "docs/accounting.md", "python benchmarks/bench_accounting.py",
             measured=True),
    Recorded("accounting_mechanisms", "docs/accounting.md", "python benchmarks/bench_accounting.py --mechanisms",
             measured=True, certificates=("discrete-mechanisms",)),
    Recorded("accounting_sweep", "docs/accounting.md", "python benchmarks/bench_accounting.py --sweep", measured=True),
    Recorded("accounting_ledger_speed", "docs/accounting.md", "python benchmarks/bench_accounting.py --ledger 10,100,1000",
             measured=True),
    Recorded("cli_latency", "docs/accounting.md", "python benchmarks/bench_cli.py", measured=True),
    Recorded("flower_ledger_speed", "docs/integrations.md",
             "OPENBLAS_NUM_THREADS=1 nice -n 15 python benchmarks/bench_flower.py ledger --rounds 100 --repeats 3",
             measured=True),
    Recorded("flower_deployment_speed", "docs/integrations.md",
             "OPENBLAS_NUM_THREADS=1 nice -n 15 python benchmarks/bench_flower.py deployment --deployment-rounds 4 "
             "--deployment-repeats 2", measured=True),
    Recorded("audit_algorithms", "docs/audit.md",
             "silodp audit --algorithm NAME --epsilon 2 --trials 100000 --json (each row's algorithm)",
             certificates=("with-replacement", "without-replacement")),
    Recorded("audit_mutations", "docs/audit.md", "python benchmarks/bench_audit.py --detection 50"),
    Recorded("audit_sdp", "docs/audit.md", "silodp audit --algorithm sdp-prox-sgd|sdp-prox-svrg|sdp-pl-svrg|sdp-spider"),
    Recorded("audit_speed", "docs/audit.md", "python benchmarks/bench_audit.py", measured=True),
    Recorded("audit_shipped", "docs/audit.md", "silodp audit --shipped", measured=True),
    Recorded("simulator_speed", "docs/algorithms.md", "python benchmarks/bench_simulator.py", measured=True),
    Recorded("simulator_kernel", "docs/algorithms.md", "python benchmarks/bench_simulator.py --breakdown", measured=True),
    Recorded("shuffle_moments_speed", "docs/shuffle.md", "PYTHONPATH=. python benchmarks/bench_shuffle.py --moments",
             measured=True),
    Recorded("shuffle_variance", "docs/shuffle.md", "PYTHONPATH=. python benchmarks/bench_shuffle.py"),
    Recorded("rates_full", "docs/rates.md", "python docs/figures/rates_figures.py"),
    Recorded("rates_isrl_vs_sdp", "docs/rates.md", "python docs/figures/rates_figures.py",
             certificates=("with-replacement",)),
    Recorded("rates_theorems", "docs/rates.md", "python docs/figures/rates_figures.py",
             certificates=("with-replacement",)),
    Recorded("reproduce_walls", "docs/reproduction.md", "silodp reproduce GRID --workers 2 (each row's grid)",
             measured=True),
    Recorded("reproduce_speed", "docs/reproduction.md", "python benchmarks/bench_reproduce.py --workers 2",
             measured=True),
)}


def recorded(name: str) -> Recorded:
    if name not in RECORDED:
        raise ValueError(f"--recorded: no recorded table {name!r} (known: {', '.join(sorted(RECORDED))})")
    return RECORDED[name]


def table(name: str) -> DocTable:
    if name not in TABLES:
        raise ValueError(f"--generated: no generated table {name!r} (known: {', '.join(sorted(TABLES))})")
    return TABLES[name]
