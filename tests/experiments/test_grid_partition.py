"""The grid option ``partition`` (issue 16, item 4): silos drawn by a flwr-datasets partitioner
instead of the paper's partition -- hash stability, validation, the data it builds, and a grid
file run end to end through the runner."""

import hashlib
import json

import numpy as np
import pytest

from silodp.experiments import Store, reproduce
from silodp.experiments import datasets as ds
from silodp.experiments import grid as g
from silodp.experiments.partition import DATASETS

DIRICHLET = {"kind": "dirichlet", "alpha": 0.5}


def _cfg(**kw):
    base = dict(dataset="wbcd", algorithm="isrl-mb-sgd", epsilon=1.0, calibration="tight", silos_per_round=2,
                rounds=25, step_size=0.1, clip=1.0, trial=0)
    return g.RunConfig(**{**base, **kw})


def _digest(configs) -> str:
    return hashlib.sha256("".join(sorted(c.config_hash for c in configs)).encode()).hexdigest()[:16]


def test_grids_without_a_partition_keep_their_hashes():
    """Hashes recorded before the option existed (commit 3bfd496): existing stores stay valid."""
    assert _cfg().config_hash == _cfg(partition=None).config_hash == "ae7415fc92a3ff0eb54c328f"
    assert _digest(g.preset("mnist", quick=True).expand()) == "8bdcf7a2c822f2d9"
    assert _digest(g.preset("scaffold-synthetic", quick=True).expand()) == "47f6a6b624715972"
    isrl = [c for c in g.preset("wbcd", quick=True).expand() if not c.algorithm.startswith("sdp-")]
    assert len(isrl) == 72 and _digest(isrl) == "e48339dc68d38465"


def test_a_partition_is_part_of_the_hash_and_canonical():
    a = _cfg(partition={"alpha": 1, "kind": "dirichlet"})
    assert a == _cfg(partition={"kind": "dirichlet", "alpha": 1.0}) and a.config_hash != _cfg().config_hash
    assert a.config_hash != _cfg(partition={"kind": "dirichlet", "alpha": 2.0}).config_hash
    assert a.partition == (("alpha", 1.0), ("kind", "dirichlet"))
    back = g.RunConfig.from_dict(json.loads(json.dumps(a.to_dict())))
    assert back == a and back.config_hash == a.config_hash
    assert a.setting_key() != _cfg().setting_key()  # another experiment, selected separately


@pytest.mark.parametrize("spec, match", [
    ("dirichlet", "partition: must be a table"),
    ({}, "partition.kind: must be one of"),
    ({"kind": "iid"}, "partition.kind: must be one of"),
    ({"kind": "dirichlet"}, "partition.alpha: required"),
    ({"kind": "dirichlet", "alpha": 0}, "partition.alpha: must be > 0"),
    ({"kind": "dirichlet", "alpha": "big"}, "partition.alpha: must be a real number"),
    ({"kind": "dirichlet", "alpha": 0.5, "beta": 1}, r"partition: unknown keys \['beta'\]"),
    ({"kind": "dirichlet", "alpha": 0.5, "self_balancing": 1}, "partition.self_balancing: must be true or false"),
    ({"kind": "dirichlet", "alpha": 0.5, "num_partitions": 0}, "partition.num_partitions: must be an integer >= 1"),
    ({"kind": "shard"}, "partition.shard_size: kind 'shard' needs"),
    ({"kind": "shard", "shard_size": 2.5}, "partition.shard_size: must be an integer"),
    ({"kind": "pathological"}, "partition.num_classes_per_partition: required"),
    ({"kind": "pathological", "num_classes_per_partition": 1, "class_assignment_mode": "any"},
     "partition.class_assignment_mode: must be one of"),
])
def test_bad_partition_specs_name_the_argument(spec, match):
    with pytest.raises(ValueError, match=match):
        _cfg(partition=spec)
    with pytest.raises(ValueError, match=match):
        g.GridSpec("t", "wbcd", (g.AlgorithmGrid("mb-sgd", (0.1,)),), (1.0,), ((2, 5),), partition=spec)


def test_bad_partitions_in_grid_files(tmp_path):
    base = {"name": "x", "dataset": "wbcd", "epsilons": [1], "settings": [[2, 5]],
            "algorithms": {"mb-sgd": {"step_sizes": [1]}}}
    for bad, match in (({**base, "partition": []}, "partition: an empty list"),
                       ({**base, "dataset": "synthetic", "partition": DIRICHLET}, "partition: dataset 'synthetic'"),
                       ({**base, "partition": [DIRICHLET, {"kind": "dirichlet", "alpha": -1}]}, "partition.alpha")):
        (tmp_path / "g.json").write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=match):
            g.load_grid(tmp_path / "g.json")
    with pytest.raises(ValueError, match="partition: "):  # what only the partitioner can tell: 569 < 20 x 50
        ds.load("wbcd", partition={"kind": "shard", "shard_size": 50, "num_partitions": 20})


