"""silodp.experiments.select and .report: selection on the validation split (never the test split),
summaries per algorithm and epsilon, and the paper's claims checked on hand-made numbers."""

import math

import pytest

from silodp.experiments.grid import RunConfig
from silodp.experiments.report import check_claims, format_summary, summarize
from silodp.experiments.select import select
from silodp.experiments.store import RunRecord


def _rec(step, trial, val, test, algorithm="isrl-mb-sgd", epsilon=1.0, status="ok", calibration="tight", eps_cert=0.9):
    cal = "none" if epsilon is None else calibration
    cfg = RunConfig(dataset="wbcd", algorithm=algorithm, epsilon=epsilon, calibration=cal, silos_per_round=2,
                    rounds=25, step_size=step, clip=1.0, trial=trial)
    return RunRecord(cfg, cfg.config_hash, trial, status, None, test, val, 0.1,
                     None if epsilon is None else eps_cert, None, None, {})


def test_selection_uses_validation_error_never_test_error():
    # step 0.1: best on test, worse on validation; step 0.5: best on validation
    records = [_rec(0.1, t, val=0.30, test=0.01) for t in range(3)]
    records += [_rec(0.5, t, val=0.10, test=0.20 + 0.01 * t) for t in range(3)]
    [sel] = select(records)
    assert sel.hyperparameters["step_size"] == 0.5 and sel.val_error == pytest.approx(0.10)
    assert sel.test_errors == pytest.approx((0.20, 0.21, 0.22)) and sel.trials == 3 and sel.candidates == 2
    assert sel.test_mean == pytest.approx(0.21) and sel.test_std == pytest.approx(0.01)


def test_configurations_with_missing_trials_do_not_compete():
    records = [_rec(0.1, 0, val=0.01, test=0.5)]                       # one lucky trial only
    records += [_rec(0.5, t, val=0.2, test=0.2) for t in range(2)]
    records += [_rec(0.1, 1, val=0.0, test=0.0, status="failed")]    # its second trial failed
    [sel] = select(records)
    assert sel.hyperparameters["step_size"] == 0.5


def test_ties_and_non_finite_validation_errors_are_deterministic():
    records = [_rec(s, 0, val=0.2, test=s) for s in (0.9, 0.3)] + [_rec(0.05, 0, val=math.nan, test=0.0)]
    [sel] = select(records)
    assert sel.hyperparameters["step_size"] == 0.3  # equal validation errors: the first in sort order
    assert select(list(reversed(records)))[0].hyperparameters == sel.hyperparameters


def test_one_selection_per_setting():
    records = [_rec(0.1, 0, 0.1, 0.1, epsilon=e) for e in (1.0, 3.0)]
    records += [_rec(0.1, 0, 0.1, 0.1, algorithm="mb-sgd", epsilon=None)]
    sels = select(records)
    assert {(s.algorithm, s.epsilon, s.calibration) for s in sels} == {
        ("isrl-mb-sgd", 1.0, "tight"), ("isrl-mb-sgd", 3.0, "tight"), ("mb-sgd", None, "none")}


def _row(algorithm, epsilon, mean, std=0.0, trials=10, calibration="tight", certified=None):
    return {"experiment": "wbcd M=2 R=25", "dataset": "wbcd", "silos_per_round": 2, "rounds": 25,
            "calibration": calibration, "algorithm": algorithm, "epsilon": epsilon, "mean_test_error": mean,
            "std_test_error": std, "trials": trials, "mean_val_error": mean, "certified_epsilon": certified,
            "hyperparameters": {}, "candidates": 1}


def _claims(rows):
    return {c["id"]: c for c in check_claims(rows)}


def test_claims_reproduced_on_numbers_that_satisfy_them():
    rows = []
    for eps, mb, loc in ((1.0, 0.100, 0.106), (3.0, 0.050, 0.053)):
        rows += [_row("isrl-spider", eps, 0.098 if eps == 1.0 else 0.049), _row("isrl-mb-sgd", eps, mb),
                 _row("isrl-local-sgd", eps, loc)]
    rows += [_row("isrl-spider", 1.0, 0.2, calibration="paper", certified=0.47)]
    claims = _claims(rows)
    assert claims["spider-never-worse-than-mb-sgd"]["reproduced"] is True
    imp = claims["spider-improves-over-isrl-local-sgd"]["measured"]
    # (0.106 - 0.098) / 0.106 and (0.053 - 0.049) / 0.053, averaged
    assert imp["mean_relative_improvement_pct"] == pytest.approx(100 * (0.008 / 0.106 + 0.004 / 0.053) / 2)
    assert claims["spider-improves-over-isrl-local-sgd"]["reproduced"] is True  # 7.5% within [3.03, 12.12]
    assert claims["spider-improves-over-isrl-mb-sgd"]["reproduced"] is True     # 2.0% within [0.86, 3.44]
    assert claims["spider-best-for-most-epsilons"]["reproduced"] is True
    tvp = claims["tight-accounting-vs-paper-calibration"]
    assert tvp["reproduced"] is True and tvp["measured"]["mean_gain_points"] == pytest.approx(100 * (0.2 - 0.098))
    assert tvp["measured"]["certified_epsilons"][0]["paper_noise_certifies"] == 0.47


