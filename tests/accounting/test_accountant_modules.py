"""The accountants as one module each (issue 35 item 4): the package's import paths, discovery of
an accountant file inside the package, the pld accountant's builders by mechanism kind, its public
incremental composition, and the distributed mechanisms as classes."""

import importlib
import sys

import pytest

from silodp._registry import discover
from silodp.accounting import ADD_OR_REMOVE_ONE, REPLACE_ONE, distributed
from silodp.accounting import events as ev
from silodp.accounting.accountants import ACCOUNTANTS, PLD_BUILDERS, PldAccountant, get_accountant
from silodp.accounting.blocks import Block, Mechanism, Sampling, UnsupportedEventError


def test_each_accountant_lives_in_its_own_module():
    modules = {name: cls.__module__ for name, cls in ACCOUNTANTS.items() if cls.__module__.startswith("silodp.")}
    assert modules["pld"] == "silodp.accounting.accountants.pld"
    assert modules["gdp"] == "silodp.accounting.accountants.gdp"
    assert modules["rdp"] == "silodp.accounting.accountants.rdp"
    assert len({modules[n] for n in ("gdp", "rdp", "pld", "zcdp", "advanced", "pvec")}) == 6


def test_discovery_walks_into_the_accountants_package(tmp_path, monkeypatch):
    """A file with the registration marker in a subpackage (as ``accounting/accountants/``) is
    imported by the package walk; one without it is not."""
    root = tmp_path / "toyroot"
    (root / "accounting" / "accountants").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "accounting" / "__init__.py").write_text("")
    (root / "accounting" / "accountants" / "__init__.py").write_text("")
    (root / "accounting" / "accountants" / "mine.py").write_text("# @register_accountant\nLOADED = True\n")
    (root / "accounting" / "accountants" / "other.py").write_text("LOADED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        importlib.import_module("toyroot.accounting")
        done = discover("toyroot.accounting", "@register_accountant")
        assert done == ["toyroot.accounting.accountants.mine"]
        assert "toyroot.accounting.accountants.other" not in sys.modules
    finally:
        for name in [m for m in sys.modules if m.startswith("toyroot")]:
            del sys.modules[name]


def test_every_mechanism_the_pld_accountant_certifies_has_a_builder():
    for kind, samplings in PldAccountant.CERTIFIES.items():
        if kind == Mechanism.NON_PRIVATE:
            continue  # never built: a non-private composition is infinite
        keys = [(kind, s) for s in samplings if s != Sampling.BALLS_IN_BINS] if kind == Mechanism.GAUSSIAN else [kind]
        assert keys and all(k in PLD_BUILDERS for k in keys), kind


def test_a_block_without_a_builder_is_unsupported(monkeypatch):
    block = Block(Mechanism.GAUSSIAN, 3, 1.0, Sampling.POISSON, q=0.1)
    acc = PldAccountant(ADD_OR_REMOVE_ONE)
    acc._check_block(block)  # registered: fine
    monkeypatch.delitem(PLD_BUILDERS, (Mechanism.GAUSSIAN, Sampling.POISSON))
    with pytest.raises(UnsupportedEventError, match="no privacy loss distribution for Gaussian steps with sampling poisson"):
        acc._check_block(block)
    assert not acc.supports(ev.PoissonSampledDpEvent(0.1, ev.GaussianDpEvent(1.0)))
    assert acc.supports(ev.NonPrivateDpEvent())  # never built: its certificate is infinite


def test_incremental_composition_through_the_public_api_equals_the_accountant():
    """Folding each call's ``composed_pld()`` in order and asking ``fast_epsilon`` gives the
    accountant's own certificate for all the calls (the Flower accountant's path), up to the float
    round-off and tail truncation of another order of convolutions (4e-9 relative here: the
    accountant groups identical calls and merges the rest in a balanced tree)."""
    calls = [(ev.PoissonSampledDpEvent(0.1, ev.GaussianDpEvent(1.0)), 5), (ev.GaussianDpEvent(3.0), 2),
             (ev.PoissonSampledDpEvent(0.1, ev.GaussianDpEvent(1.0)), 5)]
    folded = None
    for event, count in calls:
        one = PldAccountant(REPLACE_ONE).compose(event, count).composed_pld()
        folded = one if folded is None else folded.compose(one)
    whole = PldAccountant(REPLACE_ONE)
    for event, count in calls:
        whole.compose(event, count)
    fast = PldAccountant.fast_epsilon(folded, 1e-5)
    assert fast is not None and fast == pytest.approx(whole.get_epsilon(1e-5), rel=1e-7)
    assert PldAccountant.fast_epsilon(folded, 1e-300) is None  # the round-off charge needs the slower passes
    with pytest.raises(ValueError, match="nothing composed"):
        PldAccountant().composed_pld()


def test_distributed_mechanisms_are_classes_asked_not_names():
    assert distributed.MECHANISMS == ("binomial", "skellam", "discrete-gaussian")
    assert {name: m.noise_name for name, m in distributed.MECHANISM_KINDS.items()} == distributed.NOISE_NAMES
    p = distributed.calibrate("skellam", 16, 1.0, 4, 20, 2.0, 1e-5, 2)
    assert isinstance(p.kind, distributed.Skellam) and p.noise_variance() == p.noise
    assert type(distributed.release_event(p)) is distributed.SkellamSumDpEvent
    with pytest.raises(ValueError, match="mechanism: must be one of binomial, skellam, discrete-gaussian"):
        distributed.get_mechanism("laplace")
    with pytest.raises(ValueError, match="vector_norm: the binomial certifies one record per message"):
        distributed.calibrate("binomial", 16, 1.0, 4, 20, 2.0, 1e-5, 2, vector_norm=3.0)
    with pytest.raises(ValueError, match="no distributed event"):
        distributed.release_event(distributed.calibrate("binomial", 16, 1.0, 4, 20, 2.0, 1e-5, 2))


def test_the_old_import_paths_still_work():
    from silodp.accounting.accountants import (RDP_ORDERS, GdpAccountant, pld_discretization,  # noqa: F401
                                               register_accountant, unregister_accountant)

    assert type(get_accountant("gdp")) is GdpAccountant and len(RDP_ORDERS) > 100
