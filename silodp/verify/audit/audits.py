"""Privacy audits: the accountant's claim (an upper bound) against an empirical lower bound.

``audit_gaussian`` audits one Gaussian release; ``audit_algorithm`` audits a federated algorithm
of :mod:`silodp.algorithms` (optionally with a privacy bug from :mod:`silodp.verify.audit.mutations`)
in a :class:`Scenario`; ``audit_papers`` audits the papers' closed-form calibrations.
The claim always comes from :mod:`silodp.accounting` (``calibrate_algorithm`` / ``certify`` for
the algorithm's transcript, the exact analytic Gaussian for one release); the lower bound from
the scores of the distinguishing game (:mod:`silodp.verify.audit.game`) through the estimators
of :mod:`silodp.verify.audit.estimators`. ``violation`` is ``epsilon_lower > epsilon_claimed``.
"""

from __future__ import annotations

import dataclasses
import math

from silodp.accounting import gaussian
from silodp._validation import check_delta, check_positive
from silodp.verify.audit import game
from silodp.verify.audit.estimators import ESTIMATORS, EpsilonBound, Scores, estimate

DEFAULT_DELTA = 1e-5
CANARIES = ("homogeneous", "gradient", "median")


@dataclasses.dataclass(frozen=True)
class Scenario:
    """Everything an algorithm audit runs on: the algorithm, its parameters and the data.

    ``num_silos`` silos of ``n`` records with ``d`` features plus the canary's free coordinate
    (:func:`~silodp.verify.audit.canaries.free_coordinate_federation`), squared loss, clip 1; a
    linear model, or an MLP with ``hidden`` sizes. ``canary``: "homogeneous" (every record of
    the audited silo a copy of the replaced one: the worst case under subsampling), "gradient"
    (only the replaced record is a canary) or "median" (:mod:`silodp.verify.audit.canaries`);
    ``steer``: replay adversarial iterates that flip the canary's gradient (isrl-spider with
    ``hidden=(1,)``). Record ``record`` of silo ``silo`` is replaced. ``noise_shape``: relative
    noise of the message types, scaled as a whole by the accounting layer's calibration
    (default: the shape of the paper's formula, as ``calibrate_algorithm`` does).
    """

    algorithm: str
    params: dict = dataclasses.field(default_factory=dict)
    num_silos: int = 2
    n: int = 20
    d: int = 4
    hidden: tuple[int, ...] | None = None
    canary: str = "homogeneous"
    steer: bool = False
    silo: int = 0
    record: int = 0
    data_seed: int = 0
    noise_shape: dict | None = None

    def build(self):
        """(problem, (D, D'), steering replay or None)."""
        import torch  # noqa: F401  (torch-backed layers below)

        from silodp.algorithms import Problem, linear_model, mlp
        from silodp.verify.audit import canaries

        fed = canaries.free_coordinate_federation(self.num_silos, self.n, self.d, self.data_seed)
        model = linear_model(self.d + 1) if self.hidden is None else mlp(self.d + 1, list(self.hidden))
        problem = Problem(model, "squared", clip=1.0, beta=self.params.get("beta"))
        if self.canary in ("homogeneous", "gradient"):
            worlds = canaries.gradient_canary(fed, self.silo, self.record, homogeneous=self.canary == "homogeneous")
        elif self.canary == "median":
            worlds = canaries.median_canary(fed, self.silo, self.record)
        else:
            raise ValueError(f"canary: must be one of {CANARIES}, got {self.canary!r}")
        steer = None
        if self.steer:
            from silodp.algorithms.registry import algorithm_class

            if "period" not in algorithm_class(self.algorithm)().get_params():  # the replay is SPIDER's
                raise ValueError(f"steer: only SPIDER (an algorithm with a period) can be steered, got {self.algorithm!r}")
            its = canaries.flip_iterates(model, int(self.params.get("rounds", 10)) + 1, seed=self.data_seed)
            steer = canaries.spider_replay(its, float(self.params["step_size"]), int(self.params.get("period", 2)),
                                           self.num_silos)
        return problem, worlds, steer

    def algorithm_params(self) -> dict:
        return {k: v for k, v in self.params.items() if k != "beta"}


