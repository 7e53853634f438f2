"""The headline experiment of Noble, Bellet & Dieuleveut (2022, Sec. 5 and Fig. 1): at a fixed
epsilon, DP-SCAFFOLD reaches a higher test accuracy than DP-FedAvg on heterogeneous
Synthetic(alpha, beta), the gap grows with the number K of local steps, and on i.i.d. data there
is no gap.

Protocol (as the authors' code: K T fixed so that every K has the same privacy cost, and
eta_l = eta / (K eta_g) so that K eta_l is fixed): every K in ``local_steps`` runs
T = ``total_steps`` / K rounds; sigma_g is calibrated once toward the server (worst case, all
rounds; :func:`silodp.accounting.scaffold.scaffold_sigma_g`), so all K run with the same noise
multiplier and the same certified (epsilon, delta); DP-SCAFFOLD-warm's K initial noisy gradients
are accounted, so it runs with a slightly larger sigma_g. Linear softmax model on
FedProx's Synthetic(alpha, beta) with unit-norm inputs and an L2 penalty (prox), the metric is the
final model's accuracy on the users' pooled test records, averaged over ``seeds``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

ALGORITHMS = ("dp-scaffold", "dp-scaffold-warm", "dp-fedavg")


@dataclasses.dataclass(frozen=True)
class Setting:
    """One dataset: Synthetic(alpha, beta), or FedProx's i.i.d. variant."""

    label: str
    alpha: float
    beta: float
    iid: bool = False


SETTINGS = (Setting("Synthetic(1,1)", 1.0, 1.0), Setting("Synthetic(5,5)", 5.0, 5.0), Setting("iid", 0.0, 0.0, True))


@dataclasses.dataclass(frozen=True)
class HeadlineConfig:
    """The grid and its fixed parameters (defaults: the full run of docs/scaffold.md)."""

    settings: tuple[Setting, ...] = SETTINGS
    local_steps: tuple[int, ...] = (5, 50, 100)
    algorithms: tuple[str, ...] = ALGORITHMS
    seeds: tuple[int, ...] = (0, 1, 2)
    epsilon: float | None = 10.0  # None: no noise (the non-private reference)
    delta: float = 1e-5
    total_steps: int = 1000
    num_users: int = 20
    samples_per_user: int = 250
    dim: int = 40
    user_sampling: float = 1.0
    data_sampling: float = 0.2
    clip: float = 1.0
    eta: float = 10.0
    l2: float = 5e-3

    def rounds(self, k: int) -> int:
        if self.total_steps % k:
            raise ValueError(f"local_steps: {k} must divide total_steps={self.total_steps}")
        return self.total_steps // k


#: a grid small enough for a unit test and the notebook (seconds, not minutes)
QUICK = HeadlineConfig(settings=SETTINGS[1:], local_steps=(5, 50), algorithms=("dp-scaffold", "dp-fedavg"), seeds=(0,),
                       total_steps=200, num_users=10, samples_per_user=150)


def _data(cfg: HeadlineConfig, setting: Setting, seed: int):
    from .fedprox_data import fedprox_synthetic

    return fedprox_synthetic(setting.alpha, setting.beta, num_users=cfg.num_users, samples_per_user=cfg.samples_per_user,
                             dim=cfg.dim, iid=setting.iid, normalize=True, seed=seed)


def noise(cfg: HeadlineConfig, records_per_user: int, warm_steps: int = 0) -> tuple[float, float]:
    """(sigma_g, noise std) for K T = ``total_steps`` noisy gradients (plus the warm start's) toward
    the server, worst case."""
    from silodp.accounting.scaffold import ScaffoldConfig, scaffold_sigma_g

    acc = ScaffoldConfig(cfg.num_users, records_per_user, cfg.total_steps, 1, cfg.user_sampling, cfg.data_sampling,
                         cfg.clip, warm_steps)
    z = 0.0 if cfg.epsilon is None else scaffold_sigma_g(acc, cfg.epsilon, cfg.delta).sigma_g
    return z, acc.noise_std(z)


def run_headline(cfg: HeadlineConfig = QUICK, progress=None) -> list[dict]:
    """One row per (setting, K, algorithm, seed): test accuracy, train objective, sigma_g."""
    from .models import linear_model
    from .problems import Problem
    from .prox import L2Squared
    from .registry import get_algorithm

    rows = []
    for setting in cfg.settings:
        for seed in cfg.seeds:
            data = _data(cfg, setting, seed)
            fed = data.train
            problem = Problem(linear_model(data.num_features, data.num_outputs), data.loss, L2Squared(cfg.l2), clip=cfg.clip)
            for k in cfg.local_steps:
                for name in cfg.algorithms:
                    z, std = noise(cfg, fed.min_size, k if name == "dp-scaffold-warm" else 0)
                    algo = get_algorithm(name, rounds=cfg.rounds(k), local_steps=k, step_size=cfg.eta / k,
                                         user_sampling=cfg.user_sampling, data_sampling=cfg.data_sampling,
                                         sigmas={"sigma": std}, metrics_every=0)
                    w = algo.run(problem, fed, seed=seed).w_last
                    rows.append({"setting": setting.label, "local_steps": k, "rounds": cfg.rounds(k), "algorithm": name,
                                 "seed": seed, "test_accuracy": problem.accuracy(w, data.test),
                                 "train_objective": problem.objective(w, fed), "sigma_g": z,
                                 "epsilon": cfg.epsilon, "delta": cfg.delta})
                    if progress is not None:
                        progress(rows[-1])
    return rows


def summarize(rows: list[dict]) -> list[dict]:
    """Mean (and std over seeds) test accuracy per (setting, K, algorithm), and the gap
    DP-SCAFFOLD minus DP-FedAvg per (setting, K)."""
    keys = sorted({(r["setting"], r["local_steps"]) for r in rows}, key=lambda t: (t[0], t[1]))
    out = []
    for setting, k in keys:
        entry = {"setting": setting, "local_steps": k}
        for name in sorted({r["algorithm"] for r in rows}):
            acc = np.array([r["test_accuracy"] for r in rows
                            if (r["setting"], r["local_steps"], r["algorithm"]) == (setting, k, name)])
            entry[name] = float(acc.mean())
            entry[f"{name}_std"] = float(acc.std())
        if "dp-scaffold" in entry and "dp-fedavg" in entry:
            entry["gap"] = entry["dp-scaffold"] - entry["dp-fedavg"]
        out.append(entry)
    return out


def headline_figure(summary: list[dict]):
    """Test accuracy against K, one panel per setting, DP-SCAFFOLD and DP-FedAvg."""
    import matplotlib.pyplot as plt

    settings = list(dict.fromkeys(e["setting"] for e in summary))
    fig, axes = plt.subplots(1, len(settings), figsize=(4.2 * len(settings), 3.4), sharey=True, squeeze=False)
    for ax, setting in zip(axes[0], settings):
        part = [e for e in summary if e["setting"] == setting]
        ks = [e["local_steps"] for e in part]
        for name, marker in zip(ALGORITHMS, ("o", "^", "s")):
            if name in part[0]:
                ax.errorbar(ks, [e[name] for e in part], yerr=[e[f"{name}_std"] for e in part], marker=marker,
                            capsize=3, label=name)
        ax.set_xscale("log")
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set_title(setting)
        ax.set_xlabel("local steps K (K T fixed)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("test accuracy")
    axes[0][0].legend()
    fig.tight_layout()
    return fig
