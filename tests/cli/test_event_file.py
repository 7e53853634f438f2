"""``silodp epsilon --event FILE``: a dp-accounting event serialized as JSON (docs/cli.md) reads
back as the event dp-accounting's own conversion gives, certifies the same epsilon as the flags
describing the same mechanism, and anything silodp does not certify is refused in one line."""

import json

import pytest

dp_event = pytest.importorskip("dp_accounting.dp_event")

from silodp.accounting import event_json, from_dp_accounting  # noqa: E402
from silodp.cli import main  # noqa: E402


def _as_json(nt) -> dict:
    """dp-accounting's ``to_named_tuple()`` as JSON objects (nested tuples become objects)."""
    out = {}
    for key, value in nt._asdict().items():
        if hasattr(value, "_asdict"):
            value = _as_json(value)
        elif isinstance(value, (list, tuple)):
            value = [_as_json(v) for v in value]
        out[key] = value
    return out


EVENTS = [
    dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(1.0)), 1000),
    dp_event.ComposedDpEvent([dp_event.GaussianDpEvent(2.0), dp_event.ZCDpEvent(0.1),
                              dp_event.SampledWithoutReplacementDpEvent(100, 10, dp_event.GaussianDpEvent(3.0))]),
    dp_event.GaussianDpEvent(0.0),  # dp-accounting's convention: non-private
    dp_event.LaplaceDpEvent(1.0),
    dp_event.SelfComposedDpEvent(dp_event.LaplaceDpEvent(10.0), 10),
    dp_event.DiscreteLaplaceDpEvent(0.5, 2),
    dp_event.RandomizedResponseDpEvent(0.5, 4),
]


@pytest.mark.parametrize("event", EVENTS)
def test_reads_dp_accountings_own_serialization(event):
    text = json.dumps(_as_json(event.to_named_tuple()))
    assert event_json.loads(text) == from_dp_accounting(event)
    assert event_json.loads(event_json.dumps(event)) == from_dp_accounting(event)


def test_cli_event_file_certifies_as_the_flags(tmp_path, capsys):
    path = tmp_path / "event.json"
    path.write_text(json.dumps(_as_json(EVENTS[0].to_named_tuple())))
    assert main(["epsilon", "--event", str(path), "--delta", "1e-5", "--json"]) == 0
    from_file = json.loads(capsys.readouterr().out)
    assert main(["epsilon", "--noise-multiplier", "1.0", "--steps", "1000", "--sampling", "poisson", "--q", "0.01",
                 "--delta", "1e-5", "--json"]) == 0
    assert from_file == json.loads(capsys.readouterr().out)
    assert from_file["relation"] == "add-remove"


@pytest.mark.parametrize("event,relation", [
    (dp_event.LaplaceDpEvent(1.0), "add-remove"),
    (dp_event.SelfComposedDpEvent(dp_event.LaplaceDpEvent(10.0), 10), "add-remove"),
    (dp_event.DiscreteLaplaceDpEvent(0.5, 2), "add-remove"),
    (dp_event.RandomizedResponseDpEvent(0.5, 4), "replace-one"),  # dp-accounting: REPLACE_ONE only
])
def test_dp_accountings_other_mechanisms_certify_as_its_pld(tmp_path, capsys, event, relation):
    """dp-accounting's own JSON (its field names) of the Laplace, discrete Laplace and randomized
    response events: read, and certified within 0.1% of dp-accounting's PLD under the same relation."""
    from dp_accounting import NeighboringRelation
    from dp_accounting.pld import PLDAccountant

    path = tmp_path / "event.json"
    path.write_text(json.dumps(_as_json(event.to_named_tuple())))
    assert main(["epsilon", "--event", str(path), "--delta", "1e-5", "--relation", relation, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    nr = NeighboringRelation.REPLACE_ONE if relation == "replace-one" else NeighboringRelation.ADD_OR_REMOVE_ONE
    reference = PLDAccountant(neighboring_relation=nr).compose(event).get_epsilon(1e-5)
    assert data["relation"] == relation and data["epsilon"] == pytest.approx(reference, rel=1e-3)


@pytest.mark.parametrize("content,word", [
    # a dp-accounting class silodp does not certify
    ('{"class_name": "MixtureOfGaussiansDpEvent", "standard_deviation": 1.0, "sensitivities": [1.0],'
     ' "sampling_probs": [1.0]}', "class_name"),
    ('{"class_name": "NoSuchDpEvent"}', "class_name"),
    # dp-accounting's LaplaceDpEvent has the field noise_multiplier, not parameter
    ('{"class_name": "LaplaceDpEvent", "parameter": 1.0}', "parameter"),
    ('{"class_name": "RandomizedResponseDpEvent", "noise_parameter": 0.5}', "num_buckets"),
    ('{"class_name": "GaussianDpEvent"}', "noise_multiplier"),
    ('{"class_name": "GaussianDpEvent", "noise_multiplier": 1, "extra": 2}', "extra"),
    ('{"class_name": "GaussianDpEvent", "noise_multiplier": "1"}', "noise_multiplier"),
    ('{"class_name": "PoissonSampledDpEvent", "sampling_probability": 0.1, "event": 3}', "event"),
    ('{"class_name": "GaussianDpEvent", "noise_multiplier": -1}', "noise_multiplier"),
    ("not json", "JSON"),
])
def test_malformed_events_are_refused_in_one_line(tmp_path, capsys, content, word):
    path = tmp_path / "event.json"
    path.write_text(content)
    assert main(["epsilon", "--event", str(path), "--delta", "1e-5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and word in err[0]


def test_event_excludes_the_mechanism_flags(tmp_path, capsys):
    path = tmp_path / "event.json"
    path.write_text(event_json.dumps(EVENTS[0]))
    assert main(["epsilon", "--event", str(path), "--noise-multiplier", "1", "--delta", "1e-5"]) == 2
    assert "--noise-multiplier" in capsys.readouterr().err


def test_generic_commands_default_to_add_remove_and_say_so(capsys):
    """One Gaussian step at sigma/C = 1: the exact GDP curve under add/remove (mu = 1), which is
    dp-accounting's default (its PLD under ADD_OR_REMOVE_ONE as the reference); fixed-size batches
    are defined under replace-one only and are refused under the default."""
    from dp_accounting.pld import PLDAccountant

    assert main(["epsilon", "--noise-multiplier", "1", "--delta", "1e-5", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    reference = PLDAccountant().compose(dp_event.GaussianDpEvent(1.0)).get_epsilon(1e-5)
    assert data["relation"] == "add-remove" and data["epsilon"] == pytest.approx(reference, rel=1e-3)
    assert main(["epsilon", "--noise-multiplier", "1", "--delta", "1e-5", "--sampling", "without-replacement",
                 "--q", "0.1", "--dataset-size", "100"]) == 2
    err = capsys.readouterr().err  # the CLI's own flag, never the Python argument (issue 36)
    assert "--relation replace-one" in err and "REPLACE_ONE" not in err
