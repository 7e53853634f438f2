"""The silo privacy service: the channel of a Flower deployment as a process the silo owns.

In a Flower deployment the ClientApp is code the server ships (inside the app bundle, FAB), so
the records, the ledger and the noise cannot live there. :mod:`silodp.service` is the process the
silo's operator starts (``silodp silo serve CONFIG.toml``, :mod:`silodp.service.app`) on the silo's
side of an OS boundary: it loads the silo's records once from the operator's configuration
(:mod:`silodp.service.config`), holds the ledger and the budget, and answers three narrow calls
(:mod:`silodp.service.wire`): ``admit`` a run's proposed plan, ``release`` one message of an
admitted plan at the server's model, ``status`` of the ledger. A thin ClientApp
(:mod:`silodp.service.client`) forwards the server's proposal and model and returns what the
service released. :mod:`silodp.service.silo` is the silo-side computation (records, plan,
release) shared by the service and the in-process mode (the simulation engine, and operators who
accept the FAB as trusted). :mod:`silodp.service.federation` starts a local federation of
SuperLink, SuperNodes and services (``silodp federation up``).

Light: importing this package imports neither torch nor the web stack.
"""
