"""Shuffle-DP calibration: time against the previous methods, and the per-coordinate noise variance
of P_vec beside the Gaussian twins (docs/shuffle.md).

    PYTHONPATH=. python benchmarks/bench_shuffle.py            # timing ratios (same run) + table
    PYTHONPATH=. python benchmarks/bench_shuffle.py --timing   # timing only
    PYTHONPATH=. python benchmarks/bench_shuffle.py --moments  # every calibration, against the dense sums

Moments (``--moments``), issue 22: every SDP calibration at the WBCD and MNIST presets, its CPU
(``time.process_time``: this process and its BLAS threads) and wall seconds, against the target of
:data:`TARGET_CPU_S` CPU seconds per calibration, with the blocked matrix-product moments (:func:`silodp.accounting.pvec_l2.log_correlations`)
against the baseline ``dense``, the moments as summed before (one log-sum-exp over the window per
order and shift, :func:`dense_shift_moments`), in the same run, and both certificates (the blocked
one never below the dense one at the same cost cap; the blocked sums' cap, pvec_l2.MAX_WORK, is
10x the dense one's, so the MNIST SPIDER groups are no longer capped there).

Timing, on the same configuration in the same run, as ratios: the method before issue 13
(per-invocation budgets scaled by the ``advanced`` accountant, then b by bisection, each step an
exact hockey-stick sum per coordinate composed by KOV), the per-coordinate whole-transcript PLD
(accountant ``pvec-pld``) and the default certificate (``pvec``: the l2-aware Renyi moments,
:mod:`silodp.accounting.pvec_l2`). The first method finishes only for ``sdp-prox-sgd``.

Table: for each SDP algorithm at the toolkit's WBCD and MNIST preset sizes (``silodp run``
defaults: R = 25, K = n / 4, Q = n / K, S = 3 for PL-SVRG, q = 2 for SPIDER), the variance per
coordinate of the server's averaged P_vec estimate from the binomial noise, (2B/g)^2 m b p (1-p) / m^2:
Alg 5 as printed (paper budgets, no rotation, each invocation calibrated alone), silodp before
issue 13 (``--previous``; slow), the per-coordinate PLD (rotation, ``pvec-pld``), the l2-aware
default (rotation, ``pvec``); the ISRL-DP Gaussian twin's sigma^2 / M, and a central-DP Gaussian at
the same transcript and epsilon, sigma^2 / M^2 (the twin's event is the central one: noise
multiplier sigma K / C on a sum of M K records).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import multiprocessing
import time

import numpy as np
from scipy.special import logsumexp

from silodp.accounting import calibrate, pvec, pvec_l2, pvec_protocol
from silodp.accounting.binomial import binomial_protocol_params
from silodp.accounting.releases import releases_event
from silodp.algorithms.privacy import TranscriptConfig, algorithm_class, calibrate_algorithm

EPSILON = 6.0
#: Issue 22's target: every SDP calibration at the WBCD and MNIST presets within this many CPU seconds.
TARGET_CPU_S = 3.0
#: ``silodp run`` defaults at the two presets (smallest silo's training size n, N silos, d)
PRESETS = {"wbcd": dict(n=170, num_silos=2, dimension=161), "mnist": dict(n=160, num_silos=25, dimension=3329)}
TWINS = {"sdp-prox-sgd": "isrl-prox-sgd", "sdp-prox-svrg": "isrl-prox-svrg", "sdp-pl-svrg": "isrl-pl-svrg",
         "sdp-spider": "isrl-spider"}
#: the Gaussian twin's noise key of each P_vec message group (SPIDER's difference noise depends on
#: the step length, so it has no single sigma to compare)
TWIN_KEYS = {"sdp-prox-sgd": {"grad": "sigma"}, "sdp-prox-svrg": {"full": "sigma1", "diff": "sigma2"},
             "sdp-pl-svrg": {"full": "sigma1", "diff": "sigma2"}, "sdp-spider": {"grad": "sigma1"}}


def config(preset: str, algorithm: str) -> TranscriptConfig:
    p = PRESETS[preset]
    K = p["n"] // 4
    cls = algorithm_class(algorithm)
    extra = {"inner_steps": p["n"] // K} if "svrg" in algorithm else {}
    if algorithm == "sdp-pl-svrg":
        extra["restarts"] = 3
    if algorithm == "sdp-spider":
        extra["period"] = 2
    return cls.plan.transcript(rounds=25, batch_size=K, replacement=cls.default_replacement, **p, **extra)


def previous_params(algorithm: str, cfg: TranscriptConfig, epsilon: float, delta: float) -> dict:
    """silodp before issue 13: budgets scaled by the advanced accountant, b by KOV bisection."""
    plan = [r for r in algorithm_class(algorithm).plan.shuffle_declaration(cfg, {"epsilon": epsilon, "delta": delta})
            if r.count]
    scale = calibrate(lambda s: releases_event([dataclasses.replace(r, epsilon=r.epsilon / s) for r in plan]),
                      epsilon, delta, "advanced").noise_multiplier
    out = {}
    for r in plan:
        p = binomial_protocol_params(r.epsilon / scale, r.delta, r.bound, cfg.dimension, r.messages)
        out[r.group] = dict(g=p.g, b=p.b, p=p.p, rotate=False, messages=r.messages, bound=r.bound)
    return out


def variance(params: dict, dimension: int) -> float:
    """Per-coordinate variance of the averaged estimate from the binomial noise."""
    bound = pvec.rotated_bound(params["bound"], dimension) if params["rotate"] else params["bound"]
    m, g, b, p = params["messages"], params["g"], params["b"], params["p"]
    return (2 * bound / g) ** 2 * m * b * p * (1 - p) / m ** 2


def dense_shift_moments(trials: int, shifts: int, orders: tuple = pvec_l2.ORDERS) -> tuple:
    """The baseline: :func:`silodp.accounting.pvec_l2.shift_moments` as computed before issue 22
    (one log-sum-exp over the whole window per order and shift, n (shifts + 1) exponentials per order)."""
    if trials > pvec_l2.trials_cap(shifts, len(orders)):
        return np.full((len(orders), shifts + 1), np.inf), 1.0
    lo, c, outside = pvec_protocol.log_pmf_window(trials, pvec_l2.WINDOW_SDS, shifts)
    n = trials - 2 * lo + 1
    inside = min(shifts, len(c) - n) + 1
    partners = np.lib.stride_tricks.sliding_window_view(c, n)[:inside]
    out = np.full((len(orders), shifts + 1), np.inf)
    for i, a in enumerate(orders):
        out[i, :inside] = logsumexp(a * c[:n] + (1 - a) * partners, axis=1)
    return out, outside


#: The baseline's cost cap (pvec_l2.MAX_WORK before issue 22: beyond it the l2 certificate was
#: taken at the capped noise and the per-coordinate PLD consulted too).
DENSE_MAX_WORK = 2e8


def moments_timing(presets=tuple(PRESETS)) -> list[dict]:
    """Every SDP calibration with the blocked moments and with the dense baseline (the dense sums
    at :data:`DENSE_MAX_WORK`), same run."""
    rows = []
    blocked, cap = pvec_l2.shift_moments, pvec_l2.MAX_WORK
    dense = functools.lru_cache(maxsize=256)(dense_shift_moments)
    for preset in presets:
        for algorithm in TWINS:
            cfg = config(preset, algorithm)
            row = {"preset": preset, "algorithm": algorithm}
            for name, fn, work in (("blocked", blocked, cap), ("dense", dense, DENSE_MAX_WORK)):
                pvec_l2.shift_moments, pvec_l2.MAX_WORK = fn, work
                try:
                    _clear_caches()
                    dense.cache_clear()
                    wall, cpu = time.perf_counter(), time.process_time()
                    out = calibrate_algorithm(algorithm, cfg, EPSILON, 1.0 / cfg.n ** 2)
                    row[f"{name}_cpu_s"] = time.process_time() - cpu
                    row[f"{name}_wall_s"] = time.perf_counter() - wall
                    row[f"{name}_epsilon"] = out.epsilon
                    row[f"{name}_b"] = {k: v["b"] for k, v in out.shuffle.items()}
                finally:
                    pvec_l2.shift_moments, pvec_l2.MAX_WORK = blocked, cap
            row["cpu_ratio"] = row["dense_cpu_s"] / row["blocked_cpu_s"]
            row["wall_ratio"] = row["dense_wall_s"] / row["blocked_wall_s"]
            row["within_target"] = row["blocked_cpu_s"] <= TARGET_CPU_S
            rows.append(row)
            print(json.dumps(row), flush=True)
    slowest = max(rows, key=lambda r: r["blocked_cpu_s"])
    print(json.dumps({"target_cpu_s": TARGET_CPU_S, "all_within_target": all(r["within_target"] for r in rows),
                      "slowest": f"{slowest['preset']} {slowest['algorithm']}",
                      "slowest_cpu_s": slowest["blocked_cpu_s"], "slowest_wall_s": slowest["blocked_wall_s"]}))
    return rows


def _clear_caches() -> None:
    for fn in (pvec.transcript_epsilon, pvec.calibrate_noise, pvec.coordinate_pld, pvec.invocation_pld,
               pvec_l2.certificate, pvec_l2.shift_moments):
        fn.cache_clear()


def _timed(fn) -> tuple[dict, object]:
    """({"wall_s", "cpu_s"}, fn()) from cold caches."""
    _clear_caches()
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}, out


def timing(repeats: int = 1) -> dict:
    """Calibration time of the three methods for sdp-prox-sgd at the WBCD preset (the one SDP
    transcript the first method calibrates in seconds; the SVRG ones did not finish in 18 minutes)."""
    cfg = config("wbcd", "sdp-prox-sgd")
    delta = 1.0 / cfg.n ** 2
    methods = {"previous": lambda: previous_params("sdp-prox-sgd", cfg, EPSILON, delta),
               "pvec-pld": lambda: calibrate_algorithm("sdp-prox-sgd", cfg, EPSILON, delta, accountant="pvec-pld"),
               "pvec": lambda: calibrate_algorithm("sdp-prox-sgd", cfg, EPSILON, delta)}
    out = {name: min((_timed(fn)[0] for _ in range(repeats)), key=lambda t: t["cpu_s"])
           for name, fn in methods.items()}
    for key in ("cpu_s", "wall_s"):
        out[f"speedup_over_previous_{key}"] = out["previous"][key] / out["pvec"][key]
        out[f"speedup_over_pvec_pld_{key}"] = out["pvec-pld"][key] / out["pvec"][key]
    return out


def _previous_cell(args, queue):
    queue.put(previous_params(*args))


def table_row(preset: str, algorithm: str, previous_limit: float) -> dict:
    cfg = config(preset, algorithm)
    delta = 1.0 / cfg.n ** 2
    seconds, after = _timed(lambda: calibrate_algorithm(algorithm, cfg, EPSILON, delta))
    pld_seconds, per_coordinate = _timed(lambda: calibrate_algorithm(algorithm, cfg, EPSILON, delta,
                                                                     accountant="pvec-pld"))
    try:
        paper = calibrate_algorithm(algorithm, cfg, EPSILON, delta, method="paper")
    except ValueError:  # the paper's per-invocation budgets need more than pvec.MAX_TRIALS trials
        paper = None
    twin = calibrate_algorithm(TWINS[algorithm], cfg, EPSILON, delta)
    before = None
    if previous_limit > 0:
        queue = multiprocessing.Queue()
        proc = multiprocessing.Process(target=_previous_cell, args=((algorithm, cfg, EPSILON, delta), queue))
        proc.start()
        proc.join(previous_limit)
        if proc.is_alive():
            proc.terminate()
        else:
            before = queue.get()
    rows = {}
    for group, after_p in after.shuffle.items():
        key = TWIN_KEYS[algorithm].get(group)
        sigma = None if key is None else twin.sigmas[key]
        rows[group] = {
            "paper_alg5": None if paper is None else variance(paper.shuffle[group], cfg.dimension),
            "before": None if before is None else variance(before[group], cfg.dimension),
            "per_coordinate": variance(per_coordinate.shuffle[group], cfg.dimension),
            "after": variance(after_p, cfg.dimension),
            "isrl_gaussian": None if sigma is None else sigma ** 2 / cfg.m,
            "central_gaussian": None if sigma is None else sigma ** 2 / cfg.m ** 2,
        }
    return {"preset": preset, "algorithm": algorithm, "certified_after": after.epsilon,
            "certified_per_coordinate": per_coordinate.epsilon,
            "certified_paper_alg5": None if paper is None else paper.epsilon,
            "calibration_cpu_s": seconds["cpu_s"], "calibration_wall_s": seconds["wall_s"],
            "within_target": seconds["cpu_s"] <= TARGET_CPU_S, "per_coordinate_cpu_s": pld_seconds["cpu_s"],
            "per_coordinate_wall_s": pld_seconds["wall_s"], "groups": rows}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--timing", action="store_true", help="only the timing ratio")
    ap.add_argument("--previous", type=float, default=0.0, help="seconds allowed per previous-method cell (0: skip)")
    ap.add_argument("--moments", action="store_true", help="every calibration: blocked moments against the dense sums")
    args = ap.parse_args()
    if args.moments:
        moments_timing()
        return
    print(json.dumps({"timing": timing()}))
    if args.timing:
        return
    for preset in PRESETS:
        for algorithm in TWINS:
            print(json.dumps(table_row(preset, algorithm, args.previous)), flush=True)


if __name__ == "__main__":
    main()
