"""The papers' algorithms are replace-one (ISRL-DP, Lowy et al. Definition 4); generic accounting
defaults to add/remove (as dp-accounting, Opacus, Flower). A call into the accounting layer from
the algorithm, integration, verification or experiment layers that names no relation would take
the generic default and, for a replace-one transcript, certify about half the true epsilon. This
specification scans those layers' source: every such call names its relation (positionally or as
``neighbouring=`` / ``neighboring_relation=``), or forwards one (``cls.neighbouring``,
``self.neighbouring``, ``rel``). The scan reads calls of names imported from ``silodp.accounting``
(module-level or inside functions); attribute calls (``accounting.epsilon(...)``) are not read."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "silodp"
LAYERS = ("algorithms", "integrations", "verify", "experiments")
#: accounting entry point -> index of its relation among the positional arguments
RELATION_POSITION = {"get_accountant": 1, "candidate_accountants": 1, "tightest_epsilon": 2, "epsilon": 3,
                     "delta": 3, "tightest_calibration": 4, "calibrate": 4}
KEYWORDS = {"neighbouring", "neighboring_relation"}
#: modules whose accounting calls are generic mechanisms on purpose (Opacus' DP-SGD is add/remove,
#: and its accountants carry their relation as a class attribute passed positionally)
GENERIC = {"integrations/opacus.py"}


def _accounting_names(tree: ast.Module) -> set[str]:
    """Names imported from ``silodp.accounting`` (or its modules) in this file."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("silodp.accounting"):
            names |= {a.asname or a.name for a in node.names if a.name in RELATION_POSITION}
    return names


def _unnamed_calls(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = _accounting_names(tree)
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names):
            continue
        if any(k.arg in KEYWORDS for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
            continue
        if len(node.args) <= RELATION_POSITION[node.func.id]:
            out.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.func.id}(...)")
    return out


def test_the_scan_finds_an_unnamed_relation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from silodp.accounting import tightest_epsilon\n\ndef f(e):\n    return tightest_epsilon(e, 1e-5)\n")
    good = tmp_path / "good.py"
    good.write_text("from silodp.accounting import REPLACE_ONE, tightest_epsilon\n\n"
                    "def f(e):\n    return tightest_epsilon(e, 1e-5, REPLACE_ONE)\n")
    assert _scan(bad, tmp_path) == ["bad.py:4 tightest_epsilon(...)"]
    assert _scan(good, tmp_path) == []


def _scan(path: Path, root: Path) -> list[str]:
    global ROOT
    saved, ROOT = ROOT, root
    try:
        return _unnamed_calls(path)
    finally:
        ROOT = saved


@pytest.mark.parametrize("layer", LAYERS)
def test_every_accounting_call_of_the_layer_names_its_relation(layer):
    files = [p for p in sorted((ROOT / layer).rglob("*.py")) if str(p.relative_to(ROOT)) not in GENERIC]
    assert files
    unnamed = [call for p in files for call in _unnamed_calls(p)]
    assert not unnamed, unnamed
