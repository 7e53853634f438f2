"""docs/cli.md matches the tool: read against the argparse parsers themselves (``build_parser``),
every subcommand has its section, every flag a section names exists on that subcommand (nested
subcommands such as ``silo serve`` included), and every flag of a subcommand is documented in its
section. The algorithms' own flags, generated from their configs when ``--algorithm NAME`` is
given, are documented by reference (``silodp run --algorithm NAME --help``), so they must exist
where named but need not each be listed. tests/cli/test_reference.py runs the page's examples."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from silodp.cli import CliError, build_parser

DOC = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
#: flags every parser has, or the top-level parser's own
GLOBAL = {"--help", "--version"}


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {name: p for a in parser._actions if isinstance(a, argparse._SubParsersAction)
            for name, p in a.choices.items()}


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    """The long flags of ``parser`` and of its nested subcommands."""
    own = {o for a in parser._actions for o in a.option_strings if o.startswith("--")}
    return own.union(*(_flags(p) for p in _subcommands(parser).values())) - GLOBAL


def _generated(parser: argparse.ArgumentParser) -> set[str]:
    """The flags ``--algorithm NAME`` adds (every registered family's own parameters), generated
    on the parser in place as the CLI does."""
    before = _flags(parser)
    try:
        parser.parse_known_args(["--algorithm", "isrl-spider"])
    except CliError:  # required flags missing: the flags were added before the parse
        pass
    return _flags(parser) - before


def sections(doc: str = DOC) -> dict[str, tuple[str, list[str]]]:
    """``silodp X`` -> (the text of its ``### `silodp X``` section, the subcommands its heading
    names: ``silodp reproduce`` and ``silodp plot`` share one)."""
    heads = list(re.finditer(r"^### (.*)$", doc, re.M))
    out = {}
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(doc)
        body = doc[head.end():end].split("\n## ")[0]
        names = re.findall(r"`silodp (\w+)`", head.group(1))
        for name in names:
            out[name] = (body, names)
    return out


def misnamed(doc: str, parsers: dict) -> dict[str, list[str]]:
    """Per section, the flags it names that none of its subcommands has."""
    wrong = {}
    for name, (body, names) in sections(doc).items():
        known = set().union(*(_flags(parsers[n]) for n in names))
        # a section may name flags of a command it points to: `silodp run ... --flag` or `run`'s --flag
        other = {f for cmd, rest in re.findall(r"(?:silodp |`)(\w+)[` ]([^`\n]*)", body) if cmd in parsers and cmd != name
                 for f in FLAG.findall(rest) if f not in known}
        missing = sorted(set(FLAG.findall(body)) - known - other - GLOBAL)
        if missing:
            wrong[name] = missing
    return wrong


def undocumented(doc: str, parsers: dict, generated: dict) -> dict[str, list[str]]:
    """Per subcommand, its flags that its section does not name (generated ones aside)."""
    text = sections(doc)
    out = {name: sorted(_flags(p) - generated.get(name, set()) - set(FLAG.findall(text[name][0])))
               for name, p in parsers.items()}
    return {k: v for k, v in out.items() if v}


@pytest.fixture(scope="module")
def commands():
    pytest.importorskip("torch")  # the algorithms' generated flags
    commands = _subcommands(build_parser())
    generated = {name: g for name, p in commands.items() if "--algorithm" in _flags(p) and (g := _generated(p))}
    assert set(generated) == {"noise", "run"}
    return commands, generated


def test_every_subcommand_has_a_section(commands):
    assert set(sections()) == set(commands[0])


def test_every_flag_named_exists_with_that_subcommand(commands):
    assert misnamed(DOC, commands[0]) == {}


def test_conventions_name_only_real_flags(commands):
    parsers, _ = commands
    conventions = DOC[:DOC.index("\n## ")]
    every = set().union(*(_flags(p) for p in parsers.values()))
    typo = "--noise-multipler"  # the example of a mistyped flag the CLI corrects
    assert typo in conventions
    assert set(FLAG.findall(conventions)) - every - GLOBAL == {typo}


def test_every_flag_is_documented_in_its_section(commands):
    parsers, generated = commands
    assert undocumented(DOC, parsers, generated) == {}
    for name in generated:  # the generated flags are documented by reference to --help
        assert f"silodp {name} --algorithm NAME --help" in DOC


def test_the_checks_catch_a_wrong_or_missing_flag(commands):
    parsers, generated = commands
    assert "--noise-multipler" not in _flags(parsers["epsilon"]) and "--noise-multiplier" in _flags(parsers["epsilon"])
    assert {"--silos", "--dir"} <= _flags(parsers["federation"])  # nested: federation up
    doctored = DOC.replace("`--max-runs N`", "`--max-run N`")
    assert misnamed(doctored, parsers) == {"reproduce": ["--max-run"], "plot": ["--max-run"]}
    assert undocumented(doctored, parsers, generated) == {"reproduce": ["--max-runs"]}
    assert set(sections(DOC.replace("### `silodp shuffle`", "### shuffle"))) == set(parsers) - {"shuffle"}
