"""silodp inside Flower (``flwr>=1.42,<1.43``): a privacy-accountant backend, an ISRL-DP client mod
with a per-silo ledger, and a worst-silo epsilon aggregator.

* :class:`SilodpAccountant` implements ``flwr.serverapp.PrivacyAccountant`` (the protocol of
  Flower's client-level, trusted-server DP strategies ``DifferentialPrivacy{Server,Client}Side
  FixedClipping``) on silodp's accountants: PLD by default (Koskela et al. 2020; Doroshenko et
  al. 2022, pessimistic discretization: a certificate), or RDP. Flower's own backend is RDP only.
* :class:`IsrlDpMod` is the no-trusted-server counterpart: each silo clips its update and adds
  Gaussian noise *before* anything leaves it, calibrates that noise from its own (epsilon, delta,
  rounds) with silodp's accountants, keeps its ledger in the SuperNode's own ledger file when the
  node config declares a budget (:mod:`silodp.integrations.flower_silo`; else in
  ``Context.state``), reports its epsilon in its metrics, refuses to reply once the next
  release would exceed its budget, and lets nothing else out (metrics, EVALUATE, QUERY).
  Flower's ``LocalDpMod`` composes nothing across rounds and uses
  the classical Gaussian formula (Dwork & Roth 2014, Thm A.1, valid for epsilon < 1 only).
* :func:`worst_silo_epsilon` aggregates the silos' reports on the server: ISRL-DP (paper
  Definition 4) holds for the federation at the *largest* silo epsilon.

Units: ``noise_multiplier`` is sigma / C, C the clip norm, as in Flower and Opacus.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from logging import INFO

import numpy as np

try:
    from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Error, Message, MessageType, MetricRecord, RecordDict
except ModuleNotFoundError as _missing:  # name the extra, not only "No module named 'flwr'"
    raise ModuleNotFoundError("silodp.integrations.flower needs flwr, which is not installed: "
                              "pip install 'silodp[flower]'", name="flwr") from _missing
from flwr.clientapp.typing import ClientAppCallable
from flwr.common.constant import ErrorCode
from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords
from flwr.supercore import log
from flwr.supercore.privacy_accounting import (
    GaussianPrivacyEvent,
    NeighboringRelation,
    PrivacyConfig,
    PrivacySpent,
    SamplingMethod,
)

from silodp.accounting import Calibration, get_accountant, tightest_epsilon
from silodp.accounting import events as ev
from silodp.accounting.accountants import PldAccountant
from silodp._validation import check_count, check_delta, check_positive
from silodp.accounting.releases import BatchSampling, GaussianRelease, releases_event

#: The metric each silo reports (and :func:`worst_silo_epsilon` maximizes).
EPSILON_KEY = "silodp_epsilon"
#: The one text the server gets when the app :class:`IsrlDpMod` wraps fails (raises or replies an
#: error): nothing of the app's own message (a loss, a value computed from records) leaves.
APP_FAILED = "the silo's app failed on this message; nothing released"
#: Where :class:`SiloLedger` lives in a node's ``Context.state``.
LEDGER_KEY = "silodp.ledger"
_STATE_SCHEMA_VERSION = 1


def _check_backend(accountant: str, probe: ev.DpEvent, relation: ev.NeighboringRelation) -> None:
    """Refuse an ``accountant`` the registry does not have, or whose ``supports()`` refuses ``probe``."""
    from silodp.accounting import ACCOUNTANTS

    if accountant not in ACCOUNTANTS or not get_accountant(accountant, relation).supports(probe):
        able = [n for n in ACCOUNTANTS if get_accountant(n, relation).supports(probe)]
        raise ValueError(f"accountant: must be a registered accountant certifying this sampling {able}, "
                         f"got {accountant!r}")


class SilodpAccountant:
    """Flower's ``PrivacyAccountant`` protocol on a registered silodp accountant that supports the
    configured sampling (``"pld"``, ``"rdp"``, ...).

    Each ``GaussianPrivacyEvent`` becomes the silodp event of Flower's ``sampling_method``:
    ``POISSON`` -> ``PoissonSampledDpEvent(sample_size / population_size, Gaussian)``,
    ``WITHOUT_REPLACEMENT`` -> ``SampledWithoutReplacementDpEvent``, ``NO_AMPLIFICATION`` -> the
    Gaussian itself, under the configured neighbouring relation (client-level: a client's data
    appears, disappears or is replaced). Flower has no balls-in-bins method: such rounds are
    declared ``NO_AMPLIFICATION`` here (sound) and certified tighter by composing
    ``BallsInBinsDpEvent`` with a silodp accountant (docs/accounting.md). Same events, same epsilon rules as Flower's RDP backend;
    the PLD is tighter (never larger, up to its discretization).

    Incremental (issue 21 item 3): with ``"pld"`` the composed privacy loss distribution is kept
    and each ``compose`` call folds one more PLD into it (the PLD of its event, self-composed
    ``count`` times, cached per distinct call), exactly what :class:`PldAccountant` computes for
    the same calls in the same order, so the certificate is identical to composing them all at
    once, while the composed PLD holds at most :attr:`GROWTH` times the grid points of the largest
    call's PLD. Past that (its support widens like the square root of the rounds: 3x for
    Poisson-subsampled, 10x for plain Gaussians in 100 rounds at the default grid) its grid
    interval doubles, as often as needed to keep it within :attr:`COARSE_GROWTH` times, and each
    later call's PLD is folded in on that grid: every loss is rounded *up* to the coarser grid,
    which only moves mass to larger losses, so the answer stays a certificate (Zhu, Dong & Wang
    2022, Thm 10; :mod:`silodp.accounting.pld`), slightly above the fine one (0.24% of epsilon
    after 100 Poisson-subsampled rounds, 0.06% without amplification;
    ``tests/integrations/test_flower.py``). An update therefore costs one convolution and one
    query on a PLD of bounded size: flat in the number of rounds (``benchmarks/bench_flower.py
    ledger``). Where that PLD's floating-point charge or
    tail mass needs the accountant's slower paths, the query replays the calls through it. With
    any other registered accountant (``"rdp"``, ``"gdp"``, ...) identical events are grouped (curves add; order does not matter). :meth:`state_dict`
    lists the calls in order and :meth:`load_state_dict` replays them (one convolution each).
    """

    #: Most grid points of the kept composition, in multiples of the largest single call's PLD, on
    #: the accountant's own grid (where the certificate is :class:`PldAccountant`'s, bit for bit)
    #: and once coarsened (an update then costs about what the first did: ``bench_flower.py ledger``).
    GROWTH, COARSE_GROWTH = 1.5, 1.0

    def __init__(self, config: PrivacyConfig, accountant: str = "pld") -> None:
        if not isinstance(config, PrivacyConfig):
            raise ValueError(f"config must be a flwr PrivacyConfig, got {type(config).__name__}")
        self._config = config
        _check_backend(accountant, self._event(GaussianPrivacyEvent(1.0, 1, config.population_size)),
                       ev.relation(config.neighboring_relation))
        self.accountant = accountant
        #: the composed PLD is kept (one convolution per update) where the accountant is the PLD's
        #: (a subclass included); any other registered accountant groups identical calls
        self._incremental = isinstance(get_accountant(accountant, ev.relation(config.neighboring_relation)), PldAccountant)
        self._calls: list[tuple[GaussianPrivacyEvent, int]] = []  # every compose call, in order
        self._fold = None  # pld: the composed PLD of _calls; rdp: the accountant of the grouped calls
        self._blocks: dict[tuple[GaussianPrivacyEvent, int], object] = {}  # pld: the PLD of one call
        self._factor = 1  # pld: the kept composition's grid interval, in multiples of the accountant's
        self._cap = 0  # pld: the grid points of the largest single call's PLD

    @property
    def config(self) -> PrivacyConfig:
        return self._config

    @property
    def accounting_method(self) -> str:
        return f"silodp-{self.accountant}"

    @property
    def num_releases(self) -> int:
        return sum(count for _, count in self._calls)

    def _event(self, event: GaussianPrivacyEvent) -> ev.DpEvent:
        if not isinstance(event, GaussianPrivacyEvent):
            raise ValueError(f"event must be a flwr GaussianPrivacyEvent, got {type(event).__name__}")
        if event.population_size != self._config.population_size:
            raise ValueError(f"event.population_size {event.population_size} != config.population_size "
                             f"{self._config.population_size}")
        gaussian = ev.GaussianDpEvent(event.noise_multiplier)
        method = self._config.sampling_method
        if method is SamplingMethod.POISSON:
            return ev.PoissonSampledDpEvent(event.sample_size / event.population_size, gaussian)
        if method is SamplingMethod.WITHOUT_REPLACEMENT:
            return ev.SampledWithoutReplacementDpEvent(event.population_size, event.sample_size, gaussian)
        return gaussian

    def _accountant(self, calls):
        """A fresh silodp accountant that composed ``calls`` (the reference: all at once)."""
        acc = get_accountant(self.accountant, ev.relation(self._config.neighboring_relation))
        for event, count in calls:
            acc.compose(self._event(event), count)
        return acc

    def _grouped(self, calls):
        groups: dict[GaussianPrivacyEvent, int] = {}
        for event, count in calls:
            groups[event] = groups.get(event, 0) + count
        return self._accountant(groups.items())

    def _block(self, call: tuple[GaussianPrivacyEvent, int], factor: int = 1):
        """The PLD :class:`PldAccountant` composes for one call (cached: rounds repeat their event),
        on the grid ``factor`` times coarser (:func:`_coarsened`)."""
        if (call, factor) not in self._blocks:
            fine = self._blocks.get((call, 1)) or self._accountant([call]).composed_pld()
            self._blocks[(call, 1)] = fine
            self._cap = max(self._cap, _points(fine))
            self._blocks[(call, factor)] = _coarsened(fine, factor)
        return self._blocks[(call, factor)]

    def _extended(self, call: tuple[GaussianPrivacyEvent, int]) -> tuple[object, int]:
        """The state after one more ``call`` (the composed PLD and its grid factor; or the grouped
        accountant, factor 1): past :attr:`GROWTH` (then :attr:`COARSE_GROWTH`) times the largest
        call's grid points, the composition's grid interval doubles, as often as needed."""
        if not self._incremental:
            return self._grouped([*self._calls, call]), 1
        factor = self._factor
        block = self._block(call, factor)
        total = block if self._fold is None else self._fold.compose(block)
        while _points(total) > (self.GROWTH if factor == 1 else self.COARSE_GROWTH) * self._cap:
            factor *= 2
            total = _coarsened(total, 2)
        return total, factor

    def compose(self, event: GaussianPrivacyEvent, count: int = 1) -> None:
        """Compose ``count`` identical releases of ``event`` (validated by the accountant's
        allow-list before anything is committed)."""
        check_count("count", count)
        call = (event, int(count))
        self._accountant([call])
        self._fold, self._factor = self._extended(call)
        self._calls.append(call)

    def _epsilon(self, state, calls, delta: float) -> float:
        if not calls:
            return 0.0
        if self._incremental:
            eps = PldAccountant.fast_epsilon(state, delta)  # PldAccountant's own first path
            if eps is not None:
                return eps
            return self._accountant(calls).get_epsilon(delta)  # its slower paths, or its refusal
        return state.get_epsilon(delta)

    def get_epsilon(self, delta: float) -> float:
        return self._epsilon(self._fold, self._calls, check_delta("delta", delta))

    def get_delta(self, epsilon: float) -> float:
        if not epsilon > 0 or not math.isfinite(epsilon):
            raise ValueError(f"epsilon must be positive and finite, got {epsilon!r}")
        if not self._calls:
            return 0.0
        if self._incremental:
            return float(min(1.0, self._fold.get_delta_for_epsilon(epsilon)))
        return self._fold.get_delta(epsilon)

    def get_privacy_spent(self, delta: float | None = None) -> PrivacySpent:
        dl = self._config.target_delta if delta is None else check_delta("delta", delta)
        return PrivacySpent(epsilon=self.get_epsilon(dl), delta=dl, num_releases=self.num_releases,
                            accounting_method=self.accounting_method)

    def would_exceed(self, event: GaussianPrivacyEvent, max_epsilon: float | None = None, count: int = 1) -> bool:
        """Whether composing ``count`` more ``event`` would certify more than ``max_epsilon`` (or
        the config's) at the config's delta; the committed state is not changed."""
        limit = self._config.max_epsilon if max_epsilon is None else max_epsilon
        if limit is None:
            raise ValueError("max_epsilon must be supplied either in PrivacyConfig or to would_exceed()")
        check_positive("max_epsilon", limit)
        call = (event, check_count("count", count))
        self._accountant([call])
        projected = self._epsilon(self._extended(call)[0], [*self._calls, call], self._config.target_delta)
        return bool(projected > limit)

    def state_dict(self) -> dict[str, object]:
        """JSON-serializable state: the configuration and the ledger of composed events."""
        return {
            "schema_version": _STATE_SCHEMA_VERSION,
            "backend": self.accounting_method,
            "config": {**dataclasses.asdict(self._config),
                       "neighboring_relation": self._config.neighboring_relation.value,
                       "sampling_method": self._config.sampling_method.value},
            "compositions": [{"event": dataclasses.asdict(e), "count": c} for e, c in self._calls],
        }

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore :meth:`state_dict`'s output; the configuration and backend must match."""
        if not isinstance(state, dict) or state.get("schema_version") != _STATE_SCHEMA_VERSION:
            raise ValueError(f"state: must be a dict with schema_version {_STATE_SCHEMA_VERSION}")
        if state.get("backend") != self.accounting_method:
            raise ValueError(f"state: produced by backend {state.get('backend')!r}, not {self.accounting_method!r}")
        raw = dict(state.get("config") or {})
        try:
            config = PrivacyConfig(**{**raw, "neighboring_relation": NeighboringRelation(raw["neighboring_relation"]),
                                      "sampling_method": SamplingMethod(raw["sampling_method"])})
            compositions = [(GaussianPrivacyEvent(**c["event"]), int(c["count"])) for c in state["compositions"]]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"state: malformed ({exc})") from exc
        if config != self._config:
            raise ValueError("state: its privacy configuration does not match this accountant's")
        previous = self._calls, self._fold, self._factor
        self._calls, self._fold, self._factor = [], None, 1
        try:
            for event, count in compositions:
                self.compose(event, count)
        except ValueError:
            self._calls, self._fold, self._factor = previous
            raise


