"""Opacus inside a silo: a silo trains locally with Opacus, records each round's steps in its
ledger file, and the ledger's epsilon across rounds and runs is the certificate of the steps that
ran. Shuffled batches: the exact certificate of the epochs (independent reference: the analytic
Gaussian of E epochs composed, multiplier z / (2 sqrt E) under replace-one). Poisson batches: the
rate and steps Opacus' own accountant recorded, certified under replace-one (independent
reference: dp-accounting's PLD of the same Poisson-subsampled Gaussians)."""

import itertools

import pytest

pytest.importorskip("opacus")

import torch  # noqa: E402
from dp_accounting import dp_event as dpe  # noqa: E402
from dp_accounting.pld import PLDAccountant  # noqa: E402
from dp_accounting.privacy_accountant import NeighboringRelation as DpRelation  # noqa: E402
from opacus import PrivacyEngine  # noqa: E402

from silodp.accounting.gaussian import epsilon_for_delta  # noqa: E402
from silodp.accounting.releases import BatchSampling  # noqa: E402
from silodp.integrations.flower_opacus import harden, opacus_release, poisson_batch  # noqa: E402
from silodp.integrations.flower_silo import SiloLedgerDB, SiloRefusal  # noqa: E402

DELTA, Z, N, K, EPOCHS = 1e-5, 3.0, 64, 16, 2


def private_training(poisson: bool, engine: PrivacyEngine | None = None):
    gen = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(N, 5, generator=gen), torch.randint(0, 2, (N,), generator=gen))
    model = torch.nn.Linear(5, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(data, batch_size=K, shuffle=True)
    model, optimizer, loader = (engine or PrivacyEngine(accountant="prv")).make_private(
        module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=Z, max_grad_norm=1.0,
        poisson_sampling=poisson)
    return model, harden(optimizer), loader


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


def test_the_ledger_composes_opacus_poisson_steps_as_opacus_drew_them(tmp_path):
    engine = PrivacyEngine(accountant="rdp")
    model, optimizer, loader = private_training(poisson=True, engine=engine)
    db = SiloLedgerDB(tmp_path / "silo.sqlite", 10.0, DELTA)
    steps = [3, 5, 2]  # Poisson rounds need not be epochs
    db.admit("1", [opacus_release(optimizer, loader, sum(steps))])
    batches = (batch for _ in range(sum(steps)) for batch in loader)  # epochs, as many as needed
    for k in steps:
        for x, y in itertools.islice(batches, k):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        release = opacus_release(optimizer, loader, k)
        assert release.sampling == BatchSampling.POISSON
        db.release("1", release, "train")
    # the sampling that really ran: Opacus' own accountant saw rate K / n, every step counted
    ((z, q, ran),) = engine.accountant.history
    assert (z, q, ran) == (Z, K / N, sum(steps)) and release.batch_size / release.dataset_size == q
    ref = PLDAccountant(DpRelation.REPLACE_ONE, value_discretization_interval=1e-3).compose(
        dpe.PoissonSampledDpEvent(q, dpe.GaussianDpEvent(Z)), ran).get_epsilon(DELTA)
    assert db.spent() == pytest.approx(ref, rel=2e-3)
    assert db.spent() > engine.get_epsilon(DELTA) * 0.5  # Opacus reports add/remove: smaller, same order


def test_poisson_rates_round_toward_more_privacy_loss():
    assert poisson_batch(0.25, 64) == 16 and poisson_batch(0.1, 30) == 3  # exact rates (0.1 * 30 > 3 in floats)
    assert poisson_batch(1 / 5, 66) == 14  # Opacus' q = 1 / len(loader) when K = 16 does not divide 66
    assert 13 / 66 < 0.2 <= 14 / 66
    with pytest.raises(ValueError, match="sample_rate"):
        poisson_batch(0.0, 10)


def test_zero_noise_and_partial_epochs_are_refused():
    _, optimizer, loader = private_training(poisson=False)
    with pytest.raises(ValueError, match="whole epochs"):
        opacus_release(optimizer, loader, len(loader) + 1)
    optimizer.noise_multiplier = 0.0
    with pytest.raises(ValueError, match="noise_multiplier"):
        opacus_release(optimizer, loader, len(loader))
