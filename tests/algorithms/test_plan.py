"""The plans (silodp/algorithms/plan.py): one object per release kind holds the privacy contract
and the channel a run gets; the algorithm classes hold their Config, _run and plan."""

import ast
import math
import pathlib

import pytest

import silodp.algorithms as algorithms
from silodp.algorithms import base, context, plan
from silodp.algorithms.registry import ALGORITHMS

PACKAGE = pathlib.Path(algorithms.__file__).parent
#: the privacy hooks a family used to override; they live on plans now
HOOKS = ("transcript_config", "noise_transcript", "transcript_signature", "noise_report", "declaration",
         "shuffle_declaration", "calibrate", "calibration_settings", "certify_noise", "targeted_epsilon",
         "noise_details", "_validate", "run_declaration", "resolve_noise")


def _shuffled_reads(source: str) -> list[int]:
    """Lines reading ``<x>.shuffled`` (or ``getattr(x, "shuffled", ...)``) or setting a
    ``shuffled = <constant>`` class flag."""
    tree = ast.parse(source)
    reads = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr == "shuffled"
             or isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("getattr", "hasattr") and len(node.args) > 1
             and isinstance(node.args[1], ast.Constant) and node.args[1].value == "shuffled"]
    flags = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
             and any(isinstance(t, ast.Name) and t.id == "shuffled" for t in node.targets)]
    return reads + flags


def test_no_module_of_silodp_branches_on_a_shuffled_flag():
    """No ``.shuffled`` read (or ``shuffled = True`` class flag) is left anywhere in silodp: the
    CLI, the experiments, the audits and the integrations ask the plan a capability (its kind, its
    noise arguments, whether it releases Gaussian messages), never a flag."""
    root = PACKAGE.parent
    found = {str(p.relative_to(root)): _shuffled_reads(p.read_text()) for p in sorted(root.rglob("*.py"))}
    assert {k: v for k, v in found.items() if v} == {}
    assert _shuffled_reads("if cls.shuffled:\n    pass\n") == [1]  # the scan sees a planted read
    assert _shuffled_reads("class A:\n    shuffled = True\n") == [2]  # and a planted flag
    assert _shuffled_reads("x = 1\nok = not getattr(cls, 'shuffled', True)\n") == [2]  # and a read by name


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_each_class_has_the_plan_of_its_release_kind(name):
    cls = ALGORITHMS[name]
    kind = cls.plan
    assert type(kind) is cls.Plan and kind.cls is cls and not hasattr(cls, "shuffled")
    through_pvec = isinstance(kind, plan.ShufflePlan)
    channel = kind.channel()
    assert isinstance(channel, plan.ShuffleChannel if through_pvec else plan.GaussianChannel)
    assert kind.releases_gaussian_messages() is (cls.private and not through_pvec)
    if name.startswith("dp-scaffold") or name in ("dp-fedavg", "dp-fedsgd", "scaffold", "fedavg"):
        assert isinstance(kind, plan.ParticipationPlan)
    with pytest.raises(TypeError, match="configured algorithm"):
        kind.algo  # noqa: B018  (the class's plan has no run parameters)


def test_the_release_kind_is_the_plan_and_answers_for_the_noise():
    """The kind is the plan (a subclass naming another plan has that plan's capabilities); the
    noise a caller passes on, prints or zeroes is the plan's answer."""
    sdp, isrl = ALGORITHMS["sdp-prox-sgd"], ALGORITHMS["isrl-prox-sgd"]
    assert sdp.Plan is plan.ShufflePlan and isinstance(sdp.plan, plan.ShufflePlan)
    flipped = type("Flipped", (sdp,), {"Plan": plan.GaussianPlan})
    assert isinstance(flipped.plan, plan.GaussianPlan) and flipped.plan.releases_gaussian_messages()
    assert not sdp.plan.releases_gaussian_messages() and isrl.plan.releases_gaussian_messages()
    assert isrl.plan.noise_arguments({"sigma": 0.5}, None, scale=2.0) == {"sigmas": {"sigma": 1.0}}
    assert isrl.plan.noise_payload({"sigma": math.inf}, None) == {"sigma": None}
    protocol = {"grad": {"g": 4, "b": 2, "p": 0.5, "rotate": False}}
    assert sdp.plan.noise_arguments({}, protocol, scale=2.0) == {"shuffle_params": protocol}  # no clip in P_vec
    assert sdp.plan.noise_payload({}, protocol) == protocol
    with pytest.raises(ValueError, match="shuffle_params"):
        sdp.plan.noise_arguments({"sigma": 0.0}, None)


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

    assert not hasattr(base, "_UNCHECKED") and not hasattr(context, "_UNCHECKED")
    unchecked = get_mutation("halve-noise").context()
    checked = get_mutation("halve-noise").context(checked=True)
    assert unchecked.__dict__.get("_unchecked_by") is unchecked
    assert getattr(checked, "_unchecked_by", None) is not checked
    with pytest.raises(TypeError, match="instruments"):
        context._unchecked_instrument(context.Context)


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
            return [plan.gaussian_messages("grad", cfg.rounds * cfg.passes, sigmas["sigma"], cfg.clip / cfg.n, cfg.n, cfg,
                                 BatchSampling.FULL)]

    kind = Passes.Transcript
    assert kind is Passes.Transcript and issubclass(kind, TranscriptConfig) and kind is not TranscriptConfig
    assert ALGORITHMS["isrl-prox-sgd"].Transcript is TranscriptConfig  # nothing to add
    one = Passes.plan.noise_transcript({"n": 50, "rounds": 4, "batch_size": 50, "passes": 1})
    assert Passes.plan.noise_transcript({"n": 50, "rounds": 4, "batch_size": 50}).passes == 2  # its noise default
    four = dataclasses.replace(one, passes=4)
    (release,) = Passes.plan.declaration(four, {"sigma": 0.1})
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
