"""Library edges fail closed (issue 28 item 2): every probe of the hostile-input matrix that used
to answer (0.0 for a silo that does not exist, a certificate from l2 = 0, a mutated event
certified) or to raise something other than a ValueError naming the argument."""

import math

import pytest

from silodp._validation import batch_from_rate, round_up
from silodp.accounting import events as ev
from silodp.accounting import get_accountant, pvec
from silodp.accounting.ledger import IsrlLedger


def test_ledger_refuses_unknown_silos_and_nan_delta():
    led = IsrlLedger(3, "rdp")
    led.record(0, ev.GaussianDpEvent(1.0), 10)
    for silo in (7, -1, 1.5, True):
        with pytest.raises(ValueError, match="silo: must be an integer in \\[0, 3\\)"):
            led.silo_epsilon(silo, 1e-5)
    with pytest.raises(ValueError, match="delta"):
        led.silo_epsilon(1, math.nan)  # a silo with no events: 0.0 only for a valid delta
    assert led.silo_epsilon(1, 1e-5) == 0.0 and led.silo_epsilon(0, 1e-5) > 0


@pytest.mark.parametrize("l2", [0, -1, math.nan, math.inf])
def test_pvec_group_l2_must_be_positive(l2):
    with pytest.raises(ValueError, match="l2: must"):
        pvec.PvecGroup(10, 4, 100, 10, 1, l2=l2)


def test_pvec_group_mutated_after_construction_is_refused():
    grp = pvec.PvecGroup(1, 4, 100, 10, 1, l2=4.0)
    object.__setattr__(grp, "l2", 0.0)
    with pytest.raises(ValueError, match="l2"):
        pvec.transcript_epsilon((grp,), 1e-5, pvec.default_interval(1.0))


def test_invocation_epsilon_integers_checked():
    """The issue's reference value: g 4, b 100, 10 messages, d 1 certifies 0.942 (integral floats
    are those integers; fractional ones are refused by name)."""
    assert pvec.invocation_epsilon(4.0, 100, 10, 1, False, 1e-5) == pytest.approx(0.942, abs=5e-4)
    for kw, name in (({"b": 100.5}, "b"), ({"g": 0}, "g"), ({"messages": None}, "messages")):
        args = {"g": 4, "b": 100, "messages": 10, **kw}
        with pytest.raises(ValueError, match=f"^{name}: "):
            pvec.invocation_epsilon(args["g"], args["b"], args["messages"], 1, False, 1e-5)


@pytest.mark.parametrize("accountant", ["rdp", "pld", "advanced", "zcdp"])
def test_events_are_revalidated_at_compose_time(accountant):
    event = ev.SelfComposedDpEvent(ev.GaussianDpEvent(1.0), 3)
    object.__setattr__(event, "count", -3)
    with pytest.raises(ValueError, match="SelfComposedDpEvent.count"):
        get_accountant(accountant).compose(event)
    inner = ev.GaussianDpEvent(1.0)
    object.__setattr__(inner, "noise_multiplier", math.nan)
    assert not get_accountant(accountant).supports(ev.ComposedDpEvent([inner]))


def test_overflows_and_huge_allocations_are_value_errors():
    for eps in (800.0, 1e6):  # used to overflow, or ask for 149 GiB
        acc = get_accountant("pld")
        assert not acc.supports(ev.EpsilonDeltaDpEvent(eps, 0.0))
        with pytest.raises(ValueError, match="^epsilon: .*beyond the pld grid"):
            acc.compose(ev.EpsilonDeltaDpEvent(eps, 0.0))
    pld = get_accountant("pld").compose(ev.GaussianDpEvent(1.0))
    assert 0.0 <= pld.get_delta(1e308) < 1e-10  # only the mass charged to infinite loss
    with pytest.raises(ValueError, match="^steps: .*at most"):  # used to ask for 7 PiB
        get_accountant("advanced").compose(ev.SelfComposedDpEvent(ev.GaussianDpEvent(1.0), 10 ** 15)).get_epsilon(1e-5)


def test_algorithm_seam_type_errors_are_value_errors():
    from silodp.algorithms import privacy

    tc = privacy.algorithm_class("isrl-mb-sgd").plan.transcript(n=100, rounds=10, batch_size=10, num_silos=2)
    for sigmas in (None, {"sigma": None}, {"sigma": math.nan}, {"sigma": -1.0}):
        with pytest.raises(ValueError, match="^sigmas: "):
            privacy.certify("isrl-mb-sgd", tc, sigmas, 1e-5)
    for algorithm in (object, object(), int):
        with pytest.raises(ValueError, match="^algorithm: "):
            privacy.calibrate_algorithm(algorithm, tc, 1.0, 1e-5)


def test_batches_round_up_and_printed_numbers_round_toward_privacy():
    assert batch_from_rate("q", 0.025, 100) == 3      # banker's round(2.5) gave 2
    assert batch_from_rate("q", 0.1, 30) == 3         # 3.0000000000000004 is 3, not 4
    assert batch_from_rate("q", 1e-9, 5) == 1 and batch_from_rate("q", 1.0, 5) == 5
    for x in (1.2345674, 1.2345676, 9.9999999, 0.1 + 0.2, 23.62804321, 1e-7 * 1.0000001):
        assert float(round_up(x)) >= x and float(round_up(x)) <= x * (1 + 1e-5)
    from silodp.accounting.releases import sampled_steps

    event = sampled_steps(100, 1.0, "without-replacement", 0.025, 100)
    assert event.event.sample_size == 3
