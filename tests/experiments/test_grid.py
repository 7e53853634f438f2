"""silodp.experiments.grid: hashable run configs, grids from files, the paper presets."""

import dataclasses
import hashlib
import json
import math

import pytest

from silodp.experiments import grid as g


def _cfg(**kw):
    base = dict(dataset="wbcd", algorithm="isrl-mb-sgd", epsilon=1.0, calibration="tight", silos_per_round=2,
                rounds=25, step_size=0.1, clip=1.0, trial=0)
    return g.RunConfig(**{**base, **kw})


def test_config_is_hashable_and_its_hash_is_canonical():
    a, b = _cfg(epsilon=1, clip=1, data={"x": [1, 2]}), _cfg(epsilon=1.0, clip=1.0, data=(("x", (1, 2)),))
    assert a == b and hash(a) == hash(b) and a.config_hash == b.config_hash
    assert len({a, b, _cfg(trial=1)}) == 2
    assert _cfg(trial=1).config_hash != a.config_hash
    assert len(a.config_hash) == 24 and int(a.config_hash, 16) >= 0


def test_config_roundtrips_through_json():
    cfg = _cfg(algorithm="isrl-spider", params={"period": 3, "batch_size2": 7}, data={"path": "/x"})
    back = g.RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert back == cfg and back.config_hash == cfg.config_hash
    with pytest.raises(ValueError, match="unknown"):
        g.RunConfig.from_dict({**cfg.to_dict(), "colour": 1})


@pytest.mark.parametrize("field, value", [
    ("epsilon", 0.0), ("epsilon", math.inf), ("calibration", "loose"), ("rounds", 0),
    ("step_size", -1.0), ("clip", 0.0), ("trial", -1), ("delta", 1.0), ("batch_size", 0), ("clip", "big"),
])
def test_bad_config_fields_are_named(field, value):
    with pytest.raises(ValueError, match=field):
        _cfg(**{field: value})


def test_non_private_runs_have_no_epsilon():
    with pytest.raises(ValueError, match="epsilon"):
        _cfg(algorithm="mb-sgd", calibration="none")
    assert _cfg(algorithm="mb-sgd", epsilon=None, calibration="none").experiment()["dataset"] == "wbcd"


def test_selection_keys_separate_hyperparameters_from_the_setting():
    a, b = _cfg(step_size=0.1, trial=0), _cfg(step_size=0.5, clip=5.0, trial=3)
    assert a.setting_key() == b.setting_key() and a.hyperparameter_key() != b.hyperparameter_key()
    assert _cfg(epsilon=2.0).setting_key() != a.setting_key()
    assert _cfg(rounds=50).setting_key() != a.setting_key()


def test_expand_counts_the_product_and_collapses_epsilon_for_non_private():
    spec = g.GridSpec("t", "wbcd", (g.AlgorithmGrid("mb-sgd", (0.1, 0.2), (1.0, 5.0)),
                                    g.AlgorithmGrid("isrl-spider", (0.1,), (1.0,), sweep={"period": (1, 2, 3)})),
                      epsilons=(1.0, 3.0), settings=((2, 25),), trials=4, calibrations=("tight", "paper"))
    runs = spec.expand()
    assert len(runs) == 2 * 2 * 4 + 2 * 2 * 3 * 4
    assert {r.calibration for r in runs if r.algorithm == "mb-sgd"} == {"none"}
    assert len({r.config_hash for r in runs}) == len(runs)


SDP = {"sdp-prox-sgd", "sdp-prox-svrg", "sdp-pl-svrg", "sdp-spider"}


def test_full_wbcd_preset_is_the_paper_grid_and_the_sdp_arm_its_own():
    spec = g.preset("wbcd")
    runs = spec.expand()
    steps, clips, eps, trials = 15, 4, 7, 10
    private = eps * (steps * clips * (1 + 1 + 10))  # ISRL MB-SGD, Local SGD, SPIDER with q in 1..10
    assert len(runs) == trials * (2 * steps * clips + private) == 51600
    digest = hashlib.sha256("".join(sorted(r.config_hash for r in runs)).encode()).hexdigest()[:16]
    assert digest == "99213ae9a444ccd0"  # the hashes of stores written before the SDP arm and partitions
    assert {(r.silos_per_round, r.rounds) for r in runs} == {(2, 25)}
    assert {r.algorithm for r in runs} == {"mb-sgd", "local-sgd", "isrl-mb-sgd", "isrl-local-sgd", "isrl-spider"}
    assert {r.epsilon for r in runs} - {None} == set(g.PAPER_EPSILONS)
    assert math.isclose(min(r.step_size for r in runs), math.exp(-9)) and max(r.step_size for r in runs) == 1.0
    assert "(4, 25)" in spec.notes
    sdp = g.preset("wbcd-sdp").expand()  # the SDP arm: a reduced grid of its own
    assert {r.algorithm for r in sdp} == SDP and not set(sdp) & set(runs)
    assert len(sdp) == 3 * eps * 5 * 1 * (1 + 1 + 1 + 2) == 525
    assert {r.param("period") for r in sdp if r.algorithm == "sdp-spider"} == {1, 2}
    assert {r.calibration for r in sdp} == {"tight"} and {r.clip for r in sdp} == {1.0}
    quick = [r for r in g.preset("wbcd", quick=True).expand() if r.algorithm in SDP]
    assert {r.algorithm for r in quick} == {"sdp-prox-sgd"} and len(quick) == 8  # one cell for CI