def _points(pld) -> int:
    """Grid points of a PLD, both directions."""
    return sum(len(p.masses) for p in pld._directions())


def _coarsened(pld, factor: int):
    """``pld`` on a grid ``factor`` (a power of two) times coarser: the mass at loss j h moves to
    ceil(j / factor) factor h, never to a smaller loss, so every hockey-stick value can only grow
    (:mod:`silodp.accounting.pld`: moving mass to larger losses keeps the domination, Zhu, Dong &
    Wang 2022, Thm 10) and the coarse PLD stays a certificate; the sums' round-off ((factor - 1) u
    of the mass, Higham 2002, Sec 3.1) is added to its ``roundoff`` charge."""
    from silodp.accounting.pld import LossPmf, PrivacyLossDistribution

    if factor == 1:
        return pld

    def one(p: LossPmf) -> LossPmf:
        first = -(-p.offset // factor)  # the coarse point of the lowest loss
        lead = p.offset - ((first - 1) * factor + 1)  # fine points of that coarse cell below the lowest
        padded = np.concatenate([np.zeros(lead, dtype=p.masses.dtype), p.masses])
        padded = np.concatenate([padded, np.zeros(-len(padded) % factor, dtype=p.masses.dtype)])
        masses = padded.reshape(-1, factor).sum(axis=1)
        charge = factor * float(np.finfo(p.masses.dtype).eps) * float(np.sum(masses))
        return LossPmf(p.interval * factor, first, masses, p.infinity_mass, p.roundoff + charge)

    return PrivacyLossDistribution(one(pld.remove), None if pld.add is None else one(pld.add),
                                   pld.log_mass_truncation_bound)


class SiloLedger:
    """One silo's releases, kept in its node's ``Context.state`` so they outlive each round.

    Every release is a :class:`~silodp.accounting.releases.GaussianRelease` (a group, its
    sampling, batch and dataset size, noise multiplier sigma / C); the silo's epsilon is that of
    :func:`~silodp.accounting.releases.releases_event` of all of them under ``REPLACE_ONE``
    (ISRL-DP, paper Definition 4), the same event the simulator certifies. Releases of the same
    group, sampling, sizes and noise are merged (counts add).
    """

    _FIELDS = ("group", "count", "noise_multiplier", "sampling", "batch_size", "dataset_size")

    def __init__(self, context: Context, accountant: str | None = None) -> None:
        self.context = context
        self.accountant = accountant

    def releases(self) -> list[GaussianRelease]:
        if LEDGER_KEY not in self.context.state:
            return []
        rec = self.context.state[LEDGER_KEY]
        return [GaussianRelease(g, int(c), float(z), BatchSampling(s), int(k), int(n))
                for g, c, z, s, k, n in zip(*(rec[f] for f in self._FIELDS))]

    def _merged(self, release: GaussianRelease | None) -> list[GaussianRelease]:
        merged: dict[tuple, int] = {}
        for r in self.releases() + ([release] if release else []):
            key = (r.group, r.noise_multiplier, r.sampling, r.batch_size, r.dataset_size)
            merged[key] = merged.get(key, 0) + r.count
        return [GaussianRelease(g, c, z, s, k, n) for (g, z, s, k, n), c in merged.items()]

    def epsilon(self, delta: float, release: GaussianRelease | None = None) -> float:
        """Certified epsilon of everything recorded (plus ``release``, if given, as a projection)."""
        event = releases_event(self._merged(release))
        acc = self.accountant
        if acc is None:  # the tightest of the candidates, as `silodp run` certifies
            return tightest_epsilon(event, delta, ev.REPLACE_ONE)[0]
        return get_accountant(acc, ev.REPLACE_ONE).compose(event).get_epsilon(delta)

    def record(self, release: GaussianRelease) -> None:
        rows = self._merged(release)
        self.context.state[LEDGER_KEY] = ConfigRecord({
            "group": [r.group for r in rows], "count": [r.count for r in rows],
            "noise_multiplier": [r.noise_multiplier for r in rows], "sampling": [r.sampling.value for r in rows],
            "batch_size": [r.batch_size for r in rows], "dataset_size": [r.dataset_size for r in rows]})

    def count(self) -> int:
        return sum(r.count for r in self.releases())


def _update_release(noise_multiplier: float) -> GaussianRelease:
    # the whole clipped update is one contribution of norm <= C (batch = dataset = 1 slot)
    from silodp.service.plan import update_release

    return update_release(noise_multiplier)


class IsrlDpMod:
    """Client mod: ISRL-DP for each silo on its own, with a ledger the server cannot reset.

    On each ``train`` message the silo's model update (reply arrays minus received arrays) is
    clipped to l2 norm ``clipping_norm`` = C and released with N(0, (z C)^2 I) noise added. The
    clipped update is one contribution of norm <= C, so replacing one record of the silo (indeed
    its whole dataset) moves it by at most 2C: each release is ``GaussianDpEvent(z)`` under
    ``REPLACE_ONE`` (sensitivity 2C), and R releases compose adaptively. ``z`` is the smallest
    noise multiplier certifying (``epsilon``, ``delta``) for ``rounds`` releases
    (:func:`silodp.accounting.tightest_calibration`, rounded toward more privacy; ``accountant``
    names it, default the tightest of silodp's candidates). This is silo-level DP, which implies
    ISRL-DP (paper Definition 4); no amplification by the silo's own minibatching is credited.

    The ledger: when the SuperNode's node config declares a silodp budget
    (:class:`~silodp.integrations.flower_silo.SiloPolicy`: ``silodp-ledger``,
    ``silodp-budget-epsilon``, ``silodp-budget-delta``; or the host's environment does, for the
    simulation engine), the silo's persistent ledger file, across runs: the run's plan of
    ``rounds`` releases is admitted before its first message and each
    release recorded before it leaves; refusals are written to it. Without one the mod refuses
    every message (issue 34: a ledger in ``Context.state`` starts empty with every run, so three
    runs would each report one run's epsilon); ``in_state_ledger=True`` opts into that per-run
    ledger, bounded by this mod's own ``epsilon``, for a single simulated run only.

    Every exception or error reply of the wrapped app becomes the one text :data:`APP_FAILED`
    (the app's own message, e.g. a divergence guard's loss, stays in the silo's ledger).

    **Service mode** (the silo trusts no code the server ships): when the node config names a
    silo privacy service (``silodp-service``: ``unix:/path/silo.sock`` or
    ``http://127.0.0.1:PORT`` with ``silodp-service-token``; :mod:`silodp.service.client`), the
    mod is a thin client. It never calls the wrapped app (which would train on records the
    ClientApp process should not hold) and imports no torch: it forwards the server's TRAIN
    proposal (this mod's ``epsilon``, ``rounds``, ``clipping_norm``, ``accountant`` and the run
    config's ``model``, ``dataset``, ``seed``, ``step-size``, ``local-steps``) and model (the
    message's one ArrayRecord, flattened) to the service as an ``update`` message
    (:data:`silodp.service.plan.UPDATE`), and replies with what the service released, reshaped
    into the sent arrays. The service owns everything else: its records, its caps, its own
    calibration at its own delta, local training, the clip and the noise
    (:func:`silodp.service.silo.silo_update`, the one release primitive), its ledger (refusals
    included: a malformed or non-TRAIN message is forwarded so that the service refuses and
    records it), and one fixed text per refusal. The in-process mode above (the ledger from the
    node config or the environment) is for the simulation engine and for operators who accept
    the app bundle as trusted; its ledger is labelled so.

    Nothing else leaves: the server's arrays are checked finite before the silo trains on them
    (a NaN or inf weight would otherwise make the clip factor ``min(1, C / NaN)`` vanish); every
    metric the ClientApp put in its reply is replaced by ``public_metrics`` (constants the silo
    publishes, default ``{"num-examples": 1}``) and ``silodp_epsilon`` (the silo's certified
    epsilon of this run after this release); config records are dropped; EVALUATE and QUERY
    messages, which release nothing declared, are refused.
    """

    def __init__(self, clipping_norm: float, epsilon: float, delta: float, rounds: int,
                 accountant: str | None = None, public_metrics: dict[str, float] | None = None,
                 in_state_ledger: bool = False) -> None:
        self.in_state_ledger = bool(in_state_ledger)
        self.clipping_norm = check_positive("clipping_norm", clipping_norm)
        self.epsilon = check_positive("epsilon", epsilon)
        self.delta = check_delta("delta", delta)
        self.rounds = check_count("rounds", rounds)
        self.accountant = accountant
        self.public_metrics = {"num-examples": 1} if public_metrics is None else dict(public_metrics)
        for name, value in self.public_metrics.items():
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"public_metrics[{name!r}]: must be a finite number, got {value!r}")

    @functools.cached_property
    def calibration(self) -> Calibration:
        """The noise of every release, computed on first use (see the class docstring)."""
        from silodp.service.plan import update_calibration

        return update_calibration(self.rounds, self.epsilon, self.delta, self.accountant)

    @property
    def noise_multiplier(self) -> float:
        return self.calibration.noise_multiplier

    def ledger(self, context: Context) -> SiloLedger:
        """The silo's in-state ledger, evaluated by the calibration's accountant (its spec's name)."""
        return SiloLedger(context, self.accountant or self.calibration.spec.name)

    def _record_refusal(self, ctxt: Context, reason: str) -> None:
        """Write a refusal to the silo's ledger file, where the node config (or the simulation's
        environment) declares one; the in-state ledger keeps no refusals."""
        import contextlib
        import os

        from silodp.integrations.flower_silo import ENV_LEDGER_DIR, NODE_LEDGER, SiloPolicy, SiloRefusal

        if NODE_LEDGER in ctxt.node_config or ENV_LEDGER_DIR in os.environ:
            with contextlib.suppress(SiloRefusal, OSError, ValueError):
                SiloPolicy.for_node(ctxt.node_config).open_ledger().refuse(str(ctxt.run_id), f"IsrlDpMod: {reason}")

    def _admit(self, ctxt: Context, release: GaussianRelease) -> Callable[[], float]:
        """Record ``release`` (before it leaves) or raise ``SiloRefusal``; returns how to read the
        silo's epsilon afterwards."""
        import os

        from silodp.integrations.flower_silo import ENV_LEDGER_DIR, NODE_LEDGER, SiloPolicy, SiloRefusal

        if not self.in_state_ledger or NODE_LEDGER in ctxt.node_config or ENV_LEDGER_DIR in os.environ:
            # declared, or required: never falls back to the run's state (which each run starts empty)
            policy = SiloPolicy.for_node(ctxt.node_config)
            db, run = policy.open_ledger(), str(ctxt.run_id)
            db.admit(run, [dataclasses.replace(release, count=self.rounds)], policy.run_epsilon)
            db.release(run, release, "train")
            return lambda: db.epsilons(run)[0]
        ledger = self.ledger(ctxt)
        projected = ledger.epsilon(self.delta, release)
        if projected > self.epsilon:
            raise SiloRefusal(f"budget exhausted: the next release would certify epsilon {projected:.6g} > "
                              f"{self.epsilon:g} at delta {self.delta:g} ({ledger.count()} releases made)")
        ledger.record(release)  # the reply is computed in this process; an error reply releases nothing
        return lambda: projected

    def proposal(self, run_config) -> dict:
        """The ``update`` proposal forwarded to a silo service (see the class docstring)."""
        from silodp.service.client import proposal_of
        from silodp.service.plan import UPDATE

        return {**proposal_of(run_config), "algorithm": UPDATE, "epsilon": self.epsilon, "rounds": self.rounds,
                "clip": self.clipping_norm, "accountant": self.accountant or ""}

    def _forward(self, client, msg: Message, ctxt: Context) -> Message:
        """Service mode: the proposal and the model go to the service, its release (or its fixed
        refusal) comes back; the wrapped app is never called."""
        from silodp.service.client import ServiceRefused

        def refuse(text: str) -> Message:
            return Message(Error(ErrorCode.MOD_FAILED_PRECONDITION, f"IsrlDpMod: {text}"), reply_to=msg)

        is_train = msg.metadata.message_type == MessageType.TRAIN
        kind = "update" if is_train else str(msg.metadata.message_type)[:16]
        records = list(msg.content.array_records.items())
        key, sent = records[0] if len(records) == 1 else ("arrays", ArrayRecord())
        try:
            arrays = [np.asarray(a.numpy()) for a in sent.values()]
            w = np.concatenate([a.astype(np.float64).ravel() for a in arrays]) if arrays else np.zeros(0)
            if len(records) != 1 or any(a.dtype.kind not in "fiu" for a in arrays):
                w = np.zeros(0)  # the service refuses (and records) a model that is not its model
        except (TypeError, ValueError):
            arrays, w = [], np.zeros(0)
        try:
            message, out = client.release(str(ctxt.run_id), self.proposal(ctxt.run_config), kind, w)
        except ServiceRefused as exc:
            return refuse(str(exc))
        finally:
            client.close()
        if not is_train or message.size != w.size:  # the service released nothing else; never reached
            return refuse(APP_FAILED)
        parts = _split_release(message, [a.shape for a in arrays],
                              [a.dtype if a.dtype.kind == "f" else np.dtype(np.float64) for a in arrays])
        if parts is None:  # not finite in the sent dtype: nothing leaves (the service's text)
            from silodp.service.wire import REFUSALS

            return refuse(REFUSALS["release"])
        content = RecordDict({key: ArrayRecord({k: Array(v) for k, v in zip(sent.keys(), parts, strict=True)})})
        content["metrics"] = MetricRecord({**self.public_metrics, EPSILON_KEY: float(out.epsilon_run)})
        return Message(content, reply_to=msg)

    def __call__(self, msg: Message, ctxt: Context, call_next: ClientAppCallable) -> Message:
        from silodp.integrations.flower_silo import SiloRefusal
        from silodp.service.client import NODE_SERVICE, ServiceClient

        if NODE_SERVICE in ctxt.node_config:  # service mode: a thin client, nothing of the wrapped app runs
            try:
                client = ServiceClient.for_node(ctxt.node_config)
            except ValueError:
                return Message(Error(ErrorCode.MOD_FAILED_PRECONDITION,
                                     f"IsrlDpMod: {NODE_SERVICE} names no local silo service; refused"), reply_to=msg)
            return self._forward(client, msg, ctxt)

        def refuse(reason: str, sent_text: str | None = None, recorded: bool = False) -> Message:
            """An error reply; the refusal is written to the silo's ledger file when it has one
            (unless ``recorded`` already). ``sent_text``: what the server gets instead of ``reason``."""
            if not recorded:
                self._record_refusal(ctxt, reason)
            return Message(Error(ErrorCode.MOD_FAILED_PRECONDITION, f"IsrlDpMod: {sent_text or reason}"), reply_to=msg)

        if msg.metadata.message_type != MessageType.TRAIN:
            return refuse(f"a {msg.metadata.message_type} message releases nothing declared; refused")
        if len(msg.content.array_records) != 1:
            return refuse("expected one ArrayRecord")
        sent = next(iter(msg.content.array_records.values()))
        sent_arrays = sent.to_numpy_ndarrays()
        if not all(np.isfinite(a).all() for a in sent_arrays):
            return refuse("the server's arrays hold non-finite values; refused before training")
        release = _update_release(self.noise_multiplier)
        try:
            epsilon = self._admit(ctxt, release)
        except SiloRefusal as exc:
            return refuse(str(exc), recorded=exc.recorded)
        try:
            out = call_next(msg, ctxt)
        except Exception as exc:  # noqa: BLE001 -- nothing of the app's error leaves the silo
            return refuse(f"the wrapped app raised {type(exc).__name__}: {exc}", APP_FAILED)
        if out.has_error():
            return refuse(f"the wrapped app replied an error: {out.error.reason}", APP_FAILED)
        if len(out.content.array_records) != 1:
            return refuse("reply must hold one ArrayRecord")
        key, reply = next(iter(out.content.array_records.items()))
        if list(reply.keys()) != list(sent.keys()):
            return refuse("reply arrays differ from the sent ones")
        released = self._privatize(reply.to_numpy_ndarrays(), sent_arrays)
        content = RecordDict({key: ArrayRecord({k: Array(v) for k, v in zip(reply.keys(), released, strict=True)})})
        eps = epsilon()
        names = list(out.content.metric_records) or ["metrics"]
        for name in names:  # the ClientApp's metrics are data: replaced by what the silo publishes
            content[name] = MetricRecord({**self.public_metrics, EPSILON_KEY: eps})
        log(INFO, "IsrlDpMod: update clipped to %.4g, noise std %.4g; silo epsilon %.6g",
            self.clipping_norm, self.noise_multiplier * self.clipping_norm, eps)
        return Message(content, reply_to=msg)


    def _privatize(self, new: list[np.ndarray], old: list[np.ndarray]) -> list[np.ndarray]:
        """The release (:func:`privatize` with fresh noise); the audits' mutated mods
        (:mod:`silodp.verify.audit.flower_mod`) override this one seam."""
        return privatize(new, old, self.clipping_norm, self.noise_multiplier, np.random.default_rng())


