"""A silodp ``Federation`` from any flwr-datasets partitioner (Dirichlet, shard, pathological, ...)
on local arrays: no download, no Hugging Face hub.

The partitioner sees a ``datasets.Dataset`` with two columns, the record's row number and its label
(``partition_by`` of the partitioner, default ``"label"``); each partition's row numbers then pick
the silo's records from ``x`` and ``y``. Partitioners that split by label (Dirichlet: Hsu, Qi &
Brown 2019; shards: McMahan et al. 2017; pathological) therefore work unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from silodp.algorithms.federation import Federation

_ROW = "silodp_row"


def federation_from_partitioner(partitioner: Any, x: Any, y: Any, *, dtype: torch.dtype = torch.float64,
                                **federation_kwargs: Any) -> Federation:
    """Silo i holds ``partitioner.load_partition(i)``'s records of ``(x, y)``.

    ``partitioner``: a flwr-datasets ``Partitioner`` not yet bound to a dataset, whose
    ``partition_by`` column (if any) names the labels. ``x``: ``[n, ...]``; ``y``: ``[n]``.
    ``federation_kwargs`` go to :class:`~silodp.algorithms.federation.Federation` (e.g.
    ``silos_per_round``). Empty partitions are a ``ValueError`` (a silo needs records).
    """
    from datasets import Dataset
    from flwr_datasets.partitioner import Partitioner

    xs, ys = np.asarray(x), np.asarray(y)
    if xs.ndim < 2 or ys.shape != (xs.shape[0],):
        raise ValueError(f"x, y: need x [n, ...] and y [n], got {xs.shape} and {ys.shape}")
    if not isinstance(partitioner, Partitioner):
        raise ValueError(f"partitioner: must be a flwr-datasets Partitioner, got {type(partitioner).__name__}")
    label = getattr(partitioner, "_partition_by", None) or "label"
    partitioner.dataset = Dataset.from_dict({_ROW: np.arange(len(ys)), label: ys.tolist()})
    rows = [np.asarray(partitioner.load_partition(i)[_ROW], dtype=np.int64)
            for i in range(partitioner.num_partitions)]
    empty = [i for i, r in enumerate(rows) if len(r) == 0]
    if empty:
        raise ValueError(f"partitioner: partitions {empty} are empty")
    return Federation.from_silos([torch.as_tensor(xs[r], dtype=dtype) for r in rows],
                                 [torch.as_tensor(ys[r], dtype=dtype) for r in rows], **federation_kwargs)


__all__ = ["federation_from_partitioner"]
