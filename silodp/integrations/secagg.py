"""Federated training under Flower's SecAgg+ (flwr 1.42 ``SecAggPlusWorkflow`` + ``secaggplus_mod``):
every silo encodes and noises its own integer message, the server learns only the modular sum.

The algorithms (:data:`ALGORITHMS`, the ``algorithm`` of the app's run config), logistic regression
without a regularizer (the prox step is the identity):

* ``sdp-prox-sgd`` (paper Algorithm 7, shuffle-DP): each round every silo draws K records
  (disjoint batches within an epoch of floor(n / K) rounds, n the smallest silo, one secret
  permutation per epoch: the declaration's SHUFFLED sampling, as BatchSampler draws it), clips
  their per-record gradients to L and runs the binomial randomizer R_vec (paper Alg 5, rotated: :func:`silodp.algorithms.shuffle.randomize`) on each; its message
  is the per-coordinate total of ones over its K reports. SecAgg+ plays the shuffler: the server
  sees only the sum over silos of those totals, exactly the analyzer's sufficient statistic
  (:func:`silodp.algorithms.shuffle.tally`), so the P_vec certificate covers it. Parameters
  (g, b, 1/2, rotate) and the certificate: :func:`silodp.algorithms.privacy.calibrate_algorithm`
  (the exact P_vec transcript certificates, :mod:`silodp.accounting.pvec`) on the algorithm's
  own declaration, the federation carrying ``reconstruction_threshold`` so that the invocation
  counts only threshold x K messages (the declared floor). The bit width is the smallest that
  holds the sum of all M silos' totals, M K (g + b), without wrap-around (the sum is exact).
  Each silo appends its message count (public, like the silo sizes; replace-one neighbours keep
  it) so that the server knows how many messages the analyzer sums.
* ``sdp-prox-svrg`` (paper Algorithm 8): ``rounds`` epochs, each one SecAgg+ sum of the
  snapshot gradient (every record's clipped gradient at wbar, bound L, group "full") and then
  ``inner_steps`` Q sums of K per-record differences of clipped gradients at w and wbar (bound
  2L, K i.i.d. uniform draws: the declaration's WITH_REPLACEMENT, group "diff"; a silo larger
  than the smallest sends more snapshot messages than the declared t n, whose noise only adds to
  the certified view); the server steps
  by the snapshot estimate plus the difference estimate. Same wire, calibration and certificate as
  Alg 7 (both groups). Output: the last iterate (Alg 8 outputs a uniform inner iterate; the
  choice is post-processing, the certificate is the same). ``sdp-pl-svrg`` (Algorithm 9): the
  same, ``restarts`` S times in a row, each restart continuing from the last iterate (Alg 9
  restarts from a uniform inner iterate: post-processing again), calibrated on Alg 9's declaration.
* ``sdp-spider`` (paper Algorithm 10): every ``period``-th round a fresh K-record gradient sum (group
  "grad", bound L), between them K-record differences of clipped gradients at w and the previous
  iterate (group "diff", bound 2L: the declared bound; no smoothness-based clip), h fresh or h +
  the difference, w <- w - lr h; both groups through R_vec, calibrated on Alg 10's declaration.
* ``isrl-mb-sgd`` (the distributed twin of ISRL-DP minibatch SGD): each round every silo draws K
  distinct records uniformly (fresh per round), sums their clipped gradients (norm <= K L, which
  is the ``vector_norm``: nothing clipped) and encodes the sum with Skellam (Agarwal, Kairouz &
  Liu 2021) or distributed discrete Gaussian (Kairouz, Liu & Steinke 2021, Thm 1) noise
  (:func:`silodp.algorithms.distributed.encode`, record level). Calibration and certificate:
  :func:`silodp.accounting.distributed.calibrate` with ``summed`` = the threshold, R rounds
  composed adaptively (no subsampling amplification claimed), the wrap-around probability
  charged to delta.

Wire format. SecAgg+ quantizes floats itself (``quantize``: clip to +-clipping_range, scale by
quantization_range / (2 clipping_range), stochastic rounding) and weights each update by
num_examples / max_weight. :func:`workflow_settings` makes both the identity on integers in
[0, 2^bits): clipping_range = 2^(bits-1), quantization_range = 2^bits (scale 1), max_weight =
num_examples = 1, and the silo sends residue - 2^(bits-1) (:func:`to_flower`), an integer-valued
float that the stochastic rounding leaves unchanged. SecAgg+ sums modulo modulus_range = 2^32, a
multiple of 2^bits, and hands the strategy (sum - n clipping_range) / n for the n silos summed,
from which :func:`from_flower` recovers the sum modulo 2^bits exactly.

Dropouts go through SecAgg+'s reconstruction: a sum is revealed only when at least
``reconstruction_threshold`` silos' masked vectors are summed, so both certificates count the
noise of that many silos only and hold whoever drops; the strategy refuses a smaller sum as well.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from silodp.accounting import distributed as acc

#: SecAgg+'s modulus (its largest): a multiple of every 2^bits, bits <= 31.
FLOWER_MODULUS = 1 << 32

class _Algorithms:
    """Names of registered algorithms, read live (the registry imports torch, so only when asked):
    those whose releases are shuffle-DP (their plan a ``ShufflePlan``: the app runs them on P_vec, asking each
    class for its message groups and period, never its name), plus ``extra``."""

    def __init__(self, *extra: str) -> None:
        self._extra = extra

    def _names(self) -> tuple[str, ...]:
        from silodp.algorithms import ALGORITHMS as registered
        from silodp.algorithms.plan import ShufflePlan

        return (*(name for name, cls in registered.items() if isinstance(cls.plan, ShufflePlan)), *self._extra)

    def __iter__(self):
        return iter(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __repr__(self) -> str:
        return repr(self._names())


#: The SDP algorithms the app runs on P_vec (every registered shuffle-DP one), and all it runs (its
#: run config's ``algorithm``): those and isrl-mb-sgd on distributed discrete noise.
SDP = _Algorithms()
ALGORITHMS = _Algorithms("isrl-mb-sgd")


def workflow_settings(bits: int, silos: int) -> dict:
    """SecAggPlusWorkflow's quantization arguments that make its quantization the identity on
    ``silos`` silos' residues in [0, 2^bits) (module docstring)."""
    if bits > 31 or silos * (1 << bits) >= FLOWER_MODULUS:
        raise ValueError(f"bits: SecAgg+ sums modulo 2^32, so silos * 2^bits must stay below it, got {bits}")
    return {"clipping_range": float(1 << (bits - 1)), "quantization_range": 1 << bits,
            "modulus_range": FLOWER_MODULUS, "max_weight": 1.0}