def _label_shares(data):
    fed = data.train
    return [float(fed.y[i, :c].mean()) for i, c in enumerate(fed.counts.tolist())]


def test_a_dirichlet_partition_mixes_the_papers_one_class_silos():
    paper = ds.load("wbcd", seed=0)
    mixed = ds.load("wbcd", seed=0, partition=DIRICHLET)
    assert _label_shares(paper) == [0.0, 1.0]  # App H.4: malignant | benign
    shares = _label_shares(mixed)
    assert len(shares) == 2 and any(0.05 < s < 0.95 for s in shares)
    total = sum(int(f.counts.sum()) for f in (mixed.train, mixed.val, mixed.test))
    assert total == 569 and mixed.input_shape == paper.input_shape  # every record once, same features
    assert _label_shares(ds.load("wbcd", seed=1, partition=DIRICHLET)) != shares  # the trial seeds it
    four = ds.load("wbcd", seed=0, partition={"kind": "shard", "shard_size": 50, "num_partitions": 4})
    assert four.train.num_silos == 4


def test_mnist_and_cifar10_pools(monkeypatch):
    rng = np.random.default_rng(0)
    digits = np.repeat(np.arange(10), 20)
    monkeypatch.setattr(ds._data, "mnist_digits", lambda: (rng.random((200, 784)) * 255, digits))
    mnist = ds.load("mnist", partition={"kind": "pathological", "num_classes_per_partition": 2, "num_partitions": 5,
                                        "class_assignment_mode": "deterministic"},
                    pca_dim=4)
    assert mnist.train.num_silos == 5 and mnist.input_shape == (4,)
    assert set(np.unique(mnist.train.y.numpy())) <= {0.0, 1.0}  # parity targets (Sec 4)
    images = (rng.random((200, 3, 32, 32)) * 255).astype(np.uint8)
    monkeypatch.setattr(ds._data, "cifar10_arrays", lambda path: (images, digits))
    cifar = ds.load("cifar10", partition={"kind": "shard", "shard_size": 12}, path="/unused", per_class=12)
    counts = sum(f.counts for f in (cifar.train, cifar.val, cifar.test))
    assert cifar.train.num_silos == 10 and counts.tolist() == [12] * 10 and cifar.input_shape == (3, 32, 32)
    assert set(ds.POOLS) == set(DATASETS)


def test_a_dirichlet_grid_file_runs_end_to_end(tmp_path):
    spec = {"name": "wbcd-dirichlet", "dataset": "wbcd", "epsilons": [3], "settings": [[2, 5]], "trials": 1,
            "partition": [None, DIRICHLET],
            "algorithms": {"isrl-mb-sgd": {"step_sizes": [0.5]}, "mb-sgd": {"step_sizes": [0.5]}}}
    (tmp_path / "g.json").write_text(json.dumps(spec))
    out = reproduce(tmp_path / "g.json", store=tmp_path / "r.db", workers=1, progress=False)
    assert out["runs"]["stored"] == {"ok": 4, "failed": 0, "skipped": 0}
    partitions = {r["experiment"]: r["partition"] for r in out["summary"]}
    assert partitions == {"wbcd M=2 R=5": None, "wbcd M=2 R=5 dirichlet(alpha=0.5)": DIRICHLET}
    with Store(tmp_path / "r.db") as st:
        stored = {r.config.partition: r for r in st.records("ok") if r.config.algorithm == "isrl-mb-sgd"}
        row = st.db.execute("SELECT config FROM runs WHERE config LIKE '%dirichlet%' LIMIT 1").fetchone()
    assert set(stored) == {None, (("alpha", 0.5), ("kind", "dirichlet"))}
    assert stored[None].config_hash == _cfg(rounds=5, step_size=0.5, epsilon=3.0).config_hash
    assert json.loads(row[0])["partition"] == [["alpha", 0.5], ["kind", "dirichlet"]]
    assert stored[None].metrics["n"] != stored[(("alpha", 0.5), ("kind", "dirichlet"))].metrics["n"]
    again = reproduce(tmp_path / "g.json", store=tmp_path / "r.db", workers=1, progress=False)
    assert again["runs"]["ran"] == 0 and again["summary"] == out["summary"]
