"""Balls-in-bins batches in Opacus: the batch sampler (each record in exactly one batch per epoch,
bins uniform), the registered ``silodp-pld-balls-in-bins`` accountant, a PrivacyEngine run."""

import pytest

pytest.importorskip("opacus")

import torch
from opacus import PrivacyEngine
from opacus.accountants import create_accountant

from silodp.accounting import allocation, events as ev
from silodp.integrations import opacus as ours

DELTA = 1e-5


def test_sampler_puts_every_record_in_exactly_one_batch():
    sampler = ours.BallsInBinsBatchSampler(1000, 10, torch.Generator().manual_seed(0))
    sizes = []
    for _ in range(20):
        batches = list(sampler)
        assert len(batches) == len(sampler) == 10
        assert sorted(i for b in batches for i in b) == list(range(1000))
        sizes += [len(b) for b in batches]
    # Bin(1000, 1/10) sizes: mean 100, sd 9.5; 200 batches: the mean within 4 sd / sqrt(200)
    assert abs(sum(sizes) / len(sizes) - 100) < 4 * 9.5 / 200 ** 0.5 + 1e-9
    assert max(sizes) - min(sizes) > 10  # sizes vary: not fixed-size batches
    first = [list(ours.BallsInBinsBatchSampler(50, 5, torch.Generator().manual_seed(s))) for s in (1, 1, 2)]
    assert first[0] == first[1] != first[2]  # the generator decides the bins
    with pytest.raises(ValueError, match="num_batches"):
        ours.BallsInBinsBatchSampler(10, 0)


def test_accountant_is_registered_and_refuses_rdp():
    acc = create_accountant("silodp-pld-balls-in-bins")
    assert acc.neighbouring == ev.ADD_OR_REMOVE_ONE and acc.sampling == ours.OpacusSampling.BALLS_IN_BINS
    with pytest.raises(ValueError, match="pld"):
        ours.opacus_accountant("rdp", "balls-in-bins")


def test_privacy_engine_run_is_certified_by_the_allocation_pld():
    torch.manual_seed(0)
    x = torch.randn(64, 4)
    y = (x[:, 0] > 0).long()
    base = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    loader = ours.balls_in_bins_data_loader(base, torch.Generator().manual_seed(0))
    model = torch.nn.Linear(4, 2)
    engine = PrivacyEngine(accountant="silodp-pld-balls-in-bins")
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), data_loader=loader,
        noise_multiplier=2.0, max_grad_norm=1.0, poisson_sampling=False)
    seen = 0
    for xb, yb in loader:
        seen += len(xb)
        optimizer.zero_grad()
        if len(xb):
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
        optimizer.step()
    assert seen == 64 and engine.accountant.steps == 8
    expected = allocation.add_remove_pld(2.0, 8, 1, 1e-4).get_epsilon_for_delta(DELTA)
    assert engine.get_epsilon(DELTA) == pytest.approx(expected, rel=1e-6)
    from silodp.accounting import gaussian

    assert engine.get_epsilon(DELTA) < 0.5 * gaussian.epsilon_for_delta(2.0, DELTA)  # amplified: not one Gaussian


def test_shuffled_upper_bound_beside_chua_et_al_lower_bound():
    acc = create_accountant("silodp-pld-shuffled")
    acc.history = [(2.0, 1 / 8, 16)]  # 2 epochs of 8 shuffled batches
    lower, upper = acc.get_epsilon_lower_bound(DELTA), acc.get_epsilon(DELTA)
    assert 0 < lower < upper  # the un-amplified charge may cost up to upper / lower
    assert lower == pytest.approx(allocation.lower_bound_epsilon(2.0, 8, 2, DELTA, replace_one=True))
    with pytest.raises(ValueError, match="sampling"):
        create_accountant("silodp-pld").get_epsilon_lower_bound(DELTA)
