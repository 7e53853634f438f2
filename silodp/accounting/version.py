"""The accounting version: bumped whenever a certificate or a calibration can change.

Anything that caches a noise calibration or a certified epsilon (the results store of
:mod:`silodp.experiments.store`) keys it by :data:`ACCOUNTING_VERSION`, so that a calibration made
by an older (possibly buggy) accounting layer is never reused: it is recalibrated. Bump the number
in the same commit as any change to an accountant, a mechanism's event, a release declaration or
a calibration rule that can move a certificate.

A certificate used by few results is versioned on its own in :data:`CERTIFICATE_VERSIONS` (bump
it instead when only that certificate moved): a stamped table's version (:func:`version`) names
the ones its numbers depend on, so a change to one stales exactly the tables that use it.
"""

from __future__ import annotations

from typing import Iterable

#: Bump on any change that can move a certified epsilon or a calibrated noise scale.
ACCOUNTING_VERSION = 1
#: Per-certificate versions. 2 (2026-12-02): sampling without replacement under replace-one is
#: charged as the symmetric pair (either orientation per step; it was each direction apart, which
#: undercharged by up to 16%), and with replacement by the multiplicity-hiding bound. (2026-12-06:
#: ``rdp`` charges sampling without replacement by the proven symmetric pair's RDP instead of the
#: unproven MTZ19 charge at shift 2C. The version stays: every stamped table of that certificate is
#: DP-SCAFFOLD's, certified by ``pld`` alone, whose charge did not change.)
#: "balls-in-bins" 2 (2026-12-06): random allocation's grid spreads keep means (convex order) instead
#: of rounding up: 1-25% smaller epsilon at 50-1000 batches (no stamped table uses it yet).
#: "discrete-mechanisms" 2 (2026-12-06): a composition of one discrete Laplace, discrete Gaussian or
#: randomized response alone is accounted on the mechanism's own loss lattice (its exact PLD, no
#: rounding up to the grid): equal or smaller epsilon (4th-5th digit); beside other mechanisms the grid as before.
#: Round 8 (2026-12-06) keeps ACCOUNTING_VERSION 1 on purpose: ``pld``'s exponential tilting at
#: small deltas, float64 direct powers before extended precision, rdp skipped below its floor, and
#: the distinct Poisson releases of a ledger on tail-strided dots move certificates by < 1e-6
#: relative except at delta 1e-12 (the sweep's rows there up to 0.1% smaller), and only where both
#: the old and the new certificate are sound (no bug fixed: a calibration the old layer stored stays
#: valid); the tables whose digits moved, ``accounting_mechanisms`` and ``accounting_sweep``, were
#: regenerated, and ``silodp report --check`` recomputes the cheap ones.
CERTIFICATE_VERSIONS = {"with-replacement": 2, "without-replacement": 2, "balls-in-bins": 2, "discrete-mechanisms": 2}


def version(certificates: Iterable[str] = ()) -> str:
    """The version of results that use ``certificates`` (keys of :data:`CERTIFICATE_VERSIONS`):
    ``"1"`` for none, else e.g. ``"1+without-replacement.2"``."""
    names = sorted(set(certificates))
    unknown = [n for n in names if n not in CERTIFICATE_VERSIONS]
    if unknown:
        raise ValueError(f"certificates: unknown {unknown}; known: {sorted(CERTIFICATE_VERSIONS)}")
    return "+".join([str(ACCOUNTING_VERSION)] + [f"{n}.{CERTIFICATE_VERSIONS[n]}" for n in names])
