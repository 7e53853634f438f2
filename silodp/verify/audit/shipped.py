"""Privacy bugs that really shipped, as mutations of real Opacus runs, each with the audit that catches it.

Each :class:`ShippedBug` names the bug, where it shipped, and the run that exposes it: a model and
data (the Wisconsin breast cancer records, standardized), Opacus settings
(:class:`~.opacus_audit.OpacusRunConfig`), the number of canaries per run and of runs. The
mutated run must be judged ``violated`` at the claim its own accountant prints, and the same run
with the mutation off (the correct counterpart) ``consistent``. :func:`shipped_table` runs them
all (``silodp audit --shipped``); the table in docs/audit.md is its output.

Scenario choices (each the claim the bug violates; a one-run audit resolves a factor of about
two in the Gaussian's mu with thousands of canaries, see :mod:`.onerun`):

* ``replace-one-shift-c``: full-batch DP-GD under replace-one, where one run's canaries form a
  pure Gaussian mechanism; the bug halves the sensitivity, so the claim is that of twice the noise.
* ``expected-batch-normalization``: 3 records, Poisson rate 1/2: Opacus' ``int(len(dataset) *
  rate)`` is 1 without the canary and 2 with it, which the released gradients' norm shows at
  any noise; it leaks the dataset size, a global quantity, so each run holds one canary (100 runs).
* ``per-layer-clipping``: a deep MLP (13 parameter tensors a canary can own): each tensor clipped
  to C gives a canary sqrt(13) C of sensitivity against a noise calibrated to C.
* ``shuffled-accounted-as-poisson``: Chua et al. (2024)'s worst case -- every other record a copy
  of the "-" canary, so only the "+" canary's batch moves (by 2 C, 4 noise units at noise
  multiplier 0.5), and no other batch does: 101 batches of one record, one epoch. That pair is
  global (the whole dataset copies one canary), so each run holds one canary and the runs are
  independent trials: Clopper-Pearson (valid for every mechanism) decides, over 200 runs. Its
  resolution is the bulk of the trade-off curve, so the claim is read at delta = 0.05, a point of
  the Poisson accountant's own (epsilon, delta) curve; by Chua et al. the curve is wrong at small
  delta too, but there the excess lies in the tail, beyond the reach of a few hundred runs. Distinct records with +-C gradient
  canaries (many per run) stay near the Poisson claim: the gap needs the homogeneous background.
* ``public-seed-noise``: the adversary regenerates the noise from the public seed.
"""

from __future__ import annotations

import dataclasses
import functools

from silodp.verify.audit.opacus_audit import (ACCOUNTANT_ONLY, OPACUS_MUTATIONS, OpacusAudit, OpacusRunConfig,
                                              audit_opacus, counterpart_of)


@dataclasses.dataclass(frozen=True)
class ShippedBug:
    name: str
    shipped: str
    switch: str
    model: tuple[int, ...]  # hidden sizes of the MLP on the 30 features, 2 outputs
    records: int | None  # the first ``records`` training records (None: all 569)
    batch_size: int
    config: OpacusRunConfig
    canaries: int
    runs: int
    #: the estimator whose bound decides the verdict: ``fdp`` where the run is a Gaussian mechanism
    #: (full batches: a composition of Gaussians is exactly mu-GDP, so the f-DP bound is a proof),
    #: else ``steinke`` (valid for every mechanism)
    verdict_by: str = "steinke"


SHIPPED: dict[str, ShippedBug] = {b.name: b for b in (
    ShippedBug("replace-one-shift-c", "dp-accounting #378 (RDP under REPLACE_ONE; Flower's RDP backend)",
               "Opacus accountant (ShiftCAccountant)", (64, 64), None, 569,
               OpacusRunConfig(epochs=1, noise_multiplier=1.0, sample_rate=1.0, neighbouring="replace-one"), 4000, 2,
               "fdp"),
    ShippedBug("expected-batch-normalization", "Opacus #571 / #819 (v1.0-1.6 make_private)",
               "Opacus optimizer expected_batch_size", (64,), 3, 1,
               OpacusRunConfig(epochs=1, noise_multiplier=5.0, sample_rate=0.5, score="scale"), 1, 100),
    ShippedBug("per-layer-clipping", "paper 1's public code (each tensor clipped to L, noise for L)",
               "Opacus per-layer optimizer's noise norm", (64, 64, 64, 64, 64, 64), None, 569,
               OpacusRunConfig(epochs=1, noise_multiplier=1.0, sample_rate=1.0), 64, 16, "fdp"),
    ShippedBug("shuffled-accounted-as-poisson", "Chua et al. 2024 (shuffled batches, Poisson accounting)",
               "Opacus loader (shuffled) + Poisson accountant", (), 100, 1,
               OpacusRunConfig(epochs=1, noise_multiplier=0.5, poisson_sampling=False, neighbouring="replace-one",
                               score="epoch-lr", background=True, delta=0.05), 1, 200, "clopper-pearson"),
    ShippedBug("public-seed-noise", "paper 2's public code (noise re-seeded publicly, identical across users)",
               "Opacus optimizer noise generator", (32,), None, 128,
               OpacusRunConfig(epochs=1, noise_multiplier=2.0), 300, 1),
)}
assert tuple(sorted(SHIPPED)) == tuple(sorted(OPACUS_MUTATIONS))