_SGD = dict(step_size=0.1)
#: Default scenario per Gaussian ISRL-DP algorithm (small: seconds per 10^5 trials).
SCENARIOS: dict[str, Scenario] = {s.algorithm: s for s in (
    Scenario("isrl-prox-sgd", dict(rounds=2, batch_size=10, **_SGD)),
    Scenario("isrl-mb-sgd", dict(rounds=3, batch_size=5, **_SGD)),
    Scenario("isrl-local-sgd", dict(rounds=2, batch_size=5, local_steps=2, **_SGD)),
    Scenario("isrl-prox-svrg", dict(rounds=2, batch_size=5, inner_steps=2, **_SGD)),
    Scenario("isrl-pl-svrg", dict(rounds=1, batch_size=5, inner_steps=2, restarts=2, **_SGD)),
    Scenario("isrl-spider", dict(rounds=4, period=2, batch_size=20, replacement=False, **_SGD), hidden=(1,), steer=True),
    Scenario("isrl-fed-spider", dict(rounds=3, batch_size=20, replacement=False, **_SGD)),
    # DP-SCAFFOLD family (Noble et al. 2022): the curious server's worst-case claim, fresh subsets
    Scenario("dp-scaffold", dict(rounds=2, local_steps=2, batch_size=5, **_SGD)),
    Scenario("dp-scaffold-warm", dict(rounds=1, local_steps=2, warm_steps=1, batch_size=5, **_SGD)),
    Scenario("dp-fedavg", dict(rounds=2, local_steps=2, batch_size=5, **_SGD)),
    Scenario("dp-fedsgd", dict(rounds=3, batch_size=5, **_SGD)),
)}

#: the derived scenario's parameters (:func:`scenario_for`): two rounds of small batches; every
#: other integer parameter of the algorithm's config is capped at :data:`_DERIVED_CAP`
_DERIVED = dict(rounds=2, batch_size=5, **_SGD)
_DERIVED_CAP = 2


def scenario_for(algorithm: str) -> Scenario:
    """The audit scenario of the registered Gaussian ISRL-DP ``algorithm``: its entry of
    :data:`SCENARIOS` where one is tuned, else one derived from its config (``rounds`` 2,
    ``batch_size`` 5, ``step_size`` 0.1, every other integer parameter, local or inner steps,
    restarts, capped at 2: seconds per 10^5 trials) on the canary's data set, so that a new
    algorithm is audited with no scenario to write (ValueError naming ``algorithm`` otherwise)."""
    from silodp.algorithms import ALGORITHMS

    _check_gaussian(algorithm)
    if algorithm in SCENARIOS:
        return SCENARIOS[algorithm]
    params = dict(_DERIVED)
    for key, value in ALGORITHMS[algorithm]().get_params().items():
        if key not in params and key != "metrics_every" and type(value) is int and value > _DERIVED_CAP:
            params[key] = _DERIVED_CAP
    return Scenario(algorithm, params)


_FULL = dict(rounds=1, batch_size=20, replacement=False, **_SGD)
#: Scenario per mutation where the audit detects it (docs/audit.md reports the detection rates).
MUTATION_SCENARIOS: dict[str, Scenario] = {
    "halve-noise": Scenario("isrl-prox-sgd", _FULL),
    "per-layer-clip": Scenario("isrl-prox-sgd", _FULL, hidden=(4,)),
    "median-clip": Scenario("isrl-prox-sgd", dict(_FULL, batch_size=21), num_silos=1, n=21, canary="median"),
    "missing-k": Scenario("isrl-prox-sgd", dict(rounds=2, batch_size=10, **_SGD)),
    "spider-sensitivity": Scenario("isrl-spider", dict(rounds=4, period=4, batch_size=20, replacement=False, **_SGD),
                                   hidden=(1,), steer=True,
                                   noise_shape={"sigma1": 20.0, "sigma2": math.inf, "sigma2_hat": 1.0}),
    "shared-seed": Scenario("isrl-prox-sgd", dict(rounds=4, batch_size=5, **_SGD)),
    "with-replacement-as-disjoint": Scenario("isrl-prox-sgd", _FULL),
    "noise-on-average-not-sum": Scenario("isrl-prox-sgd", _FULL, num_silos=4),
}