def to_flower(residues: np.ndarray, bits: int) -> np.ndarray:
    """A silo's residues as the float vector SecAgg+ quantizes back to them."""
    return residues.astype(np.float64) - (1 << (bits - 1))


def from_flower(aggregate: np.ndarray, summed: int, bits: int) -> np.ndarray:
    """The sum of the ``summed`` silos' residues modulo 2^bits from SecAgg+'s aggregate."""
    total = np.rint(aggregate.astype(np.float64) * summed + summed * (1 << (bits - 1))).astype(np.int64)
    return np.mod(total, 1 << bits)


def clipped_grads(w: np.ndarray, x: np.ndarray, y: np.ndarray, clip: float) -> np.ndarray:
    """The per-record logistic gradients ``[n, d + 1]`` (bias last), each clipped to ``clip`` by the
    one release primitive's :func:`silodp.algorithms.release.clip_rows`: a record whose gradient is
    not finite (an ``inf - inf`` logit the server aimed at it) contributes zero, never a NaN that
    would zero the silo's whole encoded sum (a shift of up to K L instead of 2 L)."""
    import torch

    from silodp.algorithms.release import clip_rows

    xa = np.hstack([x, np.ones((len(x), 1))])
    with np.errstate(over="ignore", invalid="ignore"):
        g = (1.0 / (1.0 + np.exp(-(xa @ w))) - y)[:, None] * xa
    return clip_rows(torch.from_numpy(g), clip).numpy()


def checked_models(models: list, dimension: int) -> list:
    """The server's models as float64 vectors of ``dimension`` entries, refused
    (:class:`silodp.algorithms.release.Refusal`) unless each is finite and of that shape: checked
    before any record is touched."""
    from silodp.algorithms.release import Refusal

    out = []
    for m in models:
        v = np.asarray(m, dtype=np.float64)
        if v.shape != (dimension,):
            raise Refusal("shape")
        if not np.isfinite(v).all():
            raise Refusal("model")
        out.append(v)
    return out


