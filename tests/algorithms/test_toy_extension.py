"""A toy algorithm and a toy accountant defined here, in the test file, and nowhere else: both
are reachable from the CLI, the calibration, the ledger, the conformance suites and the audit game
with no other file edited (docs/architecture.md's "adding things": one file each)."""

import dataclasses
import json

import pytest

from silodp.accounting.accountants import GdpAccountant, register_accountant, unregister_accountant
from silodp.accounting.releases import BatchSampling
from silodp.algorithms import Problem, linear_model
from silodp.algorithms.base import FederatedAlgorithm
from silodp.algorithms.config import AlgorithmConfig, param
from silodp.algorithms.data import synthetic
from silodp.algorithms.plan import gaussian_messages
from silodp.algorithms.privacy import TranscriptConfig, calibrate_algorithm
from silodp.algorithms.registry import register_algorithm, unregister_algorithm


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToyConfig(AlgorithmConfig):
    """The toy's own parameters: heavy-ball momentum of the server step (post-processing) and the
    noisy gradients each silo releases per round (they enter the transcript)."""

    server_momentum: float = param(0.0, help="server momentum in [0, 1)", domain="unit")
    toy_passes: int = param(1, help="noisy full gradients per round (toy)", domain="count", transcript=True,
                            noise_default=1)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.server_momentum < 1:
            raise ValueError(f"server_momentum: must lie in [0, 1), got {self.server_momentum}")


class ToyFullGradient(FederatedAlgorithm):
    """Noisy full-batch gradient descent with server momentum: each round every silo releases its
    mean clipped gradient plus N(0, sigma^2 I) (contribution bound L / n); the server steps along
    the momentum of the released aggregates."""

    name = "toy-full-gradient"
    Config = ToyConfig

    @classmethod
    def declare_gaussian(cls, cfg, sigmas):
        return [gaussian_messages("grad", cfg.rounds * cfg.toy_passes, sigmas["sigma"], cfg.clip / cfg.n, cfg.n, cfg,
                             BatchSampling.FULL)]

    def _run(self, ctx, w):
        velocity = 0.0
        for _ in range(int(self.rounds)):
            passes = [ctx.send("grad", ctx.term(ctx.full(), w), ctx.available(), std=ctx.sigmas["sigma"])[0]
                      for _ in range(int(self.toy_passes))]
            velocity = self.server_momentum * velocity + sum(passes) / len(passes)
            w = ctx.prox(w - ctx.eta * velocity)
            ctx.end_round(w)
        return w


class ToyGdp(GdpAccountant):
    """The exact Gaussian-DP certificate under another name (a stand-in for a new accountant)."""

    name = "toy-gdp"


@pytest.fixture(scope="module")
def registered():
    register_algorithm(ToyFullGradient)
    register_accountant(ToyGdp)
    yield
    unregister_algorithm(ToyFullGradient.name)
    unregister_accountant(ToyGdp.name)


@pytest.fixture(scope="module")
def setup():
    data = synthetic(num_silos=3, n=40, d=3, seed=0)
    return data.train, Problem(linear_model(3), "logistic", clip=1.0, beta=1.0)


def test_the_toys_calibrate_and_certify(registered):
    cfg = ToyFullGradient.plan.transcript(n=40, rounds=5, batch_size=40)  # toy_passes: derived, no class written
    assert cfg.toy_passes == 1 and isinstance(cfg, TranscriptConfig) and type(cfg) is not TranscriptConfig
    cal = calibrate_algorithm("toy-full-gradient", cfg, 2.0, 1e-5, accountant="toy-gdp")
    assert cal.accountant == "toy-gdp" and 0.98 * 2.0 <= cal.epsilon <= 2.0
    ref = calibrate_algorithm("toy-full-gradient", cfg, 2.0, 1e-5, accountant="gdp")
    assert cal.sigmas == pytest.approx(ref.sigmas, rel=1e-9)


def test_the_toys_pass_the_conformance_suites(registered, setup):
    from silodp.verify.conformance import check_accountant, check_algorithm

    fed, problem = setup
    assert check_accountant(ToyGdp)
    check_algorithm(ToyFullGradient, problem, fed, dict(rounds=3, batch_size=5, step_size=0.1, metrics_every=0))


