"""The named conformance checks over every registered accountant and algorithm (the registries
are iterated: no hard-coded names), and the unsound entries they must catch."""

import pytest

from silodp.accounting import ADD_OR_REMOVE_ONE, GaussianDpEvent, PldAccountant
from silodp.accounting.accountants import ACCOUNTANTS, GdpAccountant
from silodp.algorithms import ALGORITHMS, Problem, linear_model, mlp
from silodp.algorithms.data import synthetic
from silodp.verify.conformance import (
    ACCOUNTANT_CHECKS,
    ALGORITHM_CHECKS,
    PROBES,
    check_accountant,
    check_algorithm,
    run_accountant_checks,
    run_algorithm_checks,
)

#: what every accountant that certifies a probe must pass (never "not applicable")
CORE_ACCOUNTANT_CHECKS = {"check_supports_never_raises", "check_supports_a_probe", "check_not_below_exact",
                          "check_count_equals_repeats", "check_split_equals_whole",
                          "check_incremental_equals_batch", "check_atomic_failure", "check_ledger_recomposes"}


@pytest.fixture(scope="module")
def setup():
    data = synthetic(num_silos=3, n=40, d=3, seed=0)
    return data.train, Problem(linear_model(3), "logistic", clip=1.0, beta=1.0)


def small(cls) -> dict:
    params = dict(rounds=2, batch_size=5, step_size=0.1, metrics_every=0)
    if "inner_steps" in cls().get_params():
        params.update(inner_steps=2, rounds=1)
    return params


def _status(results) -> dict:
    return {r.check: r.status for r in results}


@pytest.mark.parametrize("name", sorted(ACCOUNTANTS))
def test_every_accountant_conforms(name):
    results = run_accountant_checks(ACCOUNTANTS[name])
    failed = {r.check: r.detail for r in results if r.status in ("failed", "xpass")}
    assert not failed, f"{name}: {failed}"
    status = _status(results)
    assert list(status) == list(ACCOUNTANT_CHECKS)  # every check ran, none hidden by another's failure
    assert {c for c in CORE_ACCOUNTANT_CHECKS if status[c] != "passed"} == set()


@pytest.mark.parametrize("name", sorted(ACCOUNTANTS))
def test_every_accountant_conforms_under_add_or_remove(name):
    """The default relation of generic accounting: the same checks where the accountant certifies
    a probe under it (P_vec is defined under replace-one only: it certifies none)."""
    make = ACCOUNTANTS[name]
    if not any(make(ADD_OR_REMOVE_ONE).supports(e) for e in PROBES):
        assert not make(ADD_OR_REMOVE_ONE).supports(GaussianDpEvent(1.0))
        return
    results = run_accountant_checks(make, ADD_OR_REMOVE_ONE)
    failed = {r.check: r.detail for r in results if r.status in ("failed", "xpass")}
    assert not failed, f"{name}: {failed}"
    assert _status(results)["check_not_below_exact"] == "passed"


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_algorithm_conforms(name, setup):
    fed, problem = setup
    cls = ALGORITHMS[name]
    results = run_algorithm_checks(cls, problem, fed, small(cls))
    failed = {r.check: r.detail for r in results if r.status in ("failed", "xpass")}
    assert not failed, f"{name}: {failed}"
    status = _status(results)
    assert list(status) == list(ALGORITHM_CHECKS)
    assert status["check_reproducible_by_seed"] == "passed"
    if cls.private:
        assert status["check_ledger_equals_declaration"] == status["check_calibration_meets_target"] \
            == status["check_refuses_one_more_message"] == "passed"
    if cls.plan.releases_gaussian_messages():
        assert status["check_refuses_halved_noise"] == status["check_message_sensitivity"] == "passed"


class CountDropping(PldAccountant):
    """The issue's unsound wrapper: it forwards ``compose(event, count)`` to a ``pld`` accountant
    without the count (as a grouped caller passing ``count > 1`` would meet it)."""

    name = "count-dropping"

    def __init__(self, neighbouring=None, **kwargs):
        super().__init__(neighbouring, **kwargs)
        self.inner = PldAccountant(neighbouring, **kwargs)

    def compose(self, event, count=1):
        self.inner.compose(event)
        super().compose(event)
        return self

    def _epsilon(self, delta):
        return self.inner.get_epsilon(delta)


