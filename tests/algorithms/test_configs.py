"""One config dataclass per algorithm: frozen, keyword-only, validated; the docs' parameter
table is generated from them and current."""

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from silodp.algorithms.registry import ALGORITHMS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_config_is_frozen_keyword_only_and_validated(name):
    cls = ALGORITHMS[name]
    cfg = cls.Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.rounds = 3
    with pytest.raises(TypeError):
        cls.Config(5)  # keyword-only
    with pytest.raises(ValueError, match="rounds"):
        cls(rounds=0)
    with pytest.raises(ValueError, match="nosuch: not a parameter"):
        cls(nosuch=1)


def test_the_docs_parameter_table_is_current():
    spec = importlib.util.spec_from_file_location("algorithm_params", ROOT / "docs/figures/algorithm_params.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--check"]) == 0, "run: PYTHONPATH=. python docs/figures/algorithm_params.py"


def test_an_algorithms_own_parameters_are_grid_keys():
    from silodp.experiments.grid import AlgorithmGrid

    grid = AlgorithmGrid.from_dict({"name": "isrl-fedavgm", "step_sizes": [0.1], "server_momentum": 0.5,
                                    "params": {"server_step_size": 2.0}})
    assert dict(grid.params) == {"server_momentum": 0.5, "server_step_size": 2.0}
    with pytest.raises(ValueError, match="server_momentum"):  # not isrl-prox-sgd's
        AlgorithmGrid.from_dict({"name": "isrl-prox-sgd", "step_sizes": [0.1], "server_momentum": 0.5})