#: Trials per world at which docs/audit.md reports each mutation's detection rate (claim epsilon 2).
MUTATION_TRIALS: dict[str, int] = {**{name: 100_000 for name in MUTATION_SCENARIOS},
                                   "with-replacement-as-disjoint": 300_000}


@dataclasses.dataclass(frozen=True)
class Claim:
    """What the accounting layer certifies for the audited transcript."""

    epsilon: float
    delta: float
    accountant: str
    sigmas: dict[str, float]


class AlgorithmGame:
    """The distinguishing game of one algorithm in one scenario (see :mod:`.audit_game`).

    Privacy: a target ``epsilon`` (noise calibrated by the accounting layer, ``calibration``
    "tight" | "paper") or explicit ``sigmas``; ``mutation`` names a bug of
    :mod:`silodp.verify.audit.mutations`. The constructor only stores; :meth:`collect` (vectorized) and
    :meth:`collect_runs` (one real run per trial) do the work; :meth:`setup` is called by both.
    """

    def __init__(self, scenario: Scenario | str, epsilon: float | None = 2.0, delta: float = DEFAULT_DELTA,
                 sigmas: dict | None = None, calibration: str = "tight", mutation: str | None = None, seed: int = 0):
        self.scenario = scenario
        self.epsilon = epsilon
        self.delta = delta
        self.sigmas = sigmas
        self.calibration = calibration
        self.mutation = mutation
        self.seed = seed

    def setup(self) -> "AlgorithmGame":
        """Calibrate (the claim), run the reference and build the plan; idempotent."""
        if getattr(self, "plan_", None) is not None:
            return self
        from silodp.algorithms import get_algorithm
        from silodp.algorithms.privacy import calibrate_algorithm, certify

        sc = scenario_for(self.scenario) if isinstance(self.scenario, str) else self.scenario
        _check_gaussian(sc.algorithm)
        dl = check_delta("delta", self.delta)
        problem, worlds, _ = sc.build()
        cfg = get_algorithm(sc.algorithm, **sc.algorithm_params()).plan.transcript_config(problem, worlds[0])
        if self.sigmas is not None:
            sigmas = {k: float(v) for k, v in self.sigmas.items()}
            eps, acc = certify(sc.algorithm, cfg, sigmas, dl)
        elif sc.noise_shape is not None:
            sigmas, eps, acc = _calibrate_shape(sc.algorithm, cfg, sc.noise_shape, check_positive("epsilon", self.epsilon), dl)
        else:
            cal = calibrate_algorithm(sc.algorithm, cfg, check_positive("epsilon", self.epsilon), dl, method=self.calibration)
            sigmas, eps, acc = dict(cal.sigmas), cal.epsilon, cal.accountant
        self.claim_ = Claim(float(eps), dl, acc, sigmas)
        parts = prepare(sc, sigmas, self.mutation, self.seed)
        self.problem_, self.worlds_, self.reference_, self.algo_, self.plan_ = parts
        self.scenario_ = sc
        return self

    @property
    def claim(self) -> Claim:
        return self.setup().claim_

    def collect(self, trials: int, seed: int = 0) -> Scores:
        """Scores of ``trials`` vectorized runs per world."""
        return game.collect(self.setup().plan_, trials, seed)

    def collect_runs(self, trials: int, seed: int = 0) -> Scores:
        """Scores of ``trials`` real runs per world (one ``run`` each; slow)."""
        self.setup()
        transcripts = game.run_transcripts(self.algo_, self.problem_, self.worlds_, self.scenario_.silo,
                                           self.reference_, trials, seed)
        return game.score_runs(self.plan_, transcripts)


