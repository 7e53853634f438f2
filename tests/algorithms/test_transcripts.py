"""One transcript per algorithm class, derived by its plan (issue 35 item 1): the shared
:class:`~silodp.algorithms.privacy.TranscriptConfig` holds no family's field; each class's own
transcript fields are its ``Config``'s ``param(transcript=True)`` fields; ``cls.plan.transcript``
is the one way to build one and refuses an unknown keyword with a ValueError naming it; stored
transcripts of before (every family's fields, the old ``q``) still read, to the same certificate."""

import dataclasses

import pytest

from silodp.algorithms import ALGORITHMS
from silodp.algorithms.config import own_fields
from silodp.algorithms.plan import derived_transcript
from silodp.algorithms.privacy import (
    STORED_FAMILY_FIELDS,
    TranscriptConfig,
    calibrate_algorithm,
    certify,
    stored_transcript,
)

#: what every algorithm's transcript shares (the run's, the problem's and the federation's facts)
SHARED = {"n", "rounds", "batch_size", "clip", "beta", "num_silos", "silos_per_round", "dimension", "replacement",
          "balls_in_bins", "charged_delta"}
#: classes whose plan names its own transcript type (DP-SCAFFOLD's ScaffoldConfig)
DERIVED = sorted(name for name, cls in ALGORITHMS.items() if issubclass(cls.Transcript, TranscriptConfig))


def _own(cls) -> set[str]:
    return {f.name for f in own_fields(cls.Config) if f.metadata["transcript"]}


def test_the_shared_transcript_holds_no_family_field():
    assert {f.name for f in dataclasses.fields(TranscriptConfig)} == SHARED
    owned = set().union(*(_own(cls) for cls in ALGORITHMS.values()))
    assert owned >= set(STORED_FAMILY_FIELDS) - {"q"}  # every former family field now belongs to a Config
    assert not owned & SHARED


@pytest.mark.parametrize("name", DERIVED)
def test_each_class_transcript_is_the_shared_one_plus_its_config_fields(name):
    cls = ALGORITHMS[name]
    assert {f.name for f in dataclasses.fields(cls.Transcript)} == SHARED | _own(cls)
    assert cls.Transcript is derived_transcript(cls)  # made by the plan, no hand-written Transcript class
    assert cls.Transcript is cls.Transcript  # one derived class, so transcripts compare equal
    assert (cls.Transcript is TranscriptConfig) == (not _own(cls))
    assert set(cls.plan.transcript_names()) == SHARED | _own(cls)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_an_unknown_keyword_is_a_value_error_naming_it(name):
    plan = ALGORITHMS[name].plan
    with pytest.raises(ValueError, match=r"^not_a_field: not a transcript field"):
        plan.transcript(not_a_field=1, n=100, rounds=4, batch_size=10)


@pytest.mark.parametrize("name, field", [("isrl-prox-sgd", "period"), ("isrl-prox-sgd", "local_steps"),
                                         ("isrl-spider", "inner_steps"), ("isrl-prox-svrg", "period"),
                                         ("isrl-local-sgd", "batch_size2"), ("sdp-prox-sgd", "q")])
def test_another_familys_field_is_refused_not_ignored(name, field):
    with pytest.raises(ValueError, match=rf"^{field}: not a transcript field of"):
        ALGORITHMS[name].plan.transcript(n=100, rounds=4, batch_size=10, **{field: 2})


def test_the_old_period_name_is_refused_with_the_new_one_where_the_class_has_it():
    with pytest.raises(ValueError, match=r"^q: renamed to period"):
        ALGORITHMS["sdp-spider"].plan.transcript(n=100, rounds=4, batch_size=10, q=2)


@pytest.mark.parametrize("name, field, value", [("isrl-spider", "period", 0), ("isrl-prox-svrg", "inner_steps", 0),
                                                ("isrl-pl-svrg", "restarts", -1), ("isrl-local-sgd", "local_steps", 0),
                                                ("isrl-fed-spider", "batch_size2", 0),
                                                ("isrl-prox-svrg", "inner_steps", None)])