@functools.lru_cache(maxsize=4)
def wbcd_records(records: int | None):
    """The breast cancer records (standardized) as a torch dataset, the first ``records`` of them."""
    import torch
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    x = (x - x.mean(0)) / x.std(0)
    x, y = (x, y) if records is None else (x[:records], y[:records])
    return torch.utils.data.TensorDataset(torch.tensor(x, dtype=torch.float32), torch.tensor(y))


def mlp(hidden: tuple[int, ...], seed: int = 0):
    import torch
    from torch import nn

    torch.manual_seed(seed)
    sizes = (30, *hidden)
    layers = [m for a, b in zip(sizes, sizes[1:]) for m in (nn.Linear(a, b), nn.ReLU())]
    return nn.Sequential(*layers, nn.Linear(sizes[-1], 2))


def audit_shipped(name: str, mutated: bool = True, canaries: int | None = None, runs: int | None = None,
                  estimator: str | None = None, alpha: float = 0.05, seed: int = 0) -> OpacusAudit:
    """The audit of bug ``name``'s scenario, with the bug (``mutated``) or its correct counterpart;
    the verdict by ``estimator`` (default: the scenario's ``verdict_by``)."""
    import torch

    if name not in SHIPPED:
        raise ValueError(f"mutation: must be one of {sorted(SHIPPED)}, got {name!r}")
    bug = SHIPPED[name]
    loader = torch.utils.data.DataLoader(wbcd_records(bug.records), batch_size=bug.batch_size)
    return audit_opacus(mlp(bug.model), loader, canaries=canaries or bug.canaries, runs=runs or bug.runs,
                        config=bug.config, mutation=name if mutated else None, estimator=estimator or bug.verdict_by,
                        alpha=alpha,
                        seed=seed)


def _row(name: str, shipped: str, switch: str, bad, good, runs: int) -> dict:
    """A table row from a mutated audit and its counterpart's (one-run audits of any real path)."""
    return {"mutation": name, "shipped": shipped, "switch": switch, "delta": 1e-5, "claimed_epsilon": bad.claimed_epsilon,
            "epsilon_lower": bad.epsilon_lower, "verdict": bad.verdict, "verdict_by": bad.estimator,
            "counterpart_claimed_epsilon": good.claimed_epsilon, "counterpart_epsilon_lower": good.epsilon_lower,
            "counterpart_verdict": good.verdict, "canaries": bad.canaries, "runs": runs, "wall_s": bad.wall_s + good.wall_s}


def _simulator_row(name: str, estimator: str | None, alpha: float, seed: int) -> dict:
    """The row of a mutation of the simulator's suite, audited by real runs of the algorithm: one run
    of many canaries, or a few runs whose silos hold one canary each (:mod:`.silo_canaries`)."""
    from silodp.verify.audit.simulator_audit import audit_simulator

    bad = audit_simulator(name, estimator=estimator, alpha=alpha, seed=seed)
    good = audit_simulator(name, counterpart=True, estimator=estimator, alpha=alpha, seed=seed)
    return _row(name, "silodp's mutation suite (issue 7)", f"simulator channel ({bad.algorithm})", bad, good,
                getattr(bad, "runs", 1))


#: the table's names for the Flower mod's rows (the bug's name after this prefix)
MOD_PREFIX = "flower-mod:"


def _mod_row(name: str, estimator: str | None, alpha: float, seed: int) -> dict:
    """The row of a shipped bug switched on in silodp's Flower mod (:mod:`.flower_mod`)."""
    from silodp.verify.audit.flower_mod import audit_flower_mod

    bug = name[len(MOD_PREFIX):]
    bad = audit_flower_mod(bug, estimator=estimator, alpha=alpha, seed=seed)
    good = audit_flower_mod(bug, counterpart=True, estimator=estimator, alpha=alpha, seed=seed)
    return _row(bug, SHIPPED[bug].shipped, "Flower mod (IsrlDpMod._privatize)", bad, good, bad.runs)


