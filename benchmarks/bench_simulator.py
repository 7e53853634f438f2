"""CPU time per round: silodp's vectorized simulator against what a user would write with Opacus
(a per-silo loop over one ``GradSampleModule``, with hooks or with Opacus' ghost clipping), at the
paper's MNIST sizes (n ~ 1,234 records per silo, d = 50, MLP 50-64-1, batch K = 600, float32) for
N = 10 .. 400 silos.

Every number is CPU time (``time.process_time``) measured in ONE process on ``--threads`` torch
threads (default 1), the implementations interleaved (each repetition runs every implementation at
every N once, the median over repetitions is kept), so that the ratios, within an N and across N,
compare runs that saw the same machine load. silodp's per-round time is steady state: the time between the first and
the last round's callback over the rounds between (calibration, certification and warm-up are not
counted; ``end to end`` rows include them), and the process's first repetition is a warm-up, not
counted (numba compiles silodp's fused passes on their first call, or loads them from its cache).
Every timed run is preceded by an untimed one of the same implementation (``--warmup-rounds``
silodp rounds, one Opacus loop round): without it a silodp run timed right after an Opacus loop
ran ~10% slower for tens of milliseconds (its whole steady window at N = 25), a wake of the other
implementation's work rather than its own cost; the same warm-up precedes both sides. FLOP/s: the model FLOPs of one MB-SGD round (forward
2P, weight gradients 2P, activation gradients 2P' per record, P the parameters, P' those of the
layers after the first) over the measured time, against a float32 matmul measured in the same run
on the same threads: at the start and once in every repetition, interleaved with the
implementations, the largest of those measurements kept (the conservative peak: the highest rate
this process reached, so that a slow moment of the machine never inflates the share).

Rows: silodp ISRL-MB-SGD (ghost clipping; ``vmap`` materialized at the smallest N only),
ISRL-SPIDER without and with a smoothness constant ``beta`` (with ``beta`` it clips per-record
differences: ghost norms of differences), ISRL-Prox-SVRG (differences of clipped gradients); the
Opacus loops. Targets (issue 37), printed as met / missed: SPIDER with beta >= 0.5x the rounds/s
without it, silodp >= 10x Opacus per silo at N = 100, per-silo cost growth <= 1.15x from N = 25 to
N = 400, >= 50% of the measured matmul peak at N = 25, every path within 2x: each silodp row's CPU
time per record-gradient evaluation (:func:`record_gradients`: a Prox-SVRG round is a full-data
snapshot plus differences at two points, about 6x MB-SGD's work) at most twice MB-SGD's (the
``vmap`` reference, ``grad_method="materialize"``, is no algorithm's path and is not held to it).

    python benchmarks/bench_simulator.py [--silos 10,25,100,400] [--quick] [--json out.json] [--device cuda]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from silodp.algorithms import Federation, IsrlMBSGD, IsrlProxSVRG, IsrlSpider, Problem, mlp

SIGMA = 0.05


def on_cuda(device: str) -> bool:
    """Whether ``device`` ("cuda", "cuda:1", ...) is a CUDA device."""
    return torch.device(device).type == "cuda"


def clock(device: str) -> float:
    """CPU seconds of this process (on CUDA: wall seconds after a synchronize, the kernels being
    asynchronous)."""
    if on_cuda(device):
        torch.cuda.synchronize(device)
        return time.perf_counter()
    return time.process_time()


#: every matmul peak measured in this process (GFLOP/s): :func:`peak` is the largest
PEAKS: list[float] = []


def matmul_gflops(device: str, size: int = 1024, reps: int = 8) -> float:
    """float32 matmul GFLOP/s on this process's torch threads (the best of ``reps``), recorded in
    :data:`PEAKS`."""
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    a @ b
    best = math.inf
    for _ in range(reps):
        t = clock(device)
        a @ b
        best = min(best, clock(device) - t)
    PEAKS.append(2 * size ** 3 / best / 1e9)
    return PEAKS[-1]


def peak_spread() -> str:
    """How many matmul measurements the peak is the largest of, and their median and smallest: how
    much this machine's speed moved during the run (the rows moved with it)."""
    return (f"largest of {len(PEAKS)} in this run; median {statistics.median(PEAKS):.0f}, "
            f"smallest {min(PEAKS):.0f}")


def peak() -> float:
    """The measured peak: the largest of this process's :func:`matmul_gflops` measurements."""
    return max(PEAKS)


