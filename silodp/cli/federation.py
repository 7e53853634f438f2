"""``silodp federation up|down``: a local Flower federation with silo privacy services.

    silodp federation up --silos N --dir DIR --budget-epsilon E --budget-delta D [--dataset NAME] [--json]
    silodp federation down DIR [--json]

``up`` starts a SuperLink, N SuperNodes and N silo services on 127.0.0.1
(:func:`silodp.service.federation.up`) and prints the processes and the ``flwr run`` connection;
``down`` stops them by PID (the state is in DIR).
"""

from __future__ import annotations

import argparse

from silodp.cli.domains import text


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("federation", help="start or stop a local Flower federation with silo privacy services",
                              description="A SuperLink, N SuperNodes and N silo services on 127.0.0.1.")
    sub = p.add_subparsers(dest="federation_command", required=True, metavar="FEDERATION_COMMAND")
    up = sub.add_parser("up", help="start the federation", description="Start a SuperLink, N SuperNodes and N silo "
                        "services on 127.0.0.1; print their PIDs and the flwr run connection.")
    up.add_argument("--silos", type=int, required=True, help="how many silos (the dataset's partitions)")
    up.add_argument("--dir", required=True, type=text("a directory"), help="where the state, ledgers and logs live")
    up.add_argument("--budget-epsilon", type=float, required=True, help="each silo's budget epsilon")
    up.add_argument("--budget-delta", type=float, required=True, help="each silo's budget delta")
    up.add_argument("--dataset", default="wbcd", type=text("a dataset name"), help="the silos' dataset (default wbcd)")
    up.add_argument("--json", action="store_true", help="machine-readable output")
    up.set_defaults(handler=handle_up)
    down = sub.add_parser("down", help="stop the federation", description="Stop the federation in DIR by PID.")
    down.add_argument("dir", type=text("a directory"), help="the directory given to up")
    down.add_argument("--json", action="store_true", help="machine-readable output")
    down.set_defaults(handler=handle_down)


def handle_up(args: argparse.Namespace) -> int:
    from silodp.cli import emit
    from silodp.service.federation import up

    out = up(args.dir, args.silos, args.budget_epsilon, args.budget_delta, args.dataset)
    lines = [f"superlink: pid {out['superlink']['pid']} at {out['superlink']['address']}"]
    lines += [f"silo {i}: supernode pid {s['pid']}, service pid {s['service_pid']} on 127.0.0.1:{s['port']}, "
              f"ledger {s['ledger']}" for i, s in enumerate(out["silos"])]
    lines.append(f"flwr run examples/flower {out['connection']}")
    emit(out, args.json, "\n".join(lines))
    return 0


def handle_down(args: argparse.Namespace) -> int:
    from silodp.cli import emit
    from silodp.service.federation import down

    out = down(args.dir)
    emit(out, args.json, f"stopped {len(out['stopped'])} processes")
    return 0
