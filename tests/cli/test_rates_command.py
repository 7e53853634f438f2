"""``silodp rates``: the JSON contract, the figure and table files, and errors (exit 2, one line)."""

import json

import pytest

from silodp.cli import main


def test_rates_json_contract_plot_and_csv(tmp_path, capsys):
    png, table = tmp_path / "rates.png", tmp_path / "rates.csv"
    code = main(["rates", "--algorithm", "isrl-prox-sgd", "--vary", "eps", "--quick", "--trials", "16",
                 "--values", "0.07", "0.14", "--plot", str(png), "--csv", str(table), "--json"])
    assert code == 0
    payload = json.loads(capsys.readouterr().out)
    assert {"vary", "slope", "slope_ci", "theory_exponent", "explicit_bound_holds"} <= set(payload)
    assert payload["vary"] == "eps" and payload["theory_exponent"] == pytest.approx(-2.0, abs=1e-6)
    assert payload["slope_ci"][0] < payload["slope"] < payload["slope_ci"][1]
    assert payload["explicit_bound_holds"] is True
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert table.read_text().count("\n") == 3  # header + two grid values


def test_rates_human_table(capsys):
    assert main(["rates", "--vary", "M", "--quick", "--trials", "8", "--values", "1", "4"]) == 0
    out = capsys.readouterr().out
    assert "slope" in out and "theory -1.000" in out and "explicit bound holds" in out


@pytest.mark.parametrize("argv, match", [
    (["rates", "--algorithm", "mb-sgd", "--vary", "eps", "--quick"], "algorithm"),
    (["rates", "--vary", "eps", "--quick", "--trials", "1"], "--trials"),
    (["rates", "--vary", "M", "--quick", "--values", "2", "16"], "M"),
    (["rates", "--algorithm", "isrl-spider", "--vary", "d", "--quick"], "vary"),
])
def test_rates_bad_input_exits_2_with_one_line(argv, match, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("silodp rates: error:") and match in err