def model_flops(d: int, hidden: int, records: int) -> float:
    """FLOPs of one forward and backward pass (weights and activations) of MLP d-hidden-1."""
    first, rest = d * hidden + hidden, hidden + 1
    return records * (2 * (first + rest) + 2 * (first + rest) + 2 * rest)


def load() -> str:
    """The machine's load averages (1, 5, 15 min) at the end of the run, printed beside its numbers."""
    return "load " + " ".join(f"{v:.1f}" for v in os.getloadavg())


def data(silos: int, n: int, d: int, device: str):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(silos, n, d, generator=gen)
    y = (torch.rand(silos, n, generator=gen) < 0.5).float()
    return x.to(device), y.to(device)


# -- silodp -------------------------------------------------------------------------------------
#: the ``vmap`` reference row (``grad_method="materialize"``): no algorithm's path, at the smallest N only
REFERENCE = "silodp mb-sgd (materialize)"


def silodp_algorithms(args) -> dict:
    """name -> (algorithm, beta) of the silodp rows (explicit noise, no metrics)."""
    k = args.batch
    s = {"sigma1": SIGMA, "sigma2": SIGMA, "sigma2_hat": SIGMA}
    common = dict(rounds=args.rounds, batch_size=k, step_size=0.1, metrics_every=0)
    return {
        "silodp mb-sgd (ghost)": (IsrlMBSGD(sigmas={"sigma": SIGMA}, **common), None),
        REFERENCE: (IsrlMBSGD(sigmas={"sigma": SIGMA}, grad_method="materialize", **common), None),
        "silodp spider": (IsrlSpider(period=3, sigmas=s, **common), None),
        "silodp spider (beta)": (IsrlSpider(period=3, sigmas=s, **common), 5.0),
        "silodp prox-svrg": (IsrlProxSVRG(sigmas=s, replacement=False, **common), None),
    }


def record_gradients(name: str, args) -> float:
    """Per-record gradient evaluations (records x points) of one steady round of a silodp row, per
    silo: MB-SGD K; SPIDER (q = 3) averaged over the steady rounds 1..R-1, K on a fresh-gradient
    round and 2K (two points) on a difference round; Prox-SVRG one epoch, the full-data snapshot
    (n) and Q = n // K differences of 2K. The work a round does, so that paths doing more of it
    are compared per unit of work ("every path within 2x")."""
    k, n = args.batch, args.n
    if "spider" in name:
        steady = range(1, args.rounds)
        return sum(k if r % 3 == 0 else 2 * k for r in steady) / len(steady)
    if "prox-svrg" in name:
        return n + (n // k) * 2 * k
    return k


def silodp_run(algo, beta, fed, args, callback=None) -> None:
    """One run of a silodp row on the benchmark's problem (the MLP, the logistic loss, clip 1)."""
    problem = Problem(mlp(args.d, [args.hidden], 1), "logistic", clip=1.0, beta=beta)
    algo.run(problem, fed, seed=0, callback=callback)


def silodp_round(algo, beta, fed, args, device: str) -> tuple[float, float]:
    """(steady seconds per round, end-to-end seconds per round) of one run."""
    stamps = []
    start = clock(device)
    silodp_run(algo, beta, fed, args, callback=lambda r, w: stamps.append(clock(device)))
    end = clock(device)
    return (stamps[-1] - stamps[0]) / (len(stamps) - 1), (end - start) / len(stamps)


# -- Opacus: one GradSampleModule, a loop over silos --------------------------------------------
class OpacusLoop:
    """ISRL-DP MB-SGD as a user writes it with Opacus: per silo, the server's weights loaded into
    one wrapped model, a minibatch drawn, forward / backward, the DP optimizer's ``pre_step``
    (per-sample clip to 1, noise, average) gives the silo's message; the server averages."""

    def __init__(self, args, x, y, ghost: bool, device: str):
        from opacus import GradSampleModule
        from opacus.grad_sample import GradSampleModuleFastGradientClipping
        from opacus.optimizers import DPOptimizer, DPOptimizerFastGradientClipping
        from opacus.utils.fast_gradient_clipping_utils import DPLossFastGradientClipping

        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(args.d, args.hidden), torch.nn.ReLU(),
                                  torch.nn.Linear(args.hidden, 1)).to(device)
        self.x, self.y, self.k, self.device = x, y, args.batch, device
        self.server = [p.detach().clone() for p in net.parameters()]
        z = SIGMA * args.batch  # noise std SIGMA on the mean of K clipped gradients
        if ghost:
            self.model = GradSampleModuleFastGradientClipping(net, max_grad_norm=1.0, use_ghost_clipping=True)
            self.opt = DPOptimizerFastGradientClipping(torch.optim.SGD(self.model.parameters(), lr=0.1),
                                                       noise_multiplier=z, max_grad_norm=1.0, expected_batch_size=args.batch)
            self.loss = DPLossFastGradientClipping(self.model, self.opt, torch.nn.BCEWithLogitsLoss(reduction="mean"))
        else:
            self.model = GradSampleModule(net)
            self.opt = DPOptimizer(torch.optim.SGD(self.model.parameters(), lr=0.1), noise_multiplier=z,
                                   max_grad_norm=1.0, expected_batch_size=args.batch)
            self.loss = torch.nn.BCEWithLogitsLoss(reduction="mean")
        self.params = list(self.model.parameters())

    def round(self) -> None:
        n = self.x.shape[1]
        total = [torch.zeros_like(p) for p in self.server]
        for i in range(self.x.shape[0]):
            with torch.no_grad():
                for p, s in zip(self.params, self.server):
                    p.copy_(s)
            idx = torch.randint(n, (self.k,), device=self.device)
            self.opt.zero_grad()
            out = self.model(self.x[i, idx]).squeeze(-1)
            self.loss(out, self.y[i, idx]).backward()
            self.opt.pre_step()
            for t, p in zip(total, self.params):
                t += p.grad
        with torch.no_grad():
            for s, t in zip(self.server, total):
                s -= 0.1 * t / self.x.shape[0]