def test_the_count_dropping_wrapper_fails_conformance():
    # what the issue measured: 100 Gaussian steps at z 2, delta 1e-5
    steps = GaussianDpEvent(2.0)
    wrapper = CountDropping(ADD_OR_REMOVE_ONE).compose(steps, 100).get_epsilon(1e-5)
    honest = PldAccountant(ADD_OR_REMOVE_ONE).compose(steps, 100).get_epsilon(1e-5)
    assert wrapper < 2.5 and honest > 30
    with pytest.raises(AssertionError, match="check_count_equals_repeats") as failed:
        check_accountant(CountDropping)
    status = _status(run_accountant_checks(CountDropping))
    assert status["check_count_equals_repeats"] == "failed"
    assert "check_supports_never_raises" not in str(failed.value)
    assert status["check_atomic_failure"] == "failed"  # it also accepts compose(e, 0)
    assert status["check_not_below_exact"] == "failed"  # 10 steps at z 2 certified as one
    assert status["check_supports_never_raises"] == status["check_ledger_recomposes"] == "passed"
    # named as expected failures, the rest of the suite passes; a wrong expectation is reported
    check_accountant(CountDropping, expected_failed_checks={"check_count_equals_repeats": "drops the count",
                                                            "check_atomic_failure": "accepts a count of 0"},
                     checks=("check_count_equals_repeats", "check_atomic_failure", "check_supports_never_raises"))
    with pytest.raises(AssertionError, match="expected to fail"):
        check_accountant(CountDropping, expected_failed_checks={"check_supports_never_raises": "wrong"},
                         checks=("check_supports_never_raises",))
    with pytest.raises(ValueError, match="expected_failed_checks"):
        check_accountant(CountDropping, expected_failed_checks={"check_no_such_thing": "typo"})


def test_the_suite_catches_an_unsound_accountant():
    class Optimist(GdpAccountant):
        def _epsilon(self, delta):
            return 0.5 * super()._epsilon(delta)

    with pytest.raises(AssertionError, match="below the exact"):
        check_accountant(Optimist, checks=("check_not_below_exact",))


def test_the_suite_catches_a_sound_accountant_that_is_not_monotone():
    class Forgetful(GdpAccountant):  # above the exact value, but charges fewer steps more
        def _epsilon(self, delta):
            return super()._epsilon(delta) + 1000.0 / len(self)

    with pytest.raises(AssertionError, match="not monotone in steps"):
        check_accountant(Forgetful, checks=("check_monotone_in_steps",))


def test_the_suite_catches_a_compose_that_is_not_atomic():
    class Eager(GdpAccountant):  # commits each block before checking the next
        def compose(self, event, count=1):
            for block in self._flatten(event, count):
                self._check_block(block)
                self._blocks.append(block)
            return self

    with pytest.raises(AssertionError, match="check_atomic_failure"):
        check_accountant(Eager, checks=("check_atomic_failure",))


def test_the_suite_catches_an_inverse_that_is_not_one():
    class Loose(GdpAccountant):
        def _delta(self, epsilon):
            return 0.01 * super()._delta(epsilon)

    with pytest.raises(AssertionError, match="check_delta_inverts_epsilon"):
        check_accountant(Loose, checks=("check_delta_inverts_epsilon",))


def test_the_suite_catches_an_algorithm_whose_messages_move_more_than_accounted(setup):
    """Per-layer clipping (each of the mlp's 4 tensors clipped to L: norm up to 2L) accounted as
    whole-gradient clipping to L: the replaced record moves a message by more than 2C."""
    from silodp.verify.audit.mutations import get_mutation

    fed, _ = setup
    problem = Problem(mlp(3, [4]), "logistic", clip=0.3)
    cls = next(c for _, c in sorted(ALGORITHMS.items()) if c.plan.releases_gaussian_messages())
    honest = run_algorithm_checks(cls, problem, fed, small(cls), checks=("check_message_sensitivity",))
    assert _status(honest) == {"check_message_sensitivity": "passed"}
    leaky = get_mutation("per-layer-clip").context(True)
    with pytest.raises(AssertionError, match="the accountant assumes"):
        check_algorithm(cls, problem, fed, small(cls), checks=("check_message_sensitivity",), context=leaky)
