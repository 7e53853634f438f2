""""One file" is true: a toy algorithm file, a toy accountant file (the toys of
tests/algorithms/test_toy_extension.py, written out as modules) and a bound file, copied into a temporary copy
of the package and nowhere else (no import list, no registry, no scenario, no test fixture
registers them), are found by the package walk and reachable from ``silodp run``, ``noise``,
``epsilon``, ``audit`` and ``bound`` in a fresh interpreter (a subprocess). docs/architecture.md says what
this shows."""

import filecmp
import importlib.util
import inspect
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import silodp

PACKAGE = pathlib.Path(silodp.__file__).parent


def _toys():
    """The toys of tests/algorithms/test_toy_extension.py (defined there, registered by a fixture),
    written out as two module files that register themselves."""
    spec = importlib.util.spec_from_file_location("_toy_extension", pathlib.Path(__file__).parent / "algorithms"
                                                  / "test_toy_extension.py")
    toy = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # inspect finds classes there
    spec.loader.exec_module(toy)
    algorithm = "\n\n".join([
        "import dataclasses\n\nfrom silodp.accounting.releases import BatchSampling\n"
        "from silodp.algorithms.base import FederatedAlgorithm\n"
        "from silodp.algorithms.config import AlgorithmConfig, param\n"
        "from silodp.algorithms.plan import gaussian_messages\n"
        "from silodp.algorithms.registry import register_algorithm\n",
        inspect.getsource(toy.ToyConfig),  # its transcript is derived from ToyConfig (no Transcript class)
        "@register_algorithm\n" + inspect.getsource(toy.ToyFullGradient)])
    accountant = ("from silodp.accounting.accountants import GdpAccountant, register_accountant\n\n\n"
                  "@register_accountant\n" + inspect.getsource(toy.ToyGdp))
    return toy.ToyFullGradient.name, algorithm, toy.ToyGdp.name, accountant


ALGORITHM, TOY_ALGORITHM, ACCOUNTANT, TOY_ACCOUNTANT = _toys()
#: a bound: one registered value in a new module of silodp/bounds/ (here a relabelled copy of one)
BOUND = "one-file-bound"
TOY_BOUND = f"""import dataclasses

from silodp.bounds.hybrid import APPG_PL
from silodp.bounds.registry import register

register(dataclasses.replace(APPG_PL, id={BOUND!r}, title="a bound in its own file"))
"""


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    root = tmp_path_factory.mktemp("clone")
    shutil.copytree(PACKAGE, root / "silodp", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "silodp" / "algorithms" / "one_file_gradient.py").write_text(TOY_ALGORITHM)
    (root / "silodp" / "accounting" / "one_file_gdp.py").write_text(TOY_ACCOUNTANT)
    (root / "silodp" / "bounds" / "one_file_bound.py").write_text(TOY_BOUND)
    return root


def _silodp(copy: pathlib.Path, *argv: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(copy), FLWR_TELEMETRY_ENABLED="0")
    out = subprocess.run([sys.executable, "-m", "silodp", *argv, "--json"], cwd=copy, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _changed(a: pathlib.Path, b: pathlib.Path) -> list[str]:
    cmp = filecmp.dircmp(a, b, ignore=["__pycache__"])
    out = [str(b / n) for n in cmp.diff_files + cmp.left_only + cmp.right_only]
    return out + [f for sub in cmp.common_dirs for f in _changed(a / sub, b / sub)]


def test_the_copy_differs_from_the_package_by_the_two_files_only(copy):
    assert sorted(pathlib.Path(p).name for p in _changed(PACKAGE, copy / "silodp")) == \
        ["one_file_bound.py", "one_file_gdp.py", "one_file_gradient.py"]


def test_a_toy_algorithm_file_and_a_toy_accountant_file_reach_every_command(copy):
    ran = _silodp(copy, "run", "--algorithm", ALGORITHM, "--dataset", "synthetic", "--rounds", "3",
                  "--epsilon", "2", "--step-size", "0.1", "--accountant", ACCOUNTANT, "--server-momentum", "0.5")
    assert ran["algorithm"] == ALGORITHM and ran["accountant"] == ACCOUNTANT
    assert 1.9 <= ran["epsilon"] <= 2.0 and ran["server_momentum"] == 0.5
    noise = _silodp(copy, "noise", "--algorithm", ALGORITHM, "--epsilon", "2", "--delta", "1e-5",
                    "--n", "100", "--rounds", "3", "--accountant", ACCOUNTANT, "--method", "tight")
    assert noise["accountant"] == ACCOUNTANT and 1.9 <= noise["epsilon"] <= 2.0
    twice = _silodp(copy, "noise", "--algorithm", ALGORITHM, "--epsilon", "2", "--delta", "1e-5", "--n", "100",
                    "--rounds", "3", "--accountant", ACCOUNTANT, "--method", "tight", "--toy-passes", "2")
    assert twice["sigmas"]["sigma"] > 1.3 * noise["sigmas"]["sigma"]  # the derived transcript field counts
    exact = _silodp(copy, "epsilon", "--noise-multiplier", "2", "--steps", "10", "--delta", "1e-5",
                    "--accountant", "gdp")
    toy = _silodp(copy, "epsilon", "--noise-multiplier", "2", "--steps", "10", "--delta", "1e-5",
                  "--accountant", ACCOUNTANT)
    assert toy["epsilon"] == exact["epsilon"] > 0
    audit = _silodp(copy, "audit", "--algorithm", ALGORITHM, "--trials", "2000")
    assert audit["algorithm"] == ALGORITHM and audit["epsilon_lower"] <= audit["epsilon_claimed"]


def test_a_bound_file_reaches_silodp_bound(copy):
    listed = [b["id"] for b in _silodp(copy, "bound", "--list")["bounds"]]
    assert BOUND in listed and listed.count(BOUND) == 1
    params = [f"{k}={v}" for k, v in dict(L=1, N=10, d=5, delta=1e-5, eps=0.5, kappa=2, mu=0.1, n=1000).items()]
    shown = _silodp(copy, "bound", BOUND, *[a for p in params for a in ("--param", p)])
    assert shown["id"] == BOUND and shown["value"] > 0
