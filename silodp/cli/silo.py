"""``silodp silo serve CONFIG.toml``: run a silo's privacy service (:mod:`silodp.service`).

The silo's operator starts it (as the user that owns the records and the ledger); it loads the
records once, then answers the thin ClientApp's admit / release / status calls on a Unix domain
socket (mode 0600) or on 127.0.0.1 with a token, until SIGTERM. See docs/integrations.md.
"""

from __future__ import annotations

import argparse

from silodp.cli.domains import text


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("silo", help="run a silo's privacy service (the records never enter the server's code)",
                              description="The silo privacy service of a Flower deployment.")
    sub = p.add_subparsers(dest="silo_command", required=True, metavar="SILO_COMMAND")
    serve = sub.add_parser("serve", help="serve the silo's admit / release / status calls",
                           description="Load the silo's records and serve its privacy service until SIGTERM.")
    serve.add_argument("config", type=text("the service's TOML configuration"), help="the service's TOML file")
    serve.add_argument("--json", action="store_true", help="print the address served as JSON before serving")
    serve.set_defaults(handler=handle_serve)


def handle_serve(args: argparse.Namespace) -> int:
    import sys

    from silodp.cli import emit
    from silodp.service.config import load

    config = load(args.config)
    from silodp.service.app import serve

    emit({"address": config.address, "ledger": config.policy.ledger}, args.json,
         f"silo service on {config.address}; ledger {config.policy.ledger}")
    sys.stdout.flush()
    serve(config)
    return 0
