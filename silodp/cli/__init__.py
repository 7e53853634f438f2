"""``silodp`` command line: a thin face over the library.

Every subcommand lives in its own module exposing ``register(subparsers)``; heavy imports (torch,
sympy) happen inside the handlers, so accounting commands answer without importing torch.
Any failure -- bad input, an argparse error, or an exception from the library -- exits with status
2 and exactly one line on stderr (``silodp COMMAND: error: ...``), never a usage block or a
traceback. JSON output is strict: an infinite or undefined number is ``null``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
from pathlib import Path
from typing import Sequence

# Subcommand modules, in the order they appear in ``silodp --help``.
_MODULES = ("accounting", "bounds", "run", "audit", "rates", "reproduce")


class CliError(Exception):
    """A command-line error, reported as one line."""


class _Parser(argparse.ArgumentParser):
    """argparse with errors as one line (no usage block); subparsers inherit the class."""

    def error(self, message: str):
        raise CliError(f"{self.prog}: error: {message}")


#: top-level modules of an optional extra, and the install that brings them
_EXTRAS = {"torch": "torch", "matplotlib": "torch", "sklearn": "torch", "mlxtend": "torch",
           "flwr": "flower", "flwr_datasets": "flower", "opacus": "opacus"}


def missing_extra(exc: BaseException) -> str | None:
    """One line for a command that needs an extra which is not installed (``pip install silodp``
    gives the accounting layer only), or None when ``exc`` is something else."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    top = exc.name.split(".")[0]
    if top not in _EXTRAS:
        return None
    return f"this command needs {top}, which is not installed: pip install 'silodp[{_EXTRAS[top]}]'"


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line; arithmetic failures say what they mean."""
    extra = missing_extra(exc)
    if extra is not None:
        return extra
    if isinstance(exc, OverflowError):
        text = f"a value is too large to compute with ({exc})"
    elif isinstance(exc, (ValueError, CliError)):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split()) or type(exc).__name__


def _flag_names(message: str, parser: argparse.ArgumentParser | None) -> str:
    """``dataset_size: must ...`` from the library as ``--dataset-size: must ...`` when the command
    has that flag, so the one line names what the user typed."""
    head, sep, rest = message.partition(":")
    if not sep or parser is None or " " in head.strip():
        return message
    flag = "--" + head.strip().replace("_", "-")
    known = {opt for action in parser._actions for opt in action.option_strings}
    return f"{flag}:{rest}" if flag in known else message


def given(args, *flags: str) -> list[str]:
    """Which of ``flags`` (``--name`` strings) the user typed (``args.given``, set by :func:`main`)."""
    typed = getattr(args, "given", set())
    return [f for f in flags if f in typed]


def refuse(args, flags, why: str) -> None:
    """ValueError naming the first of ``flags`` the user typed, which does not apply (``why``)."""
    typed = given(args, *flags)
    if typed:
        raise ValueError(f"{typed[0]}: does not apply {why}")


def _typed_flags(argv: Sequence[str], parser: argparse.ArgumentParser) -> set[str]:
    """The long options in ``argv``, expanded from unambiguous prefixes as argparse does."""
    known = {opt for action in parser._actions for opt in action.option_strings if opt.startswith("--")}
    out = set()
    for token in argv:
        if token == "--":
            break
        if token.startswith("--"):
            name = token.split("=", 1)[0]
            matches = [k for k in known if k == name] or [k for k in known if k.startswith(name)]
            out.update(matches[:1] if len(matches) == 1 else [])
    return out


def check_writable(path: str, flag: str) -> None:
    """Fail before any work when ``path`` cannot be written (missing directory, not writable)."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise ValueError(f"{flag}: {path!r} is a directory")
    if not folder.is_dir():
        raise ValueError(f"{flag}: the directory {str(folder)!r} does not exist")
    if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise ValueError(f"{flag}: {path!r} is not writable")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="silodp",
        description="Differentially private federated learning without a trusted server.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parser.set_defaults(subparsers=sub)
    for name in _MODULES:
        try:
            module = importlib.import_module(f"silodp.cli.{name}")
        except ModuleNotFoundError as exc:  # a layer not installed in this build
            if exc.name != f"silodp.cli.{name}":
                raise
            continue
        module.register(sub)
    return parser


def strict_json(value):
    """``value`` with every non-finite float replaced by ``None``: JSON has no inf or NaN, so an
    infinite noise scale or an epsilon no accountant certifies is printed as ``null``."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def table(payload: dict) -> str:
    """``payload`` as an aligned two-column table: nested objects flattened (``noise.sigma``),
    numbers to 6 significant digits, ``None`` (and non-finite numbers) as ``-``."""
    rows: list[tuple[str, str]] = []

    def add(prefix: str, value) -> None:
        if isinstance(value, dict) and value:
            for k, v in value.items():
                add(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(value, float):
            rows.append((prefix, f"{value:.6g}" if math.isfinite(value) else "-"))
        elif isinstance(value, (list, tuple)):
            rows.append((prefix, ", ".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in value)))
        else:
            rows.append((prefix, "-" if value is None else str(value)))

    add("", payload)
    width = max((len(k) for k, _ in rows), default=0)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def emit(payload: dict, as_json: bool, human: str | None = None) -> None:
    """Print ``payload`` as strict JSON (non-finite numbers as ``null``), or ``human`` (a formatted
    table) when not ``--json``."""
    if as_json:
        print(json.dumps(strict_json(payload), indent=None, sort_keys=False, allow_nan=False))
    else:
        print(human if human is not None else json.dumps(strict_json(payload), indent=2, allow_nan=False))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
    except CliError as exc:
        print(one_line(exc), file=sys.stderr)
        return 2
    command = args.subparsers.choices.get(args.command)
    args.given = _typed_flags(argv, command) if command is not None else set()
    try:
        return int(args.handler(args) or 0)
    except Exception as exc:  # the contract: one line, exit 2, whatever failed
        print(f"silodp {args.command}: error: {_flag_names(one_line(exc), command)}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
