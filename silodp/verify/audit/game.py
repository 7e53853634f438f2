"""The ISRL-DP distinguishing game, vectorized over trials, and its end-to-end reference.

Threat model (paper Def 4): a curious server sees silo i's whole transcript. The game runs an
algorithm on two neighbouring datasets D, D' of silo i (one record replaced, see
:mod:`silodp.verify.audit.canaries`) and scores each transcript. Both runs *replay* one reference run
(:meth:`FederatedAlgorithm.run` with ``replay=``), so every release is computed at the same
iterates: the adversary fixes the queries, which ISRL-DP allows (the guarantee holds for every
fixed sequence of the other silos' messages).

At fixed iterates a Gaussian algorithm's release t of silo i is

    y_t = offset_t + (1/K) sum_{k in B_t} term_t(x_k) + N(0, std_t^2 I)

with ``term_t`` the clipped per-sample gradient (or difference of two) at the replayed query
point(s), ``B_t`` the secret minibatch and ``offset_t`` a public quantity (an earlier release or
aggregate), which the adversary subtracts. :func:`build_plan` computes ``term_t`` of every record
of silo i for both datasets once, with the algorithms' own code (:mod:`silodp.algorithms.grads`);
:func:`simulate` then draws batches and noise for T trials at once; :func:`lr_scores` is the
likelihood-ratio statistic of the adversary's model (per release a mixture over how many times
the replaced record is in the batch). :func:`run_transcripts` plays the same game with the real
algorithm, one :meth:`run` per trial (slow; it checks the vectorized path).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Callable

import numpy as np
import torch
from scipy.stats import binom

from silodp.accounting.releases import BatchSampling
from silodp.algorithms import grads as _grads
from silodp.verify.audit.estimators import Scores
from silodp.verify.instruments import Instrumented, RecordingContext

SAMPLINGS = ("full", "replacement", "permutation", "subset")
#: a clip function: raw per-sample gradients [n, d] -> (clipped [n, d], threshold used)
ClipFn = Callable[[torch.Tensor], tuple[torch.Tensor, float]]


@dataclasses.dataclass(frozen=True)
class Release:
    """One message of the audited silo, as the vectorized game needs it.

    ``rows[h]`` ([n, d]) are the clipped terms of the silo's n records in world h (0: D, 1: D');
    ``std[h]`` the noise standard deviation in world h; ``batch_size`` K (n for full data);
    ``sampling`` "full" | "replacement" | "permutation" (fresh permutation every ``epoch``
    batches of the same ``group``, ``slot`` is this batch's place in it) | "subset" (a fresh
    uniform K-subset every release).
    """

    group: str
    rows: torch.Tensor
    std: tuple[float, float]
    batch_size: int
    sampling: str
    slot: int = 0
    epoch: int = 1

    @property
    def dim(self) -> int:
        return int(self.rows.shape[-1])


@dataclasses.dataclass(frozen=True)
class Plan:
    """The audited silo's releases, the replaced record's index and the noise model."""

    releases: tuple[Release, ...]
    record: int
    shared_noise: bool = False

    def __post_init__(self) -> None:
        if not self.releases:
            raise ValueError("plan: the audited silo released nothing (was it ever available?)")
        for rel in self.releases:
            if rel.sampling not in SAMPLINGS:
                raise ValueError(f"sampling: must be one of {SAMPLINGS}, got {rel.sampling!r}")
            if not all(s > 0 for s in rel.std):
                raise ValueError(f"std: every release needs noise > 0 to be audited, got {rel.std} ({rel.group})")

    def canary_shift(self) -> np.ndarray:
        """||term of the record in D' - in D|| per release (the canary's strength)."""
        return np.array([float((r.rows[1, self.record] - r.rows[0, self.record]).norm()) for r in self.releases])


def gaussian_plan(noise_multiplier: float, dim: int = 1) -> Plan:
    """One Gaussian release of a sensitivity-1 query: world 0 at -e_1 / 2, world 1 at +e_1 / 2."""
    if not (math.isfinite(noise_multiplier) and noise_multiplier > 0):
        raise ValueError(f"noise_multiplier: must be a finite number > 0, got {noise_multiplier}")
    rows = torch.zeros(2, 1, int(dim), dtype=torch.float64)
    rows[0, 0, 0], rows[1, 0, 0] = -0.5, 0.5
    s = float(noise_multiplier)
    return Plan((Release("gaussian", rows, (s, s), 1, "full"),), record=0)


# -- building a plan from a recorded reference run -------------------------------------------------
def clip_whole(clip: float) -> ClipFn:
    """The algorithms' clipping: each per-sample gradient, as a whole, to l2 norm ``clip``."""
    return lambda raw: (_grads.clip_rows(raw, clip), float(clip))