def privatize(new: list[np.ndarray], old: list[np.ndarray], clipping_norm: float, noise_multiplier: float,
              rng: np.random.Generator) -> list[np.ndarray]:
    """``old + (clip(new - old, C) + N(0, (z C)^2 I))`` over all arrays jointly (one l2 norm),
    through silodp's one release primitive (:mod:`silodp.algorithms.release`).

    The noise meets the clipped update *before* the server's ``old`` is added, in float64: adding
    ``old`` first would round the clipped update onto the server's float grid (with ``old`` at
    ``1.5 * 2**51`` the centre moves by nearly 2C for an update clipped to C, doubling the
    sensitivity). ``old`` (the server's) must be finite: a ValueError otherwise. A non-finite update
    (NaN or inf anywhere in ``new``, or a difference that overflows) is the zero update; its norm
    never overflows. A release that is not finite in the arrays' own dtypes is refused
    (:class:`silodp.algorithms.release.Refusal`): nothing leaves."""
    import torch

    from silodp.algorithms.release import Refusal, clip_update, gaussian_release, noise_std

    check_positive("clipping_norm", clipping_norm)
    if not noise_multiplier >= 0 or math.isnan(noise_multiplier):
        raise ValueError(f"noise_multiplier: must be >= 0, got {noise_multiplier!r}")
    olds = [np.asarray(o, dtype=np.float64) for o in old]
    if not all(np.isfinite(o).all() for o in olds):
        raise ValueError("old: the server's arrays hold non-finite values")
    with np.errstate(over="ignore", invalid="ignore"):
        delta = np.concatenate([(np.asarray(n, dtype=np.float64) - o).ravel() for n, o in zip(new, olds, strict=True)])
    clipped = clip_update(torch.from_numpy(delta), clipping_norm)
    std = noise_std(noise_multiplier, clipping_norm)  # rounded up: std / C >= the multiplier charged
    noise = torch.from_numpy(rng.normal(0.0, std, size=delta.shape))
    offset = torch.from_numpy(np.concatenate([o.ravel() for o in olds]))
    released = gaussian_release(clipped, std, None, offset, noise=noise).numpy()
    out = _split_release(released, [o.shape for o in olds], [np.asarray(n).dtype for n in new])
    if out is None:
        raise Refusal("non-finite")
    return out


