"""The algorithm base class: an algorithm is its :attr:`~FederatedAlgorithm.Config`, its ``_run``
and its :attr:`~FederatedAlgorithm.Plan`.

Each algorithm class declares what one silo may release (its family's ``declare_gaussian`` or
``declare_shuffle``, next to the ``_run`` that sends it); its plan
(:mod:`silodp.algorithms.plan`) turns that into the declaration, the calibration, the certificate
and the channel a run releases through. :meth:`FederatedAlgorithm.run` drives one run on the
plan's channel, a :class:`~silodp.algorithms.context.Context` (or an audit instrument passed as
``context``), which refuses at run time any message the declaration does not cover.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, ClassVar

import torch

from . import plan as _plan
from .config import OUTPUTS, AlgorithmConfig, own_fields  # noqa: F401  (OUTPUTS: re-exported)
from .context import INSTRUMENTS_MODULE, Context
from .result import RunResult

if TYPE_CHECKING:
    from .federation import Federation
    from .problems import Problem


#: What the plan owns: a class that defines one of these (as the privacy hooks families used to
#: override, or the shortcuts the class used to carry) is refused, since the plan, not the class, is
#: what the run, the calibration and the certificate call (an override here would be silently ignored).
PLAN_OWNED = ("declaration", "shuffle_declaration", "paper_noise", "noise_shape", "noise_transcript",
              "transcript_signature", "noise_report", "transcript_config", "run_declaration", "resolve_noise",
              "_validate", "sampling", "calibrate", "calibration_settings", "certify_noise", "targeted_epsilon",
              "noise_details", "config_fields", "resolve", "validate", "uses_replacement", "picks_uniform",
              "shuffled", "noise_arguments", "noise_payload", "releases_gaussian_messages", "certify_stored",
              "channel")


class FederatedAlgorithm:
    """Base class: an algorithm is its :attr:`Config`, its ``_run`` and its :attr:`Plan`.

    A new algorithm writes (docs/architecture.md, "adding things"):

    * ``name`` and ``Config``: its parameters, one frozen keyword-only dataclass
      (:mod:`silodp.algorithms.config`; a field that changes what a silo releases is
      ``param(transcript=True)``); constructors only store and validate them;
    * ``_run(self, ctx, w)``: its rounds, public logic over what the channel ``ctx`` releases;
    * ``declare_gaussian(cls, cfg, sigmas)`` (or, with ``Plan = ShufflePlan``,
      ``declare_shuffle(cls, cfg, epsilon, delta)``): what one silo releases, next to ``_run``
      (:func:`silodp.algorithms.plan.gaussian_messages` writes one Gaussian release); optionally
      ``paper_formula``, the paper's closed-form noise;
    * ``Plan``: its release kind (:mod:`silodp.algorithms.plan`; default :class:`GaussianPlan`),
      which holds the transcript, the declaration, the calibration, the certificate, the noise
      report and the channel a run gets. A family with its own guarantees writes its own plan
      (DP-SCAFFOLD: :class:`~silodp.algorithms.plan.ParticipationPlan`).

    :meth:`run` is the driver (final): it validates, resolves the noise through the plan and runs
    ``_run`` on the plan's channel. Everything about privacy is asked of :attr:`plan`
    (``cls.plan`` for the class, ``algo.plan`` for a configured instance).
    """

    name: ClassVar[str] = ""
    #: the algorithm's parameters: a frozen, keyword-only dataclass validated in __post_init__
    Config: ClassVar[type[AlgorithmConfig]] = AlgorithmConfig
    #: the privacy contract of its release kind (:mod:`silodp.algorithms.plan`)
    Plan: ClassVar[type[_plan.Plan]] = _plan.GaussianPlan
    #: ``cls.plan``: the class's plan; ``algo.plan``: the plan of this configured instance
    plan = _plan.PlanOf()
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

    def eta(self, problem: Problem) -> float:
        """The step size: ``step_size``, else 1 / (2 beta) (ValueError naming ``step_size`` without beta)."""
        if self.step_size is not None:
            return float(self.step_size)
        if problem.beta is None:
            raise ValueError("step_size: required when the problem has no smoothness constant beta")
        return 1.0 / (2.0 * problem.beta)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "run" in cls.__dict__:
            raise TypeError(f"{cls.__name__}: run is the channel's verb and cannot be overridden; implement _run")
        if "context_class" in cls.__dict__:
            raise TypeError(f"{cls.__name__}: context_class is gone; pass the instrument to run(..., context=...)")
        owned = sorted(set(cls.__dict__) & set(PLAN_OWNED))
        if owned:
            raise TypeError(f"{cls.__name__}: {owned} belong to the plan (silodp.algorithms.plan); "
                            "write a Plan subclass and set Plan = ... on the class")

    # -- the verb ------------------------------------------------------------------------------
    def run(self, problem: Problem, federation: Federation, seed: int = 0, replay: RunResult | None = None,
            callback: Callable[[int, torch.Tensor], object] | None = None,
            context: type[Context] | None = None) -> RunResult:
        """Run on ``federation`` (training data) and return a :class:`RunResult`.

        ``replay``: a result recorded with ``record_transcript=True``; its released messages and
        aggregates replace this run's (see :mod:`silodp.algorithms.context`). ``callback(round, w)``
        is called after every round (progress bars). ``context``: the channel class (None:
        :class:`~silodp.algorithms.context.Context`); only the instruments of
        :data:`~silodp.algorithms.context.INSTRUMENTS_MODULE` (audit recordings, mutations,
        stacked trials) subclass it.
        """
        plan = self.plan
        plan.validate(problem, federation)
        sigmas, epsilon, delta, shuffle, details = plan.resolve(problem, federation)
        kind = Context if context is None else context
        if not (isinstance(kind, type) and issubclass(kind, Context)):
            raise ValueError(f"context: must be Context or an instrument of {INSTRUMENTS_MODULE}, got {kind!r}")
        ctx = kind(self, problem, federation, int(seed), sigmas, shuffle, replay)
        ctx.callback = callback
        w0 = self.w0 if self.w0 is not None else problem.model.init(ctx._gen, dtype=federation.x.dtype)
        w_last = self._run(ctx, w0.to(federation.x.device, federation.x.dtype).clone())
        w_priv = ctx.uniform_iterate() if plan.picks_uniform and ctx.iterates else w_last
        return RunResult(self.name, w_priv.clone(), w_last.clone(), ctx.history, sigmas, epsilon, delta,
                         None if shuffle is None else {g: vars(p) for g, p in shuffle.items()},
                         ctx._entries, self.get_params(), ctx._ledger.sent,
                         None if self.epsilon is None else float(self.epsilon), details)

    def _run(self, ctx: Context, w: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        """The algorithm's rounds: batches, terms and sends through ``ctx``; returns the last
        iterate (a function of released values and public state only)."""
        raise NotImplementedError