def _check_gaussian(name: str) -> None:
    from silodp.algorithms import ALGORITHMS

    if name not in ALGORITHMS:
        raise ValueError(f"algorithm: must be one of {sorted(ALGORITHMS)}, got {name!r}")
    if not ALGORITHMS[name].plan.releases_gaussian_messages():
        raise ValueError(f"algorithm: the audit game covers Gaussian ISRL-DP algorithms, got {name!r}")


def prepare(scenario: Scenario, sigmas: dict, mutation: str | None = None, seed: int = 0):
    """The game's parts for noise ``sigmas``: ``(problem, (D, D'), reference, algo, plan)``.

    ``reference`` is one run on D recorded by :class:`~.audit_game.RecordingContext` (steered when
    the scenario says so); ``algo`` (:class:`~silodp.verify.instruments.Instrumented`) replays it
    through the (broken, if ``mutation``) channel instrument;
    ``plan`` is the vectorized game (:func:`~.audit_game.build_plan`). No claim is computed.
    """
    import torch

    from silodp.algorithms import get_algorithm
    from silodp.verify.audit.mutations import get_mutation

    _check_gaussian(scenario.algorithm)
    mut = None if mutation is None else get_mutation(mutation)
    problem, worlds, steer = scenario.build()
    if mut is not None:
        mut.check(get_algorithm(scenario.algorithm, **scenario.algorithm_params()))
    params = dict(scenario.algorithm_params(), **(mut.params if mut else {}), sigmas=sigmas,
                  record_transcript=True, metrics_every=0)
    # the start is part of the replayed iterates: fix it (the first steered iterate, or a seeded init)
    params["w0"] = steer.w_priv if steer is not None else problem.model.init(
        torch.Generator().manual_seed(seed), dtype=worlds[0].x.dtype)
    reference = get_algorithm(scenario.algorithm, **params).run(problem, worlds[0], seed=seed, replay=steer,
                                                                context=game.RecordingContext)
    algo = game.Instrumented(get_algorithm(scenario.algorithm, **params), mut.context() if mut else game.RecordingContext)
    m = worlds[0].silos_per_round
    plan = game.build_plan(
        reference, problem, worlds, scenario.silo, scenario.record,
        clip_fn=mut.clip_fn(problem) if mut else None,
        noise_factor=(lambda g, k: mut.noise_factor(g, k, m)) if mut and mut.noise_factor else None,
        shared_noise=bool(mut and mut.shared_noise))
    if mut is not None and mut.clip == "median" and (scenario.num_silos != 1 or any(
            r.sampling != "full" for r in plan.releases)):
        raise ValueError("mutation: median-clip is simulated for one silo with full batches (the threshold is the "
                         "batch median); audit it in MUTATION_SCENARIOS['median-clip']")
    return problem, worlds, reference, algo, plan


def _calibrate_shape(name: str, cfg, shape: dict, epsilon: float, delta: float):
    """Noise ``c * shape`` with the smallest c the tightest supporting accountant certifies."""
    from silodp.accounting import REPLACE_ONE, tightest_calibration
    from silodp.algorithms.privacy import privacy_event

    def scaled(c: float) -> dict:
        return {k: v * c for k, v in shape.items()}

    cal = tightest_calibration(lambda c: privacy_event(name, cfg, scaled(c)), epsilon, delta, None, REPLACE_ONE)
    return scaled(cal.noise_multiplier), cal.epsilon, cal.accountant


