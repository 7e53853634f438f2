"""The noise each silo adds has the calibrated standard deviation (chi-square), and the noises
of different silos and of different rounds are independent (correlations near 0)."""

import numpy as np
import pytest
import torch
from scipy import stats

from silodp.algorithms import ALGORITHMS, Problem, linear_model, synthetic

from alg_helpers import GAUSSIAN_PRIVATE

SIGMA = 0.7


@pytest.mark.parametrize("name", GAUSSIAN_PRIVATE)
def test_noise_std_and_independence(name):
    cls = ALGORITHMS[name]
    fed = synthetic(num_silos=4, n=40, d=6, task="logistic", seed=2).train
    problem = Problem(linear_model(6), "logistic", clip=1.0)
    sigmas = {k: SIGMA for k in cls.noise_keys}
    if "sigma2_hat" in sigmas:
        sigmas["sigma2"] = 1e9  # std = min(sigma2 ||dw||, sigma2_hat) = sigma2_hat
    kw = dict(rounds=30, batch_size=8, step_size=0.05, record_transcript=True, metrics_every=0)
    if "svrg" in name:
        kw.update(rounds=6, inner_steps=4)
    noisy = cls(sigmas=sigmas, **kw).run(problem, fed, seed=3)
    clean = cls(sigmas={k: 0.0 for k in cls.noise_keys}, **kw).run(problem, fed, seed=3, replay=noisy)
    z = torch.stack([(a["messages"] - b["messages"]) / a["std"] for a, b in zip(noisy.transcript, clean.transcript)])
    assert all(a["std"] == pytest.approx(SIGMA) for a in noisy.transcript)
    z = z.numpy()  # [T, N, d] standardized noises
    df = z.size
    chi2 = float((z ** 2).sum())
    p = 2 * min(stats.chi2.cdf(chi2, df), stats.chi2.sf(chi2, df))
    assert p > 1e-3, (chi2, df)
    t, n, d = z.shape
    silos = np.corrcoef(z.transpose(1, 0, 2).reshape(n, -1))
    assert np.abs(silos[~np.eye(n, dtype=bool)]).max() < 5 / np.sqrt(t * d)
    rounds = np.corrcoef(z[:-1].reshape(-1), z[1:].reshape(-1))[0, 1]
    assert abs(rounds) < 5 / np.sqrt((t - 1) * n * d)