def per_sample_terms(problem, query: tuple, x: torch.Tensor, y: torch.Tensor, clip_fn: ClipFn):
    """Clipped terms ``[n, d]`` of records ``x: [n, ...]`` at ``query = (w, w_old, diff_clip)``
    (a gradient, or a difference of two gradients clipped to ``diff_clip``) and the threshold."""
    w, w_old, diff_clip = query
    terms, threshold = clip_fn(_grads.per_sample_grads(problem, w[None], x[None], y[None])[0])
    if w_old is not None:
        old, _ = clip_fn(_grads.per_sample_grads(problem, w_old[None], x[None], y[None])[0])
        terms = terms - old
        if diff_clip is not None:
            terms = _grads.clip_rows(terms, diff_clip)
    return terms, threshold


def _silo_row(t, silo):
    return t if t is None or t.dim() == 1 else t[silo]


_GAME_SAMPLING = {BatchSampling.FULL: "full", BatchSampling.WITH_REPLACEMENT: "replacement",
                  BatchSampling.SHUFFLED: "permutation", BatchSampling.SUBSET: "subset"}


def build_plan(reference, problem, worlds, silo: int, record: int, clip_fn: ClipFn | None = None,
               noise_factor: Callable[[str, int], float] | None = None, shared_noise: bool = False) -> Plan:
    """The plan of silo ``silo`` from a reference run recorded with :class:`RecordingContext`.

    ``worlds`` = (D, D') as federations; each release's sampling is the one its transcript entry
    records (the sampler that drew the batch).
    ``clip_fn`` replaces whole-gradient clipping (its threshold scales the noise, as code that
    calibrates sigma to its threshold does); ``noise_factor(group, K)`` scales each release's
    noise. Both exist for the deliberately broken variants of :mod:`silodp.verify.audit.mutations`.
    """
    if reference.transcript is None or not reference.transcript or "w" not in reference.transcript[0]:
        raise ValueError("reference: record it with record_transcript=True and a RecordingContext")
    clip = problem.clip
    clip_fn = clip_fn or clip_whole(clip)
    fed0 = worlds[0]
    n = int(fed0.counts[silo])
    releases, seen = [], {}
    for entry in reference.transcript:
        if not bool(entry["available"][silo]):
            continue
        query = (_silo_row(entry["w"], silo), _silo_row(entry["w_old"], silo), entry["diff_clip"])
        rows, stds = [], []
        for fed in worlds:
            terms, threshold = per_sample_terms(problem, query, fed.x[silo, :n], fed.y[silo, :n], clip_fn)
            rows.append(terms)
            stds.append(float(entry["std"]) * threshold / clip)
        batch = entry["batch"]
        k = n if batch is None else int(batch.shape[1])
        factor = 1.0 if noise_factor is None else float(noise_factor(entry["group"], k))
        # a permutation batch of all n records is the full data
        sampling = _GAME_SAMPLING[entry["sampling"]]
        if sampling != "replacement" and k >= n:
            sampling = "full"  # every record in every batch
        count = seen.get(entry["group"], 0)
        seen[entry["group"]] = count + 1
        epoch = max(1, fed0.min_size // k)
        releases.append(Release(entry["group"], torch.stack(rows), (stds[0] * factor, stds[1] * factor), k,
                                sampling, count % epoch, epoch))
    return Plan(tuple(releases), record, shared_noise)


# -- the vectorized game ------------------------------------------------------------------------------
def _batch_counts(rel: Release, trials: int, n: int, gen: torch.Generator, perms: dict) -> torch.Tensor:
    """How often each record is in the batch, ``[trials, n]``."""
    k = rel.batch_size
    if rel.sampling == "replacement":
        idx = torch.clamp((torch.rand(trials, k, generator=gen, dtype=torch.float64) * n).long(), max=n - 1)
    elif rel.sampling == "subset":
        idx = torch.rand(trials, n, generator=gen).argsort(dim=1)[:, :k]
    else:
        if rel.slot == 0 or rel.group not in perms:
            perms[rel.group] = torch.rand(trials, n, generator=gen).argsort(dim=1)
        idx = perms[rel.group][:, rel.slot * k:(rel.slot + 1) * k]
    counts = torch.zeros(trials, n, dtype=rel.rows.dtype)
    return counts.scatter_add_(1, idx, torch.ones(1, dtype=rel.rows.dtype).expand(idx.shape))


def simulate(plan: Plan, world: int, trials: int, generator: torch.Generator) -> list[torch.Tensor]:
    """Released messages (offsets removed) of ``trials`` runs in ``world``: one ``[trials, d]``
    tensor per release. Batches and noise for all trials are drawn at once."""
    if world not in (0, 1):
        raise ValueError(f"world: must be 0 (D) or 1 (D'), got {world}")
    perms: dict = {}
    shared = None
    out = []
    for rel in plan.releases:
        rows = rel.rows[world]
        n, d = rows.shape
        if rel.sampling == "full":
            mean = rows.mean(0).expand(trials, d)
        else:
            mean = _batch_counts(rel, trials, n, generator, perms) @ rows / rel.batch_size
        if shared is None or not plan.shared_noise:
            shared = torch.randn(trials, d, generator=generator, dtype=rows.dtype)
        out.append(mean + rel.std[world] * shared)
    return out


def _inclusion(rel: Release, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Possible counts of the replaced record in the batch and their log-probabilities."""
    if rel.sampling == "full":
        return np.array([1]), np.array([0.0])
    if rel.sampling in ("permutation", "subset"):
        p = rel.batch_size / n
        return (np.array([0, 1]), np.log([1 - p, p])) if p < 1 else (np.array([1]), np.array([0.0]))
    ks = np.arange(rel.batch_size + 1)
    pmf = binom.pmf(ks, rel.batch_size, 1.0 / n)
    keep = pmf > 1e-14
    return ks[keep], np.log(pmf[keep])


def _components(rel: Release, world: int, record: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The adversary's mixture for a release: log-weights [C] and means [C, d].

    Given k copies of the replaced record, the other K - k batch members are uniform over the
    other records: their expected mean is taken, their spread ignored (the canary's direction is
    one they barely use).
    """
    rows = rel.rows[world]
    n = rows.shape[0]
    if rel.sampling == "full":
        return torch.zeros(1, dtype=rows.dtype), rows.mean(0, keepdim=True)
    ks, logp = _inclusion(rel, n)
    rest = (rows.sum(0) - rows[record]) / max(n - 1, 1)
    k = torch.as_tensor(ks, dtype=rows.dtype)[:, None]
    means = (k * rows[record] + (rel.batch_size - k) * rest) / rel.batch_size
    return torch.as_tensor(logp, dtype=rows.dtype), means


def _log_mixture(y: torch.Tensor, y_sq: torch.Tensor, logp: torch.Tensor, means: torch.Tensor,
                 std: float) -> torch.Tensor:
    """log sum_c p_c N(y; means_c, std^2 I) up to a constant shared by both worlds, ``[T]``."""
    sq = y_sq[:, None] - 2.0 * (y @ means.T) + means.pow(2).sum(-1)[None]  # ||y - mean_c||^2, [T, C]
    logits = logp[None] - sq / (2 * std * std)
    top = logits[:, 0] if logits.shape[1] == 1 else torch.logsumexp(logits, dim=1)
    return top - y.shape[1] * math.log(std)


def lr_scores(plan: Plan, messages: list[torch.Tensor]) -> torch.Tensor:
    """Log-likelihood ratio log p(transcript | D') / p(transcript | D) of the adversary's model
    (independent releases, each a Gaussian mixture over the record's batch count). Exact for
    full-data releases; for minibatches the spread of the other batch members is ignored."""
    total = torch.zeros(messages[0].shape[0], dtype=messages[0].dtype)
    for rel, y in zip(plan.releases, messages):
        y_sq = y.pow(2).sum(-1)
        for world, sign in ((1, 1.0), (0, -1.0)):
            logp, means = _components(rel, world, plan.record)
            total += sign * _log_mixture(y, y_sq, logp, means, rel.std[world])
    return total


def shared_noise_scores(plan: Plan, messages: list[torch.Tensor]) -> torch.Tensor:
    """A chosen statistic for transcripts whose releases share one noise draw (``shared-seed``).

    Project every release (minus its expected value without the record) on the canary direction
    u; centring across releases cancels the shared noise, leaving +-(canary term) in the releases
    whose batch holds the record. Score: the third central moment across releases (positive when
    a few releases stick out upwards: the canary of D'; negative for D's record).
    """
    shifts = [r.rows[1, plan.record] - r.rows[0, plan.record] for r in plan.releases]
    u = sum(s / s.norm() for s in shifts if s.norm() > 0)
    if not isinstance(u, torch.Tensor) or u.norm() == 0:
        raise ValueError("plan: the canary never changes a release; nothing to score")
    u = u / u.norm()
    proj = torch.stack([(y - _components(rel, 0, plan.record)[1][0]) @ u for rel, y in zip(plan.releases, messages)], 1)
    centred = proj - proj.mean(1, keepdim=True)
    return centred.pow(3).sum(1)


def score_fn(plan: Plan) -> Callable[[Plan, list[torch.Tensor]], torch.Tensor]:
    """The adversary's statistic for ``plan``: LR, or the shared-noise statistic."""
    return shared_noise_scores if plan.shared_noise else lr_scores


@contextlib.contextmanager
def one_thread():
    """Run torch ops on one intra-op thread: the game's tensors are small ([chunk, d]), and on a
    busy machine the thread pool's synchronization made them over 10x slower (measured)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def collect(plan: Plan, trials: int, seed: int = 0, chunk: int = 25_000) -> Scores:
    """Scores of ``trials`` vectorized runs in each world (chunks of ``chunk`` trials)."""
    if int(trials) != trials or trials < 2:
        raise ValueError(f"trials: must be an integer >= 2, got {trials}")
    gen = torch.Generator().manual_seed(int(seed))
    score = score_fn(plan)
    out = []
    with one_thread():
        for world in (0, 1):
            parts, left = [], int(trials)
            while left > 0:
                m = min(chunk, left)
                parts.append(score(plan, simulate(plan, world, m, gen)).numpy())
                left -= m
            out.append(np.concatenate(parts))
    return Scores(out[0], out[1])


# -- the end-to-end game (one real run per trial) --------------------------------------------------
def run_transcripts(algo, problem, worlds, silo: int, reference, trials: int, seed: int = 0) -> list[list[torch.Tensor]]:
    """Silo ``silo``'s released messages (offsets removed) in ``trials`` real runs per world,
    each replaying ``reference``: per world, one ``[trials, d]`` tensor per release.

    ``algo`` must be an :class:`~silodp.verify.instruments.Instrumented` algorithm recording its
    transcripts through a :class:`RecordingContext` (or a subclass), with explicit ``sigmas`` (so no
    run recalibrates).
    """
    if not (isinstance(algo, Instrumented) and issubclass(algo.context, RecordingContext)):
        raise ValueError("algo: must be Instrumented(algorithm, RecordingContext or a subclass)")
    out = []
    for world, fed in enumerate(worlds):
        runs = []
        for t in range(int(trials)):
            res = algo.run(problem, fed, seed=int(seed) + 2 * t + world, replay=reference)
            runs.append([e["messages"][silo] - (0 if e["offset"] is None else _silo_row(e["offset"], silo))
                         for e in res.transcript if bool(e["available"][silo])])
        out.append([torch.stack(msgs) for msgs in zip(*runs)])
    return out


def replay_residuals(plan: Plan, result, silo: int, world: int) -> list[float]:
    """Per release of a real run (``result``, replaying the plan's reference, recorded with a
    :class:`RecordingContext`): ||message - offset - the plan's mean for that run's batch|| in
    units of std * sqrt(d). Pure noise, so O(1), exactly when the plan reproduces the algorithm."""
    entries = [e for e in result.transcript if bool(e["available"][silo])]
    if len(entries) != len(plan.releases):
        raise ValueError("result: release count differs from the plan's")
    out = []
    for rel, e in zip(plan.releases, entries):
        rows = rel.rows[world]
        mean = rows.mean(0) if e["batch"] is None else rows[e["batch"][silo]].mean(0)
        offset = 0 if e["offset"] is None else _silo_row(e["offset"], silo)
        out.append(float((e["messages"][silo] - offset - mean).norm()) / (rel.std[world] * rel.dim ** 0.5))
    return out


def score_runs(plan: Plan, transcripts: list[list[torch.Tensor]]) -> Scores:
    """Scores of end-to-end transcripts (:func:`run_transcripts`) with the plan's statistic."""
    if any(len(t) != len(plan.releases) for t in transcripts):
        raise ValueError("transcripts: release count differs from the plan's")
    score = score_fn(plan)
    return Scores(score(plan, transcripts[0]).numpy(), score(plan, transcripts[1]).numpy())


# -- the shuffle protocol P_vec (SDP): the server sees the shuffled messages ----------------------
def pvec_scores(params, num_messages: int, trials: int, seed: int = 0, bound: float = 1.0) -> Scores:
    """Scores of ``trials`` P_vec invocations per world with a Dirac canary (paper Alg 4-5).

    ``num_messages`` messages, one of them the canary: ``-bound e_1`` in D, ``+bound e_1`` in D'
    (it moves coordinate 1's count of ones by the full g), the others 0. The server's view of
    coordinate 1 is its total count of ones (all bits are shuffled together); the
    likelihood-ratio test of two shifted binomials is monotone in that count, so the score is
    the analyzer's estimate of coordinate 1. Trials are drawn at once; the distribution is the
    one :func:`silodp.algorithms.shuffle.pvec_fast` samples (tested against it).
    """
    from silodp.algorithms.shuffle import analyze, as_params

    p = as_params(params)
    n, t = int(num_messages), int(trials)
    if n < 1 or t < 2:
        raise ValueError(f"num_messages, trials: need >= 1 and >= 2, got {n}, {trials}")
    gen = torch.Generator().manual_seed(int(seed))
    half = p.g / 2.0  # a zero coordinate maps to g/2, rounded up with probability frac(g/2)

    def binomial(count: float, prob: float) -> torch.Tensor:
        return torch.binomial(torch.full((t,), float(count), dtype=torch.float64),
                              torch.full((t,), float(prob), dtype=torch.float64), generator=gen)

    out = []
    with one_thread():
        for world in (0, 1):
            rest = (n - 1) * math.floor(half) + binomial(n - 1, half - math.floor(half))
            totals = rest + world * p.g + binomial(n * p.b, p.p)
            out.append(analyze(totals, n, bound, p).numpy())
    return Scores(out[0], out[1])
