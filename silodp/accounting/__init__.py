"""Accounting layer: mechanisms as events, accountants that certify them, and noise calibration.

Every noise scale in silodp comes from here with the theorem or accountant that backs it named.
``noise_multiplier`` is sigma / C (C the per-record contribution bound) under every neighbouring
relation, as in dp-accounting's PLD, Opacus and Flower; the accountant applies the relation's
sensitivity (2C for replace-one). The relation defaults to ``ADD_OR_REMOVE_ONE``, as dp-accounting,
Opacus and Flower (``DEFAULT_RELATION``); the papers' algorithms account under ``REPLACE_ONE``
(ISRL-DP: one record of one silo replaced). dp-accounting's keyword names are accepted too. Self-contained numpy/scipy.special code: importing this package imports
neither torch nor dp-accounting (which the tests use as an independent reference; events convert
both ways). It knows mechanisms, never algorithm names: algorithms declare their releases
(:mod:`silodp.accounting.releases`) and :mod:`silodp.algorithms.privacy` calibrates them.
"""

from silodp.accounting.accountants import (
    ACCOUNTANTS,
    DEFAULT_RELATION,
    Accountant,
    AdvancedAccountant,
    DworkRothAccountant,
    GdpAccountant,
    PldAccountant,
    PvecAccountant,
    PvecPldAccountant,
    RdpAccountant,
    ZcdpAccountant,
    accountant_choices,
    delta,
    epsilon,
    get_accountant,
    register_accountant,
)
from silodp.accounting.binomial import (
    BinomialProtocolParams,
    binomial_protocol_epsilon,
    binomial_protocol_params,
    binomial_protocol_variance,
)
from silodp.accounting.blocks import Mechanism, Sampling, UnsupportedEventError
from silodp.accounting.calibration import (
    Calibration,
    CalibrationMethod,
    calibrate,
    candidate_accountants,
    tightest_calibration,
    tightest_epsilon,
)
from silodp.accounting.events import (
    ADD_OR_REMOVE_ONE,
    REPLACE_ONE,
    ComposedDpEvent,
    DpEvent,
    EpsilonDeltaDpEvent,
    GaussianDpEvent,
    LabelledMixtureDpEvent,
    NeighboringRelation,
    NoOpDpEvent,
    NonPrivateDpEvent,
    ParallelComposedDpEvent,
    PoissonSampledDpEvent,
    PvecDpEvent,
    SampledWithoutReplacementDpEvent,
    SampledWithReplacementDpEvent,
    SelfComposedDpEvent,
    ZCDpEvent,
    from_dp_accounting,
    sensitivity,
    to_dp_accounting,
)
from silodp.accounting.ledger import IsrlLedger, cdp_guarantee, user_level_guarantee
from silodp.accounting.releases import (
    BatchSampling,
    GaussianRelease,
    ReleaseLedger,
    ShuffleRelease,
    gaussian_steps,
    releases_event,
)
from silodp.accounting.shuffle import erlingsson2019, fmt21_closed_form, fmt21_numerical, shuffle_bounds

# ``epsilon`` and ``delta`` (the one-call helpers) are importable by name but left out of ``*``:
# a star import must not overwrite a user's own ``epsilon`` or ``delta``.
__all__ = [
    "ACCOUNTANTS", "ADD_OR_REMOVE_ONE", "DEFAULT_RELATION", "Accountant", "AdvancedAccountant", "BatchSampling", "GdpAccountant",
    "BinomialProtocolParams", "Calibration", "CalibrationMethod", "ComposedDpEvent", "DpEvent", "DworkRothAccountant",
    "EpsilonDeltaDpEvent", "GaussianDpEvent", "GaussianRelease", "LabelledMixtureDpEvent", "IsrlLedger", "Mechanism",
    "NeighboringRelation", "NoOpDpEvent", "NonPrivateDpEvent", "ParallelComposedDpEvent", "PldAccountant",
    "PoissonSampledDpEvent", "PvecAccountant", "PvecDpEvent", "PvecPldAccountant", "REPLACE_ONE", "RdpAccountant", "ReleaseLedger", "Sampling",
    "SampledWithReplacementDpEvent", "SampledWithoutReplacementDpEvent", "SelfComposedDpEvent",
    "ShuffleRelease", "UnsupportedEventError", "ZCDpEvent", "ZcdpAccountant", "binomial_protocol_epsilon",
    "accountant_choices", "binomial_protocol_params", "binomial_protocol_variance", "calibrate", "candidate_accountants",
    "cdp_guarantee", "erlingsson2019", "fmt21_closed_form", "fmt21_numerical",
    "from_dp_accounting", "gaussian_steps", "get_accountant", "register_accountant", "releases_event", "sensitivity",
    "shuffle_bounds", "tightest_calibration", "tightest_epsilon", "to_dp_accounting", "user_level_guarantee",
]

# A module of this package registers by being here (one new file, nothing else to edit).
from silodp._registry import discover as _discover  # noqa: E402

_discover(__name__, "@register_accountant")