def table_names() -> list[str]:
    """Every row of the table: the shipped bugs in real Opacus runs, then in silodp's Flower mod
    (:data:`.flower_mod.MOD_SCENARIOS`), then the simulator's suite: caught by one run
    (:data:`.simulator_audit.ONE_RUN_MUTATIONS`) or by a few runs of one canary per silo
    (:data:`.silo_canaries.FEW_RUN_MUTATIONS`)."""
    from silodp.verify.audit.flower_mod import MOD_SCENARIOS
    from silodp.verify.audit.silo_canaries import FEW_RUN_MUTATIONS
    from silodp.verify.audit.simulator_audit import ONE_RUN_MUTATIONS

    return [*SHIPPED, *(MOD_PREFIX + name for name in MOD_SCENARIOS), *ONE_RUN_MUTATIONS, *FEW_RUN_MUTATIONS]


def shipped_table(names=None, estimator: str | None = None, alpha: float = 0.05, seed: int = 0) -> list[dict]:
    """One row per bug: claim, lower bound per estimator, verdict, its counterpart's, runs, wall time."""
    rows = []
    for name in names or table_names():
        if name not in SHIPPED:
            rows.append((_mod_row if name.startswith(MOD_PREFIX) else _simulator_row)(name, estimator, alpha, seed))
            continue
        bad = audit_shipped(name, True, estimator=estimator, alpha=alpha, seed=seed)
        if name in ACCOUNTANT_ONLY:  # the same training: judge its bounds against the correct claim
            good = counterpart_of(bad, SHIPPED[name].config)
        else:
            good = audit_shipped(name, False, estimator=estimator, alpha=alpha, seed=seed)
        rows.append({"mutation": name, "shipped": SHIPPED[name].shipped, "switch": SHIPPED[name].switch,
                     "delta": SHIPPED[name].config.delta, "claimed_epsilon": bad.claimed_epsilon, "epsilon_lower": bad.epsilon_lower,
                     "verdict": bad.verdict, "verdict_by": bad.estimator, "counterpart_claimed_epsilon": good.claimed_epsilon,
                     "counterpart_epsilon_lower": good.epsilon_lower, "counterpart_verdict": good.verdict,
                     "canaries": bad.canaries, "runs": bad.runs,
                     "wall_s": bad.wall_s + (0.0 if name in ACCOUNTANT_ONLY else good.wall_s)})
    return rows


def markdown(rows: list[dict]) -> str:
    """The docs table of :func:`shipped_table`'s rows."""
    head = ("| mutation | where it shipped | switched in | claimed eps | lower: steinke / fdp / CP / GDP | verdict (by) | "
            "counterpart (claim; its bound) | runs x canaries | wall s |\n|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        lo = r["epsilon_lower"]
        bounds = " / ".join(f"{lo[k]:.2f}" if k in lo else "-" for k in ("steinke", "fdp", "clopper-pearson", "gdp"))
        at = "" if r["delta"] == 1e-5 else f" (delta {r['delta']:g})"
        lines.append(f"| `{r['mutation']}` | {r['shipped']} | {r['switch']} | {r['claimed_epsilon']:.2f}{at} | {bounds} | {r['verdict']} ({r['verdict_by']}) | "
                     f"{r['counterpart_verdict']} ({r['counterpart_claimed_epsilon']:.2f}; "
                     f"{r['counterpart_epsilon_lower'][r['verdict_by']]:.2f}) | {r['runs']} x {r['canaries'] // r['runs']} | "
                     f"{r['wall_s']:.0f} |")
    return "\n".join(lines)




#: the run ``silodp audit --opacus`` audits without ``--mutation``: an MLP on breast cancer, Poisson
#: batches of expected size 64, 3 epochs, noise multiplier 1, add/remove (Opacus' default relation)
DEFAULT_RUN = OpacusRunConfig(epochs=3, noise_multiplier=1.0)


def audit_default_opacus(canaries: int = 1000, runs: int = 1, estimator: str | None = None, alpha: float = 0.05,
                         seed: int = 0) -> OpacusAudit:
    """One-run audit of :data:`DEFAULT_RUN` (the budget benchmark of docs/audit.md)."""
    import torch

    loader = torch.utils.data.DataLoader(wbcd_records(None), batch_size=64)
    return audit_opacus(mlp((64,)), loader, canaries=canaries, runs=runs, config=DEFAULT_RUN,
                        estimator=estimator or "steinke", alpha=alpha, seed=seed)


__all__ = ["DEFAULT_RUN", "MOD_PREFIX", "SHIPPED", "ShippedBug", "audit_default_opacus", "audit_shipped", "markdown", "shipped_table",
           "table_names", "wbcd_records"]
