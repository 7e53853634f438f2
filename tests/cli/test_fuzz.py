"""The CLI contract under fuzzing (issues 15, 28): every invocation either exits 0 with strict JSON
on stdout, or exits 2 with exactly one line on stderr naming what is wrong -- never a traceback,
never a usage block, never a warning before the error, and never longer than ``LIMIT_S`` seconds.

Two generators. Hypothesis draws, for each subcommand, a valid base invocation with one or two
flags replaced by hostile values. The matrix (issue 28) is generated from the parsers themselves:
every value-taking flag of every subcommand has a stated domain (:mod:`silodp.cli.domains`, or
choices, or a registry name), and for each flag the classes of the hostile-input matrix that fall
outside it (missing, empty, whitespace, NaN, +-inf, 1e999, 1e-320, beyond each bound, huge
integers, fractions for integers, unicode, bad paths) must be refused while parsing -- exit 2, one
line naming that flag -- so heavy commands are probed too, at no cost. Contradictory
combinations and the issue's wrong successes, hangs and unclear messages are listed cases.
"""

from __future__ import annotations

import contextlib
import io
import json
import signal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from silodp.cli import build_parser, main
from silodp.cli.domains import Int, PathArg, Real

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
              ["--noise-multiplier", "--trials", "--delta", "--confidence", "--epsilon"]),
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



# -- issue 28: the hostile-input matrix, generated from the parsers -------------------------------
#: flags whose value is a name checked against a registry (not a number or a path)
NAME_FLAGS = {("noise", "--algorithm"), ("run", "--algorithm"), ("audit", "--algorithm"), ("audit", "--mutation"),
              ("rates", "--algorithm"), ("rates", "--compare"), ("bound", "--param"), ("bound", "id"),
              ("reproduce", "preset"), ("report", "preset")}


def _subparsers():
    parser = build_parser()
    return parser._subparsers._group_actions[0].choices


def _value_flags(sub):
    return [a for a in sub._actions if a.nargs != 0 and a.dest != "help"]


def _name(action) -> str:
    return action.option_strings[0] if action.option_strings else action.dest


def test_every_value_flag_has_a_stated_domain():
    """The matrix's premise: no flag of any subcommand takes an unchecked number or path."""
    loose = [(cmd, _name(a)) for cmd, sub in _subparsers().items() for a in _value_flags(sub)
             if not (isinstance(a.type, (Real, Int, PathArg)) or getattr(a.type, "domain", None) or a.choices)
             and (cmd, _name(a)) not in NAME_FLAGS]
    assert not loose, loose


def _outside(action) -> list[str]:
    """Values outside ``action``'s domain, one per class of the matrix that applies to it."""
    kind = action.type
    common = ["", " ", "ünïcödé", "\u2212" + "1"]
    if action.choices:
        return common + ["nosuch", str(sorted(map(str, action.choices))[0]).upper() + "x"]
    if isinstance(kind, Int):
        out = common + ["nan", "inf", "1.5", "1e3", "0x10", "1,5", "123456789012345678901234567890", str(kind.low - 1)]
        return out + ([str(kind.high + 1)] if kind.high < 10 ** 30 else [])
    if isinstance(kind, Real):
        out = common + ["nan", "NaN", "-inf", "1e999", "abc", "1,5"]
        if kind.high != float("inf") or "high" not in kind.closed:
            out.append("inf")
        if kind.low > float("-inf"):
            out.append(repr(kind.low - abs(kind.low) - 1.0))
            if "low" not in kind.closed:
                out.append(repr(kind.low))
            if kind.low >= 0:
                out.append("1e-320")
        if kind.high < float("inf"):
            out.append(repr(kind.high * 2 + 1.0))
            if "high" not in kind.closed:
                out.append(repr(kind.high))
        return out
    if isinstance(kind, PathArg):
        out = ["", "/nonexistent-dir-silodp/x" + ("." + kind.suffixes[0] if kind.suffixes else "")]
        if kind.kind == "out":
            out += ["/proc/version" if not kind.suffixes else "/proc/x." + kind.suffixes[0], "/"]
            if kind.suffixes:
                out.append("noext")
        return out
    return common[:2]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A real (tiny) results store, so that `plot`'s base invocation is valid."""
    from silodp.experiments.grid import RunConfig
    from silodp.experiments.store import Store

    path = tmp_path_factory.mktemp("fuzz") / "r.db"
    cfg = RunConfig(dataset="wbcd", algorithm="isrl-mb-sgd", epsilon=1.0, calibration="tight", silos_per_round=2,
                    rounds=5, step_size=0.1, clip=1.0, trial=0)
    with Store(path) as st:
        st.record(cfg, {"status": "ok", "metrics": {"test_error": 0.1, "val_error": 0.1}, "certified_epsilon": 1.0,
                        "delta": 1e-5, "sigmas": {"sigma": 1.0}})
    return str(path)