def _split_release(flat: np.ndarray, shapes: list[tuple[int, ...]], dtypes: list[np.dtype]) -> list[np.ndarray] | None:
    """A flat release cut into arrays of ``shapes``, each cast to its dtype; None when a part is not
    finite in its dtype (a float64 release can overflow float32): then nothing may leave."""
    out, start = [], 0
    for shape, dtype in zip(shapes, dtypes, strict=True):
        size = math.prod(shape)
        with np.errstate(over="ignore", invalid="ignore"):
            part = flat[start:start + size].reshape(shape).astype(dtype)
        if not np.isfinite(part).all():
            return None
        out.append(part)
        start += size
    return out


def worst_silo_epsilon(records: list[RecordDict], weighting_metric_name: str) -> MetricRecord:
    """Flower's weighted metric average, except ``silodp_epsilon``: the largest a silo reported
    (the federation is ISRL-DP at its worst silo's epsilon). Signature of FedAvg's
    ``train_metrics_aggr_fn``."""
    worst = -math.inf
    for rec in records:
        for metric in rec.metric_records.values():
            if EPSILON_KEY in metric:
                worst = max(worst, float(metric[EPSILON_KEY]))
    out = aggregate_metricrecords(records, weighting_metric_name)
    if worst > -math.inf:
        out[EPSILON_KEY] = worst
    return out


__all__ = ["EPSILON_KEY", "IsrlDpMod", "SiloLedger", "SilodpAccountant", "privatize", "worst_silo_epsilon"]
