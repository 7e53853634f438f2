"""DP-SCAFFOLD, DP-SCAFFOLD-warm, DP-FedAvg and DP-FedSGD (silodp.algorithms.scaffold): the update
rules against a loop-by-loop reference fed the same released gradients, independent noise across
users, Poisson user sampling, fresh subsets without replacement, client drift with zero noise, and
the calibration path."""

import math

import numpy as np
import pytest
import torch
from scipy import stats
from scipy.optimize import minimize

from silodp.accounting import REPLACE_ONE, epsilon
from silodp.algorithms import ALGORITHMS, L2Squared, Problem, Zero, linear_model
from silodp.algorithms.fedprox_data import fedprox_synthetic
from silodp.algorithms.federation import SubsetSampler
from silodp.algorithms.scaffold import DpFedAvg, DpFedSGD, DpScaffold, DpScaffoldWarm

FAMILY = ("dp-scaffold", "dp-scaffold-warm", "dp-fedavg", "dp-fedsgd")


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Thousands of tiny local steps: intra-op threads only add contention on a shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def small():
    data = fedprox_synthetic(1, 1, num_users=4, samples_per_user=30, dim=3, num_classes=3, normalize=True, seed=2)
    return data, Problem(linear_model(3, 3), "softmax", Zero(), clip=1.0)


def test_registered_under_their_cli_names():
    assert {ALGORITHMS[n].name for n in FAMILY} == set(FAMILY)
    assert "warm_steps" in ALGORITHMS["dp-scaffold-warm"].own_params() and not ALGORITHMS["dp-fedavg"].control_variates


def _reference(result, cls, n_users, dim, steps, eta, eta_g, rounds):
    """SCAFFOLD / FedAvg written out user by user (Karimireddy et al. 2020, Alg. 1, option II;
    Noble et al. 2022, Alg. 1) on the released noisy gradients of ``result``'s transcript."""
    x = torch.zeros(dim, dtype=torch.float64)
    ci = [torch.zeros(dim, dtype=torch.float64) for _ in range(n_users)]
    c = torch.zeros(dim, dtype=torch.float64)
    warm = [e["messages"] for e in result.transcript if e["group"] == "warm"]
    if warm:
        ci = [torch.stack([m[i] for m in warm]).mean(0) for i in range(n_users)]
        c = sum(ci) / n_users
    for r in range(rounds):
        entries = [e for e in result.transcript if e["group"] == "grad" and e["round"] == r]
        if not entries:
            continue
        sampled = [i for i in range(n_users) if entries[0]["available"][i]]
        ys, new_ci = {}, {}
        for i in sampled:
            y = x.clone()
            for e in entries:
                g = e["messages"][i]
                y = y - eta * (g - ci[i] + c) if cls.control_variates else y - eta * g
            ys[i] = y
            new_ci[i] = ci[i] - c + (x - y) / (steps * eta)
        x_next = x + eta_g * sum(ys[i] - x for i in sampled) / len(sampled)
        if cls.control_variates:
            c = c + sum(new_ci[i] - ci[i] for i in sampled) / n_users
            for i in sampled:
                ci[i] = new_ci[i]
        x = x_next
    return x


@pytest.mark.parametrize("cls", [DpScaffold, DpScaffoldWarm, DpFedAvg, DpFedSGD])
def test_updates_match_the_reference(cls, small):
    data, problem = small
    steps = 1 if cls is DpFedSGD else 3
    kw = dict(rounds=4, local_steps=steps, user_sampling=0.6, data_sampling=0.3, step_size=0.2, global_step_size=0.7,
              sigmas={"sigma": 0.3}, record_transcript=True, metrics_every=0, w0=torch.zeros(problem.dim, dtype=torch.float64))
    if cls is DpScaffoldWarm:
        kw["warm_steps"] = 2
    result = cls(**kw).run(problem, data.train, seed=5)
    assert any(not e["available"].all() for e in result.transcript if e["group"] == "grad")  # partial participation
    ref = _reference(result, cls, 4, problem.dim, steps, 0.2, 0.7, 4)
    torch.testing.assert_close(result.w_last, ref, rtol=0, atol=1e-12)


