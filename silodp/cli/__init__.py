"""``silodp`` command line: a thin face over the library.

Every subcommand lives in its own module exposing ``register(subparsers)``; heavy imports (torch,
sympy) happen inside the handlers, so accounting commands answer without importing torch.
Bad input exits with status 2 and one line naming the argument. JSON output is strict: an
infinite or undefined number is ``null``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from typing import Sequence

# Subcommand modules, in the order they appear in ``silodp --help``.
_MODULES = ("accounting", "bounds", "run", "audit", "rates", "reproduce")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="silodp",
        description="Differentially private federated learning without a trusted server.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
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


def emit(payload: dict, as_json: bool, human: str | None = None) -> None:
    """Print ``payload`` as strict JSON (non-finite numbers as ``null``), or ``human`` (a formatted
    table) when not ``--json``."""
    if as_json:
        print(json.dumps(strict_json(payload), indent=None, sort_keys=False, allow_nan=False))
    else:
        print(human if human is not None else json.dumps(strict_json(payload), indent=2, allow_nan=False))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except ValueError as exc:
        print(f"silodp {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
