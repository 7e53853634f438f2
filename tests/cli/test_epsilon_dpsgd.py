"""Issue 36 item 8: ``silodp epsilon --dataset-size N --batch-size B --epochs E`` is the Poisson
call at q = B/N with ceil(E N / B) steps (TensorFlow Privacy's ``compute_dp_sgd_privacy``
inputs), printed as a privacy statement."""

import json
import math

import pytest

from silodp.cli import main

STATEMENT_KEYS = {"epsilon", "accountant", "relation", "dataset_size", "batch_size", "epochs", "sampling", "q",
                  "steps", "noise_multiplier", "sensitivity", "units"}


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("n, b, e, extra", [(60000, 256, 15, ()), (1000, 300, 1, ("--accountant", "rdp")),
                                            (1000, 300, 2.5, ("--relation", "replace-one"))])
def test_statement_is_the_equivalent_q_steps_call(capsys, n, b, e, extra):
    common = ("epsilon", "--noise-multiplier", "1.1", "--delta", "1e-5", *extra, "--json")
    code, out, _ = run(capsys, *common, "--dataset-size", str(n), "--batch-size", str(b), "--epochs", str(e))
    ours = json.loads(out)
    steps = math.ceil(e * n / b)  # ceil, never round: 1000 / 300 records -> 4 steps, not 3
    assert code == 0 and STATEMENT_KEYS <= set(ours)
    assert (ours["q"], ours["steps"], ours["sampling"], ours["dataset_size"], ours["batch_size"]) == (b / n, steps,
                                                                                                      "poisson", n, b)
    assert ours["relation"] == ("replace-one" if "replace-one" in extra else "add-remove")  # add/remove by default
    assert ours["accountant"] == ("rdp" if "rdp" in extra else "pld")
    code, out, _ = run(capsys, *common, "--sampling", "poisson", "--q", repr(b / n), "--steps", str(steps))
    assert code == 0 and json.loads(out)["epsilon"] == ours["epsilon"]  # the same certificate, bit for bit


def test_human_statement_names_rate_steps_accountant_and_relation(capsys):
    code, out, _ = run(capsys, "epsilon", "--noise-multiplier", "1.1", "--delta", "1e-5", "--dataset-size", "1000",
                       "--batch-size", "300", "--epochs", "1")
    assert code == 0
    for part in ("rate q = B/N = 0.3", "1 epochs = 4 steps (ceil(E N / B))", "Record-level (add-remove)",
                 "certified by pld", "noise_multiplier 1.1"):
        assert part in out


def test_against_dp_accounting():
    """The statement's epsilon against an independent PLD (dp-accounting), 1% tolerance."""
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting.pld import PLDAccountant

    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["epsilon", "--noise-multiplier", "1.1", "--delta", "1e-5", "--dataset-size", "1000",
                     "--batch-size", "300", "--epochs", "1", "--json"]) == 0
    ours = json.loads(buf.getvalue())["epsilon"]
    ref = PLDAccountant(value_discretization_interval=1e-4).compose(
        dp_accounting.PoissonSampledDpEvent(0.3, dp_accounting.GaussianDpEvent(1.1)), 4).get_epsilon(1e-5)
    assert ours == pytest.approx(ref, rel=1e-2) and ours >= ref * (1 - 1e-3)


@pytest.mark.parametrize("argv, flag", [
    (("--batch-size", "10", "--epochs", "1"), "--dataset-size"),
    (("--dataset-size", "100", "--epochs", "1"), "--batch-size"),
    (("--dataset-size", "100", "--batch-size", "10"), "--epochs"),
    (("--dataset-size", "100", "--batch-size", "101", "--epochs", "1"), "--batch-size"),
    (("--dataset-size", "100", "--batch-size", "10", "--epochs", "1", "--steps", "5"), "--steps"),
    (("--dataset-size", "100", "--batch-size", "10", "--epochs", "1", "--q", "0.1"), "--q"),
    (("--dataset-size", "100", "--batch-size", "10", "--epochs", "1", "--sampling", "poisson"), "--sampling"),
])
def test_bad_statement_input_is_one_line_naming_the_flag(capsys, argv, flag):
    code, out, err = run(capsys, "epsilon", "--noise-multiplier", "1.0", "--delta", "1e-5", *argv)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1 and f"{flag}:" in err
