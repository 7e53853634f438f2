"""The package as a user installs it: ``python -m build`` gives a wheel and an sdist; the wheel,
installed into a fresh virtual environment (no editable install, no source tree on the path, no
torch), answers ``silodp --help`` and an accounting command, and ``import silodp.accounting``
imports no torch. The commands that need torch say so in one line (exit 2).

No network: the fresh environment reuses this environment's installed packages (numpy, scipy,
sympy, dp-accounting...) through a folder of links that leaves out torch and silodp itself.
"""

from __future__ import annotations

import email
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: installed top-level names that the fresh environment must not see
HIDDEN = ("torch", "functorch", "torchgen", "torchvision", "torchaudio", "silodp", "__editable__", "_silodp")


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=120, **kw)


def _clean_env(**extra) -> dict:
    """This process' environment without PYTHONPATH and VIRTUAL_ENV: a PYTHONPATH naming the
    checkout (set by the caller, or left by an earlier test in the same worker) would show pip the
    checkout's ``silodp.egg-info`` as an installed silodp and make it skip the wheel."""
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    clean.update(extra)
    return clean


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """``python -m build`` of a copy of the source (the build leaves nothing in the worktree);
    without the ``build`` frontend, the same PEP 517 hooks called directly."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "silodp", src / "silodp", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("dist")
    if importlib.util.find_spec("build") is not None:
        proc = _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", out, src])
        assert proc.returncode == 0, proc.stderr[-2000:]
    else:
        for hook in ("build_sdist", "build_wheel"):  # one process each, as a frontend calls them
            proc = _run([sys.executable, "-c", f"import sys, setuptools.build_meta as b; b.{hook}(sys.argv[1])", out],
                        cwd=src)
            assert proc.returncode == 0, proc.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def env(dist, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed (not editable) and this environment's packages
    minus torch and silodp visible through one ``.pth`` line."""
    root = tmp_path_factory.mktemp("venv")
    venv.create(root, with_pip=False)
    shadow = tmp_path_factory.mktemp("site")
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.lower().startswith(HIDDEN) and entry.suffix != ".pth":
            (shadow / entry.name).symlink_to(entry)
    python = root / "bin" / "python"
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    Path(purelib, "_parent_packages.pth").write_text(f"{shadow}\n")
    wheel = next(dist.glob("*.whl"))
    # --ignore-installed: the wheel is installed whatever the fresh environment's path shows
    proc = _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
                 "--ignore-installed", "--no-compile", "--quiet", wheel], env=_clean_env(PYTHONNOUSERSITE="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return root


def _in_env(env: Path, *cmd, tmp_path: Path):
    """Run in the fresh environment, from a folder outside the source tree, without PYTHONPATH."""
    clean = _clean_env(PYTHONNOUSERSITE="1", PATH=f"{env / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    return _run(cmd, cwd=tmp_path, env=clean)


def test_build_gives_a_wheel_and_an_sdist(dist):
    (wheel,) = dist.glob("silodp-*.whl")
    (sdist,) = dist.glob("silodp-*.tar.gz")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = email.message_from_string(zf.read(next(n for n in names if n.endswith("METADATA"))).decode())
    assert "silodp/accounting/__init__.py" in names and "silodp/cli/__init__.py" in names
    requires = meta.get_all("Requires-Dist")
    base = [r for r in requires if "extra ==" not in r]
    assert {r.split(">")[0].split("<")[0].split("=")[0].strip() for r in base} == {
        "numpy", "scipy", "sympy", "dp-accounting"}
    assert any(r.startswith("torch") and 'extra == "torch"' in r for r in requires)
    with tarfile.open(sdist) as tf:
        members = tf.getnames()
    assert any(m.endswith("/pyproject.toml") for m in members)
    assert any(m.endswith("/silodp/accounting/__init__.py") for m in members)


def test_accounting_installs_and_imports_without_torch(env, tmp_path):
    probe = ("import sys, silodp.accounting as a; assert 'torch' not in sys.modules, 'torch imported'; "
             "import importlib.util as u; print(a.__file__, u.find_spec('torch'))")
    proc = _in_env(env, env / "bin" / "python", "-c", probe, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    where, torch_spec = proc.stdout.split()
    assert Path(where).is_relative_to(env) and not Path(where).is_relative_to(ROOT)
    assert torch_spec == "None"  # the environment has no torch at all


def test_cli_help_and_an_accounting_command(env, tmp_path):
    help_ = _in_env(env, "silodp", "--help", tmp_path=tmp_path)
    assert help_.returncode == 0 and "epsilon" in help_.stdout, help_.stderr
    proc = _in_env(env, "silodp", "epsilon", "--noise-multiplier", "1", "--delta", "1e-5", "--json",
                   tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    # one Gaussian step at sigma/C = 1: the exact GDP curve (mu = 1 add/remove), about 3.73
    from silodp.accounting import epsilon
    from silodp.accounting.events import ADD_OR_REMOVE_ONE, REPLACE_ONE, GaussianDpEvent

    relation = {"add-remove": ADD_OR_REMOVE_ONE, "replace-one": REPLACE_ONE}[out["relation"]]
    assert out["epsilon"] == pytest.approx(epsilon(GaussianDpEvent(1.0), 1e-5, "gdp", relation), rel=1e-9)


def test_commands_needing_torch_say_so_in_one_line(env, tmp_path):
    proc = _in_env(env, "silodp", "run", "--algorithm", "isrl-mb-sgd", "--dataset", "wbcd", "--epsilon", "1",
                   tmp_path=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'silodp[torch]'" in lines[0], proc.stderr


def test_the_flower_example_names_its_silodp_source_for_uv():
    """uv resolves from scratch (pip finds the installed checkout): the example's ``silodp[flower]``
    needs a ``[tool.uv.sources]`` entry that is this checkout, and the extra must exist."""
    import tomllib

    example = ROOT / "examples" / "flower"
    spec = tomllib.loads((example / "pyproject.toml").read_text())
    assert "silodp[flower]" in spec["project"]["dependencies"]
    source = (example / spec["tool"]["uv"]["sources"]["silodp"]["path"]).resolve()
    assert source == ROOT
    project = tomllib.loads((source / "pyproject.toml").read_text())["project"]
    assert project["name"] == "silodp" and "flower" in project["optional-dependencies"]


def test_the_flower_example_takes_cpu_torch_under_uv():
    """uv reads no pip constraints file and, unpinned, resolves torch from PyPI (a CUDA build: with
    uv 0.13.9, torch 2.15.0 and 43 nvidia packages). The example names torch directly, at
    constraints.txt's version, from an explicit CPU index (uv applies sources to direct dependencies)."""
    import tomllib

    example = tomllib.loads((ROOT / "examples" / "flower" / "pyproject.toml").read_text())
    pinned = [line.strip() for line in (ROOT / "constraints.txt").read_text().splitlines()
              if line.strip().startswith("torch==")]
    assert pinned and pinned[0] in example["project"]["dependencies"]
    index = example["tool"]["uv"]["sources"]["torch"]["index"]
    (entry,) = [i for i in example["tool"]["uv"]["index"] if i["name"] == index]
    assert entry["url"].endswith("/whl/cpu") and entry["explicit"] is True
