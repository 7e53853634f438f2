"""Accounting layer: mechanisms as events, accountants that certify them, and noise calibration.

Every noise scale in silodp comes from here with the theorem or accountant that backs it named.
The neighbouring relation defaults to ``REPLACE_ONE`` (ISRL-DP: one record of one silo replaced).
Self-contained numpy/scipy.special code: importing this package imports neither torch nor
dp-accounting (which the tests use as an independent reference; events convert both ways).
"""

from silodp.accounting import composition, gaussian, papers, pld, rdp, shuffle, subsampling, zcdp
from silodp.accounting.accountants import (
    ACCOUNTANTS,
    Accountant,
    AdvancedAccountant,
    DworkRothAccountant,
    PldAccountant,
    RdpAccountant,
    ZcdpAccountant,
    delta,
    epsilon,
    get_accountant,
)
from silodp.accounting.binomial import (
    BinomialProtocolParams,
    binomial_protocol_epsilon,
    binomial_protocol_params,
    binomial_protocol_variance,
)
from silodp.accounting.blocks import UnsupportedEventError
from silodp.accounting.calibration import Calibration, calibrate
from silodp.accounting.events import (
    ADD_OR_REMOVE_ONE,
    REPLACE_ONE,
    ComposedDpEvent,
    DpEvent,
    EpsilonDeltaDpEvent,
    GaussianDpEvent,
    NeighboringRelation,
    NonPrivateDpEvent,
    ParallelComposedDpEvent,
    PoissonSampledDpEvent,
    SampledWithoutReplacementDpEvent,
    SampledWithReplacementDpEvent,
    SelfComposedDpEvent,
    ZCDpEvent,
    from_dp_accounting,
    to_dp_accounting,
)
from silodp.accounting.ledger import IsrlLedger, cdp_guarantee, user_level_guarantee
from silodp.accounting.shuffle import erlingsson2019, fmt21_closed_form, fmt21_numerical, shuffle_bounds
from silodp.accounting.transcripts import (
    NoiseCalibration,
    TranscriptConfig,
    calibrate_algorithm,
    paper_vs_tight,
    privacy_event,
)

__all__ = [name for name in dir() if not name.startswith("_")]
