"""silodp: differentially private federated learning without a trusted server.

Layers (arrows point down):

* :mod:`silodp.accounting` -- privacy events, accountants, amplification, calibration (numpy/scipy).
* :mod:`silodp.algorithms` -- problems, the vectorized federation simulator and the papers' algorithms (torch).
* :mod:`silodp.bounds` -- the papers' upper and lower bounds as symbolic objects (sympy).
* :mod:`silodp.verify` -- empirical rates against bounds, privacy audits.

Importing :mod:`silodp` itself is cheap: no torch, no sympy.
"""

__version__ = "0.1.0"