class Setup:
    """One N's federation, silodp rows (each with its untimed warm-up run) and Opacus loops, and the
    CPU times of their timed runs so far."""

    def __init__(self, args, silos: int, device: str):
        self.silos, self.args, self.device = silos, args, device
        x, y = data(silos, args.n, args.d, device)
        self.fed = Federation(x, y, torch.full((silos,), args.n, device=device))
        self.algos = silodp_algorithms(args)
        self.warmups = silodp_algorithms(argparse.Namespace(**{**vars(args), "rounds": args.warmup_rounds}))
        # the vmap reference, only where it is affordable, timed in a pass of its own after the grid:
        # a run after its hundreds of MB of per-sample gradients was ~20% slower, warm-up included
        reference = self.algos.pop(REFERENCE)
        self.reference = {REFERENCE: reference} if silos == min(args.silos) else {}
        self.loops = {}
        if not on_cuda(device) or args.opacus_on_cuda:
            try:
                self.loops = {"opacus loop (hooks)": OpacusLoop(args, x, y, False, device),
                              "opacus loop (ghost clipping)": OpacusLoop(args, x, y, True, device)}
            except ImportError:  # opacus is a dev extra
                self.loops = {}
        rows = [name for name in self.warmups if name in self.algos or name in self.reference]  # the table's order
        self.steady: dict[str, list[float]] = {name: [] for name in [*rows, *self.loops]}
        self.e2e: dict[str, list[float]] = {name: [] for name in rows}

    def repetition(self, keep: bool, reference: bool = False) -> None:
        """Every implementation once (its warm-up run first), its times kept where ``keep``; with
        ``reference`` the vmap reference alone (where this N has it)."""
        args, device = self.args, self.device
        for name, (algo, beta) in (self.reference if reference else self.algos).items():
            if args.warmup_rounds:  # untimed, the same implementation just before (see the module docstring)
                silodp_run(self.warmups[name][0], beta, self.fed, args)
            s, e = silodp_round(algo, beta, self.fed, args, device)
            if keep:
                self.steady[name].append(s)
                self.e2e[name].append(e)
        for name, loop in ({} if reference else self.loops).items():
            if args.warmup_rounds:
                loop.round()
            t = clock(device)
            for _ in range(args.loop_rounds):
                loop.round()
            if keep:
                self.steady[name].append((clock(device) - t) / args.loop_rounds)

    def row(self) -> dict:
        """The medians over the kept repetitions."""
        return {"silos": self.silos, "seconds_per_round": {name: statistics.median(v) for name, v in self.steady.items()},
                "end_to_end_seconds_per_round": {name: statistics.median(v) for name, v in self.e2e.items()},
                "flops_per_round": model_flops(self.args.d, self.args.hidden, self.silos * self.args.batch)}


