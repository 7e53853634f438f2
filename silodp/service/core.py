"""One silo's answers to a run, whichever process computes them: :class:`Silo`.

The silo service (:mod:`silodp.service.app`) holds one :class:`Silo` for its whole life (records,
models and calibrations loaded once: warm); the in-process ClientApp of an operator who accepts
the app bundle as trusted builds one per message from its node config. Both go through the same
steps, in this order, and release nothing unless each passes:

1. the proposal (:class:`silodp.service.plan.Settings`) against the silo's caps, the model
   families it accepts and the records it fixed (:meth:`Silo.check`; refusal code ``plan``);
2. the plan: the silo calibrates its own noise for its own records at its own delta
   (:func:`silodp.service.silo.silo_plan`, cached per proposal) and the ledger admits the whole
   declared plan against everything the silo ever released (:meth:`SiloLedgerDB.admit
   <silodp.integrations.flower_silo.SiloLedgerDB.admit>`; ``budget``);
3. the server's model: present, of the model's dimension, finite (``model``); the kind must be
   one the algorithm sends (``kind``: the algorithm class's ``silo_noise``,
   :func:`silodp.service.plan.silo_noise`; ``update`` for the service's own
   :data:`~silodp.service.plan.UPDATE`, local training then the clipped update);
4. the release is recorded in the ledger before it is computed (``budget``), then computed on the
   records with fresh secret randomness.

Every refusal is a :class:`Refusal` with one of :data:`silodp.service.wire.REFUSALS`' codes and
its detailed reason, which the ledger records (its ``refusals`` table); the service answers with
the code's fixed text only.
"""

from __future__ import annotations

import dataclasses
import json
import math
import secrets
from collections.abc import Mapping
from typing import cast

import numpy as np

from silodp.integrations.flower_silo import (
    SiloLedgerDB,
    SiloPolicy,
    SiloRefusal,
    as_declared,
    dump_releases,
    load_releases,
)
from silodp.service.plan import Settings, silo_noise

#: Keys that fix the silo's records (a proposal may only name the same).
DATA_KEYS = ("dataset", "seed")
#: The public input box of :func:`silodp.algorithms.release.check_model`: a server model must be
#: finite (forward, backward, parameter gradients) for every input with |x_i| <= this. The silos'
#: standardized features lie far inside it; a record outside it is still safe (a non-finite term
#: contributes zero).
INPUT_BOUND = 1e3
#: The most local steps of an ``update`` message a silo allows unless its operator says
#: (``[caps] max_local_steps``): each costs a full-batch gradient on the silo's records.
MAX_LOCAL_STEPS = 100
#: The environment variable that turns a service's noise off (value ``"1"``), read once when the
#: service starts (:func:`silodp.service.app.build_silo`): **for tests only** (the battery's
#: neighbour comparison, issue 34 item 4). Only the operator who starts the process can set it;
#: no message, proposal or configuration file reaches it. The ledger still records the calibrated
#: noise, so a noiseless service's certificates are not what it released: never set it on a
#: silo whose releases leave the test.
ENV_TEST_NOISELESS = "SILODP_SERVICE_TEST_NOISELESS"


class Refusal(SiloRefusal):
    """A refusal with its code (a key of :data:`silodp.service.wire.REFUSALS`); ``str()`` is the
    detailed reason the ledger records, never sent by the service."""

    def __init__(self, code: str, reason: str, recorded: bool = False) -> None:
        super().__init__(reason)
        self.code, self.recorded = code, recorded


def model_array(value, dim: int, name: str) -> np.ndarray:
    """The server's array ``name`` as a float64 vector of ``dim`` finite entries, or a refusal
    (code ``model``); checked before anything touches the records."""
    if value is None:
        raise Refusal("model", f"arrays: the message lacks {name!r}")
    out = np.asarray(value, dtype=np.float64)
    if out.shape != (dim,):
        raise Refusal("model", f"arrays[{name!r}]: shape {out.shape}, expected ({dim},)")
    if not np.isfinite(out).all():
        raise Refusal("model", f"arrays[{name!r}]: holds non-finite values")
    return out