def _bases(store: str, out: str) -> dict:
    """A valid invocation per subcommand (never run: every generated case must fail parsing)."""
    return {
        "epsilon": ["--noise-multiplier", "2", "--steps", "10", "--delta", "1e-5"],
        "noise": ["--epsilon", "2", "--steps", "10", "--delta", "1e-5"],
        "shuffle": ["--eps0", "1", "--n", "1000", "--delta", "1e-6"],
        "bound": ["thm2.1-isrl"],
        "run": ["--algorithm", "isrl-prox-sgd", "--dataset", "wbcd", "--epsilon", "2", "--rounds", "2"],
        "audit": ["--mechanism", "gaussian", "--noise-multiplier", "2", "--trials", "200"],
        "rates": ["--vary", "eps", "--quick"],
        "reproduce": ["wbcd", "--quick", "--store", out + ".db"],
        "plot": ["--store", store, "--out", out + ".png"],
        "report": ["wbcd", "--quick", "--store", store],
        "distributed": ["--mechanism", "skellam", "--dimension", "10", "--clip", "1", "--silos", "3", "--bits", "16",
                        "--epsilon", "1", "--delta", "1e-5"],
        "ledger": [store],  # its one value is the positional path (no generated cases)
        "silo": ["admits", out + ".toml"],  # nested subcommands: their flags are checked in test_silo_service
        "federation": ["down", out],
    }


def _matrix(store: str, out: str):
    bases = _bases(store, out)
    subs = _subparsers()
    assert set(bases) == set(subs), "a new subcommand needs a base invocation here"
    for cmd, sub in subs.items():
        for action in _value_flags(sub):
            flag = _name(action)
            if (cmd, flag) in NAME_FLAGS or not action.option_strings:
                continue
            for value in _outside(action):
                argv = [cmd, *bases[cmd]]
                if flag in argv:
                    argv[argv.index(flag) + 1] = value
                else:
                    argv += [flag, value] * (1 if action.nargs in (None, "?") else 1)
                yield argv, flag
            if action.required:  # missing: the flag and its value removed
                argv = [cmd, *bases[cmd]]
                if flag in argv:
                    i = argv.index(flag)
                    yield argv[:i] + argv[i + 2:], flag
                yield [cmd, *bases[cmd], flag], flag  # a flag with no value


def test_the_generated_matrix_is_refused_naming_the_flag(store, tmp_path):
    """Every flag x every class outside its domain: exit 2, one line, the flag named, at parse time
    (fast: the whole matrix, heavy commands included, runs in seconds)."""
    cases = list(_matrix(store, str(tmp_path / "out")))
    assert len(cases) > 400
    bad = []
    for argv, flag in cases:
        code, out, err = invoke(argv)
        lines = [line for line in err.splitlines() if line.strip()]
        if not (code == 2 and not out and len(lines) == 1 and lines[0].startswith("silodp") and flag in lines[0]
                and "Traceback" not in err):
            bad.append((argv, code, err.strip()[:200]))
    assert not bad, bad[:10]
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no output file left by a refused case