def test_claims_not_reproduced_and_not_testable():
    rows = [_row("isrl-spider", 1.0, 0.12, std=0.01), _row("isrl-mb-sgd", 1.0, 0.10, std=0.01),
            _row("isrl-local-sgd", 1.0, 0.11)]
    claims = _claims(rows)
    never = claims["spider-never-worse-than-mb-sgd"]
    assert never["reproduced"] is False and never["measured"]["spider_worse"][0][1] == 1.0
    assert never["measured"]["spider_worse_by_more_than_2_standard_errors"] == 1  # 0.02 > 2 * 0.0045
    assert claims["spider-improves-over-isrl-mb-sgd"]["measured"]["same_direction"] is False
    assert claims["mb-sgd-strong-at-high-privacy"]["reproduced"] is True
    assert claims["tight-accounting-vs-paper-calibration"]["reproduced"] is None
    assert all(c["reproduced"] is None for c in check_claims([_row("mb-sgd", None, 0.03)]))


def test_summary_rows_and_text():
    records = [_rec(0.5, t, 0.1, 0.2) for t in range(2)] + [_rec(0.5, 0, 0.1, 0.05, algorithm="mb-sgd", epsilon=None)]
    rows = summarize(select(records))
    assert [r["algorithm"] for r in rows] == ["isrl-mb-sgd", "mb-sgd"]
    r = rows[0]
    assert (r["experiment"], r["epsilon"], r["trials"], r["certified_epsilon"]) == ("wbcd M=2 R=25", 1.0, 2, 0.9)
    assert r["hyperparameters"] == {"step_size": 0.5, "clip": 1.0}
    text = format_summary(rows, check_claims(rows))
    assert "isrl-mb-sgd" in text and "0.2000 +- 0.0000" in text
    assert len(text.splitlines()) == 3  # header and two rows; no claim is testable on these rows


def test_last_iterate_selection_uses_the_last_iterate_metrics():
    records = []
    for t in range(2):
        a, b = _rec(0.1, t, val=0.10, test=0.10, algorithm="isrl-spider"), _rec(0.5, t, val=0.30, test=0.30, algorithm="isrl-spider")
        a.metrics.update(last_val_error=0.40, last_test_error=0.40)   # good random iterate, bad last one
        b.metrics.update(last_val_error=0.05, last_test_error=0.06)
        records += [a, b]
    [own], [last] = select(records), select(records, output="last")
    assert own.hyperparameters["step_size"] == 0.1 and own.output == "algorithm"
    assert last.hyperparameters["step_size"] == 0.5 and last.test_mean == pytest.approx(0.06) and last.output == "last"
    with pytest.raises(ValueError, match="output"):
        select(records, output="best")


def test_alg11_rule_picks_the_better_spider_on_validation_never_test():
    from silodp.experiments.report import ALG11, alg11_rule

    rows = [_row("isrl-spider", 1.0, 0.20), _row("isrl-fed-spider", 1.0, 0.10), _row("isrl-spider", 3.0, 0.05),
            _row("isrl-fed-spider", 3.0, 0.08)]
    rows[1]["mean_test_error"] = 0.30  # Fed-SPIDER: better on validation, worse on test -> still chosen
    extra = [r for r in alg11_rule(rows) if r["algorithm"] == ALG11]
    assert [(r["epsilon"], r["chosen"], r["mean_test_error"]) for r in extra] == [
        (1.0, "isrl-fed-spider", 0.30), (3.0, "isrl-spider", 0.05)]
    assert alg11_rule(rows[:1]) == rows[:1]  # SPIDER alone: no rule row


def test_errors_table_bolds_the_best_tight_cell_and_rounds_certificates_up():
    from silodp.experiments.tables import errors_table

    rows = [_row("isrl-spider", 1.0, 0.2, 0.01), _row("isrl-mb-sgd", 1.0, 0.1, 0.02),
            _row("isrl-spider", 1.0, 0.05, calibration="paper", certified=1.234),
            _row("mb-sgd", None, 0.03, calibration="none")]
    text = errors_table(rows)
    assert "| 1 | 0.2000 ± 0.0100 | **0.1000 ± 0.0200** | 0.0500 ± 0.0000 (1.24) |" in text
    assert "Non-private: MB-SGD 0.0300 ± 0.0000." in text


