"""A run carries its algorithm's parameters as the algorithm's own config (issue 35 item 1):
:class:`~silodp.experiments.grid.RunConfig` has no algorithm field (SPIDER's period, Local SGD's
local steps are ``params``), a grid validates them by the algorithm's ``Config``, and every hash
stored before (config hashes, calibration request keys, stamped tables) stays. The pinned hashes
and keys below were computed by silodp before this change, with the period and the local steps as
the RunConfig fields ``q`` and ``local_steps``."""

import dataclasses
import json

import pytest

from silodp.algorithms import ALGORITHMS
from silodp.algorithms.config import own_fields
from silodp.experiments import execute as ex
from silodp.experiments.grid import AlgorithmGrid, GridSpec, RunConfig

BASE = dict(dataset="wbcd", epsilon=2.0, calibration="tight", silos_per_round=2, rounds=5, step_size=0.5, clip=1.0,
            trial=0)


def test_a_run_config_has_no_algorithm_field():
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    own = {f.name for cls in ALGORITHMS.values() for f in own_fields(cls.Config)}
    assert not fields & own and not fields & {"q", "period"}


#: (algorithm, params) -> (config hash, calibration request key) before round 8
PINNED = {
    ("isrl-spider", (("period", 2),)): ("16497525eb8094f87d2f1211", "1cc4db6ad4702c3b7fe8c1a5"),
    ("sdp-spider", (("batch_size2", 7), ("period", 3))): ("ebb7159fb0758d4dfef1c813", "3b0c2e65f295cc5cdf540647"),
    ("isrl-prox-svrg", ()): ("e6f602f166d13a3f893f99d0", "6505863d8d4cc8168b952fa1"),
    ("isrl-pl-svrg", (("inner_steps", 3),)): ("28755322967035d5c508eb37", "547bd4ae062d4e546b60b709"),
    ("isrl-local-sgd", (("local_steps", 2),)): ("912b7f4220bbf51eca6e7a80", "348c269fe19ffb8a65714eee"),
    ("isrl-prox-sgd", ()): ("812b38e71b5cd7e72a0c927d", "2242a1cfd52a56e2147672cd"),
    ("isrl-fed-spider", ()): ("040c4bc4f3d11f801d10d351", "b2b242d7b62c33cda1d87179"),
}


@pytest.mark.parametrize("algorithm, params", sorted(PINNED))
def test_config_hashes_and_calibration_keys_stay(algorithm, params):
    cfg = RunConfig(algorithm=algorithm, params=dict(params), **BASE)
    config_hash, request_key = PINNED[algorithm, params]
    assert cfg.config_hash == config_hash
    assert ex.request_key(ex.calibration_request(cfg)) == request_key


#: RunConfig.to_dict() of runs stored before round 8 (results stores' ``config`` column) and their hashes
STORED = [
    ({"dataset": "wbcd", "algorithm": "isrl-spider", "epsilon": 2.0, "calibration": "tight", "silos_per_round": 2,
      "rounds": 5, "step_size": 0.5, "clip": 1.0, "trial": 0, "q": 2, "local_steps": None, "batch_size": None,
      "batch_epsilon": 24.0, "delta": None, "replacement": False, "model": None, "regularizer": None, "data": [],
      "params": [["batch_size2", 7]], "val_fraction": 0.2, "test_fraction": 0.2, "partition": None},
     "d6043ed87d35c2ab743a9f2c", {"period": 2, "batch_size2": 7}),
    ({"dataset": "wbcd", "algorithm": "isrl-local-sgd", "epsilon": 2.0, "calibration": "tight", "silos_per_round": 2,
      "rounds": 5, "step_size": 0.5, "clip": 1.0, "trial": 0, "q": None, "local_steps": 2, "batch_size": None,
      "batch_epsilon": 24.0, "delta": None, "replacement": False, "model": None, "regularizer": None, "data": [],
      "params": [], "val_fraction": 0.2, "test_fraction": 0.2, "partition": None},
     "912b7f4220bbf51eca6e7a80", {"local_steps": 2}),
    ({"dataset": "fedprox_synthetic", "algorithm": "dp-scaffold", "epsilon": 10.0, "calibration": "tight",
      "silos_per_round": None, "rounds": 40, "step_size": 2.0, "clip": 1.0, "trial": 0, "q": None, "local_steps": 5,
      "batch_size": None, "batch_epsilon": 24.0, "delta": 1e-05, "replacement": False, "model": "linear",
      "regularizer": "l2:0.005", "data": [["alpha", 5.0], ["beta", 5.0], ["dim", 40], ["normalize", True],
                                          ["num_users", 10], ["samples_per_user", 150]],
      "params": [["data_sampling", 0.2], ["user_sampling", 1.0]], "val_fraction": 0.2, "test_fraction": 0.2,
      "partition": None},
     "82ec28269381a8fe45b1dd1d", {"local_steps": 5, "data_sampling": 0.2, "user_sampling": 1.0}),
]


