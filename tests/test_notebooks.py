"""Every notebook in notebooks/ is committed with the outputs of a whole run (``python
notebooks/refresh.py``, so a repository page shows them, figures inline; none an error) and is
checked like the stamped tables: executed top to bottom again here with the same settings, in a
scratch directory, every number it prints (text/plain and stream outputs) must equal the committed
one within the notebook's tolerance, and the text around the numbers must be identical. A notebook
whose code or library changed its numbers fails until ``python notebooks/refresh.py NAME`` is run."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "notebooks"
#: name -> (timeout in seconds per cell, relative tolerance on every printed number, whether a figure
#: must render). A printed number also passes within one unit of its last printed digit (a value on a
#: rounding boundary). The tolerances: the accounting, bounds and scaffold-noise numbers are closed
#: forms and numerical integrals (deterministic up to floating point: 1e-6); the audits and the
#: experiments are seeded Monte Carlo runs of torch code, whose last bits may differ between CPUs and
#: BLAS builds (1e-3 relative; a changed mechanism, claim or seed moves them by far more). The
#: timeouts are per cell and only catch hangs: whole notebooks measured on the shared 2 cores took
#: rates_tour 22-440 s (load average 2-14; its three experiment cells share that), the others under
#: 65 s.
NOTEBOOKS = {
    "accounting_tour.ipynb": (300, 1e-6, True),
    "audit_tour.ipynb": (300, 1e-3, True),
    "bounds_tour.ipynb": (300, 1e-6, True),
    "dp_scaffold.ipynb": (600, 1e-3, True),
    "rates_tour.ipynb": (600, 1e-3, True),
    "reproduce_wbcd.ipynb": (300, 1e-3, True),
}
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|\b(?:nan|inf)\b")
nbformat = pytest.importorskip("nbformat")


def printed(nb) -> list[tuple[int, str, list[str]]]:
    """Per output of a code cell: (cell index, its text with each number replaced by ``#``, the
    numbers as printed). Only text/plain and stream text: images and LaTeX are not compared.
    Consecutive stream outputs are one (how the kernel splits a stream depends on timing)."""
    texts: list[tuple[int, str | None, str]] = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for o in cell.get("outputs", []):
            stream = o.get("name") if o.get("output_type") == "stream" else None
            text = o.get("text") if stream else o.get("data", {}).get("text/plain")
            if text is None:
                continue
            if stream and texts and texts[-1][:2] == (i, stream):
                texts[-1] = (i, stream, texts[-1][2] + "".join(text))
            else:
                texts.append((i, stream, "".join(text)))
    return [(i, NUMBER.sub("#", text), NUMBER.findall(text)) for i, _, text in texts]


def _unit(token: str) -> float:
    """One unit of the last digit printed in ``token`` (``2.101`` -> 0.001, ``1.19e+03`` -> 10)."""
    mantissa, _, exponent = token.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 10.0 ** (int(exponent or 0) - decimals)


def stale(committed, executed, rtol: float) -> list[str]:
    """What differs between the committed and the re-executed outputs: a number farther than
    ``rtol`` relative (or one printed unit) from the committed one, or changed text; empty if none."""
    old, new = printed(committed), printed(executed)
    if [(i, t) for i, t, _ in old] != [(i, t) for i, t, _ in new]:
        changed = next(((o, n) for o, n in zip(old, new) if o[:2] != n[:2]), (old[len(new):], new[len(old):]))
        return [f"outputs differ beyond their numbers: committed {changed[0]!r}, now {changed[1]!r}"]
    problems = []
    for (cell, _, a), (_, _, b) in zip(old, new):
        for x, y in zip(a, b):
            fx, fy = float(x), float(y)
            if x == y or abs(fx - fy) <= max(rtol * abs(fx), _unit(x)):
                continue
            problems.append(f"cell {cell}: committed {x}, now {y}")
    return problems


def test_every_notebook_is_covered():
    assert {p.name for p in ROOT.glob("*.ipynb")} == set(NOTEBOOKS)


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_notebook_is_committed_with_its_outputs(name):
    nb = nbformat.read(ROOT / name, 4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.get("execution_count") for c in code] == list(range(1, len(code) + 1)), "run notebooks/refresh.py"
    outputs = [o for c in code for o in c.get("outputs", [])]
    assert outputs and not [o for o in outputs if o.get("output_type") == "error"]
    assert not any("execution" in c.get("metadata", {}) for c in code)  # no timing noise in diffs
    assert not any("matplotlib.use(" in c.source for c in code), "figures render inline (no Agg)"
    assert NOTEBOOKS[name][2] == any("image/png" in o.get("data", {}) for o in outputs)
    # no run times among the compared numbers: they differ on every run
    assert not any("wall_s" in t for _, t, _ in printed(nb))


def test_stale_catches_a_changed_number_or_text():
    nb = nbformat.read(ROOT / "accounting_tour.ipynb", 4)
    assert printed(nb) and stale(nb, copy.deepcopy(nb), 1e-6) == []
    def fit(x: str) -> bool:  # a number that a 1% change moves by more than its printed unit
        return len(x.partition(".")[2]) >= 3 and "e" not in x.lower() and float(x) > 0.1

    cell, _, numbers = next(p for p in printed(nb) if any(fit(x) for x in p[2]))
    target = next(x for x in numbers if fit(x))

    def doctored(replacement: str):
        bad = copy.deepcopy(nb)
        for o in bad.cells[cell].outputs:
            key = "text" if o.output_type == "stream" else None
            if key and target in o.text:
                o.text = o.text.replace(target, replacement, 1)
                return bad
            if "text/plain" in o.get("data", {}) and target in o.data["text/plain"]:
                o.data["text/plain"] = o.data["text/plain"].replace(target, replacement, 1)
                return bad
        raise AssertionError("number not found")

    moved = f"{float(target) * 1.01:.{len(target.partition('.')[2])}f}"
    assert stale(nb, doctored(moved), 1e-6) == [f"cell {cell}: committed {target}, now {moved}"]
    assert stale(nb, doctored(moved), 0.05) == []  # within a loose tolerance
    last = _unit(target)  # one unit in the last printed digit: a rounding boundary, not stale
    assert stale(nb, doctored(f"{float(target) + last:.{len(target.partition('.')[2])}f}"), 1e-6) == []
    assert stale(nb, doctored(target + " (changed)"), 1e-6)[0].startswith("outputs differ")


def test_number_parsing():
    # digits inside a name (thm3.2, x1, 850x400) are text, compared exactly
    assert NUMBER.findall("eps 1.19e+03, n=-2.0 thm3.2 x1 850x400 .5 1e-05 nan") == [
        "1.19e+03", "-2.0", "850", ".5", "1e-05", "nan"]
    assert [_unit(x) for x in ("2.101", "1.19e+03", "7", "1e-05")] == [0.001, 10.0, 1.0, 1e-05]


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_notebook_reproduces_its_committed_numbers(name, tmp_path):
    nbclient = pytest.importorskip("nbclient")
    timeout, rtol, _ = NOTEBOOKS[name]
    committed = nbformat.read(ROOT / name, 4)
    nb = copy.deepcopy(committed)
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute()
    except Exception as exc:  # no kernel installed in this environment
        if "No such kernel" in str(exc) or "NoSuchKernel" in type(exc).__name__:
            pytest.skip("python3 kernel not installed")
        raise
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert stale(committed, nb, rtol) == [], f"stale: run python notebooks/refresh.py {name}"
