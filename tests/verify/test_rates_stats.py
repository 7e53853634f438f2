"""silodp.verify.rates.stats: bootstrap intervals and log-log slope fits.

References: scipy.stats.bootstrap (percentile method) for the mean's interval; a known power law
for the slope; the frequency with which the slope interval covers the true slope over repeated
synthetic experiments (nominal 90%).
"""

import numpy as np
import pytest
from scipy import stats as sps

from silodp.verify.rates import stats


def test_mean_interval_matches_scipy_percentile_bootstrap():
    rng = np.random.default_rng(0)
    sample = rng.exponential(2.0, size=200)
    means, lo, hi = stats.mean_intervals([sample, sample * 2], reps=20000, confidence=0.9, seed=1)
    ref = sps.bootstrap((sample,), np.mean, confidence_level=0.9, n_resamples=20000, method="percentile",
                        random_state=2).confidence_interval
    assert means[0] == pytest.approx(sample.mean())
    assert lo[0] == pytest.approx(ref.low, rel=0.02) and hi[0] == pytest.approx(ref.high, rel=0.02)
    assert lo[1] == pytest.approx(2 * lo[0], rel=0.03)


def test_fit_recovers_a_known_power_law():
    x = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    rng = np.random.default_rng(3)
    samples = [3.0 * xi**-1.5 * rng.gamma(20.0, 1 / 20.0, size=400) for xi in x]
    fit = stats.fit_power_law(x, samples, reps=2000, confidence=0.95, seed=0)
    assert fit.slope == pytest.approx(-1.5, abs=0.03)
    assert abs(fit.slope + 1.5) < 3 * fit.slope_se and not fit.contains(-1.45)
    assert np.allclose(fit.predict(x), 3.0 * x**-1.5, rtol=0.05)
    assert fit.slope_ci[0] < fit.slope < fit.slope_ci[1] and fit.slope_se > 0


def test_slope_interval_has_its_nominal_coverage():
    x = np.array([1.0, 2.0, 4.0, 8.0])
    rng = np.random.default_rng(7)
    covered = 0
    reps = 300
    for k in range(reps):
        samples = [x_i**2.0 * rng.exponential(1.0, size=60) for x_i in x]
        covered += stats.fit_power_law(x, samples, reps=400, confidence=0.9, seed=k).contains(2.0)
    assert 0.84 <= covered / reps <= 0.96


def test_fit_replicates_is_vectorized_ols():
    x = np.array([1.0, 10.0, 100.0])
    means = 5.0 * x**0.5
    reps = np.stack([means * f for f in (0.9, 1.0, 1.1)])
    fit = stats.fit_replicates(x, means, reps, 0.95)
    assert fit.slope == pytest.approx(0.5) and fit.intercept == pytest.approx(np.log(5.0))
    assert fit.slope_ci == pytest.approx((0.5, 0.5))  # a common factor leaves the slope unchanged


@pytest.mark.parametrize("call, match", [
    (lambda: stats.fit_power_law([1, 2], [[1, 2]], reps=50), "samples"),
    (lambda: stats.fit_power_law([1, 1], [[1, 2], [1, 2]], reps=50), "x"),
    (lambda: stats.fit_power_law([1, 2], [[1.0], [1, 2]], reps=50), "samples"),
    (lambda: stats.fit_power_law([1, 2], [[1, 2], [np.nan, 2]], reps=50), "samples"),
    (lambda: stats.fit_power_law([1, 2], [[-1, -2], [1, 2]], reps=50), "means"),
    (lambda: stats.mean_intervals([[1, 2]], reps=50, confidence=1.5), "confidence"),
    (lambda: stats.bootstrap_means([[1, 2]], reps=1), "reps"),
])
def test_bad_input_raises(call, match):
    with pytest.raises(ValueError, match=match):
        call()
