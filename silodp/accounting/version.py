"""The accounting version: bumped whenever a certificate or a calibration can change.

Anything that caches a noise calibration or a certified epsilon (the results store of
:mod:`silodp.experiments.store`) keys it by :data:`ACCOUNTING_VERSION`, so that a calibration made
by an older (possibly buggy) accounting layer is never reused: it is recalibrated. Bump the number
in the same commit as any change to an accountant, a mechanism's event, a release declaration or
a calibration rule that can move a certificate.
"""

#: Bump on any change that can move a certified epsilon or a calibrated noise scale.
ACCOUNTING_VERSION = 1