def test_the_toy_algorithm_runs_from_the_cli(registered, capsys):
    from silodp.cli import main

    code = main(["run", "--algorithm", "toy-full-gradient", "--dataset", "synthetic", "--rounds", "3",
                 "--epsilon", "2", "--step-size", "0.1", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(captured.out)
    assert result["algorithm"] == "toy-full-gradient" and 0 < result["epsilon"] <= 2.0
    assert result["server_momentum"] == 0.0


def test_the_toys_own_parameter_is_a_cli_flag(registered, capsys):
    """The toy's config field is a `run` flag (generated), its value reaches the run, its domain is
    the parser's, and another algorithm refuses it."""
    from silodp.cli import main

    base = ["run", "--algorithm", "toy-full-gradient", "--dataset", "synthetic", "--rounds", "3", "--epsilon", "2",
            "--step-size", "0.1", "--json"]
    outputs = []
    for momentum in ("0", "0.9"):
        code = main(base + ["--server-momentum", momentum])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        outputs.append(json.loads(captured.out))
    assert outputs[1]["server_momentum"] == 0.9 and outputs[0]["epsilon"] == outputs[1]["epsilon"]
    assert outputs[0]["train_loss"] != outputs[1]["train_loss"]  # the momentum changed the run, not its privacy
    assert main(base + ["--server-momentum", "1.5"]) == 2 and "--server-momentum" in capsys.readouterr().err
    other = ["run", "--algorithm", "isrl-prox-sgd", "--dataset", "synthetic", "--rounds", "2", "--epsilon", "2",
             "--server-momentum", "0.5"]
    assert main(other) == 2 and "--server-momentum: not a parameter of isrl-prox-sgd" in capsys.readouterr().err


def test_the_toys_transcript_field_reaches_noise_and_the_run(registered, setup, capsys):
    """The toy's own transcript class carries its field: ``noise --algorithm`` takes the
    generated flag (twice the releases: more noise, by the exact Gaussian composition), the
    run's transcript and declaration count it, and the ledger holds that many releases."""
    from silodp.cli import main

    argv = ["noise", "--algorithm", "toy-full-gradient", "--epsilon", "2", "--n", "40", "--batch-size", "40",
            "--rounds", "5", "--method", "tight", "--accountant", "gdp", "--delta", "1e-5", "--json"]
    sigmas = []
    for passes in ("1", "2"):
        code = main(argv + ["--toy-passes", passes])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        sigmas.append(json.loads(captured.out)["sigmas"]["sigma"])
    assert sigmas[1] == pytest.approx(sigmas[0] * 2 ** 0.5, rel=5e-3)  # GDP: mu grows as sqrt(releases)
    fed, problem = setup
    algo = ToyFullGradient(rounds=2, batch_size=5, step_size=0.1, toy_passes=3, sigmas={"sigma": 0.05},
                           metrics_every=0)
    assert algo.plan.transcript_config(problem, fed).toy_passes == 3
    assert len(algo.run(problem, fed).ledger) == 6


def test_the_toy_accountant_answers_the_cli(registered, capsys):
    from silodp.cli import main

    argv = ["epsilon", "--noise-multiplier", "2.0", "--steps", "10", "--delta", "1e-5", "--json", "--accountant"]
    answers = []
    for name in ("toy-gdp", "gdp"):
        code = main(argv + [name])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        answers.append(json.loads(captured.out)["epsilon"])
    assert answers[0] == answers[1] > 0


def test_the_toy_algorithm_is_audited(registered, setup):
    """The audit game's recorded transcript of the toy: its messages at the declared noise."""
    from silodp.verify.audit import game
    from silodp.verify.instruments import RecordingContext

    fed, problem = setup
    algo = ToyFullGradient(rounds=2, batch_size=5, step_size=0.1, sigmas={"sigma": 0.05}, record_transcript=True,
                           metrics_every=0)
    reference = algo.run(problem, fed, context=RecordingContext)
    worlds = (fed, fed)
    plan = game.build_plan(reference, problem, worlds, 0, 0)
    assert [r.group for r in plan.releases] == ["grad", "grad"] and plan.releases[0].std == (0.05, 0.05)


def test_a_toy_accountant_competes_for_the_default_from_its_own_class():
    """candidacy / candidate_rank on the class are all it takes to compete for the default
    certificate: a toy ranked above gdp answers the default epsilon."""
    from silodp.accounting import GaussianDpEvent, SelfComposedDpEvent, candidate_accountants, tightest_epsilon

    class ToyFirst(GdpAccountant):
        name, candidate_rank = "toy-first", -1

    event = SelfComposedDpEvent(GaussianDpEvent(2.0), 10)
    register_accountant(ToyFirst)
    try:
        assert candidate_accountants(event) == ["toy-first"]
        eps, name = tightest_epsilon(event, 1e-5)
        assert name == "toy-first" and eps == GdpAccountant().compose(event).get_epsilon(1e-5)
    finally:
        unregister_accountant(ToyFirst.name)
    assert candidate_accountants(event) == ["gdp"]
