"""Execute the notebooks top to bottom and save them with their outputs, so a repository page
shows what they compute: ``python notebooks/refresh.py`` (all), or name some. Each runs in a
scratch directory (nothing is written beside it); no timing metadata is recorded, so a refresh
changes only what the notebook prints. ``tests/test_notebooks.py`` executes them again with the
same settings and fails when a printed number moved beyond the notebook's tolerance: after a change
to the code a notebook runs, refresh it (``python notebooks/refresh.py NAME.ipynb``)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def refresh(path: Path, timeout: int = 600) -> None:
    import nbclient
    import nbformat

    nb = nbformat.read(path, 4)
    with tempfile.TemporaryDirectory() as scratch:
        nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                                resources={"metadata": {"path": scratch}}).execute()
    nbformat.write(nb, path)


def main(names: list[str]) -> int:
    paths = [HERE / n for n in names] if names else sorted(HERE.glob("*.ipynb"))
    for path in paths:
        print(f"{path.name} ...", flush=True)
        refresh(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
