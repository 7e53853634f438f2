"""Issue 36 item 1: the numbers docs/integrations.md states about the Flower example come from the
commands it names. Section 1c: the noise factor of an ``"rdp"`` calibration, for the example's own
defaults. Section 1d: the local federation's ``silodp silo admits`` (epsilon of one run, how many
runs the budget admits), run on the configuration ``silodp federation up`` writes for silo 0, and
the one-host deployment's claim that its budget admits one run and refuses the second. And
no Flower command in the docs, the README, the notebooks or the example proposes ``accountant="rdp"``
(it over-noises: the silos' ledgers then certify far below the target)."""

import json
import re
import shlex
import tomllib
from pathlib import Path

from silodp.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "docs" / "integrations.md").read_text()
SECTION = DOCS[DOCS.index("### 1c."):DOCS.index("### 1d.")]
DEPLOYMENT = DOCS[DOCS.index("### 1d."):DOCS.index("### 1e.")]
FLOWER = DOCS[DOCS.index("## 1. Flower"):DOCS.index("## 2. Opacus")]


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


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_the_federation_numbers_are_silo_admits(tmp_path, capsys):
    from silodp.service.federation import _service_config

    up = shlex.split(re.search(r"^silodp federation up (.+)$", DEPLOYMENT, re.M).group(1))
    flags = dict(zip(up[::2], up[1::2]))
    admits = shlex.split(re.search(r"^silodp silo admits (.+)$", DEPLOYMENT, re.M).group(1))
    assert admits[0] == "fed/silo-0/service.toml" and admits[1] == "--run-config"
    run_config = admits[2]
    # the flwr run the section shows proposes what silo admits was asked about
    flwr_run = shlex.split(re.search(r"^flwr run examples/flower silodp-.+$", DEPLOYMENT, re.M).group(0))
    assert flwr_run[flwr_run.index("--run-config") + 1] == run_config
    silo = tmp_path / "silo-0"
    silo.mkdir()
    config = _service_config(silo, "wbcd", 0, 0, float(flags["--budget-epsilon"]), float(flags["--budget-delta"]), 1)
    assert main(["silo", "admits", str(config), "--run-config", run_config, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    text = _flat(DEPLOYMENT)
    stated = re.search(r"one run of `([^`]+)` certifies epsilon (\d+\.\d+) for silo 0 .*? a budget of (\d+(?:\.\d+)?) "
                       r"admits (\d+) such runs", text)
    assert stated.group(1) == run_config
    # printed rounded up to 6 significant digits: never below the certificate
    assert out["epsilon_run"] <= float(stated.group(2)) <= out["epsilon_run"] * (1 + 1e-5)
    assert float(stated.group(3)) == out["budget_epsilon"] == float(flags["--budget-epsilon"])
    assert int(stated.group(4)) == out["runs"] and out["epsilon_spent"] == 0.0


def test_the_one_host_budget_admits_one_run_per_silo(tmp_path, capsys):
    """The one-host commands' node-config budgets admit exactly one run of their ``flwr run``
    (the section: the second is refused by both silos), each silo's certificate as stated."""
    from silodp.service.federation import _service_config

    one_host = DEPLOYMENT[DEPLOYMENT.index("**One host**"):DEPLOYMENT.index("**What a round costs.**")]
    nodes = [dict(item.split("=", 1) for item in shlex.split(m)) for m in re.findall(r"--node-config '([^']+)'", one_host)]
    run_config = shlex.split(re.search(r"^flwr run examples/flower local (.+)$", one_host, re.M).group(1))[-1]
    stated = re.search(r"one run certifies epsilon (\d+\.\d+) for silo 0 and (\d+\.\d+) for silo 1", _flat(one_host))
    assert [int(n["partition-id"]) for n in nodes] == [0, 1] and stated
    for node, shown in zip(nodes, stated.groups()):
        silo = tmp_path / f"silo-{node['partition-id']}"
        silo.mkdir()
        config = _service_config(silo, node["dataset"], int(node["partition-id"]), int(node["seed"]),
                                 float(node["silodp-budget-epsilon"]), float(node["silodp-budget-delta"]), 1)
        assert main(["silo", "admits", str(config), "--run-config", run_config, "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["runs"] == 1  # the first run fits, the second is refused
        assert out["epsilon_run"] <= float(shown) <= out["epsilon_run"] * (1 + 1e-5)
    assert f"{float(nodes[0]['silodp-budget-epsilon']):g}" in _flat(one_host).split("At the budget below, ")[1][:4]


def test_no_flower_command_proposes_rdp():
    """Every command of the Flower section (the deployment's too: tests/test_flower_defaults.py
    checks the simulation commands and the example's default), the example, the README and the
    notebooks: ``accountant="rdp"`` appears only in prose that warns against it."""
    proposing = re.compile(r"""accountant\s*=\s*\\?["']rdp""")
    commands = [line for line in FLOWER.splitlines() if "--run-config" in line or "run_simulation.py" in line
                or line.lstrip().startswith(("flwr ", "silodp "))]
    assert commands and not [line for line in commands if proposing.search(line)]
    files = [*(ROOT / "examples" / "flower").rglob("*.py"), ROOT / "README.md", *(ROOT / "notebooks").glob("*.ipynb")]
    for path in files:
        text = path.read_text()
        for found in proposing.finditer(text):  # a mention must warn (within the next 200 characters)
            assert "over-noise" in text[found.start():found.start() + 200], f"{path.name}: {text[found.start():][:120]}"
