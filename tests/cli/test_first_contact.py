"""What a newcomer meets first on the command line (issue 36, item 6): ``--version``; a mistyped
flag or subcommand named with the closest real one; errors in the CLI's own words (``--relation
replace-one``, never ``neighbouring=REPLACE_ONE`` or a flag the user did not pass); ``--param n 1000``
hinted as ``n=1000``; over-long paths and non-database ledgers as one line, exit 2."""

import pytest

from silodp import __version__
from silodp.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"silodp {__version__}"


@pytest.mark.parametrize("argv, hint", [
    (["epsilon", "--noise-multipler", "1"], "did you mean --noise-multiplier?"),  # before 'required: --delta'
    (["epsilon", "--noise-multipler", "1", "--delta", "1e-5"], "did you mean --noise-multiplier?"),
    (["epsilonn"], "did you mean epsilon?"),
    (["epsilon", "--delta", "1e-5", "--accountant", "pldd"], "did you mean pld?"),
])
def test_a_typo_is_answered_with_the_closest_name(capsys, argv, hint):
    code, _, err = run(capsys, *argv)
    assert code == 2 and one_line(err).endswith(f"({hint})")


def test_errors_name_the_cli_s_own_flags(capsys):
    code, _, err = run(capsys, "epsilon", "--sampling", "without-replacement", "--noise-multiplier", "1", "--q", "0.01",
                       "--dataset-size", "1000", "--steps", "100", "--delta", "1e-5")
    line = one_line(err)
    assert code == 2 and "--relation replace-one" in line
    assert "--event" not in line and "neighbouring" not in line and "REPLACE_ONE" not in line
    assert line.count("defined for replace-one only") == 1  # one reason, not one per accountant


@pytest.mark.parametrize("argv", [["bound", "--param", "n", "1000"], ["bound", "thm2.1-isrl", "--param", "n", "1000"]])
def test_param_with_a_space_is_hinted(capsys, argv):
    code, _, err = run(capsys, *argv)
    assert code == 2 and one_line(err).endswith("write --param n=1000")


@pytest.mark.parametrize("command", ["reproduce", "plot"])
def test_an_over_long_store_path_is_one_line(capsys, tmp_path, command):
    code, _, err = run(capsys, command, "--store", str(tmp_path / ("a" * 300)))
    line = one_line(err)
    assert code == 2 and "--store" in line and "too long" in line and "Traceback" not in err


def test_a_file_that_is_not_a_ledger_is_one_line(capsys, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n" * 100)
    code, _, err = run(capsys, "ledger", str(text))
    line = one_line(err)
    assert code == 2 and "is not a silodp ledger" in line and "DatabaseError" not in line
    code, _, err = run(capsys, "ledger", str(tmp_path / ("b" * 300)))
    assert code == 2 and "too long" in one_line(err)