def test_scaffold_table_gap_ci_is_paired_over_trials():
    from scipy.stats import t

    from silodp.experiments.tables import scaffold_table

    def row(alg, errors):
        import statistics
        return {**_row(alg, 10.0, statistics.fmean(errors), statistics.stdev(errors), trials=len(errors)),
                "data": {"alpha": 1.0, "beta": 1.0}, "hyperparameters": {"local_steps": 5}, "rounds": 100,
                "test_errors": errors}

    # per-trial gaps 0.1, 0.2, 0.3: mean 0.2, std 0.1, half-width t(0.975, 2) * 0.1 / sqrt(3)
    text = scaffold_table([row("dp-scaffold", [0.3, 0.2, 0.1]), row("dp-fedavg", [0.4, 0.4, 0.4])])
    half = t.ppf(0.975, 2) * 0.1 / math.sqrt(3)
    assert f"+0.200 [{0.2 - half:+.3f}, {0.2 + half:+.3f}] | 3 |" in text
    assert "| Synthetic(1,1) | 5 | 100 | 0.800 ± 0.100 | 0.600 ± 0.000 |" in text
    assert "warm" not in text
    # DP-SCAFFOLD-warm's runs get their own column, between the two; the gap stays SCAFFOLD - FedAvg
    warm = scaffold_table([row("dp-scaffold", [0.3, 0.2, 0.1]), row("dp-scaffold-warm", [0.25, 0.25, 0.25]),
                           row("dp-fedavg", [0.4, 0.4, 0.4])])
    assert "| setting | K | T | DP-SCAFFOLD | DP-SCAFFOLD-warm | DP-FedAvg | gap [95% CI] | trials |" in warm
    assert f"| 0.800 ± 0.100 | 0.750 ± 0.000 | 0.600 ± 0.000 | +0.200 [{0.2 - half:+.3f}" in warm


def test_claims_table_lists_testable_claims_with_their_measurements():
    from silodp.experiments.tables import claims_table

    rows = [_row("isrl-spider", 1.0, 0.2, 0.01), _row("isrl-mb-sgd", 1.0, 0.1, 0.02)]
    text = claims_table(check_claims(rows))
    assert "| ISRL-DP MB-SGD never outperformed ISRL-DP SPIDER for any value of epsilon" in text
    assert "| **not reproduced** | points 1; spider worse by more than 2 standard errors 1 |" in text
    assert "DP-SCAFFOLD" not in text  # no rows to test it: left out


def test_scaffold_table_of_noiseless_twins_and_of_mnist():
    """A grid of SCAFFOLD and FedAvg (no epsilon, calibration ``none``) gets their columns and
    their gap; MNIST label-skew rows are labelled by similarity, and similarity 1 is not
    heterogeneous for the DP-SCAFFOLD claim."""
    from silodp.experiments.report import scaffold_gaps, scaffold_heterogeneous
    from silodp.experiments.tables import scaffold_table

    def row(alg, errors, eps=None, **extra):
        import statistics
        return {**_row(alg, eps, statistics.fmean(errors), statistics.stdev(errors), trials=len(errors),
                       calibration="none" if eps is None else "tight"),
                "hyperparameters": {"local_steps": 5}, "rounds": 100, "test_errors": errors, **extra}

    syn = {"dataset": "fedprox_synthetic", "data": {"alpha": 5.0, "beta": 5.0}}
    text = scaffold_table([row("scaffold", [0.1, 0.2, 0.3], **syn), row("fedavg", [0.2, 0.4, 0.6], **syn)])
    assert "| setting | K | T | SCAFFOLD (no noise) | FedAvg (no noise) | gap [95% CI] | trials |" in text
    assert "| Synthetic(5,5) | 5 | 100 | 0.800 ± 0.100 | 0.600 ± 0.200 | +0.200 [" in text and "DP-" not in text
    [gap] = scaffold_gaps([row("scaffold", [0.1, 0.2, 0.3], **syn), row("fedavg", [0.2, 0.4, 0.6], **syn)])
    assert gap["gap"] == pytest.approx(0.2)
    mnist = {"dataset": "mnist_label_skew", "data": {"num_users": 20, "similarity": 0.1}}
    text = scaffold_table([row("dp-scaffold", [0.1, 0.2], 4.0, **mnist), row("dp-fedavg", [0.3, 0.3], 4.0, **mnist)])
    assert "| MNIST, similarity 0.1 | 5 | 100 | 0.850 ± 0.071 | 0.700 ± 0.000 | +0.150 [" in text
    assert scaffold_heterogeneous(row("dp-scaffold", [0.1, 0.2], **mnist))
    assert not scaffold_heterogeneous(row("dp-scaffold", [0.1, 0.2], dataset="mnist_label_skew",
                                          data={"similarity": 1.0}))