def test_scaffold_with_one_local_step_is_fedsgd(small):
    """K = 1, full participation, f1 = 0: c = mean_i c_i, so the corrections cancel in the average."""
    data, problem = small
    kw = dict(rounds=6, local_steps=1, data_sampling=0.3, step_size=0.3, sigmas={"sigma": 0.2}, metrics_every=0)
    a = DpScaffold(**kw).run(problem, data.train, seed=1).w_last
    b = DpFedSGD(**kw).run(problem, data.train, seed=1).w_last
    torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_noise_is_independent_across_users_and_has_the_right_scale():
    """Replay with zero noise recovers each user's noise; users' noises are uncorrelated (the
    authors' code gave every user the same noise), each has std sigma (chi-square)."""
    data = fedprox_synthetic(1, 1, num_users=6, samples_per_user=40, dim=4, num_classes=3, seed=0)
    problem = Problem(linear_model(4, 3), "softmax", clip=1.0)
    sigma = 0.5
    kw = dict(rounds=8, local_steps=5, data_sampling=0.25, step_size=0.1, record_transcript=True, metrics_every=0,
              warm_steps=3)
    noisy = DpScaffoldWarm(sigmas={"sigma": sigma}, **kw).run(problem, data.train, seed=3)
    clean = DpScaffoldWarm(sigmas={"sigma": 0.0}, **kw).run(problem, data.train, seed=3, replay=noisy)
    z = torch.stack([(a["messages"] - b["messages"]) / sigma for a, b in zip(noisy.transcript, clean.transcript)]).numpy()
    t, n, d = z.shape  # 43 releases x 6 users x 15 coordinates
    assert not np.allclose(z[:, 0], z[:, 1])
    corr = np.corrcoef(z.transpose(1, 0, 2).reshape(n, -1))
    assert np.abs(corr[~np.eye(n, dtype=bool)]).max() < 5 / np.sqrt(t * d)
    chi2 = float((z ** 2).sum())
    assert 2 * min(stats.chi2.cdf(chi2, z.size), stats.chi2.sf(chi2, z.size)) > 1e-3


def test_poisson_user_sampling():
    data = fedprox_synthetic(0, 0, num_users=10, samples_per_user=10, dim=2, num_classes=2, seed=0)
    problem = Problem(linear_model(2, 2), "softmax", clip=1.0)
    res = DpFedSGD(rounds=300, user_sampling=0.3, batch_size=2, step_size=0.1, sigmas={"sigma": 0.1},
                   record_transcript=True, metrics_every=0).run(problem, data.train, seed=0)
    masks = torch.stack([e["available"] for e in res.transcript]).numpy().astype(float)
    # rounds without any sampled user release nothing (probability 0.7^10 each): count them as zeros
    assert stats.binomtest(int(masks.sum()), 3000, 0.3).pvalue > 1e-3
    assert all(stats.binomtest(int(k), 300, 0.3).pvalue > 1e-4 for k in masks.sum(0))  # every user at rate l
    corr = np.corrcoef(masks.T)  # independently of the others
    assert np.abs(corr[~np.eye(10, dtype=bool)]).max() < 5 / np.sqrt(len(masks))


def test_subsets_are_fresh_uniform_and_without_replacement():
    counts = torch.tensor([5, 8])
    mask = torch.arange(8)[None, :] < counts[:, None]
    sampler = SubsetSampler(mask, 3, torch.Generator().manual_seed(0))
    draws = torch.stack([sampler.next() for _ in range(3000)])  # [3000, 2, 3]
    assert all(int(draws[:, i].max()) < int(counts[i]) for i in range(2))
    assert all(len(set(row.tolist())) == 3 for row in draws.reshape(-1, 3))
    for i, n in enumerate(counts.tolist()):
        freq = np.bincount(draws[:, i].reshape(-1).numpy(), minlength=n)
        assert stats.chisquare(freq).pvalue > 1e-3


