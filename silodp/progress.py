"""Progress of long work on stderr: rounds of a run, cells of a grid, calibration searches.

Three modes. ``bar``: on a terminal, one line redrawn in place with the count, the total, the
elapsed time and the ETA. ``lines``: when stderr is not a terminal, or the command prints
``--json``, one plain line every ``every`` seconds (and one when the work ends), so logs and CI
show where a long job is (the first once the work has taken ``after`` seconds). ``off``: ``--quiet``. Nothing is printed for work that ends within
``after`` seconds (one second by default), so fast commands stay silent. Pure standard library.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

MODES = ("bar", "lines", "off")


def progress_mode(as_json: bool = False, quiet: bool = False, stream: TextIO | None = None) -> str:
    """``off`` when ``quiet``; ``lines`` under ``--json`` or off a terminal; else ``bar``."""
    stream = sys.stderr if stream is None else stream
    if quiet:
        return "off"
    tty = getattr(stream, "isatty", lambda: False)()
    return "bar" if tty and not as_json else "lines"


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60:02d}:{rest % 60:02d}"


def as_mode(progress: bool | str | None, stream: TextIO | None = None) -> str:
    """A library's ``progress=`` argument as a mode: a mode name, False (``off``), or True / None
    (chosen from the stream, :func:`progress_mode`)."""
    if isinstance(progress, str):
        return progress
    return "off" if progress is False else progress_mode(stream=stream)


def add_quiet_flag(parser) -> None:
    """``--quiet``: no progress on stderr (see :func:`progress_mode`)."""
    parser.add_argument("--quiet", action="store_true",
                        help="no progress on stderr (default: a bar on a terminal, else a line every 10 s)")


class Progress:
    """Count ``total`` units of work (``None``: unknown) under ``desc``; see the module docstring.

    Use as a context manager, or call :meth:`close`; :meth:`update` after each unit."""

    def __init__(self, total: int | None, desc: str, unit: str = "it", *, mode: str | None = None,
                 stream: TextIO | None = None, every: float = 10.0, after: float = 1.0) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.mode = progress_mode(stream=self.stream) if mode is None else mode
        if self.mode not in MODES:
            raise ValueError(f"mode: must be one of {MODES}, got {mode!r}")
        self.total, self.desc, self.unit = total, desc, unit
        self.every, self.after = float(every), float(after)
        self.n, self.postfix = 0, ""
        self.start = time.monotonic()
        self._last = self.start  # last time something was printed (or the start)
        self._drawn = False

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def text(self, now: float | None = None) -> str:
        """``desc: n/total unit (p%) [elapsed < ETA eta], postfix`` -- the line both modes print."""
        elapsed = (time.monotonic() if now is None else now) - self.start
        if self.total:
            done = min(self.n, self.total) / self.total
            eta = elapsed * (1 - done) / done if done > 0 else None
            count = f"{self.n}/{self.total} {self.unit} ({100 * done:.0f}%)"
            times = f"{_clock(elapsed)} < ETA {_clock(eta) if eta is not None else '?'}"
        else:
            count, times = f"{self.n} {self.unit}", _clock(elapsed)
        return f"{self.desc}: {count} [{times}]" + (f", {self.postfix}" if self.postfix else "")

    def _show(self, final: bool = False) -> None:
        now = time.monotonic()
        if self.mode == "off" or now - self.start < self.after:
            return
        if self.mode == "bar":
            if final or now - self._last >= 0.1 or not self._drawn:
                self.stream.write("\r\x1b[2K" + self.text(now) + ("\n" if final else ""))
                self.stream.flush()
                self._last, self._drawn = now, True
        elif final or not self._drawn or now - self._last >= self.every:
            self.stream.write(self.text(now) + "\n")
            self.stream.flush()
            self._last, self._drawn = now, True

    def update(self, n: int = 1) -> None:
        self.n += n
        self._show()

    def set_description(self, desc: str) -> None:
        self.desc = desc
        self._show()

    def set_postfix(self, **values) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def close(self) -> None:
        """The final line (when anything was shown, or the work took longer than ``after``)."""
        if self.mode != "off" and (self._drawn or time.monotonic() - self.start >= self.after):
            self._show(final=True)
        self.mode = "off"