def signs(dimension: int, public_seed: int, server_round: int):
    """The round's public rotation (from the run's public seed)."""
    import torch

    from silodp.algorithms.shuffle import rotation_signs

    return rotation_signs(dimension, torch.Generator().manual_seed(public_seed * 100003 + server_round))


@dataclasses.dataclass(frozen=True)
class Deployment:
    """One SecAgg+ training run of ``rounds`` rounds (:attr:`flower_rounds` SecAgg+ sums), steps
    of size ``lr``; ``epsilon`` is silodp's certificate of the configuration (at the
    reconstruction ``threshold``), ``bits`` the width of each silo's residues."""

    xs: tuple
    ys: tuple
    threshold: int
    delta: float
    rounds: int
    batch_size: int
    clip: float
    epsilon: float
    bits: int
    lr: float
    public_seed: int

    @property
    def dimension(self) -> int:
        return self.xs[0].shape[1] + 1

    @property
    def flower_rounds(self) -> int:
        """SecAgg+ sums over the run (one per message a silo sends)."""
        return self.rounds

    def terms(self, models: list, pid: int, server_round: int, secret: int) -> np.ndarray:
        """Silo ``pid``'s per-record terms ``[k, d]`` in ``server_round`` (``models``: what the
        server sent; ``secret``: the silo's own batch seed): the clipped gradients at the model
        of its K-record batch."""
        idx = self.batch(pid, server_round, secret)
        models = checked_models(models, self.dimension)
        return clipped_grads(models[0], self.xs[pid][idx], self.ys[pid][idx], self.clip)

    def batch(self, pid: int, server_round: int, secret: int) -> np.ndarray:
        """The indices of silo ``pid``'s K records in ``server_round``."""
        raise NotImplementedError

    def message(self, terms: np.ndarray, server_round: int, generator) -> np.ndarray:
        """One silo's residues in [0, 2^bits) for its per-record terms ``[k, d]``."""
        raise NotImplementedError

    def estimate(self, total: np.ndarray, summed: int, server_round: int) -> np.ndarray:
        """The mean per-record term over the ``summed`` silos' messages, from their modular sum."""
        raise NotImplementedError

    def step(self, state: dict, total: np.ndarray, summed: int, server_round: int) -> None:
        """The server's update of ``state["w"]`` (and what else it keeps) from one sum;
        ``state["w"], state["second"]`` are the models the silos get next."""
        state["w"] = state["w"] - self.lr * self.estimate(total, summed, server_round)