def test_name_flags_refuse_unknown_names_before_any_work():
    for argv, flag in [
        (["noise", "--epsilon", "1", "--delta", "1e-5", "--algorithm", "nosuch"], "--algorithm"),
        (["run", "--algorithm", "", "--dataset", "wbcd", "--epsilon", "1"], "--algorithm"),
        (["audit", "--algorithm", "nosuch"], "--algorithm"),
        (["audit", "--algorithm", "isrl-prox-sgd", "--mutation", "nosuch"], "--mutation"),
        (["rates", "--vary", "eps", "--algorithm", "nosuch"], "--algorithm"),
        (["rates", "--vary", "eps", "--quick", "--compare", "nosuch"], "--compare"),
        (["bound", "nosuch"], "bound"),
        (["bound", "thm2.1-isrl", "--param", "n=abc"], "--param"),
        (["reproduce", "nosuch"], "preset"),
    ]:
        code, _, err = invoke(argv)
        assert code == 2 and len(err.strip().splitlines()) == 1 and flag in err, (argv, err)


#: the issue's wrong successes, hangs and unclear messages, and those the fresh matrix found: (argv,
#: the flag the refusal must name); scripts/hostile_matrix.py runs them too
ISSUE_CASES = [
    # pld settings that another accountant would ignore
    (["epsilon", "--noise-multiplier", "1", "--delta", "1e-5", "--accountant", "rdp",
      "--value-discretization-interval", "1e-3"], "--value-discretization-interval"),
    (["noise", "--epsilon", "1", "--delta", "1e-5", "--accountant", "gdp", "--log-mass-truncation-bound", "-30"],
     "--log-mass-truncation-bound"),
    # noise --algorithm: flags that change nothing in that algorithm's transcript
    (["noise", "--epsilon", "1", "--delta", "1e-5", "--algorithm", "isrl-prox-sgd", "--spider-period", "2"], "--spider-period"),
    (["noise", "--epsilon", "1", "--delta", "1e-5", "--algorithm", "isrl-prox-sgd", "--data-sampling", "0.2"],
     "--data-sampling"),
    (["noise", "--epsilon", "1", "--delta", "1e-5", "--algorithm", "dp-scaffold", "--batch-size", "10"], "--batch-size"),
    (["noise", "--epsilon", "1", "--delta", "1e-5", "--algorithm", "dp-scaffold", "--without-replacement"],
     "--without-replacement"),
    (["noise", "--epsilon", "1", "--delta", "1e-5", "--algorithm", "dp-scaffold", "--silos-per-round", "2"],
     "--silos-per-round"),
    (["noise", "--epsilon", "1", "--delta", "1e-5", "--algorithm", "dp-scaffold", "--method", "paper"], "--method"),
    (["noise", "--epsilon", "1", "--delta", "1e-5", "--algorithm", "dp-scaffold", "--accountant", "rdp"],
     "--accountant"),
    # contradictory modes
    (["bound", "--list", "--latex"], "--latex"),
    (["bound", "--list", "--param", "n=1"], "--param"),
    (["bound", "--list", "thm2.1-isrl"], "--list"),
    (["bound", "thm2.1-isrl", "--latex", "--param", "n=1"], "--param"),
    (["run", "--algorithm", "mb-sgd", "--dataset", "wbcd", "--epsilon", "1", "--delta", "5"], "--delta"),
    (["run", "--algorithm", "mb-sgd", "--dataset", "wbcd", "--epsilon", "1", "--delta", "0.1"], "--delta"),
    (["reproduce", "wbcd", "--scheduler", "tcp://127.0.0.1:9", "--workers", "2"], "--workers"),
    (["reproduce", "wbcd", "--scheduler", ""], "--scheduler"),
    (["reproduce", "wbcd", "--scheduler", "localhost"], "--scheduler"),
    (["reproduce", "wbcd", "--quick", "--data-path", "/"], "--data-path"),
    (["reproduce", "mnist", "--data-path", "/nonexistent-silodp"], "--data-path"),
    (["plot", "--out", "noext"], "--out"),
    # the issue's hangs, refused at once
    (["epsilon", "--noise-multiplier", "1", "--delta", "1e-5", "--sampling", "poisson", "--q", "1e-320"], "--q"),
    (["audit", "--mechanism", "gaussian", "--noise-multiplier", "1", "--trials", "10000000000000"], "--trials"),
    (["audit", "--mechanism", "pvec", "--epsilon", "1e-320"], "--epsilon"),
    # the issue's unclear messages, now naming the flag typed
    (["epsilon", "--noise-multiplier", "1e-320", "--delta", "1e-5"], "--noise-multiplier"),
    (["noise", "--epsilon", "1", "--delta", "1e-5", "--algorithm", "isrl-spider", "--spider-period", "0"], "--spider-period"),
    (["noise", "--epsilon", "1", "--delta", "1e-5", "--algorithm", "isrl-prox-sgd", "--silos", "0"], "--silos"),
    (["noise", "--epsilon", "1", "--delta", "1e-5", "--steps", "100000000000000000000000000000"], "--steps"),
    (["rates", "--vary", "kappa", "--quick"], "--vary"),
    (["rates", "--vary", "eps", "--quick", "--csv", "/proc/version"], "--csv"),
    # found by the fresh matrix (scripts/hostile_matrix.py)
    (["noise", "--epsilon", "1", "--delta", "1e-5", "--algorithm", ""], "--algorithm"),
    (["run", "--algorithm", "isrl-prox-sgd", "--dataset", "wbcd", "--epsilon", "1e-300"], "--epsilon"),
    (["run", "--algorithm", "isrl-prox-sgd", "--dataset", "wbcd", "--epsilon", "2", "--clip", "1e308"], "--clip"),
    (["run", "--algorithm", "isrl-prox-sgd", "--dataset", "wbcd", "--epsilon", "2", "--hidden"], "--hidden"),
    (["run", "--algorithm", "isrl-prox-sgd", "--dataset", "wbcd", "--epsilon", "2", "--hidden", "-inf"], "--hidden"),
    (["audit", "--mechanism", "gaussian", "--noise-multiplier", "1e308", "--trials", "200"], "--noise-multiplier"),
    (["audit", "--mechanism", "gaussian", "--noise-multiplier", "1e-300", "--trials", "200"], "--noise-multiplier"),
    (["rates", "--vary", "M", "--quick", "--mutations"], "--vary"),
    (["rates", "--vary", "M", "--quick", "--values", "1e308", "4"], "--values"),
    (["rates", "--vary", "M", "--quick", "--compare", ""], "--compare"),
    (["distributed", "--mechanism", "skellam", "--dimension", "10", "--clip", "1e308", "--silos", "3", "--bits", "16",
      "--epsilon", "1", "--delta", "1e-5"], "--clip"),
    (["distributed", "--mechanism", "skellam", "--dimension", "10", "--clip", "1", "--silos", "3", "--bits", "16",
      "--epsilon", "1e-100", "--delta", "1e-5"], "--epsilon"),
    (["reproduce", "wbcd", "--quick", "--store", "/nonexistent-silodp/r.db"], "--store"),
    (["epsilon", "--noise-multiplier", "1", "--delta", "1e-5", "--accountant", "rdp",
      "--value-discretization-interval", "0.01"], "--value-discretization-interval"),
    (["noise", "--epsilon", "1", "--delta", "1e-5", "--steps", "10", "--accountant", "rdp", "--sampling", "poisson",
      "--q", "1e-320"], "--q"),
]


