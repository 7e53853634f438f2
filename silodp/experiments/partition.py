"""The grid option ``partition``: silos drawn from a dataset's pooled records by a flwr-datasets
partitioner instead of the paper's partition (one class, or one digit pair, per silo: Sec 4,
App H.2-H.4).

A spec is a small dict, ``{"kind": "dirichlet", "alpha": 0.5}``, whose other keys are the
partitioner's own arguments (flwr-datasets' names): Dirichlet (Hsu, Qi & Brown 2019) ``alpha``,
``min_partition_size``, ``self_balancing``; shards (McMahan et al. 2017) ``shard_size``,
``num_shards_per_partition``, ``keep_incomplete_shard``; pathological
``num_classes_per_partition``, ``class_assignment_mode``; and for every kind
``num_partitions`` (default: the paper's number of silos of the dataset). The partitioner splits
by the dataset's class label and is seeded by the run's trial, like the train / validation /
test split. Validation is pure Python (flwr-datasets is imported only to build a partitioner).
"""

from __future__ import annotations

from typing import Any, Callable

from silodp._validation import check_count, check_positive

#: the datasets whose records can be pooled and re-partitioned (see :mod:`.datasets`)
DATASETS = ("wbcd", "mnist", "cifar10")
ASSIGNMENT_MODES = ("random", "deterministic", "first-deterministic")


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name}: must be true or false, got {value!r}")
    return value


def _mode(name: str, value: Any) -> str:
    if value not in ASSIGNMENT_MODES:
        raise ValueError(f"{name}: must be one of {ASSIGNMENT_MODES}, got {value!r}")
    return value


def _size(name: str, value: Any) -> int:
    return check_count(name, value, minimum=0)


#: kind -> (flwr-datasets class, {argument: validator}, required arguments)
KINDS: dict[str, tuple[str, dict[str, Callable], tuple[str, ...]]] = {
    "dirichlet": ("DirichletPartitioner", {"alpha": check_positive, "min_partition_size": _size,
                                           "self_balancing": _flag}, ("alpha",)),
    "shard": ("ShardPartitioner", {"shard_size": check_count, "num_shards_per_partition": check_count,
                                   "keep_incomplete_shard": _flag}, ()),
    "pathological": ("PathologicalPartitioner", {"num_classes_per_partition": check_count,
                                                 "class_assignment_mode": _mode}, ("num_classes_per_partition",)),
}


def check_partition(spec: Any, dataset: str) -> tuple:
    """The canonical form of a spec (a dict, or its sorted item tuple): validated values as sorted
    ``(key, value)`` pairs; a ``ValueError`` naming ``partition`` or ``partition.<key>`` otherwise."""
    try:
        spec = dict(spec)
    except (TypeError, ValueError):
        raise ValueError(f"partition: must be a table like {{'kind': 'dirichlet', 'alpha': 0.5}}, "
                         f"got {spec!r}") from None
    if dataset not in DATASETS:
        raise ValueError(f"partition: dataset {dataset!r} cannot be re-partitioned (only {DATASETS})")
    kind = spec.pop("kind", None)
    if kind not in KINDS:
        raise ValueError(f"partition.kind: must be one of {tuple(KINDS)}, got {kind!r}")
    _, checks, required = KINDS[kind]
    checks = {"num_partitions": check_count, **checks}
    unknown = sorted(set(spec) - set(checks))
    if unknown:
        raise ValueError(f"partition: unknown keys {unknown} for kind {kind!r} (allowed: {sorted(checks)})")
    for key in required:
        if key not in spec:
            raise ValueError(f"partition.{key}: required for kind {kind!r}")
    if kind == "shard" and "shard_size" not in spec and "num_shards_per_partition" not in spec:
        raise ValueError("partition.shard_size: kind 'shard' needs shard_size or num_shards_per_partition")
    values = {key: checks[key](f"partition.{key}", value) for key, value in spec.items()}
    return tuple(sorted({"kind": kind, **values}.items()))


def make_partitioner(spec: tuple, num_partitions: int, seed: int):
    """The flwr-datasets partitioner of a canonical spec, splitting by ``"label"`` into
    ``num_partitions`` parts unless the spec says otherwise, seeded by ``seed``."""
    import flwr_datasets.partitioner as fp

    args = dict(spec)
    name, _, _ = KINDS[args.pop("kind")]
    args.setdefault("num_partitions", num_partitions)
    return getattr(fp, name)(partition_by="label", seed=int(seed), **args)
