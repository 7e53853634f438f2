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
import re
import sys
import warnings
from typing import Sequence

# Subcommand modules, in the order they appear in ``silodp --help``.
_MODULES = ("accounting", "bounds", "run", "audit", "rates", "reproduce", "distributed", "ledger", "silo",
            "federation")


class CliError(Exception):
    """A command-line error, reported as one line."""


class _Parser(argparse.ArgumentParser):
    """argparse with errors as one line (no usage block); subparsers inherit the class."""

    def error(self, message: str):
        raise CliError(f"{self.prog}: error: {message}")


#: top-level modules of an optional extra, and the install that brings them
_EXTRAS = {"torch": "torch", "matplotlib": "torch", "sklearn": "torch", "mlxtend": "torch",
           "flwr": "flower", "flwr_datasets": "flower", "fastapi": "flower", "uvicorn": "flower", "httpx": "flower",
           "opacus": "opacus"}


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
    elif isinstance(exc, OSError) and exc.strerror:  # e.g. a 300-character path: no traceback, no echo of it
        name = str(exc.filename or "")
        shown = name if len(name) <= 80 else f"{name[:40]}...{name[-20:]}"
        text = f"{exc.strerror}: {shown!r}" if name else exc.strerror
    elif isinstance(exc, (ValueError, CliError)):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split()) or type(exc).__name__


def _flag_names(message: str, parser: argparse.ArgumentParser | None, aliases: dict | None = None) -> str:
    """``dataset_size: must ...`` from the library as ``--dataset-size: must ...`` when the command
    has that flag (or ``aliases`` maps the library's name to the flag the user typed, e.g.
    ``period`` -> ``--spider-period``), so the one line names what the user typed; the library's keyword
    spelling ``method='tight'`` reads as the flag, ``--method tight``."""
    if parser is None:
        return message
    known = {opt for action in parser._actions for opt in action.option_strings}

    def flag_of(name: str) -> str | None:
        flag = (aliases or {}).get(name) or "--" + name.replace("_", "-")
        return flag if flag in known else None

    message = re.sub(r"\b([a-z_]+)='([^']*)'", lambda m: f"{flag_of(m[1])} {m[2]}" if flag_of(m[1]) else m[0], message)
    lead = re.match(r"([a-z_]+)=\S", message)  # "epsilon=1e-300 is unreachable ..." names --epsilon
    if lead and flag_of(lead[1]):
        return f"{flag_of(lead[1])}: {message}"
    head, sep, rest = message.partition(":")
    if not sep or " " in head.strip():
        return message
    flag = flag_of(head.strip())
    return f"{flag}:{rest}" if flag else message


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
    """Fail before any work when ``path`` cannot be written (missing directory, not writable:
    tried, see :func:`silodp.cli.domains.check_writable`)."""
    from silodp.cli.domains import check_writable as writable

    try:
        writable(path)
    except ValueError as exc:
        raise ValueError(f"{flag}: {exc}") from None


