"""The plans (silodp/algorithms/plan.py): one object per release kind holds the privacy contract
and the channel a run gets; the algorithm classes hold their Config, _run and plan."""

import ast
import pathlib

import pytest

import silodp.algorithms as algorithms
from silodp.algorithms import base, plan
from silodp.algorithms.registry import ALGORITHMS

PACKAGE = pathlib.Path(algorithms.__file__).parent
#: the privacy hooks a family used to override; they live on plans now
HOOKS = ("transcript_config", "noise_transcript", "transcript_signature", "noise_report", "declaration",
         "shuffle_declaration", "calibrate", "calibration_settings", "certify_noise", "targeted_epsilon",
         "noise_details", "_validate", "run_declaration", "resolve_noise")


def _shuffled_reads(path: pathlib.Path) -> list[int]:
    """Lines reading ``<x>.shuffled`` or setting a ``shuffled = <constant>`` class flag."""
    tree = ast.parse(path.read_text())
    reads = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr == "shuffled"]
    flags = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
             and any(isinstance(t, ast.Name) and t.id == "shuffled" for t in node.targets)]
    return reads + flags


def test_no_module_of_the_algorithms_branches_on_shuffled_outside_the_plans():
    """Every `.shuffled` read (or `shuffled = True` class flag) of silodp/algorithms is in plan.py
    (base.py's ``shuffled`` is a read-only view of the plan's, for the CLI and the audits)."""
    found = {p.name: _shuffled_reads(p) for p in sorted(PACKAGE.glob("*.py")) if p.name != "plan.py"}
    assert {k: v for k, v in found.items() if v} == {}
    assert _shuffled_reads(PACKAGE / "plan.py")  # the test reads the real file (it would see one)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_each_class_has_the_plan_of_its_release_kind(name):
    cls = ALGORITHMS[name]
    kind = cls.plan
    assert type(kind) is cls.Plan and kind.cls is cls
    assert cls.shuffled is isinstance(kind, plan.ShufflePlan)
    channel = kind.channel()
    assert isinstance(channel, plan.ShuffleChannel if cls.shuffled else plan.GaussianChannel)
    if name.startswith("dp-scaffold") or name in ("dp-fedavg", "dp-fedsgd", "scaffold", "fedavg"):
        assert isinstance(kind, plan.ParticipationPlan)
    with pytest.raises(TypeError, match="configured algorithm"):
        kind.algo  # noqa: B018  (the class's plan has no run parameters)


def test_the_shuffled_flag_follows_the_plan_and_cannot_be_set_apart_from_it():
    sdp = ALGORITHMS["sdp-prox-sgd"]
    assert sdp.Plan is plan.ShufflePlan and sdp.shuffled is True
    assert ALGORITHMS["isrl-prox-sgd"].shuffled is False
    flipped = type("Flipped", (sdp,), {"Plan": plan.GaussianPlan})
    assert flipped.shuffled is False and isinstance(flipped.plan, plan.GaussianPlan)


def test_dp_scaffold_overrides_no_privacy_hook():
    """DP-SCAFFOLD's twelve overrides are its ParticipationPlan; the classes keep their loop only."""
    for cls in ALGORITHMS.values():
        assert not set(HOOKS) & set(vars(cls)), cls.__name__
    scaffold = ALGORITHMS["dp-scaffold"](local_steps=2, epsilon=1.0, delta=1e-5)
    assert isinstance(scaffold.plan, plan.ParticipationPlan) and scaffold.plan.algo is scaffold
    assert scaffold.plan.calibration_settings() == {"privacy_against": "server", "participation": "worst-case"}


def test_an_instance_plan_is_bound_to_its_current_parameters():
    algo = ALGORITHMS["isrl-prox-sgd"](rounds=3, epsilon=1.0)
    assert algo.plan.algo is algo
    algo.rounds = 5
    assert algo.plan.algo.rounds == 5


def test_no_module_state_marks_the_unchecked_instruments():
    """The audit mutations' unchecked channel is marked on the class itself (no module-level set),
    and the mark is not inherited."""
    from silodp.verify.audit.mutations import get_mutation

    assert not hasattr(base, "_UNCHECKED")
    unchecked = get_mutation("halve-noise").context_class()
    checked = get_mutation("halve-noise").context_class(checked=True)
    assert unchecked.__dict__.get("_unchecked_by") is unchecked
    assert getattr(checked, "_unchecked_by", None) is not checked
    with pytest.raises(TypeError, match="instruments"):
        base._unchecked_instrument(base.Context)


def test_a_transcript_field_of_the_config_needs_no_transcript_class():
    """A ``param(transcript=True)`` field the shared TranscriptConfig lacks enters a derived
    transcript class (one per Config, so transcripts compare equal), with its noise default."""
    import dataclasses

    from silodp.accounting.releases import BatchSampling
    from silodp.algorithms.config import AlgorithmConfig, param
    from silodp.algorithms.privacy import TranscriptConfig, certify

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class PassesConfig(AlgorithmConfig):
        passes: int = param(1, help="noisy full gradients per round", domain="count", transcript=True,
                            noise_default=2)

    class Passes(base.FederatedAlgorithm):
        name = "passes"
        Config = PassesConfig

        @classmethod
        def declare_gaussian(cls, cfg, sigmas):
            return [cls.gaussian("grad", cfg.rounds * cfg.passes, sigmas["sigma"], cfg.clip / cfg.n, cfg.n, cfg,
                                 BatchSampling.FULL)]

    kind = Passes.Transcript
    assert kind is Passes.Transcript and issubclass(kind, TranscriptConfig) and kind is not TranscriptConfig
    assert ALGORITHMS["isrl-prox-sgd"].Transcript is TranscriptConfig  # nothing to add
    one = Passes.noise_transcript({"n": 50, "rounds": 4, "batch_size": 50, "passes": 1})
    assert Passes.noise_transcript({"n": 50, "rounds": 4, "batch_size": 50}).passes == 2  # its noise default
    four = dataclasses.replace(one, passes=4)
    (release,) = Passes.declaration(four, {"sigma": 0.1})
    assert release.count == 16
    # four passes are the same release as one pass over four times the rounds: the same certificate
    same = dataclasses.replace(one, rounds=16)
    assert certify(Passes, four, {"sigma": 0.1}, 1e-5) == certify(Passes, same, {"sigma": 0.1}, 1e-5)
    assert certify(Passes, four, {"sigma": 0.1}, 1e-5)[0] > certify(Passes, one, {"sigma": 0.1}, 1e-5)[0]


@pytest.mark.parametrize("hook", base.PLAN_OWNED)
def test_a_class_cannot_override_what_its_plan_owns(hook):
    """An override of a privacy hook on the class would be silently ignored by the run, the
    calibration and the certificate (they call the plan): it is refused when the class is made."""
    with pytest.raises(TypeError, match="belong to the plan"):
        type("Overrides", (ALGORITHMS["isrl-prox-sgd"],), {hook: lambda *a: None})
