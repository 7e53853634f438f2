"""docs/cli.md is the CLI contract: every example on it runs and prints (at least) the JSON keys
listed under it, as strict JSON. Examples run in order, in a scratch directory."""

import json
import re
import shlex
from pathlib import Path

import pytest

from silodp.cli import _MODULES, main

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
EXAMPLE = re.compile(r"```bash\n(silodp [^\n]*)\n```\nJSON keys: (.*?)(?:\n\n|\Z)", re.S)


def examples() -> list[tuple[str, list[str]]]:
    return [(cmd, re.findall(r"`([^`]+)`", keys.split("(")[0])) for cmd, keys in EXAMPLE.findall(DOC.read_text())]


def test_every_subcommand_is_documented():
    documented = {shlex.split(cmd)[1] for cmd, _ in examples()}
    assert documented == {"epsilon", "noise", "shuffle", "distributed", "bound", "run", "audit", "rates", "reproduce",
                          "plot", "report"}
    assert len(_MODULES) == 10  # a new subcommand module needs its section in docs/cli.md
    for name in ("ledger", "silo", "federation"):  # documented, not runnable without a silo's files
        assert f"### `silodp {name}`" in DOC.read_text()


def test_examples_print_their_documented_keys(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def refuse(token):
        raise AssertionError(f"non-JSON constant {token}")

    for cmd, keys in examples():
        assert keys, cmd
        code = main(shlex.split(cmd)[1:])
        out = capsys.readouterr().out
        data = json.loads(out, parse_constant=refuse)
        assert code == 0, cmd
        missing = [k for k in keys if k not in data]
        assert not missing, f"{cmd}: missing {missing}"


@pytest.mark.parametrize("argv,word", [
    (["epsilon", "--noise-multiplier", "1", "--delta", "2", "--json"], "delta"),
    (["noise", "--epsilon", "-1", "--delta", "1e-5", "--json"], "epsilon"),
])
def test_errors_are_one_line_naming_the_argument(capsys, argv, word):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and word in err
