"""Audits of silodp's Flower mod (:class:`~silodp.integrations.flower.IsrlDpMod`) on its real code path.

``audit_flower_mod(mutation)`` calls the mod itself -- ``mod(msg, context, call_next)`` with
Flower's own ``Message`` and ``Context`` objects, exactly as a ClientApp's mod stack does -- for
``rounds`` TRAIN messages per run and ``runs`` independent runs (a fresh silo each). The silo's
"training" (``call_next``) is a gradient canary in its update: in round r the update is
``+-A`` on coordinate r of every array (A huge, so the mod's clipping binds: the released update is
``+-C e_r / sqrt(k)`` per array, k arrays, under correct clipping), the sign being the canary's coin
(replace-one: the silo's data, hence its update, is one or the other). The adversary is the
server: canary r's score is the inner product of the released update with the canary's direction
(released minus sent, on coordinate r of every array), less the noise where the adversary can
regenerate it. The claim is the epsilon the silo's own ledger reports after its last release.

Mutations (:data:`MOD_MUTATIONS`) override the mod's one seam ``IsrlDpMod._privatize``:

* ``public-seed-noise``: the noise generator seeded from a public seed and the release count;
* ``per-layer-clipping``: each array clipped to C separately, the noise calibrated to C;
* ``replace-one-shift-c``: the noise the shift-C accountant calibrates (half the multiplier the
  replace-one sensitivity 2C needs), while the ledger records the multiplier it believes certifies.

Each canary has one release, so a run's canaries are independent Gaussian trials where the noise
is fresh: ``fdp`` decides for those (one release is exactly a Gaussian mechanism); for
``public-seed-noise`` Steinke et al.'s bound (valid for every mechanism) decides.
"""

from __future__ import annotations

import dataclasses
import time
from contextlib import contextmanager

import numpy as np

from silodp.verify.audit.onerun import CanaryScores, RunAudit, judge_run

MOD_MUTATIONS = ("public-seed-noise", "per-layer-clipping", "replace-one-shift-c")
#: the public seed of ``public-seed-noise`` (known to the adversary)
PUBLIC_SEED = 1234
_CANARY = 1e6


@dataclasses.dataclass(frozen=True)
class ModScenario:
    """``rounds`` releases per run, ``runs`` runs, ``arrays`` arrays per update, the mod's budget."""

    rounds: int
    runs: int
    arrays: int = 1
    epsilon: float = 2.0
    verdict_by: str = "fdp"


#: the scenario where each mutation of the mod is caught (its counterpart: the same, plain mod)
MOD_SCENARIOS = {
    "public-seed-noise": ModScenario(rounds=300, runs=1, verdict_by="steinke"),
    "per-layer-clipping": ModScenario(rounds=1, runs=1000, arrays=16),
    "replace-one-shift-c": ModScenario(rounds=1, runs=12000, epsilon=4.0),
}


def mutated_mod(mutation: str):
    """The subclass of :class:`~silodp.integrations.flower.IsrlDpMod` with ``mutation`` in its release."""
    from silodp.integrations.flower import IsrlDpMod, privatize

    if mutation not in MOD_MUTATIONS:
        raise ValueError(f"mutation: must be one of {MOD_MUTATIONS}, got {mutation!r}")

    class MutatedIsrlDpMod(IsrlDpMod):
        releases = 0

        def _privatize(self, new, old):
            c, z = self.clipping_norm, self.noise_multiplier
            if mutation == "public-seed-noise":
                self.releases += 1
                return privatize(new, old, c, z, public_noise_rng(self.releases))
            rng = np.random.default_rng()
            if mutation == "per-layer-clipping":
                return [privatize([n], [o], c, z, rng)[0] for n, o in zip(new, old, strict=True)]
            return privatize(new, old, c, z / 2.0, rng)  # shift C read where replace-one moves 2C

    MutatedIsrlDpMod.__name__ = f"IsrlDpMod[{mutation}]"
    return MutatedIsrlDpMod


def public_noise_rng(release: int) -> np.random.Generator:
    """The generator of the ``public-seed-noise`` mod at its ``release``-th release (1-based)."""
    return np.random.default_rng(PUBLIC_SEED + release)


@dataclasses.dataclass(frozen=True)
class ModAudit(RunAudit):
    """Result of :func:`audit_flower_mod` (the issue's JSON keys, then the run's)."""

    mutation: str | None
    rounds: int
    runs: int
    noise_multiplier: float
    wall_s: float