@pytest.mark.parametrize("stored, config_hash, params", STORED)
def test_an_old_stored_run_loads_with_its_hash(stored, config_hash, params):
    """A stored row's config: its ``q`` / ``local_steps`` are read into ``params`` in one place
    (RunConfig.from_dict), the hash it is stored under is the hash of what is read, and the run is
    the same (the algorithm gets the same keyword arguments)."""
    cfg = RunConfig.from_dict(json.loads(json.dumps(stored)))
    assert dict(cfg.params) == params and cfg.config_hash == config_hash
    assert RunConfig.from_dict(cfg.to_dict()) == cfg  # and it is stored in the new form as it is read
    assert "q" not in cfg.to_dict() and "local_steps" not in cfg.to_dict()


def test_an_old_stored_run_prepares_the_same_algorithm():
    cfg = RunConfig.from_dict(STORED[1][0])
    prep = ex.prepare(cfg)
    assert prep.params["local_steps"] == 2
    assert prep.params["batch_size"] == ex.paper_batch_size(prep.train.min_size, 5) // 2  # K over the steps


def test_the_parameters_move_what_they_did():
    """The own parameter reaches the algorithm: SPIDER's period moves its calibration request."""
    one, two = (RunConfig(algorithm="isrl-spider", params={"period": p}, **BASE) for p in (1, 2))
    assert ex.prepare(two).params["period"] == 2
    assert ex.calibration_request(one)["transcript"]["period"] == 1
    assert ex.calibration_request(two)["transcript"]["period"] == 2
    assert one.hyperparameters()["period"] == 1 and one.hyperparameters()["params"] == []


def test_a_grid_file_sweeps_and_fixes_the_algorithms_own_parameters():
    spec = GridSpec.from_dict({"name": "t", "dataset": "wbcd", "epsilons": [1], "settings": [[2, 5]], "trials": 1,
                               "algorithms": {"isrl-spider": {"step_sizes": [0.1], "period": [1, 2],
                                                              "batch_size2": 7},
                                              "isrl-local-sgd": {"step_sizes": [0.1], "local_steps": 3}}})
    runs = spec.expand()
    assert sorted(tuple(sorted(dict(r.params).items())) for r in runs) == [
        (("batch_size2", 7), ("period", 1)), (("batch_size2", 7), ("period", 2)), (("local_steps", 3),)]
    # None is the algorithm's default (left out of params), as the former fields' None was
    default = AlgorithmGrid("isrl-spider", (0.1,), sweep={"period": (None, 2)}).parameter_sets()
    assert default == ((), (("period", 2),))


@pytest.mark.parametrize("entry, message", [
    ({"q": [1, 2]}, r"^q: renamed to period"),
    ({"period": [1, 0]}, r"^period: "),
    ({"local_steps": 2}, r"unknown keys \['local_steps'\]"),  # not a parameter of SPIDER
    ({"params": {"inner_steps": 3}}, r"^inner_steps: not a parameter of isrl-spider"),
    ({"params": {"batch_size2": -1}}, r"^batch_size2: "),
])
def test_a_grid_refuses_what_the_algorithms_config_refuses(entry, message):
    with pytest.raises(ValueError, match=message):
        AlgorithmGrid.from_dict({"name": "isrl-spider", "step_sizes": [0.1], **entry}).parameter_sets()
