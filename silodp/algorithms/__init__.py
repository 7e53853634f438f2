"""Problems, the vectorized federation simulator, and the paper's federated algorithms (torch).

Lowy, Ghafelebashi, Razaviyayn 2023, "Private Non-Convex Federated Learning Without a Trusted
Server" (arXiv:2203.06735): ISRL-DP and SDP proximal SGD, SVRG and SPIDER, plus the MB-SGD and
Local SGD baselines. See ``docs/algorithms.md``.
"""

from .base import FederatedAlgorithm
from .context import Context
from .baselines import MBSGD, IsrlFedAvgM, IsrlLocalSGD, IsrlMBSGD, LocalSGD
from .data import FederatedData, mnist, synthetic, wbcd
from .federation import BatchSampler, Federation
from .grads import clip_rows, clipped_grad_sum, per_sample_grads
from .models import Model, lenet, linear_model, mlp
from .problems import Problem
from .prox import REGULARIZERS, L1, Box, ElasticNet, GroupLasso, L2Ball, L2Squared, Zero
from .proxsgd import IsrlProxSGD, SdpProxSGD
from .registry import ALGORITHMS, get_algorithm, register_algorithm
from .result import RunResult
from .scaffold import DpFedAvg, DpFedSGD, DpScaffold, DpScaffoldWarm, FedAvg, Scaffold
from .shuffle import BinomialParams, pvec_fast, pvec_messages, pvec_variance
from .spider import IsrlFedSpider, IsrlSpider, SdpSpider
from .svrg import IsrlPLSVRG, IsrlProxSVRG, SdpPLSVRG, SdpProxSVRG

__all__ = [
    "ALGORITHMS", "BatchSampler", "BinomialParams", "Box", "Context", "DpFedAvg", "DpFedSGD", "DpScaffold",
    "DpScaffoldWarm", "ElasticNet", "FedAvg", "FederatedAlgorithm",
    "FederatedData", "Federation", "GroupLasso", "IsrlFedAvgM", "IsrlFedSpider", "IsrlLocalSGD", "IsrlMBSGD",
    "IsrlPLSVRG", "IsrlProxSGD", "IsrlProxSVRG", "IsrlSpider", "L1", "L2Ball", "L2Squared", "LocalSGD",
    "MBSGD", "Model", "Problem", "REGULARIZERS", "RunResult", "Scaffold", "SdpPLSVRG", "SdpProxSGD", "SdpProxSVRG",
    "SdpSpider", "Zero", "clip_rows", "clipped_grad_sum", "get_algorithm", "lenet", "linear_model", "mlp",
    "mnist", "per_sample_grads", "pvec_fast", "register_algorithm", "pvec_messages", "pvec_variance", "synthetic", "wbcd",
]

# A module of this package registers by being here (one new file, nothing else to edit).
from silodp._registry import discover as _discover  # noqa: E402

_discover(__name__, "@register_algorithm")
