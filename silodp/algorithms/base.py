"""Shared machinery: the algorithm base class (its Config, _run and plan) and the per-run context
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
import weakref
from typing import TYPE_CHECKING, Any, Callable, ClassVar

import torch

from silodp.accounting.releases import BatchSampling, GaussianRelease, ReleaseLedger

from . import plan as _plan
from .config import OUTPUTS, AlgorithmConfig, own_fields  # noqa: F401  (OUTPUTS: re-exported)
from .federation import BallsInBinsSampler, BatchSampler, Federation, SubsetSampler
from .privacy import TranscriptConfig
from .result import RunResult

if TYPE_CHECKING:
    from .problems import Problem


#: What the plan owns: a class that defines one of these (as the privacy hooks families used to
#: override) is refused, since the plan, not the class, is what the run, the calibration and the
#: certificate call (an override here would be silently ignored).
PLAN_OWNED = ("declaration", "shuffle_declaration", "paper_noise", "noise_shape", "noise_transcript",
              "transcript_signature", "noise_report", "transcript_config", "run_declaration", "resolve_noise",
              "_validate", "sampling", "calibrate", "calibration_settings", "certify_noise", "targeted_epsilon",
              "noise_details", "config_fields")


class FederatedAlgorithm:
    """Base class: an algorithm is its :attr:`Config`, its ``_run`` and its :attr:`Plan`.

    A new algorithm writes (docs/architecture.md, "adding things"):

    * ``name`` and ``Config``: its parameters, one frozen keyword-only dataclass
      (:mod:`silodp.algorithms.config`; a field that changes what a silo releases is
      ``param(transcript=True)``); constructors only store and validate them;
    * ``_run(self, ctx, w)``: its rounds, public logic over what the channel ``ctx`` releases;
    * ``declare_gaussian(cls, cfg, sigmas)`` (or, with ``Plan = ShufflePlan``,
      ``declare_shuffle(cls, cfg, epsilon, delta)``): what one silo releases, next to ``_run``;
      optionally ``paper_formula``, the paper's closed-form noise;
    * ``Plan``: its release kind (:mod:`silodp.algorithms.plan`; default :class:`GaussianPlan`),
      which holds the transcript, the declaration, the calibration, the certificate, the noise
      report and the channel a run gets. A family with its own guarantees writes its own plan
      (DP-SCAFFOLD: :class:`~silodp.algorithms.plan.ParticipationPlan`).

    :meth:`run` is the driver (final): it validates, resolves the noise through the plan and runs
    ``_run`` on the plan's channel. The other methods here are shortcuts to :attr:`plan`.
    """

    name: ClassVar[str] = ""
    #: the algorithm's parameters: a frozen, keyword-only dataclass validated in __post_init__
    Config: ClassVar[type[AlgorithmConfig]] = AlgorithmConfig
    #: the privacy contract of its release kind (:mod:`silodp.algorithms.plan`)
    Plan: ClassVar[type[_plan.Plan]] = _plan.GaussianPlan
    #: ``cls.plan``: the class's plan; ``algo.plan``: the plan of this configured instance
    plan = _plan.PlanOf()
    #: whether the plan releases through the shuffler (read-only: set by ``Plan``)
    shuffled = _plan.ShuffledOf()
    private: ClassVar[bool] = True
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
    #: the transcript dataclass of the plan: the shared :class:`TranscriptConfig` plus the
    #: ``param(transcript=True)`` fields of :attr:`Config` it lacks, derived
    #: (:func:`silodp.algorithms.plan.derived_transcript`; a class may name its own); rebuilt from
    #: plain data by silodp.experiments
    Transcript = _plan.TranscriptOf()
    #: the paper's closed-form noise ``(cfg, epsilon, delta) -> sigmas``, or None
    paper_formula: ClassVar[Any] = None
    #: the per-run :class:`Context` class (None: :class:`Context`); only the instruments of
    #: :data:`INSTRUMENTS_MODULE` (audit recordings, mutations) subclass it
    context_class: ClassVar[type | None] = None

    if TYPE_CHECKING:  # the Config's fields are instance attributes, set from the dataclass in __init__
        def __getattr__(self, name: str) -> Any: ...

    def __init__(self, **params: Any) -> None:
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

    @property
    def uses_replacement(self) -> bool:
        return self.default_replacement if self.replacement is None else bool(self.replacement)

    @property
    def picks_uniform(self) -> bool:
        """Whether ``w_priv`` is a uniformly random iterate: the algorithm's own rule (``output``
        None or "random", e.g. Alg 3 line 17) or the last iterate (``output="last"``, post-processing)."""
        return self.uniform_output and self.output != "last"

    def eta(self, problem: Problem) -> float:
        if self.step_size is not None:
            return float(self.step_size)
        if problem.beta is None:
            raise ValueError("step_size: required when the problem has no smoothness constant beta")
        return 1.0 / (2.0 * problem.beta)

    # -- what a family writes beside _run ------------------------------------------------------
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
    def sampling(cls, cfg: Any) -> BatchSampling:
        """The batch sampling of the class's minibatches (:meth:`Plan.sampling <silodp.algorithms.plan.Plan.sampling>`)."""
        return cls.plan.sampling(cfg)

    @staticmethod
    def gaussian(group: str, count: int, sigma: float, contribution: float, batch_size: int, cfg: Any,
                 sampling: BatchSampling | None = None) -> GaussianRelease:
        """``count`` messages of ``group`` with noise std ``sigma`` over per-record contributions of
        norm <= ``contribution`` (clip over the batch size): noise multiplier sigma / contribution."""
        how = sampling or FederatedAlgorithm.sampling(cfg)
        return GaussianRelease(group, count, float(sigma) / contribution, how, batch_size, cfg.n)

    # -- shortcuts to the plan (silodp.algorithms.plan holds the contract) ----------------------
    @classmethod
    def declaration(cls, cfg: Any, sigmas: dict) -> list:
        """:meth:`Plan.declaration <silodp.algorithms.plan.Plan.declaration>`: what one silo
        releases given the noise ``sigmas`` (shuffle-DP: the budgets ``{"epsilon", "delta"}``)."""
        return cls.plan.declaration(cfg, sigmas)

    @classmethod
    def shuffle_declaration(cls, cfg: Any, budgets: dict | None, params: dict | None = None) -> list:
        """:meth:`ShufflePlan.shuffle_declaration <silodp.algorithms.plan.ShufflePlan.shuffle_declaration>`."""
        return cls.plan.shuffle_declaration(cfg, budgets, params)

    @classmethod
    def noise_shape(cls, cfg: Any, epsilon: float, delta: float) -> dict:
        """The noise shape a tight calibration scales."""
        return cls.plan.noise_shape(cfg, epsilon, delta)

    @classmethod
    def noise_transcript(cls, values: dict) -> Any:
        """The transcript of ``values`` without a run (``silodp noise --algorithm``)."""
        return cls.plan.noise_transcript(values)

    @classmethod
    def transcript_signature(cls, cfg: Any) -> str:
        """What ``cfg`` determines for this class (``silodp noise --algorithm`` refuses flags that move nothing)."""
        return cls.plan.transcript_signature(cfg)

    @classmethod
    def noise_report(cls, cfg: Any, epsilon: float, delta: float, method: str = "both",
                     accountant: str | None = None) -> dict:
        """The noise for (``epsilon``, ``delta``) as plain data (``silodp noise --algorithm``)."""
        return cls.plan.noise_report(cfg, epsilon, delta, method, accountant)

    def transcript_config(self, problem: Problem, federation: Federation) -> Any:
        """The transcript of a run on ``problem`` and ``federation``."""
        return self.plan.transcript_config(problem, federation)

    def run_declaration(self, problem: Problem, federation: Federation, sigmas: dict, shuffle: dict | None) -> list | None:
        """The releases this run must stay within (None: not private, nothing to check)."""
        return self.plan.run_declaration(problem, federation, sigmas, shuffle)

    def resolve_noise(self, problem: Problem, federation: Federation) -> tuple[dict, float | None, float | None, dict | None]:
        """``(sigmas, epsilon, delta, shuffle)`` for this run: explicit, calibrated or non-private."""
        return self.plan.resolve(problem, federation)[:4]

    def _validate(self, problem: Problem, federation: Federation) -> None:
        """The checks that need the problem and the federation (:meth:`Plan.validate <silodp.algorithms.plan.Plan.validate>`)."""
        self.plan.validate(problem, federation)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "run" in cls.__dict__:
            raise TypeError(f"{cls.__name__}: run is the channel's verb and cannot be overridden; implement _run")
        owned = sorted(set(cls.__dict__) & set(PLAN_OWNED))
        if owned:
            raise TypeError(f"{cls.__name__}: {owned} belong to the plan (silodp.algorithms.plan); "
                            "write a Plan subclass and set Plan = ... on the class")

    # -- the verb ------------------------------------------------------------------------------
    def run(self, problem: Problem, federation: Federation, seed: int = 0, replay: RunResult | None = None,
            callback: Callable[[int, torch.Tensor], object] | None = None) -> RunResult:
        """Run on ``federation`` (training data) and return a :class:`RunResult`.

        ``replay``: a result recorded with ``record_transcript=True``; its released messages and
        aggregates replace this run's (see the module docstring). ``callback(round, w)`` is
        called after every round (progress bars).
        """
        plan = self.plan
        self._validate(problem, federation)
        sigmas, epsilon, delta, shuffle, details = plan.resolve(problem, federation)
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

    def _run(self, ctx: Context, w: torch.Tensor) -> torch.Tensor:  # pragma: no cover
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


