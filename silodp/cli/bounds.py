"""``silodp bound``: list, evaluate and render the paper's bounds (silodp.bounds).

    silodp bound --list [--json]
    silodp bound ID [--param NAME=VALUE ...] [--json]      value, dominant term, exponents
    silodp bound ID --latex [--json]                        the formula
    silodp bound ID [--json]                                 (no --param) a description

sympy is imported inside the handler, so ``silodp --help`` stays fast.
"""

from __future__ import annotations

import argparse
import math
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bound",
        help="evaluate the paper's upper/lower bounds",
        description="List, evaluate (value, dominant term, exponents, conditions) or render bounds.",
    )
    p.add_argument("id", nargs="?", help="bound id (see --list)")
    p.add_argument("--list", action="store_true", help="list bound ids, titles and sources")
    p.add_argument(
        "--param", action="append", default=[], metavar="NAME=VALUE",
        help="a parameter value, e.g. --param n=1000 (repeatable)",
    )
    p.add_argument("--latex", action="store_true", help="print the formula as LaTeX")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=handle)


def parse_params(items: list[str]) -> dict[str, float]:
    """``["n=1000", "eps=1"]`` -> ``{"n": 1000.0, "eps": 1.0}``; ValueError naming the item."""
    out: dict[str, float] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"--param expects NAME=VALUE, got {item!r}")
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"--param {name}: not a number: {raw!r}") from None
        if name in out:
            raise ValueError(f"--param {name} given twice")
        out[name] = value
    return out


def handle(args: argparse.Namespace) -> int:
    from silodp.cli import emit

    from silodp import bounds

    from silodp.cli import refuse

    if args.list:
        if args.id:
            raise ValueError(f"--list: lists every bound; give it without a bound id (got {args.id!r})")
        refuse(args, ("--param", "--latex"), "with --list")
        rows = [
            {"id": b.id, "title": b.title, "source": str(b.source), "kind": str(b.kind)}
            for b in bounds.list_bounds()
        ]
        wid = max(len(r["id"]) for r in rows)
        wkind = max(len(r["kind"]) for r in rows)
        human = "\n".join(f"{r['id']:<{wid}}  {r['kind']:<{wkind}}  {r['title']}" for r in rows)
        emit({"bounds": rows}, args.json, human)
        return 0
    if not args.id:
        raise ValueError("bound: give a bound id or --list")
    bound = bounds.get_bound(args.id)
    params = parse_params(args.param)
    if args.latex:
        refuse(args, ("--param",), "with --latex (the formula has no values)")
        emit({"id": bound.id, "latex": bound.latex()}, args.json, bound.latex())
        return 0
    if not params:
        info = bound.describe()
        emit(info, args.json, _describe_human(info))
        return 0
    payload = evaluate_payload(bound, params)
    emit(payload, args.json, _evaluate_human(payload))
    return 0


def evaluate_payload(bound: Any, params: dict[str, float]) -> dict[str, Any]:
    """The JSON answer for one bound at one point."""
    point, unused = bound.split_params(params)
    ex = bound.exponents(point)
    prescribed = {k: v for k, v in _prescribed(bound, point).items() if k not in point}
    checks = bound.check(point)
    return {
        "id": bound.id,
        "value": ex.value,
        "dominant_term": ex.dominant_term,
        "terms": ex.term_values,
        "exponents": ex.exponents,
        "conditions_hold": bound.conditions_hold(point),
        "conditions": checks,
        "prescribed": prescribed,
        "unused": unused,
        "source": str(bound.source),
    }


def _prescribed(bound: Any, point: dict[str, float]) -> dict[str, float]:
    if "paper" not in bound.prescriptions:
        return {}
    try:
        values = bound.prescribe(point)
    except ValueError:  # some prescription inputs missing: report none
        return {}
    return {k: float(v) for k, v in values.items() if math.isfinite(float(v))}


def _evaluate_human(p: dict[str, Any]) -> str:
    from silodp.cli.tables import num

    lines = [f"{p['id']}: {num(p['value'])}   ({p['source']})",
             f"  dominant term   {p['dominant_term']}"]
    lines += [f"  term {name:<18} {num(val)}" for name, val in p["terms"].items()]
    lines += [f"  d log / d log {k:<8} {v:+.4f}" for k, v in p["exponents"].items()]
    lines.append(f"  conditions hold {p['conditions_hold']}")
    lines += [f"    {k:<20} {v}" for k, v in p["conditions"].items()]
    lines += [f"  prescribed {k:<10} {num(v)}" for k, v in p["prescribed"].items()]
    if p["unused"]:
        lines.append(f"  unused          {', '.join(p['unused'])}")
    return "\n".join(lines)


def _describe_human(info: dict[str, Any]) -> str:
    lines = [f"{info['id']}: {info['title']}", f"  source      {info['source']}",
             f"  parameters  {', '.join(info['parameters'])}", f"  formula     {info['latex']}"]
    lines += [f"  condition   {k}: {v}" for k, v in info["conditions"].items()]
    return "\n".join(lines)