def _suggest(word: str, choices) -> str:
    """`` (did you mean X?)`` for the closest of ``choices`` to a mistyped ``word``, else ''."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def _command_parser(argv: Sequence[str], parser: argparse.ArgumentParser):
    """The innermost (sub)command parser ``argv`` names (``silodp silo serve``: serve's), or None."""
    command = None
    for token in argv:
        if token == "--":
            break
        current = command or parser
        subs = [a for a in current._actions if isinstance(a, argparse._SubParsersAction)]
        if subs and token in subs[0].choices:
            command = subs[0].choices[token]
    return command


def _long_flags(command: argparse.ArgumentParser) -> list[str]:
    return sorted({opt for action in command._actions for opt in action.option_strings if opt.startswith("--")})


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _precheck(argv: Sequence[str], parser: argparse.ArgumentParser) -> None:
    """Errors argparse words poorly, caught before it runs: a renamed flag (named with its new
    spelling: :data:`silodp._validation.RENAMED` and the command parser's ``renamed_flags``), a
    mistyped flag (named with the closest real one, before any 'required' complaint),
    ``--param n 1000`` (hint ``n=1000``).
    Commands whose flags are generated on ``--algorithm`` leave unknown flags to argparse."""
    command = _command_parser(argv, parser)
    if command is None:
        return
    known = _long_flags(command)
    generated = "parse_known_args" in vars(command)
    from silodp._validation import RENAMED

    renamed = {**{k: v for k, v in RENAMED.items() if k.startswith("--")}, **getattr(command, "renamed_flags", {})}
    tokens = list(argv)
    for i, token in enumerate(tokens):
        if token == "--":
            break
        if not token.startswith("--"):
            continue
        name = token.split("=", 1)[0]
        if name in renamed and name not in known:
            new, meaning = renamed[name]
            raise CliError(f"{command.prog}: error: {name}: renamed to {new} ({meaning}); pass {new}")
        if not generated and not any(k.startswith(name) for k in known):
            raise CliError(f"{command.prog}: error: unrecognized arguments: {name}")
        following = tokens[i + 1:i + 3]
        if name == "--param" and "=" not in token and len(following) == 2 and "=" not in following[0] \
                and not following[0].startswith("-") and _number(following[1]):
            raise CliError(f"{command.prog}: error: --param expects NAME=VALUE: write --param {following[0]}={following[1]}")


def _with_suggestion(message: str, argv: Sequence[str] = (), parser: argparse.ArgumentParser | None = None) -> str:
    """argparse's ``invalid choice: 'x' (choose from ...)`` and ``unrecognized arguments: --x``
    with the closest choice or flag named."""
    u = re.search(r"unrecognized arguments: (--[^\s=]+)", message)
    command = _command_parser(argv, parser) if parser is not None else None
    if u and command is not None:
        return message + _suggest(u[1], _long_flags(command))
    m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
    if not m:
        return message
    choices = re.findall(r"'([^']*)'", m[2]) or [c.strip() for c in m[2].split(",")]
    return message + _suggest(m[1], choices)


def cli_words(message: str, parser: argparse.ArgumentParser | None, typed: set[str]) -> str:
    """A library message in the CLI's words: ``neighbouring=REPLACE_ONE`` as ``--relation
    replace-one`` (where the command has ``--relation``); "no accountant certifies it" with each
    distinct reason once, blamed on ``--event`` only when the user passed it."""
    m = re.match(r"event: no accountant certifies it \((.*)\)$", message)
    if m:
        reasons = [r.split(": ", 1)[-1] for r in re.split(r"; (?=[a-z][a-z0-9-]*: )", m[1])]
        what = "--event" if "--event" in typed else "this mechanism"
        message = f"no accountant certifies {what}: " + "; ".join(dict.fromkeys(reasons))
    known = {opt for action in parser._actions for opt in action.option_strings} if parser is not None else set()
    if "--relation" in known:
        message = re.sub(r"neighbou?ring=REPLACE_ONE", "--relation replace-one", message)
        message = re.sub(r"neighbou?ring=ADD_OR_REMOVE_ONE", "--relation add-remove", message)
        message = re.sub(r"\bREPLACE_ONE\b", "replace-one", message)
        message = re.sub(r"\bADD_OR_REMOVE_ONE\b", "add-remove", message)
    return message


def build_parser() -> argparse.ArgumentParser:
    from silodp import __version__

    parser = _Parser(
        prog="silodp",
        description="Differentially private federated learning without a trusted server.",
    )
    parser.add_argument("--version", action="version", version=f"silodp {__version__}")
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


def emit(payload: dict, as_json: bool, human: str | None = None) -> None:
    """Print ``payload`` as strict JSON at full precision (non-finite numbers as ``null``), or,
    when not ``--json``, ``human`` (default: ``payload`` as an aligned table,
    :func:`silodp.cli.tables.pairs`; numbers rounded toward privacy)."""
    if as_json:
        print(json.dumps(strict_json(payload), indent=None, sort_keys=False, allow_nan=False))
    else:
        from silodp.cli.tables import pairs

        print(human if human is not None else pairs(payload))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        _precheck(argv, parser)
        args = parser.parse_args(argv)
    except CliError as exc:
        print(_with_suggestion(one_line(exc), argv, parser), file=sys.stderr)
        return 2
    except Exception as exc:  # a path argparse's type check could not even stat (too long, ...)
        print(f"silodp: error: {one_line(exc)}", file=sys.stderr)
        return 2
    command = args.subparsers.choices.get(args.command)
    args.given = _typed_flags(argv, command) if command is not None else set()
    with warnings.catch_warnings(record=True) as caught:  # no warning before an error line
        warnings.simplefilter("always")
        try:
            code = int(args.handler(args) or 0)
        except Exception as exc:  # the contract: one line, exit 2, whatever failed
            message = cli_words(one_line(exc), command, args.given)
            message = _flag_names(message, command, getattr(args, "flag_aliases", None))
            print(f"silodp {args.command}: error: {message}", file=sys.stderr)
            return 2
    for text in dict.fromkeys(" ".join(str(w.message).split()) for w in caught):  # a success: its warnings, once each
        print(f"silodp {args.command}: warning: {text}", file=sys.stderr)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
