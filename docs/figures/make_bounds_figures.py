"""Regenerate docs/figures/bounds_*.png: python docs/figures/make_bounds_figures.py"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402

from silodp.bounds.plots import ratio_figure, regime_map_figure  # noqa: E402

HERE = Path(__file__).parent


def main() -> None:
    fig = regime_map_figure(
        "thm2.1-sdp", ("n", np.logspace(1, 7, 200)), ("eps", np.logspace(-2, 1, 150)),
        dict(N=10, M=10, d=100, delta=1e-6, L=1, kappa=10, mu=1),
    )
    fig.savefig(HERE / "bounds_regime_thm21_sdp.png", dpi=120)
    fig = ratio_figure(
        "thm3.2", "wang2019", ("n", np.logspace(1, 6, 200)), ("N", np.logspace(0, 3, 150)),
        dict(d=100, eps=1, delta=1e-6, L=1, beta=1, Delta=1),
    )
    fig.savefig(HERE / "bounds_thm32_vs_wang2019.png", dpi=120)
    fig = ratio_figure(
        "thm2.1-sdp", "thm2.1-isrl", ("N", np.logspace(0, 3, 200)), ("d", np.logspace(0, 6, 150)),
        dict(n=1e4, M=1, eps=1, delta=1e-6, L=1, kappa=10, mu=1),
    )
    fig.savefig(HERE / "bounds_sdp_vs_isrl_thm21.png", dpi=120)


if __name__ == "__main__":
    main()
