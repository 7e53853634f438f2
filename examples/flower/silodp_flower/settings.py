"""The run settings of the example (no torch): silodp's proposal, :mod:`silodp.service.plan`."""

from silodp.service.plan import ALGORITHMS, Settings

__all__ = ["ALGORITHMS", "Settings"]