def _unchecked_instrument(cls: type) -> type:
    """Test-only hook (used by :mod:`silodp.verify.instruments` for the audit's mutations): runs
    through the instrument ``cls`` itself (not its subclasses) are not checked against the
    declaration: the deliberately broken variants of :mod:`silodp.verify.audit.mutations`, which
    the audits must catch on their own. The mark is the class's own attribute (no module state)."""
    if not (isinstance(cls, type) and issubclass(cls, Context) and cls.__module__ == INSTRUMENTS_MODULE):
        raise TypeError("only the audit instruments of silodp.verify.instruments may run unchecked")
    cls._unchecked_by = cls
    return cls


class Context:
    """The channel of one run: it owns the data, the generator and the release ledger.

    The algorithm draws batches through it (:meth:`sampler`, :meth:`batch`, :meth:`full`: opaque
    :class:`Batch` handles), asks it for clipped per-record terms (:meth:`term`: an opaque
    :class:`Term`) and sends them (:meth:`send`), receiving only noised releases; offsets must be
    values the channel released. Public state: :attr:`num_silos`, :attr:`min_size`, :attr:`clip`,
    :attr:`beta`, :attr:`dtype`, :attr:`eta`, :attr:`sigmas`, :attr:`iterates`. Gaussian and shuffle
    releases go through :meth:`send`, through the channel its algorithm's plan gives it
    (:class:`~silodp.algorithms.plan.GaussianChannel` or :class:`~silodp.algorithms.plan.ShuffleChannel`).

    Instruments (stacked trials, audit recordings, mutations) subclass it in
    :data:`INSTRUMENTS_MODULE` only, overriding the narrow hooks ``_expand``, ``_scale``,
    ``_clip_terms``, ``_noise_std``, ``_noise_generator``, ``_per_silo_offset``, ``_aggregate``,
    ``_offset_mean``, ``_shuffle_aggregate``.
    """

    #: set by :func:`_unchecked_instrument` on the one instrument class it marks
    _unchecked_by: ClassVar[type | None] = None

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__ != INSTRUMENTS_MODULE:
            raise TypeError(f"{cls.__name__}: the channel cannot be subclassed outside {INSTRUMENTS_MODULE}")

    def __init__(self, algo, problem, federation, seed, sigmas, shuffle, replay):
        self._algo, self._problem, self._fed = algo, problem, federation
        self._checked = type(self)._unchecked_by is not type(self)
        self._channel = algo.plan.channel()
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
        out: Any
        if subset:
            out = SubsetSampler(self._fed.mask, batch_size, self._gen)
        elif getattr(self._algo, "balls_in_bins", False) and replacement is None:
            if not self._channel.balls_in_bins:
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
        clip = self._problem.clip
        w, w_old, dc = self._expand(w), self._expand(w_old), self._scale(diff_clip)
        bound = diff_clip if diff_clip is not None else (None if clip is None else (2 * clip if w_old is not None else clip))
        return self._channel.terms(self, data, w, w_old, dc, self._algo.grad_method), bound

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
        idx = data._idx
        a = avail.to(self._fed.x.device, self._fed.x.dtype)
        std = self._noise_std(group, term, std)
        self._record(group, data, std, term.bound, self._channel.messages(data._weights, a))
        replayed = self._next_replay(group)
        agg, released, messages = self._channel.release(self, group, values, term, a, std, offset, replayed)
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
        self._ledger.record(self._channel.sent(self, group, data, std, bound, messages))

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
        """P_vec on the rows of ``term`` that ``sent`` selects (:meth:`silodp.algorithms.plan.ShuffleChannel.pvec`)."""
        return _plan.ShuffleChannel.pvec(self, term, bound, params, sent)

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
