"""The CLI contract under fuzzing (issue 15): every invocation either exits 0 with strict JSON on
stdout, or exits 2 with exactly one line on stderr naming what is wrong -- never a traceback,
never a usage block, and never longer than ``LIMIT_S`` seconds.

Hypothesis draws, for each subcommand, a valid base invocation with one or two flags replaced by
hostile values (0, negatives, NaN, inf, 1e308, huge integers, empty strings, wrong types) or
flags that do not apply to the mode.
"""

from __future__ import annotations

import contextlib
import io
import json
import signal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from silodp.cli import main

#: No fuzzed invocation may take longer (they are all small or refused early).
LIMIT_S = 20

HOSTILE = ["0", "-1", "-0.5", "nan", "NaN", "inf", "-inf", "1e308", "-1e308", "1e-320",
           "123456789012345678901234567890", "", " ", "abc", "1,5", "0x10", "True", "None", "[]"]

#: subcommand -> (valid base arguments, flags that may be fuzzed)
COMMANDS = {
    "epsilon": (["--noise-multiplier", "2", "--steps", "10", "--delta", "1e-5"],
                ["--noise-multiplier", "--steps", "--delta", "--q", "--dataset-size"]),
    "noise": (["--epsilon", "2", "--steps", "10", "--delta", "1e-5"],
              ["--epsilon", "--steps", "--delta", "--q", "--dataset-size"]),
    "shuffle": (["--eps0", "1", "--n", "1000", "--delta", "1e-6"], ["--eps0", "--n", "--delta"]),
    "bound": (["thm2.1-isrl", "--param", "n=1000", "--param", "eps=1"], ["--param"]),
    "run": (["--algorithm", "isrl-prox-sgd", "--dataset", "wbcd", "--epsilon", "2", "--rounds", "2"],
            ["--epsilon", "--rounds", "--batch-size", "--delta", "--seed", "--silos-per-round", "--step-size"]),
    "audit": (["--mechanism", "gaussian", "--noise-multiplier", "2", "--trials", "200"],
              ["--noise-multiplier", "--trials", "--delta", "--alpha", "--epsilon"]),
}


@contextlib.contextmanager
def time_limit(seconds: int):
    def fail(signum, frame):
        raise TimeoutError(f"an invocation took longer than {seconds} s")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def invoke(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), time_limit(LIMIT_S):
        try:
            code = main(argv)
        except SystemExit as exc:  # --help and the like
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def _no_nan(token: str):
    raise AssertionError(f"non-strict JSON constant {token}")


def check_contract(argv: list[str]) -> None:
    code, out, err = invoke(argv)
    assert "Traceback" not in out + err, argv
    assert "usage:" not in err, argv
    if code == 0:
        if "--json" in argv:
            json.loads(out, parse_constant=_no_nan)
    else:
        assert code == 2, (argv, code, err)
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("silodp"), (argv, err)


def _replace(base: list[str], flag: str, value: str) -> list[str]:
    argv = list(base)
    if flag in argv and flag != "--param":
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value if flag != "--param" else f"n={value}"]
    return argv


@st.composite
def invocations(draw):
    command = draw(st.sampled_from(sorted(COMMANDS)))
    base, flags = COMMANDS[command]
    argv = [command, *base]
    for _ in range(draw(st.integers(1, 2))):
        argv = _replace(argv, draw(st.sampled_from(flags)), draw(st.sampled_from(HOSTILE)))
    if draw(st.booleans()):
        argv.append("--json")
    return argv


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(invocations())
def test_fuzzed_invocations_keep_the_contract(argv):
    check_contract(argv)


@pytest.mark.parametrize("argv", [
    ["epsilon", "--noise-multiplier", "1e308", "--delta", "1e-5", "--json"],
    ["shuffle", "--eps0", "1e308", "--n", "1000", "--delta", "1e-6", "--json"],
    ["shuffle", "--eps0", "1", "--n", "12345678901234567890", "--delta", "1e-6", "--json"],
    ["epsilon", "--noise-multiplier", "0.0005", "--delta", "1e-5", "--accountant", "all", "--json"],
    ["epsilon", "--noise-multiplier", "0.3", "--steps", "1000000", "--delta", "1e-5", "--json"],
    ["nosuch"],
    [],
    ["epsilon"],
    ["run", "--algorithm", "nosuch", "--dataset", "wbcd", "--epsilon", "1"],
    ["audit", "--algorithm", "isrl-prox-sgd", "--trials", "1"],
])
def test_issue_examples_keep_the_contract(argv):
    check_contract(argv)


def test_accountant_all_answers_null_where_an_accountant_cannot_certify():
    code, out, _ = invoke(["epsilon", "--noise-multiplier", "0.0005", "--delta", "1e-5", "--accountant", "all",
                           "--json"])
    data = json.loads(out)
    assert code == 0 and data["pld"] is None and data["relation"] == "add-remove"
