"""One frozen, keyword-only config dataclass per algorithm (as jax_privacy's configs), validated in
``__post_init__``; the single source of an algorithm's parameters.

:class:`AlgorithmConfig` holds the parameters every algorithm shares (R, K, eta, the privacy
target or explicit noise, sampling, output rule). A family adds its own fields with :func:`param`,
whose metadata (help text, value domain, CLI flag, whether the field enters the transcript) is what
the command line (``silodp run`` and ``silodp noise --algorithm``), the grid keys of
:mod:`silodp.experiments.grid` and the parameter tables of docs/algorithms.md are generated from
(:func:`own_fields`, :func:`parameter_table`): a new algorithm's own parameter is a flag with no CLI
edit. This module imports neither torch nor any algorithm.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

from silodp._validation import check_count
from silodp.accounting import CalibrationMethod

#: value domains a parameter can declare (the CLI maps each to its parser: silodp.cli.domains)
DOMAINS = ("count", "count0", "positive", "probability", "unit")
#: ``output``: None (the algorithm's own rule), "random" (the same), "last" (the last iterate)
OUTPUTS = (None, "random", "last")
#: the calibration methods (silodp.accounting.CalibrationMethod's values)
CALIBRATIONS = tuple(c.value for c in CalibrationMethod)
#: per-record gradient methods (silodp.algorithms.grads)
GRAD_METHODS = ("ghost", "materialize")


def param(default: Any, *, help: str, domain: str | tuple, flag: str | None = None, transcript: bool = False,
          noise_default: Any = None) -> Any:
    """A family's own field: ``domain`` one of :data:`DOMAINS` or a tuple of choices; ``flag`` the
    CLI spelling (default ``--name-with-dashes``); ``transcript``: the field changes what a silo
    releases, so ``silodp noise --algorithm`` takes it too (with ``noise_default`` there)."""
    if not (isinstance(domain, tuple) or domain in DOMAINS):
        raise ValueError(f"domain: must be one of {DOMAINS} or a tuple of choices, got {domain!r}")
    meta = {"help": help, "domain": domain, "flag": flag, "transcript": transcript, "noise_default": noise_default}
    return dataclasses.field(default=default, metadata=meta)


def flag_of(f: dataclasses.Field) -> str:
    """The CLI flag of the own field ``f``."""
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AlgorithmConfig:
    """Parameters shared by every algorithm: ``rounds`` (R), ``batch_size`` (K), ``step_size``
    (eta; None: ``1 / (2 beta)`` from the problem), a target ``epsilon`` / ``delta`` (calibrated
    with ``calibration`` "tight" | "paper" by ``accountant``, None: the tightest) or explicit noise
    ``sigmas`` (standard deviations, keys the class's ``noise_keys``) / ``shuffle_params`` (SDP:
    ``(g, b, p)`` per message group); ``replacement`` (None: the class's default), ``balls_in_bins``
    (minibatches by balls-in-bins, :class:`~silodp.algorithms.federation.BallsInBinsSampler`,
    accounted as ``BatchSampling.BALLS_IN_BINS``; Gaussian algorithms only), ``grad_method``,
    ``record_transcript``, ``metrics_every`` (0: none), ``w0``, ``output`` (:data:`OUTPUTS`)."""

    rounds: int = 10
    batch_size: int = 32
    step_size: float | None = None
    epsilon: float | None = None
    delta: float | None = None
    sigmas: dict | None = None
    shuffle_params: dict | None = None
    calibration: str = "tight"
    accountant: str | None = None
    replacement: bool | None = None
    balls_in_bins: bool = False
    grad_method: str = "ghost"
    record_transcript: bool = False
    metrics_every: int = 1
    w0: Any = None
    output: str | None = None

    def __post_init__(self) -> None:
        check_count("rounds", self.rounds)
        check_count("batch_size", self.batch_size)
        if self.metrics_every:
            check_count("metrics_every", self.metrics_every)
        if self.grad_method not in GRAD_METHODS:
            raise ValueError(f"grad_method: must be one of {GRAD_METHODS}, got {self.grad_method!r}")
        if self.calibration not in CALIBRATIONS:
            raise ValueError(f"calibration: must be one of {CALIBRATIONS}, got {self.calibration!r}")
        if self.step_size is not None and not (0 < float(self.step_size) < math.inf):
            raise ValueError(f"step_size: must be a finite number > 0, got {self.step_size}")
        if self.epsilon is not None and not (0 < float(self.epsilon) < math.inf):
            raise ValueError(f"epsilon: must be a finite number > 0, got {self.epsilon}")
        if self.delta is not None and not (0 < float(self.delta) < 1):
            raise ValueError(f"delta: must be in (0, 1), got {self.delta}")
        if self.balls_in_bins and self.replacement:
            raise ValueError("balls_in_bins: batches are drawn by balls-in-bins, not with replacement (leave replacement unset)")
        if self.output not in OUTPUTS:
            raise ValueError(f"output: must be one of {OUTPUTS}, got {self.output!r}")

    def transcript_fields(self, n: int) -> dict:
        """The own fields that enter the transcript (``param(transcript=True)``), defaults resolved
        for a smallest silo of ``n`` records (families override to resolve a None)."""
        return {f.name: getattr(self, f.name) for f in own_fields(type(self)) if f.metadata["transcript"]}


def own_fields(config: type) -> tuple[dataclasses.Field, ...]:
    """The fields ``config`` adds to :class:`AlgorithmConfig` (a family's own parameters)."""
    shared = {f.name for f in dataclasses.fields(AlgorithmConfig)}
    return tuple(f for f in dataclasses.fields(config) if f.name not in shared)


def check_in(name: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"{name}: must be one of {allowed}, got {value!r}")


def check_unit(name: str, value: float, closed_low: bool = False) -> None:
    """``value`` in (0, 1] (``closed_low``: [0, 1))."""
    ok = 0 <= float(value) < 1 if closed_low else 0 < float(value) <= 1
    if not ok:
        raise ValueError(f"{name}: must lie in {'[0, 1)' if closed_low else '(0, 1]'}, got {value}")


def parameter_table(classes: Iterable[Any]) -> str:
    """The own parameters of every class in ``classes`` as a Markdown table (docs/algorithms.md,
    between its generated markers): algorithm, parameter, default, CLI flag, transcript, meaning."""
    rows = ["| algorithm | parameter | default | flag | in the transcript | meaning |", "|---|---|---|---|---|---|"]
    for cls in classes:
        for f in own_fields(cls.Config):
            mark = "yes" if f.metadata["transcript"] else "no"
            rows.append(f"| `{cls.name}` | `{f.name}` | `{f.default!r}` | `{flag_of(f)}` | {mark} | {f.metadata['help']} |")
    return "\n".join(rows)
