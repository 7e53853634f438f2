"""Helpers shared by the algorithm tests."""

from silodp.algorithms import ALGORITHMS
from silodp.algorithms.plan import ShufflePlan


def shuffled(cls) -> bool:
    """Whether the class's plan releases through P_vec (its kind)."""
    return isinstance(cls.plan, ShufflePlan)


ALL_NAMES = sorted(ALGORITHMS)
GAUSSIAN_PRIVATE = sorted(n for n, c in ALGORITHMS.items() if c.private and not shuffled(c))
SHUFFLED = sorted(n for n, c in ALGORITHMS.items() if shuffled(c))


def zero_noise(cls) -> dict:
    """Constructor kwargs that make ``cls`` noiseless (explicit zero sigmas / huge-g protocol)."""
    if not cls.private:
        return {}
    if shuffled(cls):
        return {"shuffle_params": {"g": 10**7, "b": 0, "p": 0.0}}
    return {"sigmas": {k: 0.0 for k in cls.noise_keys}}