def measure(args, device: str) -> list[dict]:
    """The rows of every N, interleaved over N as well as over implementations: each repetition
    runs every implementation at every N once, then the peak once per N, so that the ratios across
    N (per-silo growth, slope) compare runs that saw the same machine load, as the ratios within an
    N do. The first repetition is not counted: one-time costs of a process (numba compiling or
    loading silodp's fused passes, MKL's and Opacus' first calls, each N's first allocations) are
    no round's."""
    setups = [Setup(args, n, device) for n in args.silos]
    for rep in range(args.reps + 1):
        for setup in setups:
            setup.repetition(keep=rep > 0)
            matmul_gflops(device)  # the peak, interleaved with the rows it divides
    for rep in range(args.reps + 1):  # the vmap reference after the grid (see Setup)
        for setup in setups:
            if setup.reference:
                setup.repetition(keep=rep > 0, reference=True)
    return [setup.row() for setup in setups]


@contextlib.contextmanager
def wrapped(targets: list, wrap: Callable[[Any, str, Callable], Callable]) -> Iterator[None]:
    """Each attribute ``name`` of ``owner`` in ``targets`` replaced by ``wrap(owner, name, real)``
    while the block runs (a timing wrapper of the real function), and restored after it."""
    real = {(owner, name): getattr(owner, name) for owner, name in targets}
    try:
        for (owner, name), fn in real.items():
            setattr(owner, name, wrap(owner, name, fn))
        yield
    finally:
        for (owner, name), fn in real.items():
            setattr(owner, name, fn)


def breakdown(args, silos: int, device: str, reps: int = 5) -> dict:
    """Where one steady MB-SGD round's CPU time goes at ``silos`` (the peak target's N): the ghost
    kernel (``grads.clipped_grad_sum``), the minibatch gather (called by the kernel, a chunk of
    silos at a time: its time is the gather's, not the kernel's), the sampler, the noise draw and
    release (``GaussianChannel.release``) and the rest (ledger, prox, bookkeeping), each the median
    over ``reps`` runs; and the kernel's two matrix products alone, timed on the same shapes (the
    forward ``[N K, d] x [d, h]`` for every silo at once, the per-silo sums ``x_s^T G_s``, a bmm)."""
    from silodp.algorithms import federation, grads, plan

    algo, _ = silodp_algorithms(args)["silodp mb-sgd (ghost)"]
    x, y = data(silos, args.n, args.d, device)
    fed = Federation(x, y, torch.full((silos,), args.n, device=device))
    spent: dict = {}
    hooks = [(grads, "clipped_grad_sum", "kernel"), (federation.Federation, "gather", "gather"),
             (federation.BatchSampler, "next", "sampler"), (plan.GaussianChannel, "release", "noise and release")]
    labels = {(owner, name): label for owner, name, label in hooks}

    inner = [0.0, 0]  # time and faults of the timed calls inside the running one (the kernel's gathers)

    def timed(owner, name, real):
        label = labels[(owner, name)]

        def call(*a, **k):
            t, f, outer = clock(device), minor_faults(), inner[:]
            inner[:] = [0.0, 0]
            out = real(*a, **k)
            dt, df = clock(device) - t, minor_faults() - f
            spent[label] = spent.get(label, 0.0) + dt - inner[0]  # a nested call's time is its own only
            faulted[label] = faulted.get(label, 0) + df - inner[1]
            inner[:] = [outer[0] + dt, outer[1] + df]
            return out
        return call

    faulted: dict = {}
    rounds, parts = [], {label: [] for *_, label in hooks}
    faults: dict = {label: [] for label in [*parts, "round"]}
    with wrapped(list(labels), timed):
        for _ in range(reps):
            spent.clear()
            stamps: list[tuple[float, int]] = []
            algo.run(Problem(mlp(args.d, [args.hidden], 1), "logistic", clip=1.0), fed, seed=0,
                     callback=lambda r, w: (stamps.append((clock(device), minor_faults())),
                                            (spent.clear(), faulted.clear()) if r == 0 else None))
            steady = len(stamps) - 1
            rounds.append((stamps[-1][0] - stamps[0][0]) / steady)
            faults["round"].append((stamps[-1][1] - stamps[0][1]) / steady)
            for label in parts:  # the first round's calls were cleared at its callback
                parts[label].append(spent.get(label, 0.0) / steady)
                faults[label].append(faulted.get(label, 0) / steady)
    out = {label: statistics.median(v) for label, v in parts.items()}
    out["round"] = statistics.median(rounds)
    out["faults"] = {label: statistics.median(v) for label, v in faults.items()}  # minor page faults a round
    out["other"] = max(0.0, out["round"] - sum(out[label] for label in parts))
    a = torch.randn(silos * args.batch, args.d, device=device)
    w1 = torch.randn(args.d, args.hidden, device=device)
    b = torch.randn(silos, args.batch, args.hidden, device=device)
    xs = a.view(silos, args.batch, args.d)
    times = []
    for _ in range(2 * reps):
        t = clock(device)
        a @ w1
        torch.bmm(xs.transpose(1, 2), b)
        times.append(clock(device) - t)
    out["matmuls"] = statistics.median(times[1:])
    return out