def test_a_family_field_is_validated_by_its_config(name, field, value):
    with pytest.raises(ValueError, match=rf"^{field}: "):
        ALGORITHMS[name].plan.transcript(n=100, rounds=4, batch_size=10, **{field: value})


def test_the_family_fields_take_their_noise_defaults():
    cfg = ALGORITHMS["isrl-pl-svrg"].plan.transcript(n=100, rounds=4, batch_size=10)
    assert (cfg.inner_steps, cfg.restarts) == (1, 1)  # the noise defaults, as `silodp noise` had
    assert ALGORITHMS["isrl-spider"].plan.transcript(n=100, rounds=4, batch_size=10).period == 1


def test_a_shared_transcript_given_where_a_family_one_is_needed_is_refused():
    """A family's declaration reads its own fields: the shared transcript alone is a ValueError
    naming them, never an AttributeError in the middle of a calibration."""
    bare = TranscriptConfig(n=100, rounds=4, batch_size=100)
    with pytest.raises(ValueError, match=r"cfg: a transcript of .* needs \['batch_size2', 'period'\]"):
        calibrate_algorithm("isrl-spider", bare, 1.0, 1e-5)
    with pytest.raises(ValueError, match="period"):
        certify("isrl-spider", bare, {"sigma1": 1.0, "sigma2": 1.0}, 1e-5)
    # a richer transcript serves a class that reads less (its extra fields are not read)
    spider = ALGORITHMS["isrl-spider"].plan.transcript(n=100, rounds=4, batch_size=100, period=3)
    assert certify("isrl-prox-sgd", spider, {"sigma": 0.05}, 1e-5) == certify("isrl-prox-sgd", bare, {"sigma": 0.05},
                                                                               1e-5)


#: a calibration request's transcript as results stores hold it from before round 8: the shared
#: TranscriptConfig carried every family's fields (neutral where the family had none)
STORED = {"n": 400, "rounds": 6, "batch_size": 40, "clip": 1.0, "batch_size2": 40, "period": 1, "inner_steps": 1,
          "restarts": 1, "local_steps": 1, "beta": 1.0, "num_silos": 2, "silos_per_round": None, "dimension": 3,
          "replacement": False, "balls_in_bins": False, "charged_delta": 0.0}
#: each family's own values in a stored dict and the same transcript built today
OWN = {"isrl-spider": {"period": 3, "batch_size2": 20}, "isrl-prox-svrg": {"inner_steps": 5},
       "isrl-pl-svrg": {"inner_steps": 5, "restarts": 3}, "isrl-local-sgd": {"local_steps": 4},
       "isrl-prox-sgd": {}, "isrl-mb-sgd": {}}


@pytest.mark.parametrize("name", sorted(OWN))
def test_an_old_stored_transcript_reads_to_the_same_certificate(name):
    """The stored dict's fields the class lacks are dropped (its declaration never read them); what
    it has is kept: the transcript equals today's and certifies the same epsilon."""
    cls = ALGORITHMS[name]
    old = stored_transcript({**STORED, **OWN[name]}, cls.Transcript)
    shared = {k: v for k, v in STORED.items() if k in SHARED}
    new = cls.plan.transcript(**shared, **OWN[name])
    assert old == new and type(old) is cls.Transcript
    sigmas = {k: 0.05 for k in cls.noise_keys}
    assert certify(cls, old, sigmas, 1e-5) == certify(cls, new, sigmas, 1e-5)


def test_a_stored_field_that_never_was_a_family_field_is_refused():
    with pytest.raises(ValueError, match=r"^momentum: not a field of the stored transcript"):
        stored_transcript({**STORED, "momentum": 0.9})
    assert stored_transcript(STORED) == TranscriptConfig(**{k: v for k, v in STORED.items() if k in SHARED})