@dataclasses.dataclass(frozen=True)
class AuditResult:
    """Claim against audit. ``epsilon_lower`` is the ``estimator``'s bound; both estimators'
    bounds are kept in ``bounds``; ``violation`` = ``epsilon_lower > epsilon_claimed``."""

    target: str
    epsilon_claimed: float
    epsilon_lower: float
    violation: bool
    trials: int
    delta: float
    estimator: str
    accountant: str
    bounds: dict[str, EpsilonBound]
    mutation: str | None = None
    canary_shift: float | None = None

    def as_dict(self) -> dict:
        out = {"epsilon_claimed": self.epsilon_claimed, "epsilon_lower": self.epsilon_lower,
               "violation": self.violation, "trials": self.trials, "delta": self.delta,
               "estimator": self.estimator, "target": self.target, "mutation": self.mutation,
               "accountant": self.accountant, "canary_shift": self.canary_shift}
        for name, b in self.bounds.items():
            out[f"epsilon_lower_{name.replace('-', '_')}"] = b.epsilon
        return out


def _check_estimator(estimator: str) -> str:
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator: must be one of {sorted(ESTIMATORS)}, got {estimator!r}")
    return estimator


def judge(scores: Scores, claim: Claim, target: str, estimator: str = "clopper-pearson", alpha: float = 0.05,
          mutation: str | None = None, canary_shift: float | None = None, seed: int = 0) -> AuditResult:
    """Run every estimator on ``scores`` and compare ``estimator``'s bound with the claim."""
    _check_estimator(estimator)
    bounds = {name: estimate(scores, claim.delta, name, alpha=alpha, seed=seed) for name in ESTIMATORS}
    lower = bounds[estimator].epsilon
    return AuditResult(target, claim.epsilon, lower, bool(lower > claim.epsilon), scores.trials, claim.delta,
                       estimator, claim.accountant, bounds, mutation, canary_shift)


def audit_gaussian(noise_multiplier: float, delta: float = DEFAULT_DELTA, trials: int = 100_000,
                   estimator: str = "clopper-pearson", alpha: float = 0.05, seed: int = 0) -> AuditResult:
    """Audit one Gaussian release with the likelihood-ratio statistic against its exact epsilon
    (Balle & Wang 2018; :func:`silodp.accounting.gaussian.epsilon_for_delta`)."""
    z = check_positive("noise_multiplier", noise_multiplier)
    dl = check_delta("delta", delta)
    claim = Claim(gaussian.epsilon_for_delta(z, dl), dl, "analytic-gaussian", {"noise_multiplier": z})
    scores = game.collect(game.gaussian_plan(z), trials, seed)
    return judge(scores, claim, "gaussian", estimator, alpha, seed=seed)


def audit_pvec(epsilon: float, delta: float = DEFAULT_DELTA, num_messages: int = 100, trials: int = 100_000,
               estimator: str = "clopper-pearson", alpha: float = 0.05, seed: int = 0) -> AuditResult:
    """Audit one invocation of the binomial shuffle protocol P_vec (d = 1) with the parameters the
    accounting layer certifies for (``epsilon``, ``delta``) (:func:`binomial_protocol_params`),
    using a Dirac canary (:func:`~silodp.verify.audit.game.pvec_scores`)."""
    from silodp.accounting.binomial import binomial_protocol_params

    dl = check_delta("delta", delta)
    params = binomial_protocol_params(check_positive("epsilon", epsilon), dl, 1.0, 1, int(num_messages))
    claim = Claim(params.epsilon, dl, "binomial-exact", {"g": params.g, "b": params.b, "p": params.p})
    return judge(game.pvec_scores(params, num_messages, trials, seed), claim, "pvec", estimator, alpha, seed=seed)


def audit_algorithm(algorithm: str, epsilon: float = 2.0, delta: float = DEFAULT_DELTA, trials: int = 100_000,
                    mutation: str | None = None, estimator: str = "clopper-pearson", alpha: float = 0.05,
                    seed: int = 0, scenario: Scenario | None = None, sigmas: dict | None = None,
                    calibration: str = "tight") -> AuditResult:
    """Audit ``algorithm`` (calibrated to ``epsilon`` by the accounting layer, or explicit
    ``sigmas``), optionally with the privacy bug ``mutation``, in ``scenario`` (default: the
    mutation's scenario when it is for this algorithm, else :func:`scenario_for`)."""
    _check_estimator(estimator)
    if scenario is None:
        ms = MUTATION_SCENARIOS.get(mutation) if mutation is not None else None
        scenario = ms if ms is not None and ms.algorithm == algorithm else scenario_for(algorithm)
    g = AlgorithmGame(scenario, epsilon, delta, sigmas, calibration, mutation, seed).setup()
    scores = g.collect(trials, seed)
    shift = g.plan_.canary_shift()
    return judge(scores, g.claim, g.scenario_.algorithm, estimator, alpha, mutation,
                 float(shift.max()) if shift.size else None, seed)