#: FLOPs of a product from its tensor arguments' shapes (``addmm(bias, [M, K], [K, N])`` and the like)
PRODUCTS = {
    "addmm": lambda s: 2 * s[1][0] * s[1][1] * s[2][1],
    "bmm": lambda s: 2 * s[0][0] * s[0][1] * s[0][2] * s[1][2],
    "baddbmm": lambda s: 2 * s[1][0] * s[1][1] * s[1][2] * s[2][2],
    "addmv": lambda s: 2 * s[1][0] * s[1][1],
    "matmul": lambda s: 2 * math.prod(s[0]) * (s[1][-1] if len(s[1]) > 1 else 1),
}
#: the operators :func:`kernel_ops` times one by one (the products and the passes over [N K, h])
TIMED = [(torch, "addmm"), (torch, "bmm"), (torch, "baddbmm"), (torch, "addmv"), (torch.Tensor, "__matmul__"),
         (torch, "sign"), (torch.linalg, "vector_norm"), (torch.Tensor, "relu_"), (torch.Tensor, "mul_"),
         (torch.Tensor, "sum"), (torch, "mul"), (torch.Tensor, "copy_")]
#: the fused passes of :mod:`silodp.algorithms.fused` (numba), timed as one row each
FUSED = ("clipped_sum", "store_transposed")


def kernel_ops(args, silos: int, device: str, reps: int = 15) -> dict:
    """Where the ghost kernel's CPU time goes at ``silos`` (the inputs of one steady MB-SGD round:
    the minibatch ``[N, K, d]`` of ``n`` records per silo in float32 as the round's :class:`Rows`, which
    the kernel gathers a chunk of silos at a time with its rows' ``||x||^2 + 1``, the server's
    iterate, weights 1 / K): the
    kernel's minor page faults a call, its CPU time in the calls that time its operators (so that
    the rest below is measured in the same calls, never negative from a change of machine speed
    between two phases), and the CPU time of each call of the operators in :data:`TIMED` by shape,
    each wrapped in the clock for the call (the median over ``reps`` kernel calls; CPU time, so a call in which this thread lost the core counts only what it
    ran): a product's FLOPs from its shapes and its rate, any other operator's bytes read (its tensor
    arguments) and their rate; the rest of the kernel (views, clip factors, finiteness checks,
    Python) is the kernel's time less theirs. A fused pass (:data:`FUSED`, where numba is installed)
    is one row: all the kernel's work between its products; so is each gather of a chunk's rows."""
    from silodp.algorithms import federation, fused, grads

    gen = torch.Generator().manual_seed(0)
    x, y = data(silos, args.n, args.d, device)
    # as a round's batch: K of each silo's n records, in a random order, gathered by the kernel
    idx = torch.rand(silos, args.n, generator=gen).argsort(1)[:, :args.batch].to(device)
    rows = federation.Rows(Federation(x, y, torch.full((silos,), args.n, device=device)), idx)
    problem = Problem(mlp(args.d, [args.hidden], 1), "logistic", clip=1.0)
    w = problem.model.init(gen, dtype=torch.float32).to(device)
    weights = torch.full((silos, args.batch), 1.0 / args.batch, device=device)

    def call():
        grads.clipped_grad_sum(problem, w, rows, None, weights, 1.0)

    for _ in range(3):
        call()
    times, faults = [], minor_faults()
    for _ in range(reps):
        t = clock(device)
        call()
        times.append(clock(device) - t)
    faults = (minor_faults() - faults) / reps
    spent: dict = {}  # (operator, shapes) -> [CPU seconds in each kernel call], calls

    def timed(owner, attribute, real):
        name = "matmul" if attribute == "__matmul__" else attribute

        def run(*a, **k):
            t = clock(device)
            out = real(*a, **k)
            dt = clock(device) - t
            given = (*a, *k.values()) if name == "gather" else a  # the gather's rows: its out= (written, then read)
            key = (name, tuple(tuple(v.shape) for v in tensors(given)))
            slot = spent.setdefault(key, [[0.0] * reps, 0])
            slot[0][rep] += dt
            slot[1] += 1
            return out
        return run

    wrapped_times = []  # the kernel's time in the calls that time its operators: the rest is never negative
    with wrapped(TIMED + [(fused, name) for name in FUSED if hasattr(fused, name)] + [(federation.Federation, "gather")],
                 timed):
        for rep in range(reps):  # noqa: B007  (read by the wrappers: each call's slot)
            t = clock(device)
            call()
            wrapped_times.append(clock(device) - t)
    ops = []
    for (name, shapes), (secs, count) in spent.items():
        sh = [list(v) for v in shapes]
        flops = PRODUCTS[name](sh) if name in PRODUCTS else None
        calls = count / reps  # per kernel call: the FLOPs and bytes of all of them, as the seconds
        ops.append({"op": name, "shapes": sh, "calls": calls, "seconds": statistics.median(secs),
                    "flops": None if flops is None else calls * flops,
                    "bytes_read": calls * 4 * sum(math.prod(v) for v in sh) if flops is None else None})
    return {"silos": silos, "reps": reps, "kernel_seconds": statistics.median(wrapped_times), "page_faults": faults,
            "ops": sorted(ops, key=lambda o: -o["seconds"])}


