"""What a server proposes for a run (the Flower example's run config), read without torch: the
silo service and the in-process silo check it before they decide to train.

A proposal is never trusted: :class:`silodp.integrations.flower_silo.SiloPolicy` checks it
against the silo's caps, and the silo calibrates its own noise for it
(:func:`silodp.service.silo.silo_plan`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

#: The service's own mechanism (not a registered algorithm): the silo trains ``local_steps``
#: full-batch gradient steps at the server's model and releases the clipped model update with
#: Gaussian noise (message kind ``update``; what :class:`silodp.integrations.flower.IsrlDpMod`
#: forwards in its service mode). Silo-level DP: the update clipped to C moves by at most 2C when
#: the silo's records change (all of them, one included), certified as ``rounds`` Gaussian
#: releases of noise multiplier z = sigma / C under replace-one (implies ISRL-DP, paper Def. 4).
UPDATE = "clipped-update"
#: the message kind of :data:`UPDATE` and its noise key
UPDATE_NOISE = {"update": "sigma"}
#: the config field of an algorithm's period of fresh gradients (SPIDER's ``period``, the paper's
#: q): the one place that names it
PERIOD_FIELD = "period"


def silo_noise(algorithm: str) -> Mapping[str, str]:
    """What a silo service computes for ``algorithm``: message kind -> the noise key of its std
    (or the algorithm's method of it). :data:`UPDATE`'s, or the ``silo_noise`` a registered,
    private, non-shuffled algorithm class declares on itself (an opt-in: a subclass does not
    inherit it); ValueError naming ``algorithm`` otherwise. Imports the registry (torch) for an
    algorithm other than :data:`UPDATE`."""
    if algorithm == UPDATE:
        return UPDATE_NOISE
    from silodp.algorithms import ALGORITHMS as REGISTERED

    cls = REGISTERED.get(algorithm)
    if cls is None or not _serves(cls):
        raise ValueError(f"algorithm: must be one of {service_algorithms()}, got {algorithm!r}")
    return dict(cls.__dict__["silo_noise"])


def _serves(cls: type) -> bool:
    """Whether a silo service computes the registered algorithm class ``cls`` (see :func:`silo_noise`)."""
    return bool(cls.__dict__.get("silo_noise")) and cls.plan.releases_gaussian_messages()  # type: ignore[attr-defined]


def service_algorithms() -> tuple[str, ...]:
    """The registered algorithms a silo service computes (see :func:`silo_noise`), and :data:`UPDATE`."""
    from silodp.algorithms import ALGORITHMS as REGISTERED

    return tuple(name for name, cls in REGISTERED.items() if _serves(cls)) + (UPDATE,)


def __getattr__(name: str):  # ALGORITHMS, computed from the registry when first asked for
    if name == "ALGORITHMS":
        return service_algorithms()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def update_calibration(rounds: int, epsilon: float, delta: float, accountant: str | None = None):
    """The noise of :data:`UPDATE`'s ``rounds`` releases certifying (``epsilon``, ``delta``):
    :func:`silodp.accounting.tightest_calibration` (rounded toward more privacy) of ``rounds``
    ``GaussianDpEvent(z)`` under ``REPLACE_ONE`` (sensitivity 2C: the whole clipped update)."""
    from silodp.accounting import tightest_calibration
    from silodp.accounting import events as ev
    from silodp.accounting.releases import releases_event

    return tightest_calibration(lambda z: releases_event([update_release(z, rounds)]), epsilon, delta,
                                accountant or None, ev.REPLACE_ONE)


def update_release(noise_multiplier: float, count: int = 1):
    """``count`` releases of one clipped update (one contribution of norm <= C: batch = dataset = 1)."""
    from silodp.accounting.releases import BatchSampling, GaussianRelease

    return GaussianRelease("update", int(count), float(noise_multiplier), BatchSampling.FULL, 1, 1)


@dataclasses.dataclass(frozen=True)
class Settings:
    """The ``[tool.flwr.app.config]`` of ``pyproject.toml`` (Flower spells keys with dashes)."""

    algorithm: str = "isrl-mb-sgd"
    dataset: str = "wbcd"
    model: str = "linear"
    epsilon: float = 3.0
    delta: float = 1e-4
    rounds: int = 25
    batch_size: int = 32
    #: SPIDER's period of fresh gradients (run config key ``period``; the old ``q`` is refused)
    period: int = 5
    step_size: float = 0.5
    clip: float = 1.0
    seed: int = 0
    #: silodp accountant of the calibration ("": the tightest candidate, as `silodp run`); every
    #: silo's ledger certifies with the tightest whatever this says
    accountant: str = ""
    #: where the ServerApp saves the final model (``.npy``; "": not saved)
    model_path: str = ""
    #: :data:`UPDATE`'s local gradient steps per round (capped by the silo)
    local_steps: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.algorithm, str) or not self.algorithm:
            raise ValueError(f"algorithm: must be an algorithm's name, got {self.algorithm!r}")

    @classmethod
    def from_run_config(cls, config: dict) -> "Settings":
        from silodp._validation import refuse_renamed

        refuse_renamed(key.replace("-", "_") for key in config)  # q -> period
        fields = {f.name: f for f in dataclasses.fields(cls)}
        out = {}
        for key, value in config.items():
            name = key.replace("-", "_")
            if name in fields:
                out[name] = type(getattr(cls, name))(value)
        return cls(**out)

    def algorithm_object(self):
        """The registered algorithm of this proposal (with its period where its config has one)."""
        from silodp.algorithms import get_algorithm
        from silodp.algorithms import ALGORITHMS as REGISTERED

        if self.algorithm not in REGISTERED:  # UPDATE included: the service's own mechanism
            raise ValueError(f"algorithm: must be a registered algorithm, got {self.algorithm!r}")
        silo_noise(self.algorithm)
        fields = {f.name for f in dataclasses.fields(REGISTERED[self.algorithm].Config)}
        extra = {PERIOD_FIELD: getattr(self, PERIOD_FIELD)} if PERIOD_FIELD in fields else {}
        return get_algorithm(self.algorithm, rounds=self.rounds, batch_size=self.batch_size,
                             step_size=self.step_size, epsilon=self.epsilon, delta=self.delta,
                             accountant=self.accountant or None, **extra)
