"""``silodp ledger``: print a silo's persistent ledger (silodp.integrations.flower_silo).

    silodp ledger PATH [--json]

Who computes the silo's releases (``mode``: ``service``, the silo privacy service its operator
runs, or ``in-process (the app bundle is trusted)``, the ClientApp the server ships), the budget
the silo's operator declared, the epsilon certified for everything the silo ever
released (all runs composed), each run's releases and epsilon, and how many messages the silo
refused. Reads the file only (no Flower, no torch).
"""

from __future__ import annotations

from silodp.cli.tables import num
from silodp.cli.domains import text

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("ledger", help="print a Flower silo's persistent privacy ledger",
                              description="A silo's budget, epsilon spent (all runs), runs and refusals.")
    p.add_argument("path", type=text("the ledger file"), help="the ledger file (the SuperNode's node-config silodp-ledger)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from silodp.cli import emit
    from silodp.integrations.flower_silo import SiloLedgerDB

    import sqlite3

    try:
        out = SiloLedgerDB(args.path).summary()
    except sqlite3.DatabaseError as exc:  # a text file, a corrupt file: say what the user gave
        raise ValueError(f"path: {args.path!r} is not a silodp ledger ({exc})") from None
    lines = [f"mode:   {out['mode']}",
             f"budget: epsilon {out['budget_epsilon']:g} at delta {out['budget_delta']:g}",
             f"spent:  epsilon {num(out['epsilon_spent'])} (every release, all runs composed)"]
    lines += [f"run {r['run_id']}: {r['releases']} releases, epsilon {num(r['epsilon'])}" for r in out["runs"]]
    lines.append(f"refused: {out['refused']} messages")
    emit(out, args.json, "\n".join(lines))
    return 0