def _run(mod_cls, sc: ModScenario, signs: np.ndarray, delta: float, subtract_public: bool, calibration=None):
    """One silo's run through a fresh mod (its noise calibration, the same for every run of the
    scenario, computed once): the canaries' scores, the silo's reported epsilon, the multiplier."""
    from flwr.app import ArrayRecord, Context, Message, MessageType, MetricRecord, RecordDict

    from silodp.integrations.flower import EPSILON_KEY

    mod = mod_cls(clipping_norm=1.0, epsilon=sc.epsilon, delta=delta, rounds=sc.rounds,
                  in_state_ledger=True)  # one audited run: the per-run state ledger (no silo file)
    if calibration is not None:
        mod.__dict__["calibration"] = calibration  # the cached_property's value: same config, same noise
    ctxt = Context(run_id=0, node_id=1, node_config={}, state=RecordDict(), run_config={})
    sent = [np.zeros(sc.rounds) for _ in range(sc.arrays)]
    scores, eps = np.zeros(sc.rounds), 0.0
    for r in range(sc.rounds):
        def train(msg, context, r=r):
            arrays = msg.content["arrays"].to_numpy_ndarrays()
            for a in arrays:
                a[r] += _CANARY * signs[r]
            return Message(RecordDict({"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": 1})}),
                           reply_to=msg)

        msg = Message(RecordDict({"arrays": ArrayRecord([a.copy() for a in sent])}), dst_node_id=1,
                      message_type=MessageType.TRAIN)
        out = mod(msg, ctxt, train)
        if out.has_error():
            raise RuntimeError(f"the mod refused release {r + 1}: {out.error.reason}")
        released = out.content["arrays"].to_numpy_ndarrays()
        if subtract_public:  # the adversary regenerates the public-seed noise, array by array
            rng, std = public_noise_rng(r + 1), mod.noise_multiplier * mod.clipping_norm
            released = [a - rng.normal(0.0, std, size=a.shape) for a in released]
        scores[r] = sum(float(a[r] - s[r]) for a, s in zip(released, sent))
        eps = float(out.content["metrics"][EPSILON_KEY])
    return scores, eps, mod.calibration


@contextmanager
def _task_identity():
    """Flower's messages need the run / task / node identity of a running app: this process's
    (the audit plays one silo in process), set for the call where none is, restored after; the
    mod's per-release log line is held back meanwhile (thousands of releases)."""
    import logging

    from flwr.supercore.task_identity import TaskIdentity

    saved = {name: getattr(TaskIdentity, name) for name in ("_run_id", "_task_id", "_node_id")}
    logger = logging.getLogger("flwr")
    level = logger.level
    for name, value in saved.items():
        if value is None:
            setattr(TaskIdentity, name, 1)
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)
        for name, value in saved.items():
            setattr(TaskIdentity, name, value)


def audit_flower_mod(mutation: str, counterpart: bool = False, estimator: str | None = None, alpha: float = 0.05,
                     delta: float = 1e-5, seed: int = 0) -> ModAudit:
    """Audit ``mutation``'s scenario (:data:`MOD_SCENARIOS`) through the mutated mod, or through
    the plain ``IsrlDpMod`` (``counterpart``), against the silo ledger's reported epsilon."""
    from silodp.integrations.flower import IsrlDpMod

    if mutation not in MOD_SCENARIOS:
        raise ValueError(f"mutation: must be one of {sorted(MOD_SCENARIOS)}, got {mutation!r}")
    sc = MOD_SCENARIOS[mutation]
    started = time.perf_counter()
    mod_cls = IsrlDpMod if counterpart else mutated_mod(mutation)
    coins = np.random.default_rng([seed, 24]).random((sc.runs, sc.rounds)) < 0.5
    public = mutation == "public-seed-noise"
    with _task_identity():
        runs = [_run(mod_cls, sc, np.where(coins[0], 1.0, -1.0), delta, public)]
        runs += [_run(mod_cls, sc, np.where(inc, 1.0, -1.0), delta, public, runs[0][2]) for inc in coins[1:]]
    claims = {eps for _, eps, _ in runs}
    if len(claims) != 1:
        raise RuntimeError(f"runs: the silos reported different epsilons ({sorted(claims)})")
    canary = CanaryScores(np.concatenate([s for s, _, _ in runs]), coins.ravel())
    verdict = judge_run(canary, claims.pop(), delta, alpha, estimator or sc.verdict_by)
    return ModAudit(**verdict, mutation=None if counterpart else mutation, rounds=sc.rounds, runs=sc.runs,
                    noise_multiplier=runs[0][2].noise_multiplier, wall_s=time.perf_counter() - started)


__all__ = ["MOD_MUTATIONS", "MOD_SCENARIOS", "ModAudit", "audit_flower_mod", "mutated_mod", "public_noise_rng"]