def tensors(args) -> Iterator[torch.Tensor]:
    """The tensors among ``args``, those inside lists and tuples included (a fused pass's points)."""
    for v in args:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from tensors(v)


def minor_faults() -> int:
    """This process's minor page faults so far (0 where ``resource`` is missing: not POSIX)."""
    try:
        import resource
    except ImportError:
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def breakdown_report(peak: float, args, parts: dict, kern: dict) -> list[str]:
    """``--breakdown``: the N = 25 round's parts, the kernel's operators (products at their shapes
    against the peak, the passes as bytes), and the peak shares the measured parts allow."""
    n = kern["silos"]
    flops = model_flops(args.d, args.hidden, n * args.batch)
    kernel, ops = kern["kernel_seconds"], kern["ops"]
    shown = [o for o in ops if o["seconds"] >= 0.01 * kernel]
    lines = [f"n={args.n} d={args.d} MLP({args.hidden}) K={args.batch} N={n} threads={torch.get_num_threads()} "
             f"device={args.device} matmul peak {peak:.1f} GFLOP/s (float32, {peak_spread()}); model FLOPs per round "
             f"{flops / 1e6:.1f} M ({1e3 * flops / (peak * 1e9):.2f} ms at the peak); {load()}", "",
             "| operator | argument shapes | calls | CPU ms / kernel call | share of the kernel | GFLOP/s | % of peak "
             "| MB read | GB/s |", "|---|---|---|---|---|---|---|---|---|"]
    for o in shown:
        t = o["seconds"]
        rate = f"{o['flops'] / t / 1e9:.1f} | {100 * o['flops'] / t / 1e9 / peak:.0f}% | - | -" if o["flops"] else \
            f"- | - | {o['bytes_read'] / 1e6:.2f} | {o['bytes_read'] / t / 1e9:.1f}"
        lines.append(f"| {o['op']} | {' '.join('x'.join(map(str, sh)) for sh in o['shapes'])} | {o['calls']:g} | "
                     f"{1e3 * t:.3f} | {100 * t / kernel:.0f}% | {rate} |")
    rest = kernel - sum(o["seconds"] for o in shown)
    lines.append(f"| the rest (views, clip factors, finiteness checks, Python; smaller timed calls) | - | - | "
                 f"{1e3 * rest:.3f} | {100 * rest / kernel:.0f}% | - | - | - | - |")
    prods = [o for o in ops if o["flops"]]
    t_mm, f_mm = sum(o["seconds"] for o in prods), sum(o["flops"] for o in prods)
    outside = parts["round"] - parts["kernel"] - parts["gather"]  # the gather runs inside the kernel's calls
    share = lambda t: f"{100 * flops / t / 1e9 / peak:.0f}%"  # noqa: E731
    lines += ["",
              f"* kernel {1e3 * kernel:.2f} ms CPU (median of {kern['reps']} calls; {kern['page_faults']:.0f} minor "
              f"page faults a call): products {1e3 * t_mm:.2f} ms ({f_mm / 1e6:.1f} MFLOP at {f_mm / t_mm / 1e9:.1f} "
              f"GFLOP/s, {100 * f_mm / t_mm / 1e9 / peak:.0f}% of the peak), everything else {1e3 * (kernel - t_mm):.2f} ms",
              f"* the round {1e3 * parts['round']:.2f} ms: kernel {1e3 * parts['kernel']:.2f} + its gathers "
              f"{1e3 * parts['gather']:.2f} + outside it {1e3 * outside:.2f} (sampler {1e3 * parts['sampler']:.2f}, noise "
              f"and release {1e3 * parts['noise and release']:.2f}, other {1e3 * parts['other']:.2f}): "
              f"{share(parts['round'])} of the peak; 50% allows {1e3 * flops / (0.5 * peak * 1e9):.2f} ms",
              f"* peak share if the kernel's other work (its gathers included) were free: {share(outside + t_mm)}; if, "
              f"as well, everything outside the kernel were free (the products alone, at their measured rates): "
              f"{share(t_mm)}"]
    lines.append("* minor page faults a round: " + ", ".join(f"{label} {n:.0f}" for label, n in parts["faults"].items()))
    return lines


