"""The algorithms' own CLI flags, generated from their config dataclasses
(:mod:`silodp.algorithms.config`): ``silodp run`` takes every registered family's own parameters,
``silodp noise --algorithm`` those that enter the transcript. A new algorithm's parameter is a flag
with no edit here.

The flags are added when a parser first meets ``--algorithm`` (:func:`generate_on_algorithm`), so
that the other commands never import the algorithms (torch)."""

from __future__ import annotations

import argparse
import dataclasses

from silodp.cli.domains import COUNT, POSITIVE, PROBABILITY, Int, Real

#: parsers of the domains a config field declares (silodp.algorithms.config.DOMAINS)
DOMAIN_TYPES = {"count": COUNT, "count0": Int(0), "positive": POSITIVE, "probability": PROBABILITY,
                "unit": Real(0.0, 1.0, closed="low", what="a number in [0, 1)")}


def algorithm_fields(transcript_only: bool = False) -> dict[str, dataclasses.Field]:
    """Flag -> config field, over every registered algorithm's own parameters (the first class
    that declares a flag sets its domain and help)."""
    import silodp.algorithms  # noqa: F401  (registers the families)
    from silodp.algorithms.config import flag_of, own_fields
    from silodp.algorithms.registry import ALGORITHMS

    out: dict[str, dataclasses.Field] = {}
    for cls in ALGORITHMS.values():
        for f in own_fields(cls.Config):
            if f.metadata.get("domain") is not None and (f.metadata["transcript"] or not transcript_only):
                out.setdefault(flag_of(f), f)
    return out


def dest(f: dataclasses.Field) -> str:
    """The parsed attribute of a generated flag (apart from the command's own flags' names)."""
    return "param_" + f.name


def add_algorithm_flags(parser: argparse.ArgumentParser, transcript_only: bool, title: str) -> dict:
    """Add the generated flags to ``parser`` (a flag it has already is skipped); defaults: None,
    or the field's ``noise_default`` when ``transcript_only``. Returns flag -> field; errors that
    name a field name its flag (``args.flag_aliases``)."""
    group = parser.add_argument_group(title)
    added = {}
    for flag, f in algorithm_fields(transcript_only).items():
        if flag in parser._option_string_actions:
            continue
        domain = f.metadata["domain"]
        kind = {"choices": domain} if isinstance(domain, tuple) else {"type": DOMAIN_TYPES[domain]}
        default = f.metadata["noise_default"] if transcript_only else None
        group.add_argument(flag, dest=dest(f), default=default, help=f.metadata["help"], **kind)
        added[flag] = f
    parser.set_defaults(algorithm_flags=added, flag_aliases={f.name: flag for flag, f in added.items()})
    return added


def _names_algorithm(args) -> bool:
    for token in args or ():
        name = token.split("=", 1)[0]
        if len(name) > 4 and "--algorithm".startswith(name):
            return True
    return False


def generate_on_algorithm(parser: argparse.ArgumentParser, transcript_only: bool, title: str) -> None:
    """Add the generated flags to ``parser`` the first time it parses arguments naming
    ``--algorithm`` (without torch installed there are none: the command then says what to install).
    The plain ``--help`` says so (listing them would import every algorithm)."""
    original = parser.parse_known_args
    parser.set_defaults(algorithm_flags={})
    hint = (f"Each algorithm's own parameters are flags too, generated from its config: "
            f"'{parser.prog} --algorithm NAME --help' lists them.")
    parser.epilog = hint if parser.epilog is None else f"{parser.epilog}\n\n{hint}"

    def parse_known_args(args=None, namespace=None):
        if not getattr(parser, "_generated", False) and _names_algorithm(args):
            parser._generated = True
            try:
                add_algorithm_flags(parser, transcript_only, title)
            except ModuleNotFoundError:
                pass
        return original(args, namespace)

    parser.parse_known_args = parse_known_args