@dataclasses.dataclass(frozen=True)
class SdpDeployment(Deployment):
    """An SDP algorithm on P_vec (module docstring): ``params`` and ``bounds`` per message group
    (the calibration's (g, b, 1/2, rotate) and the declared l2 bound of one message). Schedule:
    ``inner_steps`` Q > 0: SVRG epochs of 1 + Q sums, ``restarts`` S of ``rounds`` epochs each
    (Alg 8-9); ``period`` q > 0: SPIDER's fresh gradient every q rounds (Alg 10); neither: Alg 7.
    ``replacement``: the declaration's batch sampling (i.i.d. draws, else disjoint batches within
    an epoch of each group's own invocations). Each silo appends its message count (public: silo
    sizes are, and replace-one neighbours keep them) as one more coordinate."""

    algorithm: str = "sdp-prox-sgd"
    params: dict = None
    bounds: dict = None
    inner_steps: int = 0
    restarts: int = 1
    period: int = 0
    replacement: bool = False

    @property
    def flower_rounds(self) -> int:
        return self.restarts * self.rounds * (1 + self.inner_steps)

    def group(self, server_round: int) -> str:
        """The message group of ``server_round``: "grad" (Alg 7); "full" then Q times "diff" per
        epoch (Alg 8-9); "grad" every q-th round and "diff" between (Alg 10)."""
        if self.inner_steps:
            return "full" if (server_round - 1) % (1 + self.inner_steps) == 0 else "diff"
        if self.period:
            return "grad" if (server_round - 1) % self.period == 0 else "diff"
        return "grad"

    def _bound(self, group: str) -> float:
        from silodp.accounting.pvec import rotated_bound

        bound = self.bounds[group]
        return rotated_bound(bound, self.dimension) if self.params[group].rotate else bound

    def batch(self, pid, server_round, secret):
        n_i, group = len(self.xs[pid]), self.group(server_round)
        if self.replacement:  # K i.i.d. uniform draws (WITH_REPLACEMENT)
            return np.random.default_rng([secret, server_round]).integers(0, n_i, self.batch_size)
        # the group's own invocations walk epochs of floor(n / K), n the smallest silo (the
        # declaration's, and BatchSampler's: one sampler per group)
        j = sum(self.group(r) == group for r in range(1, server_round))
        epoch, slot = divmod(j, min(len(x) for x in self.xs) // self.batch_size)
        order = np.random.default_rng([secret, sorted(self.params).index(group), epoch]).permutation(n_i)
        return order[slot * self.batch_size:(slot + 1) * self.batch_size]

    def terms(self, models, pid, server_round, secret):
        group = self.group(server_round)
        if group == "grad":
            return super().terms(models, pid, server_round, secret)
        models = checked_models(models, self.dimension)
        x, y = self.xs[pid], self.ys[pid]
        if group == "full":  # the snapshot gradient: every record at wbar, bound L
            return clipped_grads(models[1], x, y, self.clip)
        idx = self.batch(pid, server_round, secret)  # differences of clipped gradients, bound 2L
        return clipped_grads(models[0], x[idx], y[idx], self.clip) - clipped_grads(models[1], x[idx], y[idx], self.clip)

    def message(self, terms, server_round, generator):
        import torch

        from silodp.algorithms.shuffle import randomize, rotate

        group = self.group(server_round)
        t = torch.from_numpy(terms)
        if self.params[group].rotate:
            t = rotate(t, signs(self.dimension, self.public_seed, server_round))
        totals = randomize(t, self._bound(group), self.params[group], generator).sum(0).numpy()
        return np.append(totals, len(terms))

    def estimate(self, total, summed, server_round):
        import torch

        from silodp.algorithms.shuffle import analyze, unrotate

        group = self.group(server_round)
        messages = int(total[-1])
        est = analyze(torch.from_numpy(total[:-1]), messages, self._bound(group), self.params[group])
        if self.params[group].rotate:
            est = unrotate(est, signs(self.dimension, self.public_seed, server_round), self.dimension)
        return est.numpy() / messages

    def step(self, state, total, summed, server_round):
        """``state["second"]``: the second model the silos get (SVRG's snapshot wbar, SPIDER's
        previous iterate); ``state["h"]``: SVRG's snapshot gradient, SPIDER's running estimate."""
        group, est = self.group(server_round), self.estimate(total, summed, server_round)
        if self.period:  # Alg 10: h fresh every q rounds, else h + the difference; w_prev <- w
            state["h"] = est if group == "grad" else state["h"] + est
            state["second"], state["w"] = state["w"], state["w"] - self.lr * state["h"]
            return
        if group == "full":  # Alg 8: the snapshot gradient, the offset of the epoch's differences
            state["h"] = est
        elif group == "diff":
            state["w"] = state["w"] - self.lr * (state["h"] + est)
        else:
            state["w"] = state["w"] - self.lr * est
        if self.group(server_round + 1) == "full":
            state["second"] = state["w"].copy()


@dataclasses.dataclass(frozen=True)
class DistributedDeployment(Deployment):
    """The distributed twin of isrl-mb-sgd (module docstring); ``params`` the calibrated mechanism."""

    params: acc.DistributedParams = None

    def batch(self, pid, server_round, secret):
        return np.random.default_rng([secret, server_round]).choice(len(self.xs[pid]), self.batch_size, replace=False)

    def message(self, terms, server_round, generator):
        import torch

        from silodp.algorithms import distributed as enc

        v = torch.from_numpy(terms.sum(0))[None]
        return enc.encode(v, self.params, signs(self.dimension, self.public_seed, server_round), generator)[0].numpy()

    def estimate(self, total, summed, server_round):
        import torch

        from silodp.algorithms import distributed as enc

        est = enc.decode(torch.from_numpy(total), self.params, summed, signs(self.dimension, self.public_seed,
                                                                               server_round))
        return est.numpy() / (summed * self.batch_size)


def sdp_transcript(algorithm: str, xs, ys, rounds: int, batch_size: int, clip: float, threshold: int,
                   lr: float = 1.0, **config):
    """The library's transcript configuration of the SDP ``algorithm`` on these silos, the
    federation declaring SecAgg+'s ``threshold`` as the fewest silos summed (``config``: the
    algorithm's own parameters, e.g. inner_steps, restarts, period; None: its default)."""
    from silodp.algorithms import Federation, Problem, get_algorithm, linear_model

    fed = Federation.from_silos([np.asarray(x, np.float64) for x in xs], [np.asarray(y, np.float64) for y in ys],
                                reconstruction_threshold=threshold)
    extra = {k: v for k, v in config.items() if v is not None}
    algo = get_algorithm(algorithm, rounds=rounds, batch_size=batch_size, step_size=lr, metrics_every=0, **extra)
    return algo.plan.transcript_config(Problem(linear_model(xs[0].shape[1]), "logistic", clip=clip), fed)


def deployment(algorithm: str, xs, ys, *, epsilon: float, delta: float, rounds: int, batch_size: int,
               threshold: int, clip: float = 1.0, mechanism: str = "discrete-gaussian", bits: int = 20,
               lr: float = 1.0, public_seed: int = 0, **config) -> Deployment:
    """Calibrate ``algorithm`` (:data:`ALGORITHMS`) for the silos' data at the reconstruction
    ``threshold``. ``mechanism`` and ``bits``: isrl-mb-sgd's noise and width (the SDP algorithms'
    binomial sets its own width from the calibrated (g, b)); ``config``: an SDP algorithm's own
    parameters (inner_steps Q, restarts S, period), None meaning its default."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm: must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    m, dim = len(xs), xs[0].shape[1] + 1
    if not 1 <= threshold <= m:
        raise ValueError(f"threshold: must be an integer in [1, {m}], got {threshold!r}")
    common = dict(xs=tuple(xs), ys=tuple(ys), threshold=threshold, delta=delta, rounds=rounds,
                  batch_size=batch_size, clip=clip, lr=lr, public_seed=public_seed)
    if algorithm in SDP:
        from silodp.algorithms.privacy import calibrate_algorithm
        from silodp.algorithms.shuffle import as_params

        cfg = sdp_transcript(algorithm, xs, ys, rounds, batch_size, clip, threshold, lr, **config)
        cal = calibrate_algorithm(algorithm, cfg, epsilon, delta)
        params = {g: as_params(r) for g, r in cal.shuffle.items()}
        most = {"grad": batch_size, "diff": batch_size, "full": max(len(x) for x in xs)}  # messages per silo
        width = max(2, math.ceil(math.log2(m * max(most[g] * (p.g + p.b) for g, p in params.items()) + 1)))
        workflow_settings(width, m)  # refuses a sum that SecAgg+ cannot hold
        from silodp.algorithms.registry import algorithm_class

        # asked of the algorithm: full-gradient anchors (SVRG) and a period (SPIDER), not its name
        svrg, spider = "full" in params, "period" in algorithm_class(algorithm)().get_params()
        return SdpDeployment(epsilon=cal.epsilon, bits=width, algorithm=algorithm, params=params,
                             bounds={g: float(r["bound"]) for g, r in cal.shuffle.items()},
                             inner_steps=cfg.inner_steps if svrg else 0, restarts=cfg.restarts if svrg else 1,
                             period=cfg.period if spider else 0, replacement=cfg.replacement, **common)
    if any(v is not None for v in config.values()):
        raise ValueError(f"config: isrl-mb-sgd takes none of {sorted(config)}")
    p = acc.calibrate(mechanism, dim, clip, m, bits, epsilon, delta, rounds, summed=threshold,
                      vector_norm=batch_size * clip)
    return DistributedDeployment(epsilon=acc.certified_epsilon(p, delta), bits=bits, params=p, **common)


def _runs(deps) -> tuple:
    """``deps`` as a tuple of Deployments (one, or several run one after the other)."""
    out = (deps,) if isinstance(deps, Deployment) else tuple(deps)
    if not out or not all(isinstance(d, Deployment) for d in out):
        raise ValueError(f"deps: need a Deployment or a non-empty sequence of them, got {deps!r}")
    if len({len(d.xs) for d in out}) != 1:
        raise ValueError("deps: every run needs the same silos")
    return out


def make_client_app(deps, drop: tuple[int, int] | None = None):
    """The silos' ClientApp (legacy NumPyClient behind ``secaggplus_mod``) for one Deployment or
    a sequence of them trained one after the other in the same session (the server's fit config
    names the run). ``drop``: (silo, round) at which that silo fails in every run (a dropout, for
    tests). Each silo's batch seed is drawn here, once per run (the server never sees it); its
    noise is fresh secret randomness per message."""
    import secrets

    import torch
    from flwr.client import ClientApp, NumPyClient
    from flwr.client.mod import secaggplus_mod

    runs = _runs(deps)
    seeds = [[secrets.randbits(63) for _ in dep.xs] for dep in runs]

    class Silo(NumPyClient):
        def __init__(self, pid: int) -> None:
            self.pid = pid

        def fit(self, parameters, config):
            r, k = int(config["round"]), int(config.get("run", 0))
            if drop is not None and (self.pid, r) == drop:
                raise RuntimeError(f"silo {self.pid} drops out in round {r}")
            dep = runs[k]
            terms = dep.terms(parameters, self.pid, r, seeds[k][self.pid])
            gen = torch.Generator().manual_seed(secrets.randbits(63))  # secret: the server must not know it
            return [to_flower(dep.message(terms, r, gen), dep.bits)], 1, {}

    def client_fn(context):
        return Silo(int(context.node_config["partition-id"])).to_client()

    return ClientApp(client_fn=client_fn, mods=[secaggplus_mod])


def make_server_app(deps, sink):
    """The ServerApp: SecAgg+ sums the silos' residues; the strategy decodes the sum and steps.
    ``deps``: one Deployment or several, trained one after the other (each its own SecAgg+
    workflow and model); ``sink`` receives {"w", "epsilon", "summed"} when each run ends."""
    from flwr.server import LegacyContext, ServerApp, ServerConfig
    from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow

    runs = _runs(deps)
    app = ServerApp()

    @app.main()
    def main(grid, context) -> None:
        for k, dep in enumerate(runs):
            m = len(dep.xs)
            state = {"w": np.zeros(dep.dimension), "second": np.zeros(dep.dimension), "summed": []}
            legacy = LegacyContext(context, config=ServerConfig(num_rounds=dep.flower_rounds),
                                   strategy=_strategy(dep, state, k))
            workflow = DefaultWorkflow(fit_workflow=SecAggPlusWorkflow(
                num_shares=m, reconstruction_threshold=dep.threshold, **workflow_settings(dep.bits, m)))
            workflow(grid, legacy)
            sink({"w": state["w"].copy(), "epsilon": dep.epsilon, "summed": list(state["summed"])})

    return app


def _strategy(dep: Deployment, state: dict, run: int):
    """FedAvg whose aggregation decodes SecAgg+'s sum and steps ``state`` (run ``run``'s model)."""
    from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server.strategy import FedAvg

    class Decode(FedAvg):
        def aggregate_fit(self, server_round, results, failures):
            n = len(results)
            if n < dep.threshold:  # SecAgg+ never reveals fewer; refuse all the same
                raise ValueError(f"summed: {n} silos, the certificate needs at least {dep.threshold}")
            agg = parameters_to_ndarrays(results[0][1].parameters)[0]
            dep.step(state, from_flower(agg, n, dep.bits), n, server_round)
            state["summed"].append(n)
            return ndarrays_to_parameters([state["w"], state["second"]]), {}

    return Decode(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=dep.threshold,
                  min_available_clients=len(dep.xs),
                  initial_parameters=ndarrays_to_parameters([state["w"], state["second"]]),
                  on_fit_config_fn=lambda r: {"round": r, "run": run})


def error_rate(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    xa = np.hstack([x, np.ones((len(x), 1))])
    return float(np.mean((xa @ w > 0) != (y > 0.5)))


__all__ = ["ALGORITHMS", "Deployment", "DistributedDeployment", "SDP", "SdpDeployment", "deployment", "error_rate",
           "from_flower", "make_client_app", "make_server_app", "sdp_transcript", "to_flower", "workflow_settings"]