@pytest.mark.parametrize("argv, flag", ISSUE_CASES)
def test_issue_cases_are_refused_naming_the_flag(argv, flag):
    code, out, err = invoke(argv)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and flag in lines[0] and "warning" not in err.lower(), (argv, err)


def test_huge_noise_certifies_about_zero():
    """--noise-multiplier 1e308 used to fail with 'Numerical result out of range'."""
    code, out, err = invoke(["epsilon", "--noise-multiplier", "1e308", "--delta", "1e-5", "--json"])
    assert code == 0 and 0.0 <= json.loads(out)["epsilon"] < 1e-2, err


def test_printed_noise_certifies_at_most_the_target():
    """The human-readable noise (rounded up) re-certifies at or below the target epsilon."""
    for steps, q in (("10", None), ("100", "0.01"), ("1000", "0.05")):
        args = ["--steps", steps, "--delta", "1e-5"] + (["--sampling", "poisson", "--q", q] if q else [])
        code, out, _ = invoke(["noise", "--epsilon", "1", "--accountant", "rdp", *args])
        assert code == 0
        printed = next(line.split()[1] for line in out.splitlines() if line.startswith("rdp "))
        code, out, _ = invoke(["epsilon", "--noise-multiplier", printed, "--accountant", "rdp", "--json", *args])
        assert code == 0 and json.loads(out)["epsilon"] <= 1.0, (printed, out)
