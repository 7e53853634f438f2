"""Issue 36 item 1 (simulation side): the noise factor docs/integrations.md (section 1c) states
for an ``"rdp"`` calibration of the Flower example is what the command it names prints, for the
example's own defaults."""

import json
import re
import shlex
import tomllib
from pathlib import Path

from silodp.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "docs" / "integrations.md").read_text()
SECTION = DOCS[DOCS.index("### 1c."):DOCS.index("### 1d.")]


def test_the_stated_noise_factor_is_the_commands(capsys):
    config = tomllib.loads((ROOT / "examples" / "flower" / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    args = shlex.split(re.search(r"`silodp (noise [^`]+)`", SECTION).group(1))
    flags = dict(zip(args[1::2], args[2::2]))
    # the command is the example's defaults: epsilon, delta, one step per round, batch / smallest silo
    assert (float(flags["--epsilon"]), float(flags["--delta"]), int(flags["--steps"])) == (
        config["epsilon"], config["delta"], config["rounds"])
    assert round(float(flags["--q"]) * int(flags["--dataset-size"])) == config["batch-size"]
    assert main([a for a in args if a not in ("--accountant", "all")] + ["--accountant", "all", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    factor = out["rdp"]["noise_multiplier"] / out["pld"]["noise_multiplier"]
    stated = float(re.search(r"adds about (\d+\.\d) times the noise", re.sub(r"\s+", " ", SECTION)).group(1))
    assert abs(factor - stated) <= 0.05
    for name in ("rdp", "pld"):  # the section's table: 6 significant digits, noise rounded up
        shown = float(re.search(rf"^{name}\s+(\d+\.\d+)\s", SECTION, re.M).group(1))
        assert out[name]["noise_multiplier"] <= shown <= out[name]["noise_multiplier"] * (1 + 1e-5)
