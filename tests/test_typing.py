"""Habits: the public functions are typed (every parameter and the return annotated), measured
here per subpackage against a floor that may only rise; the package ships ``py.typed``; ruff and
mypy run in CI (``.ci/run``, configured in pyproject.toml)."""

import ast
import pathlib

import pytest

import silodp

PACKAGE = pathlib.Path(silodp.__file__).parent
#: the smallest share of typed public functions per subpackage (raise as annotations land)
FLOORS = {"algorithms": 0.95, "accounting": 0.85, "": 0.78}


def untyped_public_functions(root: pathlib.Path) -> tuple[int, list[str]]:
    """(number of public functions and methods under ``root``, those not fully annotated). Public:
    the name and its class's name do not start with ``_``; ``self`` / ``cls`` need no annotation."""
    total, missing = 0, []

    def visit(body: list, in_class: bool, path: pathlib.Path) -> None:
        nonlocal total
        for node in body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                visit(node.body, True, path)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                if in_class and args and args[0].arg in ("self", "cls"):
                    args = args[1:]
                args += [a for a in (node.args.vararg, node.args.kwarg) if a is not None]
                total += 1
                if node.returns is None or any(a.annotation is None for a in args):
                    missing.append(f"{path.relative_to(root)}:{node.lineno} {node.name}")

    for path in sorted(root.rglob("*.py")):
        visit(ast.parse(path.read_text()).body, False, path)
    return total, missing


@pytest.mark.parametrize("sub", sorted(FLOORS))
def test_public_functions_are_typed(sub):
    total, missing = untyped_public_functions(PACKAGE / sub)
    share = 1 - len(missing) / total
    assert total > 20 and share >= FLOORS[sub], f"silodp/{sub}: {share:.0%} typed, untyped: {missing}"


def test_the_measure_sees_a_missing_annotation(tmp_path):
    (tmp_path / "m.py").write_text("def f(x: int) -> int: ...\ndef g(x) -> int: ...\ndef h(x: int): ...\n"
                                   "def _private(x): ...\nclass C:\n    def m(self, y: int) -> None: ...\n")
    total, missing = untyped_public_functions(tmp_path)
    assert total == 4 and [m.split()[-1] for m in missing] == ["g", "h"]


def test_the_package_ships_py_typed():
    assert (PACKAGE / "py.typed").is_file()
    text = (PACKAGE.parent / "pyproject.toml").read_text()
    assert '"py.typed"' in text and "[tool.mypy]" in text and "[tool.ruff" in text
    assert 'module = ["silodp.accounting", "silodp.accounting.*"]\ndisallow_untyped_defs = true' in text
    ci = (PACKAGE.parent / ".ci" / "run").read_text()
    assert "\nruff check .\n" in ci and "\nmypy\n" in ci


def changelog_repeats(text: str, prefix: int = 200) -> list[str]:
    """The entries of a changelog (``- `` bullets with their indented continuation lines) that
    repeat another's first ``prefix`` characters (whitespace normalized): the same entry twice."""
    import re

    seen, repeated = set(), []
    for entry in re.findall(r"^- .*(?:\n  .*)*", text, re.M):
        head = " ".join(entry.split())[:prefix]
        if head in seen:
            repeated.append(head[:80])
        seen.add(head)
    return repeated


def test_changelog_entries_are_not_repeated():
    text = (PACKAGE.parent / "CHANGELOG.md").read_text()
    assert len(text.splitlines()) > 20 and changelog_repeats(text) == []
    twice = "- Renamed a -> b, c -> d, and\n  more.\n- Other.\n- Renamed a -> b, c -> d, and more.\n"
    assert changelog_repeats(twice, prefix=20) == ["- Renamed a -> b, c "]
