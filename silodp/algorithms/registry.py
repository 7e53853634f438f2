"""Algorithm classes by CLI name."""

from __future__ import annotations

from .baselines import MBSGD, IsrlLocalSGD, IsrlMBSGD, LocalSGD
from .proxsgd import IsrlProxSGD, SdpProxSGD
from .scaffold import DpFedAvg, DpFedSGD, DpScaffold, DpScaffoldWarm
from .spider import IsrlFedSpider, IsrlSpider, SdpSpider
from .svrg import IsrlPLSVRG, IsrlProxSVRG, SdpPLSVRG, SdpProxSVRG

ALGORITHMS = {
    cls.name: cls
    for cls in (
        IsrlProxSGD, SdpProxSGD, IsrlProxSVRG, IsrlPLSVRG, SdpProxSVRG, SdpPLSVRG,
        IsrlSpider, SdpSpider, IsrlFedSpider, MBSGD, IsrlMBSGD, LocalSGD, IsrlLocalSGD,
        DpScaffold, DpScaffoldWarm, DpFedAvg, DpFedSGD,
    )
}


def get_algorithm(name: str, **params):
    """Instantiate the algorithm called ``name`` (see :data:`ALGORITHMS`) with ``params``."""
    if name not in ALGORITHMS:
        raise ValueError(f"algorithm: must be one of {sorted(ALGORITHMS)}, got {name!r}")
    return ALGORITHMS[name](**params)
