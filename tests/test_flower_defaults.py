"""Issue 36 item 1 (simulation side): no over-noising accountant is recommended where a Flower user
starts -- the example's default calibration is the tightest certificate, and neither the example's
command line nor a documented simulation command passes ``accountant="rdp"`` (RDP over-noises: the
issue measured epsilon 0.976 certified for a target of 8, and a diverging model)."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_example_default_is_the_tightest_certificate():
    config = tomllib.loads((ROOT / "examples/flower/pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert config["accountant"] == ""  # "": the tightest, as `silodp run`


def test_no_documented_simulation_command_passes_rdp():
    commands = [line for line in (ROOT / "docs/integrations.md").read_text().splitlines()
                if "run_simulation.py" in line or re.search(r"flwr run \S+ sim\b", line)]
    commands += (ROOT / "examples/flower/run_simulation.py").read_text().splitlines()[:5]
    assert commands and not [c for c in commands if 'accountant="rdp"' in c]