def test_zero_noise_scaffold_converges_where_fedavg_plateaus():
    """Client drift (Karimireddy et al. 2020): on heterogeneous Synthetic(1, 1) with exact local
    gradients, SCAFFOLD reaches the optimum (checked against L-BFGS on the same objective written in
    numpy) while FedAvg with the same K and step stalls at a fixed point away from it."""
    data = fedprox_synthetic(1, 1, num_users=10, samples_per_user=60, dim=10, normalize=True, seed=0)
    fed = data.train
    lam = 1e-2
    problem = Problem(linear_model(10, 10), "softmax", L2Squared(lam), clip=1e3)
    kw = dict(rounds=100, local_steps=20, data_sampling=1.0, step_size=0.5, sigmas={"sigma": 0.0}, metrics_every=10)
    scaffold = DpScaffold(**kw).run(problem, fed, seed=0)
    fedavg = DpFedAvg(**kw).run(problem, fed, seed=0)
    g_s, g_f = scaffold.history["grad_mapping_norm"], fedavg.history["grad_mapping_norm"]  # rounds 0, 10, ..., 90
    assert g_s[-1] < 1e-6
    assert g_f[-1] > 1e-2 and abs(g_f[-1] - g_f[-4]) < 1e-3 * g_f[-1]  # a plateau over 30 rounds, not slow progress

    xs = [fed.x[i, : fed.counts[i]].numpy() for i in range(fed.num_silos)]
    ys = [fed.y[i, : fed.counts[i]].numpy().astype(int) for i in range(fed.num_silos)]

    def objective(flat):
        w, b = flat[:100].reshape(10, 10), flat[100:]
        val, grad = 0.5 * lam * flat @ flat, lam * flat.copy()
        for x, y in zip(xs, ys):
            z = x @ w.T + b
            p = np.exp(z - z.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            val += np.mean(-np.log(p[np.arange(len(y)), y])) / len(xs)
            p[np.arange(len(y)), y] -= 1
            grad += np.concatenate([(p.T @ x).ravel(), p.sum(0)]) / len(y) / len(xs)
        return val, grad

    best = minimize(objective, np.zeros(110), jac=True, method="L-BFGS-B", options={"gtol": 1e-12, "ftol": 1e-15})
    assert problem.objective(scaffold.w_last, fed) == pytest.approx(best.fun, abs=1e-9)
    assert problem.objective(fedavg.w_last, fed) > best.fun + 1e-4


@pytest.mark.parametrize("name,kwargs,arg", [
    ("dp-scaffold", {"replacement": True}, "replacement"),
    ("dp-scaffold", {"user_sampling": 0.0}, "user_sampling"),
    ("dp-scaffold", {"data_sampling": 1.5}, "data_sampling"),
    ("dp-scaffold", {"local_steps": 0}, "local_steps"),
    ("dp-scaffold", {"global_step_size": -1.0}, "global_step_size"),
    ("dp-scaffold", {"privacy_against": "nobody"}, "privacy_against"),
    ("dp-scaffold", {"participation": "never"}, "participation"),
    ("dp-scaffold", {"batch_size": 999}, "batch_size"),
    ("dp-scaffold-warm", {"warm_steps": 0}, "warm_steps"),
    ("dp-scaffold", {"warm_steps": 2}, "warm_steps"),
    ("dp-fedsgd", {"local_steps": 3}, "local_steps"),
])
def test_bad_parameters_raise_naming_the_argument(small, name, kwargs, arg):
    data, problem = small
    kw = {"rounds": 2, "step_size": 0.1, "sigmas": {"sigma": 0.1}, "batch_size": 4, **kwargs}
    with pytest.raises(ValueError, match=arg):
        ALGORITHMS[name](**kw).run(problem, data.train)


def test_partial_availability_is_rejected(small):
    data, problem = small
    with pytest.raises(ValueError, match="silos_per_round"):
        DpScaffold(rounds=2, step_size=0.1, sigmas={"sigma": 0.1}, batch_size=4).run(problem, data.train.with_availability(2))


def test_calibrated_run_reports_both_guarantees(small):
    data, problem = small
    kw = dict(epsilon=3.0, delta=1e-5, rounds=3, local_steps=2, user_sampling=0.5, data_sampling=0.5, step_size=0.1,
              metrics_every=0)
    algo = DpScaffold(**kw)
    res = algo.run(problem, data.train, seed=0)
    p = res.details
    assert res.epsilon == p["epsilon_server"] <= 3.0
    assert p["epsilon_third_party"] < p["epsilon_server"]
    cfg = algo.plan.transcript_config(problem, data.train)
    assert res.sigmas["sigma"] == pytest.approx(cfg.noise_std(p["sigma_g"]))
    third = DpScaffold(**kw, privacy_against="third-party")
    q = third.run(problem, data.train, seed=0).details
    assert q["epsilon_third_party"] <= 3.0 < q["epsilon_server"]
    assert q["sigma_g"] < p["sigma_g"]


def test_privacy_event_is_the_accounting_layers(small):
    from silodp.accounting.scaffold import server_event

    data, problem = small
    algo = DpScaffoldWarm(rounds=3, local_steps=2, data_sampling=0.5, step_size=0.1, sigmas={"sigma": 0.4})
    cfg = algo.plan.transcript_config(problem, data.train)
    assert cfg.warm_steps == 2 and cfg.batch_size == math.ceil(0.5 * data.train.min_size)
    from silodp.algorithms.privacy import privacy_event

    ours, theirs = privacy_event(type(algo), cfg, algo.sigmas), server_event(cfg, 0.4 / cfg.noise_std(1.0))
    for name in ("pld", "rdp"):  # the declared releases (grad + warm) are the server's worst-case event
        # rel 1e-7: the two event trees compose the same blocks in another order (float round-off only)
        assert epsilon(ours, 1e-5, name, REPLACE_ONE) == pytest.approx(epsilon(theirs, 1e-5, name, REPLACE_ONE), rel=1e-7)


@pytest.mark.parametrize("name,twin", [("scaffold", DpScaffold), ("fedavg", DpFedAvg)])
def test_noiseless_twins_run_the_zero_noise_loop_and_certify_nothing(small, name, twin):
    """SCAFFOLD and FedAvg (the noiseless reference of Noble et al. Fig. 1) are DP-SCAFFOLD and
    DP-FedAvg with zero noise, bit for bit, and no part of the privacy layer treats them as
    private: no epsilon in the run, the calibration, the noise report, the grid or the sweep."""
    from silodp.algorithms.privacy import calibrate_algorithm
    from silodp.experiments import execute as ex
    from silodp.experiments.grid import AlgorithmGrid, GridSpec, is_private

    data, problem = small
    cls = ALGORITHMS[name]
    kw = dict(rounds=4, local_steps=3, user_sampling=0.6, data_sampling=0.3, step_size=0.2, metrics_every=0)
    res = cls(**kw).run(problem, data.train, seed=5)
    torch.testing.assert_close(res.w_last, twin(**kw, sigmas={"sigma": 0.0}).run(problem, data.train, seed=5).w_last,
                               rtol=0, atol=0)
    assert not cls.private and not is_private(name) and twin.private
    assert res.epsilon == math.inf and res.delta is None and res.details == {} and res.sigmas == {"sigma": 0.0}
    assert cls(**kw).plan.run_declaration(problem, data.train, {"sigma": 0.0}, None) is None
    cfg = cls(**kw).plan.transcript_config(problem, data.train)
    cal = calibrate_algorithm(cls, cfg, 1.0, 1e-5)
    assert cal.epsilon == math.inf and cal.sigmas == {} and cal.accountant == "none"
    report = cls.plan.noise_report(cfg, 1.0, 1e-5)  # the private twin's report has sigma_g and epsilon_server
    assert report["tight_certified_epsilon"] == math.inf and report["tight_sigmas"] == {}
    assert not {"sigma_g", "sigma_g_server", "epsilon_server"} & set(report) and "sigma_g_server" in twin.plan.noise_report(
        twin(**kw).plan.transcript_config(problem, data.train), 1.0, 1e-5)
    grid = GridSpec("np", "fedprox_synthetic", (AlgorithmGrid(name, (0.2,), sweep={"local_steps": (3,)},
                                                              params={"data_sampling": 0.3}),), (1.0, 10.0),
                    ((None, 4),), trials=1, data=({"num_users": 4, "samples_per_user": 30, "dim": 3},),
                    model="linear")
    [run] = grid.expand()  # once, whatever the epsilons
    assert run.epsilon is None and run.calibration == "none" and ex.calibration_request(run) is None
    record = ex.execute(run)
    assert record["certified_epsilon"] is None and record["delta"] is None and record["sigmas"] == {"sigma": 0.0}


def test_noise_cli_gives_the_noiseless_twins_no_epsilon(capsys):
    import json

    from silodp.cli import main

    assert main(["noise", "--algorithm", "scaffold", "--epsilon", "1", "--delta", "1e-5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tight_certified_epsilon"] is None and out["accountant"] == "none" and "sigma_g_server" not in out