def report(rows: list[dict], peak: float, args, parts: dict | None = None) -> list[str]:
    """The table, the targets' lines and the breakdown of one MB-SGD round at N = 25 (``parts``)."""
    base = "silodp mb-sgd (ghost)"
    names = list(dict.fromkeys(n for r in rows for n in r["seconds_per_round"]))
    lines = [f"n={args.n} d={args.d} MLP({args.hidden}) K={args.batch} threads={torch.get_num_threads()} "
             f"device={args.device} matmul peak {peak:.1f} GFLOP/s (float32, {peak_spread()}); {load()}", "",
             f"| N | implementation | {'wall' if on_cuda(args.device) else 'CPU'} ms / round | ms / silo | vs silodp mb-sgd "
             "| per record-gradient vs mb-sgd | GFLOP/s | % of peak |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        sec = r["seconds_per_round"]
        for name in names:
            if name not in sec:
                continue
            s = sec[name]
            gf = r["flops_per_round"] / s / 1e9 if "mb-sgd" in name or "opacus" in name else math.nan
            flop = f"{gf:.1f} | {100 * gf / peak:.0f}%" if math.isfinite(gf) else "- | -"
            work = f"{s / record_gradients(name, args) / (sec[base] / record_gradients(base, args)):.2f}x" \
                if name.startswith("silodp") else "-"
            lines.append(f"| {r['silos']} | {name} | {1e3 * s:.2f} | {1e3 * s / r['silos']:.3f} | "
                         f"{s / sec[base]:.2f}x | {work} | {flop} |")
    by_n = {r["silos"]: r["seconds_per_round"] for r in rows}
    lines.append("")
    for r in rows:
        e = r["end_to_end_seconds_per_round"]
        lines.append(f"N={r['silos']}: end to end (calibration and setup included) ms/round: "
                     + ", ".join(f"{n.replace('silodp ', '')} {1e3 * v:.1f}" for n, v in e.items()))
    lines.append("")
    checks = []
    for n, sec in by_n.items():
        if "silodp spider (beta)" in sec:
            checks.append((f"N={n}: SPIDER with beta / without, rounds/s", sec["silodp spider"] / sec["silodp spider (beta)"], 0.5))
    paths = [name for name in names if name.startswith("silodp") and "materialize" not in name]
    for n, sec in by_n.items():  # the materialized vmap reference is no algorithm's path (grad_method only)
        per = {name: sec[name] / record_gradients(name, args) for name in paths if name in sec}
        worst = max(per, key=per.get)
        checks.append((f"N={n}: slowest path per record-gradient / mb-sgd's ({worst.replace('silodp ', '')})",
                       per[worst] / per[base], -2.0))
    if 100 in by_n and "opacus loop (hooks)" in by_n[100]:
        sec = by_n[100]
        fastest = min(sec["opacus loop (hooks)"], sec["opacus loop (ghost clipping)"])
        checks.append(("N=100: fastest Opacus loop / silodp mb-sgd, CPU per round", fastest / sec[base], 10.0))
    if 25 in by_n and 400 in by_n:
        growth = (by_n[400][base] / 400) / (by_n[25][base] / 25)
        checks.append(("per-silo cost N=400 / N=25 (at most)", growth, -1.15))
        slope = math.log(by_n[400][base] / by_n[25][base]) / math.log(16)
        lines.append(f"log-log slope of CPU per round from N=25 to N=400: {slope:.2f} (target <= 1.05)")
    if 25 in by_n:
        r25 = next(r for r in rows if r["silos"] == 25)
        checks.append(("N=25: share of the matmul peak", r25["flops_per_round"] / by_n[25][base] / 1e9 / peak, 0.5))
    for label, value, target in checks:
        ok = value <= -target if target < 0 else value >= target
        lines.append(f"{label}: {value:.3g} (target {'<=' if target < 0 else '>='} {abs(target):g}) "
                     f"{'met' if ok else 'MISSED'}")
    if parts is not None and 25 in by_n:
        r25 = next(r for r in rows if r["silos"] == 25)
        allowed = r25["flops_per_round"] / (0.5 * peak * 1e9)
        at_peak = r25["flops_per_round"] / (peak * 1e9)
        lines.append(f"N=25: one mb-sgd round {1e3 * parts['round']:.2f} ms = kernel {1e3 * parts['kernel']:.2f} "
                     f"(its two matmuls alone {1e3 * parts['matmuls']:.2f}, {1e3 * at_peak:.2f} at the peak) "
                     f"+ its gathers {1e3 * parts['gather']:.2f} + sampler {1e3 * parts['sampler']:.2f} "
                     f"+ noise and release {1e3 * parts['noise and release']:.2f} + other {1e3 * parts['other']:.2f}; "
                     f"50% of the peak allows {1e3 * allowed:.2f} ms")
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--silos", default="10,25,100,400", help="comma-separated N values")
    ap.add_argument("--n", type=int, default=1234)
    ap.add_argument("--d", type=int, default=50)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--batch", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=7, help="rounds per silodp run (steady: rounds 1..R-1)")
    ap.add_argument("--loop-rounds", type=int, default=1, help="Opacus loop rounds per repetition")
    ap.add_argument("--warmup-rounds", type=int, default=2, help="untimed silodp rounds (and one Opacus loop "
                    "round) just before each timed run of the same implementation; 0: none")
    ap.add_argument("--reps", type=int, default=5, help="interleaved repetitions (median kept)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda / cuda:N where torch sees a device: the "
                    "data, the kernels and the releases run there (the draws stay on the CPU generator); "
                    "times are then wall seconds after a synchronize")
    ap.add_argument("--opacus-on-cuda", action="store_true", help="also run the Opacus loops on cuda")
    ap.add_argument("--quick", action="store_true", help="N = 10, 25; 1 repetition")
    ap.add_argument("--breakdown", action="store_true", help="only the N = 25 MB-SGD round's parts and its ghost "
                    "kernel's operators, each call in the CPU clock (products' GFLOP/s at their shapes against the "
                    "peak, the other operators' bytes read), and the peak shares they allow")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message="Full backward hook")  # Opacus' hooks on inputs without grad
    args.silos = [10, 25] if args.quick else [int(s) for s in args.silos.split(",")]
    if args.quick:
        args.reps = 1
    if args.warmup_rounds < 0:
        raise SystemExit(f"--warmup-rounds: must be >= 0, got {args.warmup_rounds}")
    if on_cuda(args.device) and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: torch sees no CUDA device")
    matmul_gflops(args.device)
    if args.breakdown:
        parts, kern = breakdown(args, 25, args.device), kernel_ops(args, 25, args.device)
        matmul_gflops(args.device)
        print("\n".join(breakdown_report(peak(), args, parts, kern)))
        return
    rows = measure(args, args.device)
    parts = breakdown(args, 25, args.device) if 25 in args.silos else None
    print("\n".join(report(rows, peak(), args, parts)))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"peak_gflops": peak(), "peak_measurements": PEAKS, "rows": rows, "threads": args.threads, "device": args.device,
                       "breakdown_n25": parts}, fh, indent=1)


if __name__ == "__main__":
    main()
