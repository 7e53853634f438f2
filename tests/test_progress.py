"""silodp.progress: a bar with total and ETA on a terminal, periodic plain lines otherwise (and
under --json), nothing with --quiet or for work shorter than a second."""

import io

import pytest

from silodp import progress as pg


class _Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(pg.time, "monotonic", lambda: now[0])
    return now


def test_mode_follows_the_stream_and_the_flags():
    assert pg.progress_mode(stream=_Tty()) == "bar"
    assert pg.progress_mode(as_json=True, stream=_Tty()) == "lines"
    assert pg.progress_mode(stream=io.StringIO()) == "lines"
    assert pg.progress_mode(quiet=True, stream=_Tty()) == "off"
    assert pg.as_mode(False) == "off" and pg.as_mode("bar") == "bar"
    with pytest.raises(ValueError, match="mode"):
        pg.Progress(3, "x", mode="loud")


def test_lines_report_total_and_eta_every_period(clock):
    out = io.StringIO()
    with pg.Progress(4, "grid", "run", mode="lines", stream=out, every=10) as bar:
        clock[0] += 5
        bar.update()  # 5 s: first line (after 1 s)
        clock[0] += 5
        bar.update()  # 10 s: within the period
        clock[0] += 10
        bar.update()  # 20 s: a line
    lines = out.getvalue().splitlines()
    assert lines[0] == "grid: 1/4 run (25%) [00:05 < ETA 00:15]"
    assert lines[1] == "grid: 3/4 run (75%) [00:20 < ETA 00:07]"
    assert lines[-1] == lines[1] and len(lines) == 3  # close repeats the final state


def test_bar_redraws_in_place(clock):
    out = _Tty()
    bar = pg.Progress(2, "isrl-spider", "round", stream=out)
    clock[0] += 2
    bar.update()
    bar.close()
    text = out.getvalue()
    assert text.startswith("\r\x1b[2Kisrl-spider: 1/2 round (50%) [00:02 < ETA 00:02]") and text.endswith("\n")


def test_fast_work_and_quiet_print_nothing(clock):
    out = io.StringIO()
    with pg.Progress(3, "fast", mode="lines", stream=out) as bar:
        bar.update(3)
    with pg.Progress(3, "quiet", mode="off", stream=out) as bar:
        clock[0] += 100
        bar.update(3)
    assert out.getvalue() == ""
