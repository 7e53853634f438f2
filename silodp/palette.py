"""One colour, marker and display name per algorithm, for every figure silodp draws.

A figure that shows an algorithm takes its style from here, so ``sdp-prox-sgd`` is the same
colour, and reads "SDP Prox-SGD", in every panel and every figure. Matplotlib colour names
(``C0``-``C9`` of the default cycle); non-private baselines share their private variant's
colour and have no marker (drawn as lines). Pure data: importing it imports nothing.

A registry (``tests/test_capabilities.py`` lists it in ``REGISTRIES``): a choice of presentation
per registered name, read by every figure, never a switch on what an algorithm does; an
algorithm without an entry is drawn in grey under its own name.
"""

from __future__ import annotations

#: algorithm -> (display name, colour, marker or None)
STYLES: dict[str, tuple[str, str, str | None]] = {
    "isrl-prox-sgd": ("ISRL-DP Prox-SGD", "C1", "o"),
    "sdp-prox-sgd": ("SDP Prox-SGD", "C5", "P"),
    "isrl-prox-svrg": ("ISRL-DP Prox-SVRG", "C6", "<"),
    "sdp-prox-svrg": ("SDP Prox-SVRG", "C7", ">"),
    "isrl-pl-svrg": ("ISRL-DP PL-SVRG", "C8", "p"),
    "sdp-pl-svrg": ("SDP PL-SVRG", "C9", "h"),
    "isrl-spider": ("ISRL-DP SPIDER", "C3", "o"),
    "sdp-spider": ("SDP SPIDER", "C1", "X"),
    "isrl-fed-spider": ("ISRL-DP Fed-SPIDER", "C4", "D"),
    "isrl-mb-sgd": ("ISRL-DP MB-SGD", "C0", "s"),
    "mb-sgd": ("MB-SGD (non-private)", "C0", None),
    "isrl-local-sgd": ("ISRL-DP Local SGD", "C2", "^"),
    "local-sgd": ("Local SGD (non-private)", "C2", None),
    "dp-scaffold": ("DP-SCAFFOLD", "C3", "o"),
    "dp-scaffold-warm": ("DP-SCAFFOLD-warm", "C4", "^"),
    "dp-fedavg": ("DP-FedAvg", "C0", "s"),
    "dp-fedsgd": ("DP-FedSGD", "C2", "v"),
    "scaffold": ("SCAFFOLD (non-private)", "C3", None),
    "fedavg": ("FedAvg (non-private)", "C0", None),
}


def style(algorithm: str) -> tuple[str, str, str | None]:
    """(display name, colour, marker) of ``algorithm``; an unknown name is shown as itself, in grey."""
    return STYLES.get(algorithm, (algorithm, "0.45", "v"))


def label(algorithm: str) -> str:
    """The display name of ``algorithm``."""
    return style(algorithm)[0]


def legend_outside(ax, **kwargs) -> None:
    """The legend to the right of ``ax``, never over its data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kwargs)
