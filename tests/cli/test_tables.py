"""Human-readable output (issue 26 item 4, issue 28): aligned tables from one module, and every
number a command prints rounded toward privacy -- each real of its ``--json`` answer appears in
the human answer rounded up (noise up, epsilon up, delta up), never rounded down."""

from __future__ import annotations

import json
import math
import random

import pytest

from silodp._validation import round_up
from silodp.cli.tables import columns, flatten, num, pairs

from test_fuzz import invoke  # tests/cli is on sys.path (rootdir-relative test modules)


def test_num_rounds_every_real_up_and_prints_the_rest_as_it_is():
    rng = random.Random(0)
    for x in [rng.uniform(-1, 1) * 10 ** rng.randint(-300, 300) for _ in range(2000)] + [0.1 + 0.2, 2 / 3, 1e-320]:
        printed = float(num(x))
        assert printed >= x and abs(printed - x) <= abs(x) * 1e-5 + 1e-320, x
    assert [num(v) for v in (None, math.nan, math.inf, -math.inf, 0.0, 7, True, "pld", [0.1, 2])] == [
        "-", "-", "inf", "-inf", "0", "7", "True", "pld", "0.1, 2"]
    assert num(1.0000001, 3) == "1.01" and num(0.123456789, 4) == "0.1235" and num(-0.123456789, 4) == "-0.1234"


def test_columns_align_numbers_right_and_text_left():
    text = columns(("name", "value"), [("a", 1.5), ("longer", 123.0), ("c", None)])
    lines = text.splitlines()
    assert lines == ["name    value",
                     "a         1.5",
                     "longer    123",
                     "c           -"]


def test_pairs_flatten_nested_payloads():
    payload = {"noise": {"sigma": 0.1 + 0.2, "rows": [{"k": 1}, {"k": 2}]}, "empty": {}, "name": "x"}
    assert flatten(payload) == [("noise.sigma", 0.1 + 0.2), ("noise.rows[0].k", 1), ("noise.rows[1].k", 2),
                                ("empty", None), ("name", "x")]
    assert pairs(payload).splitlines()[0] == "noise.sigma      0.300001"


def _reals(value, path=()):
    """Every finite non-integer real of a JSON payload, with its path of keys."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _reals(v, (*path, k))
    elif isinstance(value, list):
        for v in value:
            yield from _reals(v, path)
    elif isinstance(value, float) and math.isfinite(value) and value != int(value):
        yield path, value


NOISE = ["--epsilon", "1", "--delta", "1e-5"]
ALGO = [*NOISE, "--n", "100", "--rounds", "2", "--batch-size", "10"]


@pytest.mark.parametrize("argv, unprinted", [
    (["epsilon", "--noise-multiplier", "1.1", "--steps", "100", "--delta", "1e-5", "--accountant", "all",
      "--sampling", "poisson", "--q", "0.01"], {"value_discretization_interval", "log_mass_truncation_bound"}),
    (["epsilon", "--noise-multiplier", "0.7", "--steps", "30", "--delta", "3e-6"], set()),
    (["noise", *NOISE, "--steps", "10", "--accountant", "all"], {"value_discretization_interval", "log_mass_truncation_bound"}),
    (["noise", *NOISE, "--steps", "10", "--sampling", "without-replacement", "--q", "0.025", "--dataset-size", "100",
      "--relation", "replace-one", "--accountant", "rdp"], set()),
    (["noise", "--algorithm", "isrl-spider", *ALGO, "--accountant", "rdp"], set()),
    (["noise", "--algorithm", "isrl-mb-sgd", *ALGO, "--method", "tight", "--accountant", "rdp"], set()),
    (["noise", "--algorithm", "sdp-prox-sgd", *ALGO, "--silos", "2", "--method", "tight"], set()),
    (["noise", "--algorithm", "dp-scaffold", *NOISE, "--n", "100", "--rounds", "2", "--silos", "2"], set()),
    (["shuffle", "--eps0", "1", "--n", "1000", "--delta", "1e-6"], set()),
    (["distributed", "--mechanism", "skellam", "--dimension", "100", "--clip", "1", "--silos", "10", "--bits", "20",
      "--epsilon", "1", "--delta", "1e-5"], set()),
    (["audit", "--mechanism", "gaussian", "--noise-multiplier", "1.3", "--trials", "200"], set()),
    (["bound", "thm3.1", "--param", "n=1000", "--param", "N=10", "--param", "eps=1", "--param", "delta=1e-5",
      "--param", "d=10", "--param", "L=1", "--param", "beta=1", "--param", "Delta=1"], {"exponents"}),
])
def test_human_output_prints_every_number_of_the_json_rounded_up(argv, unprinted, monkeypatch):
    import silodp.cli
    import silodp.cli.accounting

    payloads, emit = [], silodp.cli.emit

    def keep(payload, as_json, human=None):  # the --json answer of the same run
        payloads.append(json.loads(json.dumps(silodp.cli.strict_json(payload))))
        emit(payload, as_json, human)

    for module in (silodp.cli, silodp.cli.accounting):
        monkeypatch.setattr(module, "emit", keep)
    code, human, err = invoke(argv)
    assert code == 0 and len(payloads) == 1, err
    tokens = set(human.replace(",", " ").replace("(", " ").replace(")", " ").replace("=", " ").split())
    reals = [(path, value) for path, value in _reals(payloads[0]) if not unprinted & set(path)]
    printed = {round_up(value) for _, value in reals}  # what the rounded-up numbers print
    for path, value in reals:
        assert round_up(value) in tokens, (path, value, human)
        nearest = f"{value:.6g}"
        # the ordinary rounding would have promised more privacy: it is not printed (unless another
        # number of the payload rounds up to the same digits, as epsilon_third_party beside epsilon_server)
        if float(nearest) < value and nearest not in printed:
            assert nearest not in tokens, (path, value, human)