#: The papers' closed-form calibrations and the scenario each is audited in.
PAPER_CALIBRATIONS = (
    ("Thm E.1", SCENARIOS["isrl-prox-sgd"]),
    ("Thm F.1", Scenario("isrl-spider", dict(SCENARIOS["isrl-spider"].params, beta=1.0), hidden=(1,), steer=True)),
    ("App. H.2 (SPIDER)", SCENARIOS["isrl-spider"]),
    ("App. H.2 (Fed-SPIDER)", SCENARIOS["isrl-fed-spider"]),
)


def audit_papers(epsilon: float = 2.0, delta: float = DEFAULT_DELTA, trials: int = 100_000,
                 estimator: str = "clopper-pearson", seed: int = 0) -> list[dict]:
    """What the papers' closed-form noise really gives: per formula, the target epsilon, the
    epsilon a tight accountant certifies for that noise (upper bound) and the audit's lower bounds."""
    rows = []
    for formula, sc in PAPER_CALIBRATIONS:
        g = AlgorithmGame(sc, epsilon, delta, calibration="paper", seed=seed).setup()
        res = judge(g.collect(trials, seed), g.claim, sc.algorithm, estimator, seed=seed)
        rows.append({"formula": formula, "algorithm": sc.algorithm, "target_epsilon": epsilon,
                     "certified_epsilon": res.epsilon_claimed, "accountant": res.accountant,
                     **{f"epsilon_lower_{k.replace('-', '_')}": b.epsilon for k, b in res.bounds.items()},
                     "sigmas": g.claim.sigmas, "violation": res.violation})
    return rows


def detection_rate(mutation: str, repeats: int, trials: int | None = None, epsilon: float = 2.0,
                   delta: float = DEFAULT_DELTA, estimator: str = "clopper-pearson", seed: int = 0) -> dict:
    """Fraction of ``repeats`` independent audits (fresh trials each) that flag ``mutation`` in
    its scenario (default trials: :data:`MUTATION_TRIALS`); the game is set up once."""
    sc = MUTATION_SCENARIOS.get(mutation)
    if sc is None:
        raise ValueError(f"mutation: must be one of {sorted(MUTATION_SCENARIOS)}, got {mutation!r}")
    if int(repeats) < 1:
        raise ValueError(f"repeats: must be >= 1, got {repeats}")
    trials = MUTATION_TRIALS[mutation] if trials is None else trials
    g = AlgorithmGame(sc, epsilon, delta, mutation=mutation, seed=seed).setup()
    lowers: dict[str, list[float]] = {name: [] for name in ESTIMATORS}
    for r in range(int(repeats)):
        s = seed + 1000 * (r + 1)
        res = judge(g.collect(trials, s), g.claim, sc.algorithm, estimator, seed=s)
        for name, b in res.bounds.items():
            lowers[name].append(b.epsilon)
    claim = g.claim.epsilon
    rates = {name: sum(lo > claim for lo in v) / int(repeats) for name, v in lowers.items()}
    chosen = sorted(lowers[estimator])
    return {"mutation": mutation, "algorithm": sc.algorithm, "epsilon_claimed": claim, "trials": int(trials),
            "repeats": int(repeats), "estimator": estimator, "detected": sum(lo > claim for lo in chosen),
            "rate": rates[estimator], "rates": rates, "epsilon_lower_min": chosen[0],
            "epsilon_lower_median": chosen[len(chosen) // 2]}
