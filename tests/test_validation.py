"""Bad input raises ValueError naming the argument, never NaN or inf."""

import math

import pytest

from silodp.accounting import (
    GaussianDpEvent,
    PoissonSampledDpEvent,
    calibrate,
    composition,
    gaussian,
    get_accountant,
    shuffle,
    subsampling,
    zcdp,
)

BAD_EPS = [0, -1, math.nan, math.inf]
BAD_DELTA = [0, 1, 1.5, -0.1, math.nan]


@pytest.mark.parametrize("eps", BAD_EPS)
def test_bad_epsilon(eps):
    with pytest.raises(ValueError, match="epsilon"):
        gaussian.sigma_for_budget(eps, 1e-5)
    with pytest.raises(ValueError, match="epsilon"):
        calibrate(lambda z: GaussianDpEvent(z), eps, 1e-5)


@pytest.mark.parametrize("delta", BAD_DELTA)
def test_bad_delta(delta):
    with pytest.raises(ValueError, match="delta"):
        gaussian.sigma_for_budget(1.0, delta)
    with pytest.raises(ValueError, match="delta"):
        get_accountant("rdp").compose(GaussianDpEvent(1.0)).get_epsilon(delta)
    with pytest.raises(ValueError, match="delta"):
        zcdp.epsilon_for_rho(0.1, delta)


@pytest.mark.parametrize("q", [0, -0.5, 1.5, math.nan])
def test_bad_q(q):
    with pytest.raises(ValueError, match="q"):
        subsampling.poisson(1.0, 1e-6, q)


@pytest.mark.parametrize("q", [0.0, 1.5])
def test_bad_q_in_event(q):
    with pytest.raises(ValueError, match="sampling_probability"):
        get_accountant("rdp").compose(PoissonSampledDpEvent(q, GaussianDpEvent(1.0)))


@pytest.mark.parametrize("sigma", [0, -2, math.nan, math.inf])
def test_bad_sigma(sigma):
    with pytest.raises(ValueError, match="sigma"):
        gaussian.epsilon_for_delta(sigma, 1e-5)


@pytest.mark.parametrize("steps", [0, -3, 2.5, math.nan])
def test_bad_steps(steps):
    with pytest.raises(ValueError, match="steps"):
        composition.dwork_roth(0.1, 0.0, steps, 1e-6)


def test_bad_noise_multiplier_in_event():
    with pytest.raises(ValueError, match="noise_multiplier"):
        get_accountant("pld").compose(GaussianDpEvent(-1.0))


def test_bad_accountant_name():
    with pytest.raises(ValueError, match="accountant"):
        get_accountant("moments")


def test_bad_shuffle_inputs():
    with pytest.raises(ValueError, match="eps0"):
        shuffle.fmt21_numerical(-1, 100, 1e-6)
    with pytest.raises(ValueError, match="n"):
        shuffle.fmt21_numerical(1, 1, 1e-6)
