"""Regenerate the parameter table of docs/algorithms.md (between its ``params`` markers) from the
algorithms' config dataclasses (:func:`silodp.algorithms.config.parameter_table`).

    PYTHONPATH=. python docs/figures/algorithm_params.py [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path

BEGIN, END = "<!-- params:begin (generated: python docs/figures/algorithm_params.py) -->", "<!-- params:end -->"
DOC = Path(__file__).resolve().parents[1] / "algorithms.md"


def render() -> str:
    from silodp.algorithms.config import parameter_table
    from silodp.algorithms.registry import ALGORITHMS

    return parameter_table([ALGORITHMS[name] for name in sorted(ALGORITHMS)])


def main(argv: list[str]) -> int:
    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{BEGIN}\n{render()}\n{END}{tail}"
    if "--check" in argv:
        return 0 if new == text else 1
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
