"""What a server proposes for a run (the Flower example's run config), read without torch: the
silo service and the in-process silo check it before they decide to train.

A proposal is never trusted: :class:`silodp.integrations.flower_silo.SiloPolicy` checks it
against the silo's caps, and the silo calibrates its own noise for it
(:func:`silodp.service.silo.silo_plan`)."""

from __future__ import annotations

import dataclasses

ALGORITHMS = ("isrl-mb-sgd", "isrl-spider")


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

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")

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
        from silodp.algorithms import get_algorithm

        extra = {"period": self.period} if self.algorithm == "isrl-spider" else {}
        return get_algorithm(self.algorithm, rounds=self.rounds, batch_size=self.batch_size,
                             step_size=self.step_size, epsilon=self.epsilon, delta=self.delta,
                             accountant=self.accountant or None, **extra)
