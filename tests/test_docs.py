"""The documentation runs: every fenced ``python``, ``bash`` and ``console`` block of README.md and
docs/*.md is collected and executed, and what it prints is compared where the doc shows it.

* ``python`` blocks run in a fresh namespace, in a scratch directory; a ``text`` block right after
  one is the output it must print.
* ``bash`` / ``console`` blocks: each ``silodp ...`` command (``\\`` continuations joined, a
  trailing ``# comment`` dropped; ``$ `` prompts of console blocks stripped) runs in-process,
  in order, in one scratch directory per block, and must exit 0. A comment line right after a
  command that shows a JSON object (``# {"epsilon": 1.83, ...}``) is its expected output: every
  key shown must be printed, strings equal (``...`` inside one matches anything), ``null`` as null,
  and numbers within the tolerance below. Other commands (``pip``, ``python -m pytest``, ``flwr``)
  are installation or multi-process steps and are not run here (CI runs the install itself).
* A block preceded by ``<!-- docs-test: skip (reason) -->`` is not run; the reason is required.
* docs/cli.md's one-command examples are run by tests/cli/test_reference.py (which checks their
  JSON keys) and are not run twice.

Tolerance of a shown number: relative 1%, or half a unit of its last shown digit if larger --
a doc's rounded value matches, a changed result does not.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
SKIP = re.compile(r"<!--\s*docs-test:\s*skip\s*\((?P<reason>[^)]+)\)\s*-->\s*$")
REL_TOL = 0.01


def _blocks():
    """(id, language, body, expected-output, skip-reason) for every runnable block."""
    out = []
    for doc in DOCS:
        text = doc.read_text()
        matches = list(FENCE.finditer(text))
        for i, m in enumerate(matches):
            lang = m.group(1)
            if lang not in ("python", "bash", "console"):
                continue
            if doc.name == "cli.md" and re.fullmatch(r"silodp [^\n]*\n", m.group(2)):
                continue  # tests/cli/test_reference.py runs it
            line = text.count("\n", 0, m.start()) + 1
            before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            skip = SKIP.search(before)
            expected = None
            if lang == "python" and i + 1 < len(matches) and matches[i + 1].group(1) == "text" \
                    and not text[m.end():matches[i + 1].start()].strip():
                expected = matches[i + 1].group(2)
            out.append(pytest.param(lang, m.group(2), expected, skip.group("reason") if skip else None,
                                    id=f"{doc.relative_to(ROOT)}:{line}"))
    return out


def _number_close(shown: float, got, text: str) -> bool:
    if not isinstance(got, (int, float)) or isinstance(got, bool):
        return False
    digits = len(text.split(".")[1].split("e")[0]) if "." in text else 0
    half_unit = 0.5 * 10 ** -digits * (10 ** int(text.split("e")[1]) if "e" in text.lower() else 1)
    return math.isclose(got, shown, rel_tol=REL_TOL, abs_tol=half_unit)


def _matches(shown, got, shown_text: dict) -> list[str]:
    """What of the ``shown`` JSON object the printed one ``got`` does not match."""
    bad = []
    for key, value in shown.items():
        if key not in got:
            bad.append(f"{key}: not printed")
        elif value is None:
            if got[key] is not None:
                bad.append(f"{key}: shown null, printed {got[key]!r}")
        elif isinstance(value, str):
            pattern = ".*".join(re.escape(p) for p in value.split("..."))
            if not isinstance(got[key], str) or not re.fullmatch(pattern, got[key]):
                bad.append(f"{key}: shown {value!r}, printed {got[key]!r}")
        elif isinstance(value, (int, float)):
            if not _number_close(value, got[key], shown_text.get(key, repr(value))):
                bad.append(f"{key}: shown {shown_text.get(key, value)}, printed {got[key]!r}")
    return bad


def _shown_json(comment: str):
    """The JSON object a ``# {...}`` comment shows (``...`` allowed inside strings), and the text
    of each top-level number as written (its shown precision)."""
    body = comment.lstrip("#").strip()
    if not body.startswith("{"):
        return None, {}
    try:
        shown = json.loads(body)
    except json.JSONDecodeError:
        return None, {}
    texts = dict(re.findall(r'"([^"]+)":\s*(-?[0-9][0-9.eE+-]*)', body))
    return shown, texts


def _commands(lang: str, body: str):
    """(argv, expected comment) for each ``silodp`` command of a shell block."""
    lines, joined = body.splitlines(), []
    for raw in lines:
        line = raw[2:] if lang == "console" and raw.startswith("$ ") else raw
        if joined and joined[-1].endswith("\\"):
            joined[-1] = joined[-1][:-1] + " " + line.strip()
        else:
            joined.append(line.strip())
    out = []
    for i, line in enumerate(joined):
        if not line.startswith("silodp "):
            continue
        argv = shlex.split(line, comments=True)
        expected = joined[i + 1] if i + 1 < len(joined) and joined[i + 1].startswith("# {") else None
        out.append((argv, expected))
    return out


@pytest.mark.parametrize("lang,body,expected,skip", _blocks())
def test_doc_block_runs(lang, body, expected, skip, tmp_path, monkeypatch, capsys):
    if skip:
        pytest.skip(skip)
    monkeypatch.chdir(tmp_path)
    if lang == "python":
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(body, "<doc>", "exec"), {"__name__": "__doc_block__"})
        if expected is not None:
            assert printed.getvalue().split() == expected.split() or _numbers_match(expected, printed.getvalue())
        return
    from silodp.cli import main

    commands = _commands(lang, body)
    for argv, comment in commands:
        capsys.readouterr()
        code = main(argv[1:])
        out, err = capsys.readouterr()
        assert code == 0, f"{shlex.join(argv)}: exit {code}: {err.strip()}"
        if comment is not None:
            shown, texts = _shown_json(comment)
            assert shown is not None, f"{comment!r}: shown output is not a JSON object"
            bad = _matches(shown, json.loads(out), texts)
            assert not bad, f"{shlex.join(argv)}: {bad}"


def _numbers_match(expected: str, got: str) -> bool:
    """Same words, and numbers within the tolerance (for a python block's ``text`` output)."""
    number = r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?"
    if re.sub(number, "#", expected).split() != re.sub(number, "#", got).split():
        return False
    return all(_number_close(float(a), float(b), a) for a, b in zip(re.findall(number, expected),
                                                                     re.findall(number, got)))


def test_skip_markers_name_a_reason():
    for doc in DOCS:
        for line in doc.read_text().splitlines():
            if "docs-test" in line:
                assert SKIP.search(line), f"{doc.name}: {line!r} (use <!-- docs-test: skip (reason) -->)"