class Silo:
    """A silo's policy (budget, ledger, caps), its records and what it accepts.

    ``records``: the silo's :class:`~silodp.service.silo.SiloRecords`, or a function of the
    proposal that returns them (read only when a message trains: a refusal imports no torch);
    ``fixed``: the ``dataset`` / ``seed`` the operator chose (a proposal naming others is
    refused); ``models``: the model families it accepts (None: any ``model_for`` builds);
    ``partition``: the partition id of the calibration's cache key; ``mode``: the ledger's
    label (:data:`~silodp.integrations.flower_silo.MODE_SERVICE` or ``MODE_IN_PROCESS``);
    ``max_local_steps``: the cap on an ``update`` message's local steps; ``noiseless``: the
    test-only hook of :data:`ENV_TEST_NOISELESS` (no noise, a fixed batch draw).
    """

    def __init__(self, policy: SiloPolicy, records, *, fixed: Mapping | None = None,
                 models: tuple[str, ...] | None = None, partition: int = 0, mode: str,
                 max_local_steps: int = MAX_LOCAL_STEPS, noiseless: bool = False) -> None:
        self.policy = policy
        self.max_local_steps = int(max_local_steps)
        self._noiseless = bool(noiseless)
        self.ledger: SiloLedgerDB = policy.open_ledger(mode)
        self._records = records
        self.fixed = dict(fixed or {})
        self.models = None if models is None else tuple(models)
        self.partition = int(partition)
        self._plans: dict[Settings, object] = {}  # warm: the SiloPlan of each proposal

    # -- the steps -----------------------------------------------------------------------------
    def refuse(self, run_id: str, exc: Exception) -> Refusal:
        """``exc`` as a :class:`Refusal`, recorded in the ledger (once)."""
        code = exc.code if isinstance(exc, Refusal) else "budget" if getattr(exc, "recorded", False) else "request"
        if getattr(exc, "recorded", False):
            return Refusal(code, str(exc), recorded=True)
        recorded = self.ledger.refuse(str(run_id), f"silo refuses run {run_id}: {exc}")
        return Refusal(code, str(recorded), recorded=True)

    def check(self, settings: Settings) -> None:
        """The proposal against the caps, the accepted models and the fixed records (``plan``)."""
        try:
            self.policy.check_proposal(rounds=settings.rounds, batch_size=settings.batch_size, clip=settings.clip,
                                       step_size=settings.step_size)
        except SiloRefusal as exc:
            raise Refusal("plan", str(exc)) from None
        if not (math.isfinite(settings.epsilon) and settings.epsilon > 0):
            raise Refusal("plan", f"epsilon: must be positive and finite, got {settings.epsilon!r}")
        if self.policy.run_epsilon is not None and settings.epsilon > self.policy.run_epsilon:
            raise Refusal("plan", f"epsilon: the run asks for {settings.epsilon:g}, this silo allows one run "
                                  f"{self.policy.run_epsilon:g}")
        for key in DATA_KEYS:
            if key in self.fixed and str(self.fixed[key]) != str(getattr(settings, key)):
                raise Refusal("plan", f"{key}: this silo's records are {key} {self.fixed[key]!s} (fixed by its operator), the run "
                                      f"proposes {getattr(settings, key)!s}")
        if self.models is not None and settings.model not in self.models:
            raise Refusal("plan", f"model: this silo accepts {list(self.models)}, the run proposes {settings.model!r}")
        steps = settings.local_steps
        if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= self.max_local_steps:
            raise Refusal("plan", f"local_steps: must be an integer in [1, {self.max_local_steps}], got {steps!r}")
        try:
            silo_noise(settings.algorithm)
        except ValueError as exc:
            raise Refusal("plan", str(exc)) from None

    def records(self, settings: Settings):
        return self._records(settings) if callable(self._records) else self._records

    def _plan_entry(self, settings: Settings) -> dict:
        """What the silo caches on its disk per (silo, plan): its calibration, its declared
        releases and the model's dimension (computing them needs torch; reading them does not)."""
        plan = self.plan(settings)
        return {"sigmas": plan.sigmas, "releases": dump_releases(plan.releases), "dim": int(plan.problem.model.dim)}

    def entry(self, settings: Settings) -> dict:
        own = dataclasses.asdict(dataclasses.replace(settings, model_path=""))
        key = f"plan|{json.dumps(own, sort_keys=True)}|{self.partition}|{self.policy.budget_delta!r}"
        return cast(dict, self.ledger.cached(key, lambda: self._plan_entry(settings)))

    def plan(self, settings: Settings, sigmas: dict | None = None):
        """The silo's :class:`~silodp.service.silo.SiloPlan` of ``settings`` (kept warm)."""
        if settings not in self._plans:
            from silodp.service.silo import silo_plan

            self._plans[settings] = silo_plan(settings, self.partition, self.policy.budget_delta, sigmas,
                                              self.records(settings))
        return self._plans[settings]

    def admit(self, run_id: str, settings: Settings) -> tuple[float, float]:
        """Check and admit run ``run_id``'s whole plan (idempotent); (the plan's certificate,
        the silo's epsilon with it, all runs composed), or a recorded :class:`Refusal`."""
        run_id = str(run_id)
        try:
            self.check(settings)
            entry = self.entry(settings)
            declared = load_releases(entry["releases"])
            total = self.ledger.admit(run_id, declared, self.policy.run_epsilon)
        except (SiloRefusal, ValueError, KeyError, TypeError, OverflowError) as exc:
            raise self.refuse(run_id, exc) from None
        from silodp.integrations.flower_silo import certify_releases

        return certify_releases(declared, self.policy.budget_delta), total

    def release(self, run_id: str, settings: Settings, kind: str, w, w_prev=None) -> tuple[np.ndarray, dict]:
        """One message of run ``run_id``'s admitted plan at the server's model: the noised
        release (float64) and the ledger's ``epsilon_run``, ``epsilon_spent``, ``epsilon_left``."""
        run_id = str(run_id)
        try:
            self.check(settings)
            if kind not in silo_noise(settings.algorithm):
                raise Refusal("kind", f"kind: {settings.algorithm} sends no {kind!r} messages")
            entry = self.entry(settings)
            declared = load_releases(entry["releases"])
            w = model_array(w, entry["dim"], "w")
            w_prev = model_array(w_prev, entry["dim"], "w_prev") if kind == "diff" else None
            self.ledger.admit(run_id, declared, self.policy.run_epsilon)  # the whole plan, before the first release
            message = self._release(run_id, settings, entry, declared, kind, w, w_prev)
        except (SiloRefusal, ValueError, KeyError, TypeError, OverflowError) as exc:
            raise self.refuse(run_id, exc) from None
        run_eps, spent = self.ledger.epsilons(run_id)
        return message, {"epsilon_run": run_eps, "epsilon_spent": spent,
                         "epsilon_left": max(0.0, self.policy.budget_epsilon - spent)}

    def _release(self, run_id, settings, entry, declared, kind, w, w_prev) -> np.ndarray:
        """The admitted run's release: accounted, then computed on the silo's records."""
        import torch

        from silodp.service import silo as computed  # looked up per call: the audits' mutations patch it

        plan = self.plan(settings, entry["sigmas"])
        w = torch.from_numpy(w).to(plan.fed.x.dtype)
        w_prev = None if w_prev is None else torch.from_numpy(w_prev).to(plan.fed.x.dtype)
        from silodp.algorithms.release import Refusal as NotReleased
        from silodp.algorithms.release import check_model

        try:  # a model the silo cannot evaluate finitely on its public input box: refused, no record read
            for point in (w, w_prev):
                if point is not None:
                    check_model(plan.problem, point, INPUT_BOUND)
        except NotReleased as exc:
            raise Refusal("model", str(exc)) from None
        std = plan.std(kind, w, w_prev)  # the silo's noise, from its calibration and the server's model only
        _, release = computed.silo_release(plan.problem, kind, w, w_prev, std, settings.batch_size, plan.fed.min_size)
        self.ledger.release(run_id, as_declared(release, declared), "train")  # recorded before it leaves
        # fresh secret randomness: a seed the server could know would let it subtract the noise
        generator = torch.Generator().manual_seed(0 if self._noiseless else secrets.randbits(63))
        std = 0.0 if self._noiseless else std  # the test-only hook (ENV_TEST_NOISELESS); accounted as calibrated
        try:
            if kind == "update":
                message, _ = computed.silo_update(plan.problem, plan.fed, w, settings.local_steps, settings.step_size,
                                                  std, generator)
            else:
                message, _ = computed.silo_message(plan.problem, plan.fed, kind, w, w_prev, std, settings.batch_size,
                                                   generator)
        except NotReleased as exc:
            raise Refusal("release", str(exc)) from None
        out = message.detach().numpy().astype(np.float64)
        if not np.isfinite(out).all():
            raise Refusal("release", "the release is not finite; nothing released")
        return out

    def admits(self, settings: Settings, most: int = 100) -> dict:
        """What the budget admits of ``settings`` after everything the ledger recorded: the
        silo's certificate of one run (``epsilon_run``) and how many more runs of it fit
        (``runs``, at most ``most``: the largest k whose composition with the past is certified
        within the budget, by the same tightest certificate admission uses)."""
        from silodp.integrations.flower_silo import certify_releases

        self.check(settings)
        declared = load_releases(self.entry(settings)["releases"])
        past, delta = self.ledger.recorded(), self.policy.budget_delta

        def fits(k: int) -> bool:  # monotone in k: doubling, then bisection
            return certify_releases(past + declared * k, delta) <= self.policy.budget_epsilon

        low, high = 0, 1
        while high <= most and fits(high):
            low, high = high, 2 * high
        high = min(high, most + 1)  # fits(low), not fits(high) (or past most)
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if fits(mid) else (low, mid)
        runs = low
        return {"epsilon_run": certify_releases(declared, delta), "runs": runs,
                "epsilon_spent": certify_releases(past, delta), "budget_epsilon": self.policy.budget_epsilon,
                "budget_delta": delta}

    def status(self) -> dict:
        """The ledger's summary (``silodp ledger``'s report)."""
        return self.ledger.summary()


def proposal_settings(proposal: Mapping) -> Settings:
    """A wire proposal (:class:`silodp.service.wire.Proposal`'s fields) as :class:`Settings`."""
    return Settings(**{k: v for k, v in proposal.items() if k in {f.name for f in dataclasses.fields(Settings)}})


__all__ = ["DATA_KEYS", "ENV_TEST_NOISELESS", "MAX_LOCAL_STEPS", "Refusal", "Silo", "model_array", "proposal_settings"]