def test_mnist_preset_ties_q_to_rounds():
    runs = g.preset("mnist").expand()
    qs = {r.rounds: set() for r in runs}
    for r in runs:
        if r.algorithm == "isrl-spider":
            qs[r.rounds].add(r.param("period"))
    assert qs == {25: {1, 2}, 50: {1, 2, 3, 4}}
    assert {(r.silos_per_round, r.rounds) for r in runs} == {(12, 25), (12, 50), (25, 25), (25, 50)}


def test_every_preset_and_quick_variant_expands():
    for name in g.PRESETS:
        full, quick = g.preset(name).expand(), g.preset(name, quick=True).expand()
        assert 0 < len(quick) < len(full)
    assert len(g.preset("wbcd", quick=True).expand()) <= 100  # CI-sized


def test_scaffold_preset_is_definable_without_its_algorithms(monkeypatch):
    from silodp.algorithms import registry

    for name in ("dp-fedavg", "dp-scaffold"):
        monkeypatch.delitem(registry.ALGORITHMS, name, raising=False)
    runs = g.preset("scaffold-synthetic", quick=True).expand()
    assert {r.algorithm for r in runs} == {"dp-fedavg", "dp-scaffold"}
    assert {dict(r.data)["alpha"] for r in runs} == {0.0, 5.0}
    assert {(r.param("local_steps"), r.rounds) for r in runs} == {(5, 40), (50, 4)}  # K T = 200 (quick)


def test_new_optional_fields_keep_existing_hashes():
    a = _cfg()
    assert a.config_hash == _cfg(regularizer=None, model=None).config_hash
    assert _cfg(regularizer="l2:0.1").config_hash != a.config_hash


def test_grid_from_json_and_toml(tmp_path):
    spec = {"name": "mine", "dataset": "wbcd", "epsilons": [1, 2], "settings": [[2, 10]], "trials": 2,
            "algorithms": {"isrl-mb-sgd": {"step_sizes": {"exp_linspace": [-2, 0, 3]}, "clips": [1]},
                           "mb-sgd": {"step_sizes": 0.5}}}
    (tmp_path / "g.json").write_text(json.dumps(spec))
    (tmp_path / "g.toml").write_text(
        'name = "mine"\ndataset = "wbcd"\nepsilons = [1, 2]\nsettings = [[2, 10]]\ntrials = 2\n'
        '[algorithms.isrl-mb-sgd]\nstep_sizes = {exp_linspace = [-2, 0, 3]}\nclips = [1]\n'
        '[algorithms.mb-sgd]\nstep_sizes = 0.5\n')
    a, b = g.load_grid(tmp_path / "g.json"), g.load_grid(tmp_path / "g.toml")
    assert a == b
    assert len(a.expand()) == 2 * 3 * 2 + 2
    assert [round(s, 6) for s in a.algorithms[0].step_sizes] == [round(math.exp(t), 6) for t in (-2, -1, 0)]


@pytest.mark.parametrize("bad, match", [
    ({"dataset": "wbcd", "epsilons": [1], "settings": [[2, 5]], "algorithms": {"mb-sgd": {"step_sizes": [1]}}}, "name"),
    ({"name": "x", "dataset": "wbcd", "epsilons": [1], "settings": [[2, 5]], "algorithms": {}}, "algorithms"),
    ({"name": "x", "dataset": "wbcd", "epsilons": [1], "settings": [[2, 5]], "colour": 1,
      "algorithms": {"mb-sgd": {"step_sizes": [1]}}}, "unknown"),
    ({"name": "x", "dataset": "wbcd", "epsilons": [1], "settings": [[2, 5]], "calibrations": ["loose"],
      "algorithms": {"mb-sgd": {"step_sizes": [1]}}}, "calibrations"),
])
def test_bad_grid_files_say_what_is_wrong(tmp_path, bad, match):
    (tmp_path / "g.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=match):
        g.load_grid(tmp_path / "g.json")


def test_unknown_preset_and_file_types():
    with pytest.raises(ValueError, match="preset"):
        g.preset("imagenet")
    with pytest.raises(ValueError, match="config"):
        g.load_grid("/nonexistent/grid.yaml")


def test_with_calibrations_replaces_the_arm():
    spec = g.preset("wbcd", quick=True).with_calibrations(("tight",))
    assert {r.calibration for r in spec.expand()} == {"tight", "none"}
    assert dataclasses.replace(spec, trials=1).trials == 1
