"""The papers' experiments as data: which registered algorithms the grids, tables and figures of
Lowy, Ghafelebashi & Razaviyayn (2023, arXiv:2203.06735, Sec 4 and App H) and of Noble, Bellet
& Dieuleveut (2022, DP-SCAFFOLD, Sec 5 / Fig 1) show, in which role and order.

A registry (``tests/test_capabilities.py`` lists it in ``REGISTRIES``): each row transcribes a
paper's choice of algorithms, so its entries are registered names on purpose. The presets
(:mod:`.grid`), the claims and tables (:mod:`.report`, :mod:`.tables`) and the figures
(:mod:`.figures`) read these rows and never compare an algorithm's name themselves; an algorithm
added to silodp is in no paper's grid until a row here names it. Pure data: importing it imports
nothing.
"""

from __future__ import annotations

#: Sec 4's roles: ISRL-DP FedProx-SPIDER (Alg 3), the alternate Fed-SPIDER (Alg 11) and the two
#: ISRL-DP baselines its claims compare it with
SPIDER, FED_SPIDER, MB, LOCAL = "isrl-spider", "isrl-fed-spider", "isrl-mb-sgd", "isrl-local-sgd"
#: App H.2's reporting rule (per epsilon the better of SPIDER and Fed-SPIDER): its summary row's name
ALG11 = "isrl-spider-alg11"
#: The order of the summary's rows and of the figures' legends (the rest after these)
ORDER = (SPIDER, ALG11, FED_SPIDER, MB, LOCAL, "mb-sgd", "local-sgd",
         "sdp-prox-sgd", "sdp-prox-svrg", "sdp-pl-svrg", "sdp-spider")

#: Sec 4's five algorithms, each with the grid axis it sweeps beside step size and clip
#: (``local_steps``: Local SGD's steps per round; ``period``: SPIDER's period, the paper's q; None: neither)
SEC4: tuple[tuple[str, str | None], ...] = (
    ("mb-sgd", None), ("local-sgd", "local_steps"), (MB, None), (LOCAL, "local_steps"), (SPIDER, "period"))
#: The shuffle-DP arm (Alg 7-10, not in the paper's experiments: ``wbcd-sdp``), with its axes as above
SDP_ARM: tuple[tuple[str, str | None], ...] = (
    ("sdp-prox-sgd", None), ("sdp-prox-svrg", None), ("sdp-pl-svrg", None), ("sdp-spider", "period"))

#: Noble et al.'s Fig 1 as the ``scaffold`` table shows it: the private algorithms and their
#: noiseless twins, in column order, with their titles (a grid of the twins has no epsilon: its
#: rows are the ``none`` calibration)
SCAFFOLD_TITLES = {"dp-scaffold": "DP-SCAFFOLD", "dp-scaffold-warm": "DP-SCAFFOLD-warm", "dp-fedavg": "DP-FedAvg",
                   "scaffold": "SCAFFOLD (no noise)", "fedavg": "FedAvg (no noise)"}
#: The pairs whose gap the table shows (the first pair present in the rows): private, then noiseless
SCAFFOLD_PAIRS = (("dp-scaffold", "dp-fedavg"), ("scaffold", "fedavg"))
#: The ``scaffold-synthetic`` preset's algorithms, in the grid's order
SCAFFOLD_GRID = ("dp-fedavg", "dp-scaffold")
