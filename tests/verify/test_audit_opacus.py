"""One-run audits of real Opacus runs (silodp.verify.audit.opacus_audit): the canary hook against
Opacus' own clipping, the mutated accountant against silodp's, and a shipped bug caught while its
correct counterpart is not. The larger audits of the suite run behind ``--full`` (docs/audit.md)."""

import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from silodp.accounting import events as ev
from silodp.integrations.opacus import opacus_accountant
from silodp.verify.audit.opacus_audit import CanaryHook, OpacusRunConfig, ShiftCAccountant, audit_opacus

warnings.filterwarnings("ignore", message=".*(secure|empty).*")


@pytest.fixture(scope="module")
def wbcd_loader():
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    x = (x - x.mean(0)) / x.std(0)
    data = torch.utils.data.TensorDataset(torch.tensor(x, dtype=torch.float32), torch.tensor(y))
    return torch.utils.data.DataLoader(data, batch_size=128)


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(30, 32), nn.ReLU(), nn.Linear(32, 2))


def test_hook_canary_is_clipped_by_opacus_to_c():
    """Through Opacus' own clip_and_accumulate, a canary row contributes exactly C / sqrt(k) on each
    of its k coordinates (global clipping) and nothing elsewhere."""
    from opacus import PrivacyEngine

    model = mlp()
    data = torch.utils.data.TensorDataset(torch.zeros(4, 30), torch.zeros(4, dtype=torch.long))
    module, opt, loader = PrivacyEngine(accountant="silodp-pld").make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        data_loader=torch.utils.data.DataLoader(data, batch_size=4), noise_multiplier=1e-9, max_grad_norm=2.0,
        poisson_sampling=False)
    hook = CanaryHook(opt.params, np.array([1.0, -1.0]), seed=0)
    x, y = next(iter(loader))
    nn.functional.cross_entropy(module(x), y).backward()
    ids = torch.tensor([0, 1, -1, -1])
    for p in opt.params:  # the two real rows contribute nothing, so the sum is the canaries'
        p.grad_sample[2:] = 0.0
    hook.inject(opt, ids)
    opt.expected_batch_size = 1
    opt.step()
    hook.observe(opt)
    k = hook.owned
    assert k == sum(p.numel() >= 2 for p in opt.params)
    assert hook.released[0] == pytest.approx([2.0 * math.sqrt(k), -2.0 * math.sqrt(k)], rel=1e-5)
    total = sum(float(p.grad.abs().sum()) for p in opt.params)
    assert total == pytest.approx(2 * k * 2.0 / math.sqrt(k), rel=1e-5)


def test_shift_c_accountant_is_replace_one_at_twice_the_noise():
    from opacus.accountants.registry import create_accountant

    from silodp.verify.audit.opacus_audit import _register_mutated

    bad, good = create_accountant(_register_mutated()), create_accountant(opacus_accountant("pld", "poisson", ev.REPLACE_ONE))
    for _ in range(5):
        bad.step(noise_multiplier=1.0, sample_rate=0.1)
        good.step(noise_multiplier=2.0, sample_rate=0.1)
    assert isinstance(bad, ShiftCAccountant)
    assert bad.get_epsilon(1e-5) == pytest.approx(good.get_epsilon(1e-5), rel=1e-9)
    assert bad.history == [(1.0, 0.1, 5)]  # the ledger itself is untouched


def test_public_seed_noise_caught_and_counterpart_consistent(wbcd_loader):
    config = OpacusRunConfig(epochs=1, noise_multiplier=2.0)
    bad = audit_opacus(mlp(), wbcd_loader, canaries=300, config=config, mutation="public-seed-noise")
    good = audit_opacus(mlp(), wbcd_loader, canaries=300, config=config)
    assert bad.claimed_epsilon == pytest.approx(good.claimed_epsilon)
    assert bad.verdict == "violated" and bad.epsilon_lower["steinke"] > bad.claimed_epsilon
    assert good.verdict == "consistent"
    assert set(good.as_dict()) >= {"claimed_epsilon", "epsilon_lower", "confidence", "canaries", "verdict"}
    assert set(good.epsilon_lower) == {"steinke", "fdp", "clopper-pearson", "gdp"}


def test_audit_refuses_bad_input(wbcd_loader):
    with pytest.raises(ValueError, match="mutation"):
        audit_opacus(mlp(), wbcd_loader, mutation="nope")
    with pytest.raises(ValueError, match="neighbouring"):
        audit_opacus(mlp(), wbcd_loader, config=OpacusRunConfig(poisson_sampling=False))
    with pytest.raises(ValueError, match="replace-one-shift-c"):
        audit_opacus(mlp(), wbcd_loader, canaries=4, mutation="replace-one-shift-c")
    with pytest.raises(ValueError, match="canaries"):
        audit_opacus(mlp(), wbcd_loader, canaries=100_000)


def test_cli_one_run_audit(capsys):
    """`silodp audit --shipped --mutation NAME --json`: the issue's keys; flags of other modes refused."""
    import json

    from silodp.cli import main

    assert main(["audit", "--opacus", "--mutation", "public-seed-noise", "--canaries", "300", "--json"]) == 1  # violated
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "violated" and out["canaries"] == 300 and out["confidence"] == 0.95
    assert out["epsilon_lower"]["steinke"] > out["claimed_epsilon"]
    assert main(["audit", "--opacus", "--trials", "5"]) == 2
    assert "--trials: does not apply" in capsys.readouterr().err
    assert main(["audit", "--opacus", "--mutation", "halve-noise"]) == 2
    assert main(["audit", "--mechanism", "gaussian", "--noise-multiplier", "1", "--estimator", "steinke"]) == 2
    assert main(["audit", "--opacus", "--counterpart"]) == 2


def test_accountant_only_counterpart_judges_the_same_run_against_the_correct_claim():
    """replace-one-shift-c switches only the accountant: its counterpart is the same run (same bounds)
    under silodp's replace-one claim, which is larger (the bug halves the sensitivity it reads)."""
    from silodp.verify.audit.opacus_audit import counterpart_of
    from silodp.verify.audit.shipped import SHIPPED, audit_shipped

    bad = audit_shipped("replace-one-shift-c", canaries=200, runs=1)
    good = counterpart_of(bad, SHIPPED["replace-one-shift-c"].config)
    assert good.epsilon_lower == bad.epsilon_lower and good.mutation is None and good.history == bad.history
    assert good.claimed_epsilon > bad.claimed_epsilon and good.accountant != bad.accountant
    assert good.verdict == ("violated" if good.epsilon_lower[good.estimator] > good.claimed_epsilon else "consistent")
    with pytest.raises(ValueError, match="counterpart_of"):
        counterpart_of(audit_shipped("public-seed-noise", canaries=20), SHIPPED["public-seed-noise"].config)
