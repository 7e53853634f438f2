"""``silodp silo serve CONFIG.toml``: run a silo's privacy service (:mod:`silodp.service`).

The silo's operator starts it (as the user that owns the records and the ledger); it loads the
records once, then answers the thin ClientApp's admit / release / status calls on a Unix domain
socket (mode 0600) or on 127.0.0.1 with a token, until SIGTERM. See docs/integrations.md.
"""

from __future__ import annotations

import argparse
import warnings

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
    admits = sub.add_parser("admits", help="how many runs of a proposal the silo's budget admits",
                            description="The silo's certificate of one run of a proposal (a flwr run config) and "
                                        "how many more runs of it its budget admits, given its ledger.")
    admits.add_argument("config", type=text("the service's TOML configuration"), help="the service's TOML file")
    admits.add_argument("--run-config", default="", help="the proposal, as flwr run's --run-config "
                                                         "(e.g. 'rounds=2 epsilon=1.0')")
    admits.add_argument("--json", action="store_true", help="machine-readable output")
    admits.set_defaults(handler=handle_admits)


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


def handle_admits(args: argparse.Namespace) -> int:
    from silodp.cli import emit
    from silodp.cli.tables import num
    from silodp.service.config import load

    config = load(args.config)
    with warnings.catch_warnings():  # Flower's imports warn about click
        warnings.simplefilter("ignore")
        from flwr.common.config import parse_config_args

    from silodp.service.app import build_silo
    from silodp.service.plan import Settings

    settings = Settings.from_run_config(parse_config_args([args.run_config]) if args.run_config.strip() else {})
    out = build_silo(config).admits(settings)
    emit(out, args.json, f"one run: epsilon {num(out['epsilon_run'])}; the budget (epsilon {out['budget_epsilon']:g} "
                         f"at delta {out['budget_delta']:g}, spent {num(out['epsilon_spent'])}) admits "
                         f"{out['runs']} more runs")
    return 0
