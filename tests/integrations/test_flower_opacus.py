"""Opacus inside a silo: a silo trains locally with Opacus (shuffled batches), records each
round's steps in its ledger file, and the ledger's epsilon across rounds and runs is the exact
certificate of the epochs that ran (independent reference: the analytic Gaussian of E epochs
composed, multiplier z / (2 sqrt E) under replace-one)."""

import pytest

pytest.importorskip("opacus")

import torch  # noqa: E402
from opacus import PrivacyEngine  # noqa: E402

from silodp.accounting.gaussian import epsilon_for_delta  # noqa: E402
from silodp.integrations.flower_opacus import opacus_release  # noqa: E402
from silodp.integrations.flower_silo import SiloLedgerDB, SiloRefusal  # noqa: E402

DELTA, Z, N, K, EPOCHS = 1e-5, 3.0, 64, 16, 2


def private_training(poisson: bool):
    gen = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(N, 5, generator=gen), torch.randint(0, 2, (N,), generator=gen))
    model = torch.nn.Linear(5, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(data, batch_size=K, shuffle=True)
    return PrivacyEngine(accountant="prv").make_private(module=model, optimizer=optimizer, data_loader=loader,
                                                        noise_multiplier=Z, max_grad_norm=1.0,
                                                        poisson_sampling=poisson)


def local_round(model, optimizer, loader) -> int:
    steps = 0
    for _ in range(EPOCHS):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            steps += 1
    return steps


def test_the_ledger_composes_opacus_epochs_across_rounds_and_runs(tmp_path):
    model, optimizer, loader = private_training(poisson=False)
    epochs = lambda rounds: rounds * EPOCHS  # noqa: E731
    budget = epsilon_for_delta(Z / (2 * (epochs(5) ** 0.5)), DELTA) * 1.0001  # room for 5 rounds
    db = SiloLedgerDB(tmp_path / "silo.sqlite", budget, DELTA)
    plan = opacus_release(optimizer, loader, 3 * EPOCHS * len(loader))  # run 1 declares 3 rounds
    db.admit("1", [plan])
    for _ in range(3):
        db.release("1", opacus_release(optimizer, loader, local_round(model, optimizer, loader)), "train")
    assert db.spent() == pytest.approx(epsilon_for_delta(Z / (2 * epochs(3) ** 0.5), DELTA), rel=1e-6)
    with pytest.raises(SiloRefusal, match="requested"):  # 3 more rounds do not fit, 2 do
        db.admit("2", [plan])
    db.admit("3", [opacus_release(optimizer, loader, 2 * EPOCHS * len(loader))])
    for _ in range(2):
        db.release("3", opacus_release(optimizer, loader, local_round(model, optimizer, loader)), "train")
    assert db.spent() == pytest.approx(epsilon_for_delta(Z / (2 * epochs(5) ** 0.5), DELTA), rel=1e-6)
    assert db.spent() <= budget


def test_poisson_batches_and_partial_epochs_are_refused():
    _, optimizer, loader = private_training(poisson=True)
    with pytest.raises(ValueError, match="Poisson"):
        opacus_release(optimizer, loader, len(loader))
    _, optimizer, loader = private_training(poisson=False)
    with pytest.raises(ValueError, match="whole epochs"):
        opacus_release(optimizer, loader, len(loader) + 1)
