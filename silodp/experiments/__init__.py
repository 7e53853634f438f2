"""Reproducing the papers' experiments: datasets, grids, a resumable sweep runner, selection on a
validation split, summaries, claim checks and figures. See ``docs/reproduction.md``.

Importing this package is cheap (no torch); the loaders and the runner import torch when used.
"""

from .figures import error_vs_epsilon, plot_error_vs_epsilon, scaffold_headline
from .grid import (
    CALIBRATIONS,
    PAPER_EPSILONS,
    PRESETS,
    AlgorithmGrid,
    GridSpec,
    RunConfig,
    exp_grid,
    load_grid,
    preset,
)
from .report import check_claims, format_summary, scaffold_gaps, summarize
from .reproduce import reproduce, resolve_grid, store_summary
from .runner import SweepReport, code_version, run_grid
from .select import Selection, select
from .store import RunRecord, Store

__all__ = [
    "CALIBRATIONS", "PAPER_EPSILONS", "PRESETS", "AlgorithmGrid", "GridSpec", "RunConfig", "RunRecord",
    "Selection", "Store", "SweepReport", "check_claims", "code_version", "error_vs_epsilon", "exp_grid",
    "format_summary", "load_grid", "plot_error_vs_epsilon", "preset", "reproduce", "resolve_grid", "run_grid",
    "scaffold_gaps", "scaffold_headline", "select", "store_summary", "summarize",
]
