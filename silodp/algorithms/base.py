"""Shared machinery: the algorithm base class (parameters, calibration) and the per-run context
(randomness, minibatches, the Gaussian or shuffled channel, transcripts, metrics).

Every silo message goes through :meth:`Context.send`, which draws the noise of all N silos in one
call, records what each silo released, and returns the server's aggregate. Everything an
algorithm computes afterwards is a function of released messages only (post-processing), which
is what lets :meth:`FederatedAlgorithm.run` *replay* a recorded transcript: with
``replay=result`` the server's aggregates and each silo's released messages are taken from
``result`` while the silo still computes its own message on its own data. Two runs on neighbouring
datasets, one replaying the other, thus show exactly how one silo's message depends on one record
at the same iterates (the ISRL-DP sensitivity).

Each algorithm class declares what one silo may release, its *declaration* (:meth:`FederatedAlgorithm.declaration`: its
message groups, how many of each, their sampling and noise multiplier sigma / C, C the per-record
contribution bound), next to the ``_run`` that sends them. That declaration is the privacy event
the accounting layer calibrates and certifies (:mod:`silodp.algorithms.privacy`), and at run time
every message :meth:`Context.send` makes is recorded in a
:class:`~silodp.accounting.releases.ReleaseLedger` that refuses, naming the release, any message
the declaration does not cover. The contribution bound of each message is taken from
:meth:`Context.term`, which computed it (clip norm, twice it for a difference, or the difference
clip), over the batch weights; never from the algorithm's own say-so.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Callable, ClassVar

import torch

from silodp.accounting.pvec import rotated_bound
from silodp.accounting.releases import BatchSampling, GaussianRelease, ReleaseLedger, Sent, shuffle_invocations

from . import grads as _grads
from .config import OUTPUTS, AlgorithmConfig, own_fields  # noqa: F401  (OUTPUTS: re-exported)
from .federation import BallsInBinsSampler, BatchSampler, Federation, SubsetSampler
from .privacy import NoiseCalibration, TranscriptConfig
from .release import gaussian_release
from .result import RunResult
if TYPE_CHECKING:
    from .problems import Problem
from .shuffle import analyze, as_params, pvec_fast, randomize, rotate, rotation_signs, unrotate

def _shuffle_groups(raw: dict, groups: tuple[str, ...]) -> dict:
    """Binomial parameters per message group from one ``{g, b, p}`` for all groups, or a dict
    keyed by group name (a calibration's ``shuffle``)."""
    if "g" in raw:
        return {g: as_params(raw) for g in groups}
    unknown = sorted(set(raw) - set(groups))
    if unknown or not raw:
        raise ValueError(f"shuffle_params: need (g, b, p) per message group of {list(groups)}, got {sorted(raw)}")
    return {g: as_params(raw[g]) for g in groups if g in raw}  # a group never sent needs none


class FederatedAlgorithm:
    """Base class. Constructors only store parameters (validated by the class's :attr:`Config`,
    one frozen dataclass per algorithm: :mod:`silodp.algorithms.config`); :meth:`run` does the work.
    The shared parameters are :class:`~silodp.algorithms.config.AlgorithmConfig`'s; a family adds
    its own in its ``Config`` (its CLI flags, grid keys and docs rows follow from them).
    """

    name: ClassVar[str] = ""
    #: the algorithm's parameters: a frozen, keyword-only dataclass validated in __post_init__
    Config: ClassVar[type[AlgorithmConfig]] = AlgorithmConfig
    private: ClassVar[bool] = True
    shuffled: ClassVar[bool] = False
    #: whether ``_run`` is correct on stacked trials (a ``[T, d]`` iterate: no per-run norms or
    #: picks; :mod:`silodp.verify.rates.trials`), stated by the class that defines ``_run`` (a
    #: subclass overriding ``_run`` states it anew: it does not inherit the claim)
    stacked_trials: ClassVar[bool] = False
    noise_keys: ClassVar[tuple[str, ...]] = ("sigma",)
    message_groups: ClassVar[tuple[str, ...]] = ("grad",)
    uniform_output: ClassVar[bool] = False
    default_replacement: ClassVar[bool] = True
    #: the calibration methods a target epsilon can be met with (``silodp noise --method``)
    calibration_methods: ClassVar[tuple[str, ...]] = ("tight", "paper")
    #: the transcript dataclass of :meth:`transcript_config` and :meth:`noise_transcript` (a family
    #: whose own ``param(transcript=True)`` fields the shared one lacks subclasses it; rebuilt from
    #: plain data by silodp.experiments)
    Transcript: ClassVar[type] = TranscriptConfig
    #: the per-run :class:`Context` class (None: :class:`Context`); only the instruments of
    #: :data:`INSTRUMENTS_MODULE` (audit recordings, mutations) subclass it
    context_class: ClassVar[type | None] = None

    def __init__(self, **params) -> None:
        config = type(self).Config
        names = {f.name for f in dataclasses.fields(config)}
        unknown = sorted(set(params) - names)
        if unknown:
            raise ValueError(f"{unknown[0]}: not a parameter of {self.name or type(self).__name__} "
                             f"(its parameters: {sorted(names)})")
        validated = config(**params)
        for f in dataclasses.fields(config):
            setattr(self, f.name, getattr(validated, f.name))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.get_params().items())})"

    def get_params(self) -> dict:
        """Every parameter of :attr:`Config` by name (the current values)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(type(self).Config)}

    @property
    def config(self) -> AlgorithmConfig:
        """The current parameters as the class's :attr:`Config` (validated again)."""
        return type(self).Config(**self.get_params())

    @classmethod
    def own_params(cls) -> tuple[str, ...]:
        """The names of the parameters this family adds to the shared ones."""
        return tuple(f.name for f in own_fields(cls.Config))

    # -- configuration -------------------------------------------------------------------------
    @property
    def uses_replacement(self) -> bool:
        return self.default_replacement if self.replacement is None else bool(self.replacement)

    def config_fields(self, problem: Problem, federation: Federation) -> dict:
        """Fields of :attr:`Transcript` for this run: the shared
        ones, the problem's and the federation's, and the :attr:`Config` fields marked as entering
        the transcript (:meth:`~silodp.algorithms.config.AlgorithmConfig.transcript_fields`)."""
        shared = dict(
            n=federation.min_size, rounds=int(self.rounds), batch_size=int(self.batch_size),
            batch_size2=int(self.batch_size), period=1, inner_steps=1, restarts=1, local_steps=1,
            clip=problem.clip, beta=math.inf if problem.beta is None else problem.beta, num_silos=federation.num_silos,
            silos_per_round=federation.silos_per_round, dimension=problem.dim,
            replacement=self.uses_replacement, balls_in_bins=bool(self.balls_in_bins),
        )
        return {**shared, **self.config.transcript_fields(federation.min_size)}

    #: Share of delta that random availability's floor of summed silos may charge (its tail).
    availability_share: ClassVar[float] = 0.01

    def _summed_floor(self, cfg: TranscriptConfig, federation) -> dict:
        """Shuffle-DP under random availability (Assumption 6): declare the fewest silos whose
        messages are summed, :func:`silodp.accounting.distributed.availability_floor` over every
        invocation with tail :attr:`availability_share` delta, charged to delta; under secure
        aggregation, its reconstruction threshold (no sum of fewer is revealed: nothing charged);
        {} otherwise."""
        if not (self.shuffled and self.private):
            return {}
        if federation.reconstruction_threshold is not None:
            return {"silos_per_round": federation.reconstruction_threshold, "charged_delta": 0.0}
        if federation.availability != "random":
            return {}
        from silodp.accounting.distributed import availability_floor

        delta = self.delta if self.delta is not None else 1.0 / federation.min_size ** 2
        draws = sum(r.count for r in self.declare_shuffle(cfg, None, None))
        floor, charge = availability_floor(federation.num_silos, federation.silos_per_round, max(draws, 1),
                                           self.availability_share * delta)
        return {"silos_per_round": floor, "charged_delta": charge}

    def transcript_config(self, problem: Problem, federation: Federation) -> TranscriptConfig:
        cfg = self.Transcript(**self.config_fields(problem, federation))
        return dataclasses.replace(cfg, **self._summed_floor(cfg, federation))

    # -- what one silo releases (declared next to _run; see the module docstring) ---------------
    @staticmethod
    def sampling(cfg: TranscriptConfig) -> BatchSampling:
        """Minibatches of :class:`~silodp.algorithms.federation.BatchSampler`: i.i.d. draws, or
        disjoint batches through one permutation per epoch; or balls-in-bins batches
        (:class:`~silodp.algorithms.federation.BallsInBinsSampler`)."""
        if getattr(cfg, "balls_in_bins", False):
            return BatchSampling.BALLS_IN_BINS
        return BatchSampling.WITH_REPLACEMENT if cfg.replacement else BatchSampling.SHUFFLED

    @staticmethod
    def gaussian(group: str, count: int, sigma: float, contribution: float, batch_size: int, cfg: TranscriptConfig,
                 sampling: BatchSampling | None = None) -> GaussianRelease:
        """``count`` messages of ``group`` with noise std ``sigma`` over per-record contributions of
        norm <= ``contribution`` (clip over the batch size): noise multiplier sigma / contribution."""
        how = sampling or FederatedAlgorithm.sampling(cfg)
        return GaussianRelease(group, count, float(sigma) / contribution, how, batch_size, cfg.n)

    @classmethod
    def declaration(cls, cfg: TranscriptConfig, sigmas: dict) -> list:
        """What one silo releases over the whole run, one release per message group: Gaussian
        messages given the noise standard deviations ``sigmas`` (keys :attr:`noise_keys`;
        :meth:`declare_gaussian`), or shuffle-protocol invocations given the budgets
        ``{"epsilon", "delta"}`` (:meth:`shuffle_declaration`). A non-private algorithm
        releases its messages without noise."""
        if not cls.private:
            return [GaussianRelease(group, 1, 0.0, BatchSampling.FULL, 1, 1) for group in cls.message_groups]
        if cls.shuffled:
            return cls.shuffle_declaration(cfg, sigmas)
        missing = [k for k in cls.noise_keys if k not in sigmas]
        if missing:
            raise ValueError(f"sigmas for {cls.name} must contain {cls.noise_keys}, missing {missing}")
        bad = [(k, v) for k, v in sigmas.items() if not float(v) >= 0]
        if bad:
            raise ValueError(f"sigmas: must be >= 0, got {bad}")
        return cls.declare_gaussian(cfg, {k: float(v) for k, v in sigmas.items()})

    @classmethod
    def declare_gaussian(cls, cfg: TranscriptConfig, sigmas: dict) -> list:
        """The Gaussian releases of one silo (each algorithm declares its own)."""
        raise NotImplementedError(f"{cls.__name__} declares no releases")

    @classmethod
    def declare_shuffle(cls, cfg: TranscriptConfig, epsilon: float | None, delta: float | None) -> list:
        """Shuffle-DP: the protocol invocations of one silo with the paper's per-invocation budget
        (``epsilon=None``: the structure only, budgets ``inf``)."""
        raise NotImplementedError(f"{cls.__name__} declares no shuffle invocations")

    @classmethod
    def shuffle_declaration(cls, cfg: TranscriptConfig, budgets: dict | None, params: dict | None = None) -> list:
        """:meth:`declare_shuffle` in ``cfg.dimension`` coordinates: the paper's per-invocation budgets
        (``budgets``: the target ``{"epsilon", "delta"}``; None: the structure only), the deltas,
        where all the invocations a record can enter would spend more than ``budgets["delta"]``
        (the paper's budgets assume each record is used once), shrunk so that they spend half of it.
        With ``params`` (per group (g, b, p, rotate)) attached, each invocation's epsilon is what
        those parameters certify at its delta for one message
        (:func:`silodp.accounting.pvec.invocation_epsilon`), so that the generic event of
        :func:`~silodp.accounting.releases.releases_event` stays sound."""
        plan = cls.declare_shuffle(cfg, budgets["epsilon"] if budgets else None, budgets["delta"] if budgets else None)
        return shuffle_invocations(plan, cfg.dimension, budgets["delta"] if budgets else None, params)

    #: the paper's closed-form noise ``(cfg, epsilon, delta) -> sigmas``, or None
    paper_formula: ClassVar = None

    @classmethod
    def paper_noise(cls, cfg: TranscriptConfig, epsilon: float, delta: float) -> dict:
        """The paper's closed-form noise (:attr:`paper_formula`; ValueError where the paper gives none)."""
        if cls.paper_formula is None:
            raise ValueError(f"the paper gives no closed-form noise for {cls.name!r}; use method='tight'")
        return {k: float(v) for k, v in cls.paper_formula(cfg, epsilon, delta).items() if k in cls.noise_keys}

    @classmethod
    def noise_shape(cls, cfg: TranscriptConfig, epsilon: float, delta: float) -> dict:
        """The noise *shape* a tight calibration scales: the paper's, else each message's
        contribution bound (noise multiplier 1 at scale 1)."""
        try:
            return cls.paper_noise(cfg, epsilon, delta)
        except ValueError:
            return {"sigma": cfg.clip / cfg.batch_size}

    # -- the transcript without a run (silodp noise --algorithm) --------------------------------
    @classmethod
    def noise_transcript(cls, values: dict) -> TranscriptConfig:
        """The :attr:`Transcript` of ``values`` (its field names: ``n``, ``rounds``, ..., and the
        :attr:`Config` fields that enter it); values it has no field for are ignored."""
        names = {f.name for f in dataclasses.fields(cls.Transcript)}
        return cls.Transcript(**{k: v for k, v in values.items() if k in names})

    @classmethod
    def transcript_signature(cls, cfg: TranscriptConfig) -> str:
        """What ``cfg`` determines for this class (its declaration and reference noise): a field
        that moves it applies to the class (``silodp noise --algorithm`` refuses the others)."""
        out = repr(cls.shuffle_declaration(cfg, {"epsilon": 1.0, "delta": 1e-5}) if cls.shuffled
                   else cls.declaration(cfg, {k: 1.0 for k in cls.noise_keys}))
        try:
            return out + repr(cls.noise_shape(cfg, 1.0, 1e-5))
        except ValueError as exc:
            return out + str(exc)

    @classmethod
    def noise_report(cls, cfg: TranscriptConfig, epsilon: float, delta: float, method: str = "both",
                     accountant: str | None = None) -> dict:
        """The noise for (``epsilon``, ``delta``) as plain data: ``method`` "tight" | "paper", or
        "both" (:func:`silodp.algorithms.privacy.paper_vs_tight`)."""
        from .privacy import calibrate_algorithm, paper_vs_tight

        if method == "both":
            return paper_vs_tight(cls, cfg, epsilon, delta, accountant)
        cal = calibrate_algorithm(cls, cfg, epsilon, delta, method, accountant)
        return {"algorithm": cal.algorithm, "method": cal.method, "sigmas": cal.sigmas, "epsilon": cal.epsilon,
                "delta": cal.delta, "accountant": cal.accountant, "shuffle": cal.shuffle}

    def run_declaration(self, problem: Problem, federation: Federation, sigmas: dict, shuffle: dict | None) -> list | None:
        """The releases this run must stay within (None: not private, nothing to check)."""
        if not self.private:
            return None
        cfg = self.transcript_config(problem, federation)
        if self.shuffled:
            return self.shuffle_declaration(cfg, None, {g: p.key() for g, p in shuffle.items()})
        return self.declaration(cfg, sigmas)

    def _validate(self, problem, federation) -> None:
        """The checks that need the problem and the federation (the rest: :attr:`Config`, again,
        as parameters may have been set after construction)."""
        self.config  # noqa: B018  (validates the current parameters)
        if self.step_size is None and problem.beta is None:
            raise ValueError("step_size: required when the problem has no smoothness constant beta")
        if self.private and problem.clip is None:
            raise ValueError("clip: private algorithms need a finite per-sample clip (the Lipschitz bound L)")
        if self.private and not self.shuffled and self.sigmas is None and self.epsilon is None:
            raise ValueError("epsilon: private algorithms need a target epsilon or explicit sigmas")
        if self.shuffled and self.shuffle_params is None and self.epsilon is None:
            raise ValueError("epsilon: shuffle algorithms need a target epsilon or explicit shuffle_params")
        if self.w0 is not None and tuple(self.w0.shape) != (problem.dim,):
            raise ValueError(f"w0: must have shape ({problem.dim},), got {tuple(self.w0.shape)}")

    @property
    def picks_uniform(self) -> bool:
        """Whether ``w_priv`` is a uniformly random iterate: the algorithm's own rule (``output``
        None or "random", e.g. Alg 3 line 17) or the last iterate (``output="last"``, post-processing)."""
        return self.uniform_output and self.output != "last"

    def eta(self, problem: Problem) -> float:
        return float(self.step_size) if self.step_size is not None else 1.0 / (2.0 * problem.beta)

    def resolve_noise(self, problem: Problem, federation: Federation) -> tuple[dict, float | None, float | None, dict | None]:
        """``(sigmas, epsilon, delta, shuffle)`` for this run: explicit, calibrated or non-private."""
        return self._resolve(problem, federation)[:4]

    def _resolve(self, problem, federation) -> tuple:
        """:meth:`resolve_noise` and the run's :meth:`noise_details`."""
        if not self.private:
            return {k: 0.0 for k in self.noise_keys}, math.inf, None, None, {}
        explicit = self.shuffle_params if self.shuffled else self.sigmas
        if explicit is not None:
            sigmas, eps, delta, shuffle = self._certify_explicit(problem, federation, explicit)
            return sigmas, eps, delta, shuffle, self.noise_details(self.transcript_config(problem, federation),
                                                                   sigmas, None)
        cfg = self.transcript_config(problem, federation)
        delta = self.delta if self.delta is not None else 1.0 / federation.min_size ** 2
        cal = self.calibrate(cfg, float(self.epsilon), float(delta))
        shuffle = None
        if self.shuffled:
            shuffle = _shuffle_groups(cal.shuffle, self.message_groups)
        sigmas = dict(cal.sigmas)
        return sigmas, float(cal.epsilon), float(cal.delta), shuffle, self.noise_details(cfg, sigmas, cal)

    def calibrate(self, cfg: TranscriptConfig, epsilon: float, delta: float) -> NoiseCalibration:
        """The noise of this run at the target (``epsilon``, ``delta``): the class's declaration
        calibrated by :func:`silodp.algorithms.privacy.calibrate_algorithm` with this run's
        ``calibration`` and ``accountant`` (a family with its own guarantees overrides this)."""
        from .privacy import calibrate_algorithm

        return calibrate_algorithm(type(self), cfg, epsilon, delta, method=self.calibration,
                                   accountant=self.accountant)

    def calibration_settings(self) -> dict:
        """The parameters besides the transcript, the target and ``calibration`` that
        :meth:`calibrate` and :meth:`certify_noise` read (none by default): silodp.experiments
        shares one calibration between the runs that agree on them."""
        return {}

    def certify_noise(self, cfg: TranscriptConfig, sigmas: dict, delta: float) -> float:
        """What Gaussian noise ``sigmas`` (keys :attr:`noise_keys`) certifies at ``delta``: the
        declaration by :func:`silodp.algorithms.privacy.certify` with this run's ``accountant``
        (the tightest when None)."""
        from .privacy import certify

        return certify(type(self), cfg, sigmas, delta, self.accountant)[0]

    def targeted_epsilon(self, cfg: TranscriptConfig, sigmas: dict, delta: float, certified: float) -> float:
        """The guarantee a target epsilon was met for by noise ``sigmas`` whose certificate is
        ``certified``: the certificate itself (a family calibrating toward another observer overrides)."""
        return certified

    def noise_details(self, cfg: TranscriptConfig, sigmas: dict, calibration: NoiseCalibration | None) -> dict:
        """Family-specific facts about the noise that ran (``RunResult.details``; ``silodp run``
        prints them): the calibration's ``details``, {} by default."""
        return {} if calibration is None else dict(calibration.details)

    def _certify_explicit(self, problem, federation, explicit: dict):
        """Explicit ``sigmas`` / ``shuffle_params``: the certificate is what they certify (by the
        accountant chosen, else the tightest), at ``delta`` (default 1 / n^2), never the request's
        ``epsilon``; a run whose parameters certify more than a requested ``epsilon`` warns."""
        from .privacy import certify_shuffle

        delta = float(self.delta) if self.delta is not None else 1.0 / federation.min_size ** 2
        if self.shuffled:
            shuffle = _shuffle_groups(explicit, self.message_groups)
            sigmas = {}
            eps, _ = certify_shuffle(type(self), self.transcript_config(problem, federation),
                                     {g: p.key() for g, p in shuffle.items()}, delta, self.accountant, self.epsilon)
        else:
            missing = [k for k in self.noise_keys if k not in explicit]
            if missing:
                raise ValueError(f"sigmas: missing keys {missing} (need {list(self.noise_keys)})")
            bad = [k for k in self.noise_keys if not float(explicit[k]) >= 0]
            if bad:
                raise ValueError(f"sigmas: must be >= 0, got {[(k, explicit[k]) for k in bad]}")
            sigmas, shuffle = {k: float(explicit[k]) for k in self.noise_keys}, None
            eps = self.certify_noise(self.transcript_config(problem, federation), sigmas, delta)
        if self.epsilon is not None and not eps <= float(self.epsilon) * (1 + 1e-9):
            warnings.warn(f"{self.name}: the explicit noise certifies epsilon {eps:.6g} at delta {delta:.3g}, "
                          f"above the requested {float(self.epsilon):.6g}", stacklevel=3)
        return sigmas, float(eps), delta, shuffle

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "run" in cls.__dict__:
            raise TypeError(f"{cls.__name__}: run is the channel's verb and cannot be overridden; implement _run")

    # -- the verb ------------------------------------------------------------------------------
    def run(self, problem: Problem, federation: Federation, seed: int = 0, replay: RunResult | None = None,
            callback: Callable[[int, torch.Tensor], object] | None = None) -> RunResult:
        """Run on ``federation`` (training data) and return a :class:`RunResult`.

        ``replay``: a result recorded with ``record_transcript=True``; its released messages and
        aggregates replace this run's (see the module docstring). ``callback(round, w)`` is
        called after every round (progress bars).
        """
        self._validate(problem, federation)
        sigmas, epsilon, delta, shuffle, details = self._resolve(problem, federation)
        kind = self.context_class or Context
        if not (isinstance(kind, type) and issubclass(kind, Context)):
            raise ValueError(f"context_class: must be Context or an instrument of {INSTRUMENTS_MODULE}, got {kind!r}")
        ctx = kind(self, problem, federation, int(seed), sigmas, shuffle, replay)
        ctx.callback = callback
        w0 = self.w0 if self.w0 is not None else problem.model.init(ctx._gen, dtype=federation.x.dtype)
        w_last = self._run(ctx, w0.to(federation.x.device, federation.x.dtype).clone())
        w_priv = ctx.uniform_iterate() if self.picks_uniform and ctx.iterates else w_last
        return RunResult(self.name, w_priv.clone(), w_last.clone(), ctx.history, sigmas, epsilon, delta,
                         None if shuffle is None else {g: vars(p) for g, p in shuffle.items()},
                         ctx._entries, self.get_params(), ctx._ledger.sent,
                         None if self.epsilon is None else float(self.epsilon), details)

    def _run(self, ctx: "Context", w: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        """The algorithm's rounds: batches, terms and sends through ``ctx``; returns the last
        iterate (a function of released values and public state only)."""
        raise NotImplementedError


class Term:
    """Clipped per-record terms of one batch, computed by :meth:`Context.term` and consumed (once)
    by :meth:`Context.send`: an opaque handle. Its values stay in the channel, so an algorithm can
    neither read, scale nor replace them; ``bound`` is the l2 bound of each per-record term (the
    clip norm, twice it for a difference, or the difference clip), the contribution bound the
    ledger divides the noise by."""

    __slots__ = ("bound", "_batch", "__weakref__")

    def __init__(self, bound, batch: "Batch") -> None:
        self.bound = bound
        self._batch = batch

    def __repr__(self) -> str:
        return f"Term(bound={self.bound!r}, batch={self._batch!r})"


class Batch:
    """An opaque handle of one minibatch (or the full data) the channel drew: ``sampling``
    (:class:`~silodp.accounting.releases.BatchSampling`) and ``size`` (records per silo) are
    public, the records, their labels and indices stay in the channel."""

    __slots__ = ("sampling", "size", "_x", "_y", "_weights", "_idx", "__weakref__")

    def __init__(self, x, y, weights, idx, sampling: BatchSampling, size: int) -> None:
        self.sampling, self.size = sampling, int(size)
        self._x, self._y, self._weights, self._idx = x, y, weights, idx

    def __repr__(self) -> str:
        return f"Batch({self.sampling.value}, size={self.size})"


#: Context subclasses may only be declared in this module (the audit, trial and mutation
#: instruments); an algorithm cannot bring its own channel.
INSTRUMENTS_MODULE = "silodp.verify.instruments"
#: Instruments whose releases are not checked against the declaration: the deliberately broken
#: variants of :mod:`silodp.verify.audit.mutations`, which the audits must catch on their own.
_UNCHECKED: set = set()


def _unchecked_instrument(cls: type) -> type:
    """Test-only hook (used by :mod:`silodp.verify.instruments` for the audit's mutations): runs
    through the instrument ``cls`` are not checked against the declaration."""
    if not (isinstance(cls, type) and issubclass(cls, Context) and cls.__module__ == INSTRUMENTS_MODULE):
        raise TypeError("only the audit instruments of silodp.verify.instruments may run unchecked")
    _UNCHECKED.add(cls)
    return cls


class Context:
    """The channel of one run: it owns the data, the generator and the release ledger.

    The algorithm draws batches through it (:meth:`sampler`, :meth:`batch`, :meth:`full`: opaque
    :class:`Batch` handles), asks it for clipped per-record terms (:meth:`term`: an opaque
    :class:`Term`) and sends them (:meth:`send`), receiving only noised releases; offsets must be
    values the channel released. Public state: :attr:`num_silos`, :attr:`min_size`, :attr:`clip`,
    :attr:`beta`, :attr:`dtype`, :attr:`eta`, :attr:`sigmas`, :attr:`iterates`. Gaussian and shuffle
    releases go through :meth:`send`, which dispatches on the algorithm's kind.

    Instruments (stacked trials, audit recordings, mutations) subclass it in
    :data:`INSTRUMENTS_MODULE` only, overriding the narrow hooks ``_expand``, ``_scale``,
    ``_clip_terms``, ``_noise_std``, ``_noise_generator``, ``_per_silo_offset``, ``_aggregate``,
    ``_offset_mean``, ``_shuffle_aggregate``.
    """

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__ != INSTRUMENTS_MODULE:
            raise TypeError(f"{cls.__name__}: the channel cannot be subclassed outside {INSTRUMENTS_MODULE}")

    def __init__(self, algo, problem, federation, seed, sigmas, shuffle, replay):
        self._algo, self._problem, self._fed = algo, problem, federation
        self._checked = type(self) not in _UNCHECKED
        declared = self._declaration(algo, problem, federation, sigmas, shuffle) if self._checked else None
        self._ledger = ReleaseLedger(declared)
        self._gen = torch.Generator().manual_seed(seed)
        self._sigmas, self._shuffle = dict(sigmas), shuffle
        self.eta = algo.eta(problem)
        self._entries = [] if (algo.record_transcript or replay is not None) else None
        if replay is not None and replay.transcript is None:
            raise ValueError("replay: the replayed result has no transcript (run with record_transcript=True)")
        self._replay = replay.transcript if replay is not None else None
        self._replay_pos = 0
        self._samplers = weakref.WeakValueDictionary()
        self._batches = weakref.WeakValueDictionary()
        self._terms: dict[int, tuple] = {}
        self._released = weakref.WeakValueDictionary()
        self.round = 0
        self.history = {"round": [], "objective": [], "grad_mapping_norm": [], "accuracy": []}
        self.iterates: list[torch.Tensor] = []
        self.callback = None

    @staticmethod
    def _declaration(algo, problem, federation, sigmas, shuffle):
        """The releases this run must stay within (the algorithm's declaration)."""
        return algo.run_declaration(problem, federation, sigmas, shuffle)

    # -- public state --------------------------------------------------------------------------
    @property
    def num_silos(self) -> int:
        return self._fed.num_silos

    @property
    def min_size(self) -> int:
        return self._fed.min_size

    @property
    def clip(self) -> float | None:
        return self._problem.clip

    @property
    def beta(self) -> float | None:
        return self._problem.beta

    @property
    def dtype(self) -> torch.dtype:
        return self._fed.x.dtype

    @property
    def sigmas(self) -> dict:
        """The noise standard deviations of this run (a copy)."""
        return dict(self._sigmas)

    def prox(self, v: torch.Tensor, step: float | None = None) -> torch.Tensor:
        """The regularizer's prox at step ``step`` (default :attr:`eta`): public post-processing."""
        return self._problem.regularizer.prox(v, self.eta if step is None else step)

    def uniform_iterate(self) -> torch.Tensor:
        """A uniformly random element of :attr:`iterates` (Alg 1 line 15, Alg 2 line 3)."""
        return self.iterates[int(torch.randint(len(self.iterates), (1,), generator=self._gen))]

    def coin(self, n: int, p: float) -> torch.Tensor:
        """``n`` independent Bernoulli(``p``) draws (e.g. DP-SCAFFOLD's user sampling), data-free."""
        return torch.rand(n, generator=self._gen, dtype=torch.float64) < float(p)

    # -- data ----------------------------------------------------------------------------------
    def sampler(self, batch_size: int, replacement: bool | None = None, subset: bool = False) -> Any:
        """Minibatch indices of every silo: with or without replacement
        (:class:`~silodp.algorithms.federation.BatchSampler`), or ``subset``: a fresh uniform subset
        per step (:class:`~silodp.algorithms.federation.SubsetSampler`); with the algorithm's
        ``balls_in_bins``, t = min_size // batch_size balls-in-bins batches per epoch
        (:class:`~silodp.algorithms.federation.BallsInBinsSampler`)."""
        if subset:
            out = SubsetSampler(self._fed.mask, batch_size, self._gen)
        elif getattr(self._algo, "balls_in_bins", False) and replacement is None:
            if self._algo.shuffled:
                raise ValueError("balls_in_bins: shuffle-DP algorithms declare their own batches (Gaussian algorithms only)")
            out = BallsInBinsSampler(self._fed.counts, max(1, self._fed.min_size // int(batch_size)), self._gen,
                                     expected_size=int(batch_size))
        else:
            rep = self._algo.uses_replacement if replacement is None else replacement
            out = BatchSampler(self._fed.counts, batch_size, rep, self._gen)
        self._samplers[id(out)] = out
        return out

    def available(self) -> torch.Tensor:
        return self._fed.sample_available(self._gen)

    def _issue(self, batch: Batch) -> Batch:
        self._batches[id(batch)] = batch
        return batch

    def batch(self, sampler: Any) -> Batch:
        if self._samplers.get(id(sampler)) is not sampler:
            raise ValueError("sampler: must come from this run's Context.sampler")
        if sampler.sampling is BatchSampling.BALLS_IN_BINS:  # members only, over the constant expected size
            idx, mask = sampler.next()
            x, y = self._fed.gather(idx)
            weights = mask.to(self._fed.x.device, self._fed.x.dtype) / sampler.expected_size
            return self._issue(Batch(x, y, weights, idx, sampler.sampling, sampler.expected_size))
        idx = sampler.next()
        x, y = self._fed.gather(idx)
        weights = torch.full(idx.shape, 1.0 / idx.shape[1], dtype=self._fed.x.dtype, device=self._fed.x.device)
        return self._issue(Batch(x, y, weights, idx, sampler.sampling, idx.shape[1]))

    def full(self) -> Batch:
        fed = self._fed
        return self._issue(Batch(fed.x, fed.y, fed.weights, None, BatchSampling.FULL, fed.min_size))

    # -- gradients -----------------------------------------------------------------------------
    def term(self, data: Batch, w: torch.Tensor, w_old: torch.Tensor | None = None,
             diff_clip: float | torch.Tensor | None = None) -> Term:
        """Clipped gradient terms of every silo on ``data`` at ``w`` (minus the ones at ``w_old``,
        the differences clipped to ``diff_clip``), as an opaque :class:`Term`."""
        if not isinstance(data, Batch) or self._batches.get(id(data)) is not data:
            raise ValueError("data: must come from this run's Context.batch or Context.full")
        values, bound = self._clip_terms(data, w, w_old, diff_clip)
        out = Term(bound, data)
        query = (w.detach().clone(), None if w_old is None else w_old.detach().clone(), diff_clip)
        self._terms[id(out)] = (out, values, query)
        return out

    def _clip_terms(self, data: Batch, w, w_old, diff_clip):
        """(values, bound): the weighted sums ``[N, d]`` (Gaussian channel, ghost clipping) or the
        per-sample vectors ``[N, K, d]``, and each per-record term's l2 bound."""
        x, y, weights = data._x, data._y, data._weights
        clip, problem = self._problem.clip, self._problem
        w, w_old, dc = self._expand(w), self._expand(w_old), self._scale(diff_clip)
        bound = diff_clip if diff_clip is not None else (None if clip is None else (2 * clip if w_old is not None else clip))
        if not self._algo.shuffled:
            if w_old is None:
                return _grads.clipped_grad_sum(problem, w, x, y, weights, clip, self._algo.grad_method), bound
            return _grads.clipped_diff_sum(problem, w, w_old, x, y, weights, clip, dc, self._algo.grad_method), bound
        out = _grads.clipped_per_sample(problem, w, x, y, clip)
        if w_old is not None:
            out = out - _grads.clipped_per_sample(problem, w_old, x, y, clip)
            if dc is not None:
                out = _grads.clip_rows(out, dc)
        return out, bound

    def _expand(self, w):
        """The query point of every silo (stacked trials: one per trial, repeated per silo)."""
        return w

    def _scale(self, value):
        """A per-run scale as one value per silo (stacked trials)."""
        return value

    # -- the channel ---------------------------------------------------------------------------
    def send(self, group: str, term: Term, avail: torch.Tensor, std: float | torch.Tensor = 0.0,
             offset: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Each available silo releases its message of ``group``; returns ``(aggregate [d],
        released [N, d])``.

        Gaussian: message = (weighted) term + offset + N(0, std^2 I), noise for all silos in one
        draw. Shuffle: the silos' per-record vectors go through P_vec with the term's bound; the
        aggregate is the analyzer's estimate divided by the number of messages, plus the mean
        offset; ``released`` is None. ``term`` must come from :meth:`term` (each is sent once);
        ``offset`` must be a value this channel released (public), else ``ValueError``.
        """
        held = self._terms.pop(id(term), None)
        if held is None or held[0] is not term:
            raise ValueError(f"release of group {group!r}: its term was not computed by Context.term "
                             "(or was sent already)")
        _, values, query = held
        if offset is not None and self._released.get(id(offset)) is not offset:
            raise ValueError(f"offset of group {group!r}: must be a value this channel released")
        data = term._batch
        weights, idx = data._weights, data._idx
        a = avail.to(self._fed.x.device, self._fed.x.dtype)
        std = self._noise_std(group, term, std)
        messages = int(((weights > 0).to(a.dtype) * a[:, None]).sum()) if self._algo.shuffled else 0
        self._record(group, data, std, term.bound, messages)
        replayed = self._next_replay(group)
        if self._algo.shuffled:
            bound = torch.clamp(term.bound, min=1e-12) if isinstance(term.bound, torch.Tensor) else max(term.bound, 1e-12)
            agg, messages = self._shuffle_aggregate(group, values, weights, a, bound)
            if offset is not None:
                agg = agg + self._offset_mean(offset, a)
            released = None
        else:
            mean = values if values.dim() == 2 else torch.einsum("nk,nkd->nd", weights, values)
            scale = self._scale(std) if isinstance(std, torch.Tensor) else float(std)
            noise = torch.randn(mean.shape, generator=self._noise_generator(), dtype=mean.dtype).to(mean.device) * scale
            # the primitive: offset + (term + noise) in float64, refused unless finite
            messages = gaussian_release(mean, scale, None, None if offset is None else self._per_silo_offset(offset),
                                        noise=noise).to(mean.dtype)
            released = replayed["messages"] if replayed is not None else messages
            agg = self._aggregate(released, a)
            self._released[id(released)] = released
        if replayed is not None:
            agg = replayed["aggregate"]
        self._released[id(agg)] = agg
        if self._entries is not None:
            w, w_old, diff_clip = query
            self._entries.append({"round": self.round, "group": group, "available": avail.clone(),
                                  "batch": None if idx is None else idx.clone(), "sampling": data.sampling,
                                  "std": float(std) if not isinstance(std, torch.Tensor) or std.numel() == 1 else std.detach().clone(),
                                  "messages": messages.detach().clone(),
                                  "aggregate": agg.detach().clone(), "w": w, "w_old": w_old, "diff_clip": diff_clip,
                                  "offset": None if offset is None else offset.detach().clone()})
        return agg, released

    def _noise_std(self, group: str, term: Term, std):
        return std

    def _noise_generator(self) -> torch.Generator:
        return self._gen

    def _per_silo_offset(self, offset: torch.Tensor) -> torch.Tensor:
        return offset

    def _aggregate(self, released: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return (released * a[:, None]).sum(0) / a.sum()

    def _offset_mean(self, offset: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return offset if offset.dim() == 1 else (offset * a[:, None]).sum(0) / a.sum()

    def _record(self, group: str, data: Batch, std, bound, messages: int = 0) -> None:
        """Enter one message of ``group`` in the release ledger (raises when not declared).
        Noise multiplier: ``std`` over the contribution bound, the term's l2 bound times the
        largest batch weight (the smallest multiplier over silos and stacked runs). Shuffle: the
        protocol parameters (g, b, p, rotate) and the ``messages`` summed."""
        batch = data.size  # the full data: min_size; a balls-in-bins batch: its expected size
        if self._algo.shuffled:
            p = self._shuffle[group]
            sent = Sent(group, data.sampling, batch, self._fed.min_size, params=p.key(), messages=messages)
        else:
            z = math.inf
            if self._ledger.declaration is not None or bound is not None:
                if bound is None:
                    raise ValueError(f"release of group {group!r}: its term has no contribution bound (no clip)")
                weight = float(data._weights.max())
                contribution = torch.as_tensor(bound, dtype=torch.float64) * weight
                ratio = torch.as_tensor(std, dtype=torch.float64) / contribution
                z = float(torch.where(contribution > 0, ratio, torch.full_like(ratio, math.inf)).min())
            sent = Sent(group, data.sampling, batch, self._fed.min_size, noise_multiplier=z)
        self._ledger.record(sent)

    def _next_replay(self, group):
        if self._replay is None:
            return None
        if self._replay_pos >= len(self._replay):
            raise ValueError("replay: transcript out of step (more releases than recorded)")
        entry = self._replay[self._replay_pos]
        self._replay_pos += 1
        if entry["group"] != group:
            raise ValueError(f"replay: transcript out of step (expected group {group!r}, found {entry['group']!r})")
        return entry

    def _shuffle_aggregate(self, group, values, weights, a, bound):
        """P_vec on the sent rows of ``values``; returns (mean estimate, the analyzer's view or None)."""
        sent = (weights > 0).to(values.dtype) * a[:, None]
        est, view = self._pvec(values, bound, self._shuffle[group], sent)
        return est / int(sent.sum()), view

    def _pvec(self, term, bound, params, sent):
        """P_vec's estimate of the sum of the rows of ``term`` that ``sent`` selects, rotated first
        when ``params.rotate`` (the range becomes :func:`silodp.accounting.pvec.rotated_bound`);
        returns (estimate, the analyzer's view or None). The view, recorded in the transcript, is
        the per-coordinate totals of ones (of the rotated coordinates): all that the shuffled
        labelled bits of :func:`silodp.algorithms.shuffle.pvec_messages` reveal; no per-message
        count is kept."""
        n_msgs = int(sent.sum())
        d = term.shape[-1]
        if params.rotate:
            signs = rotation_signs(d, self._gen, term.dtype)
            term, bound = rotate(term, signs), rotated_bound(float(bound), d)
        totals = None
        if self._entries is None:
            est = pvec_fast(term, bound, params, self._gen, weights=sent)
        else:
            counts = randomize(term, bound, params, self._gen)  # what each silo sends (never kept)
            totals = (counts.to(torch.float64) * sent.to(torch.float64).unsqueeze(-1)).sum((0, 1))
            est = analyze(totals, n_msgs, bound, params).to(term.dtype)
        if params.rotate:
            est = unrotate(est, signs, d)
        return est, totals

    # -- bookkeeping ---------------------------------------------------------------------------
    def end_round(self, w: torch.Tensor, keep_iterate: bool = False) -> None:
        if keep_iterate:
            self.iterates.append(w.detach().clone())
        every = self._algo.metrics_every
        if every and self.round % every == 0:
            self._log(w)
        if self.callback is not None:
            self.callback(self.round, w)
        self.round += 1

    def _log(self, w: torch.Tensor) -> None:
        """Evaluation of the server's iterate on the training federation (the harness's, not a release)."""
        p = self._problem
        self.history["round"].append(self.round)
        self.history["objective"].append(p.objective(w, self._fed))
        self.history["grad_mapping_norm"].append(p.grad_mapping_norm(w, self._fed, self.eta))
        self.history["accuracy"].append(p.accuracy(w, self._fed))
