"""The stated domain of every value a command-line flag takes, checked while parsing.

Each flag's ``type=`` is one of these callables, so a value outside its domain is refused before
any work, as one line that names the flag the user typed (argparse: ``argument --q: must ...``).
The domain is an attribute (``low``, ``high``, ...), which the CLI fuzz test reads to generate
values on both sides of every boundary. Real numbers are finite; a nonzero magnitude below
:data:`TINY` is refused (1/x would overflow: ``--q 1e-320`` used to run for minutes); integers
have a stated cap (``--trials 10**13`` used to grow memory without bound).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

#: Smallest nonzero magnitude a real flag accepts (its reciprocal stays finite).
TINY = 1e-300
#: Default cap of an integer flag.
INT_CAP = 10 ** 9


class Real:
    """A finite real in ``(low, high)`` (``closed``: which ends are included), |x| >= TINY unless 0."""

    def __init__(self, low: float = -math.inf, high: float = math.inf, closed: str = "", what: str = ""):
        self.low, self.high, self.closed, self.what = float(low), float(high), closed, what

    @property
    def domain(self) -> str:
        lo = "[" if "low" in self.closed else "("
        hi = "]" if "high" in self.closed else ")"
        return self.what or f"a number in {lo}{self.low:g}, {self.high:g}{hi}"

    def __call__(self, text: str) -> float:
        try:
            x = float(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"must be {self.domain}, got {text!r}") from None
        finite = math.isfinite(x) or (x == math.inf == self.high and "high" in self.closed)
        ok = finite and (x >= self.low if "low" in self.closed else x > self.low) and (
            x <= self.high if "high" in self.closed else x < self.high)
        if ok and x != 0 and abs(x) < TINY:
            raise argparse.ArgumentTypeError(f"must be 0 or of magnitude >= {TINY:g} (its reciprocal must be finite), "
                                             f"got {text!r}")
        if not ok:
            raise argparse.ArgumentTypeError(f"must be {self.domain}, got {text!r}")
        return x

    def __repr__(self) -> str:  # argparse names the type in some messages
        return "number"


class Int:
    """An integer in ``[low, high]`` (decimal digits only)."""

    def __init__(self, low: int = 1, high: int = INT_CAP):
        self.low, self.high = int(low), int(high)

    @property
    def domain(self) -> str:
        return f"an integer in [{self.low}, {self.high}]"

    def __call__(self, text: str) -> int:
        s = str(text).strip()
        if not s.lstrip("+-").isdigit() or not s.isascii() or len(s) > 30:
            raise argparse.ArgumentTypeError(f"must be {self.domain}, got {text!r}")
        x = int(s)
        if not self.low <= x <= self.high:
            raise argparse.ArgumentTypeError(f"must be {self.domain}, got {text!r}")
        return x

    def __repr__(self) -> str:
        return "integer"


class PathArg:
    """A file path: ``kind`` "in" (an existing readable file), "dir" (an existing directory or
    file: data paths), or "out" (a file that can be created, with one of ``suffixes``)."""

    def __init__(self, kind: str, suffixes: tuple[str, ...] = ()):
        self.kind, self.suffixes = kind, tuple(suffixes)

    def __call__(self, text: str) -> str:
        if not str(text).strip():
            raise argparse.ArgumentTypeError("must be a path, got ''")
        try:
            return self._check(str(text))
        except OSError as exc:  # a name too long to stat, ...: one line, not a traceback
            raise argparse.ArgumentTypeError(f"{exc.strerror or exc} ({len(str(text))} characters)") from None

    def _check(self, text: str) -> str:
        path = Path(text)
        if self.kind == "in" and not path.is_file():
            raise argparse.ArgumentTypeError(f"no such file {text!r}")
        if self.kind == "dir" and not path.exists():
            raise argparse.ArgumentTypeError(f"no such file or directory {text!r}")
        if self.kind == "out":
            if self.suffixes and path.suffix.lower().lstrip(".") not in self.suffixes:
                raise argparse.ArgumentTypeError(f"must end in one of {['.' + s for s in self.suffixes]}, got {text!r}")
            try:
                check_writable(text)
            except ValueError as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None
        return str(text)

    def __repr__(self) -> str:
        return "path"


def check_writable(path: str) -> None:
    """ValueError unless ``path`` can be written now: its directory exists and a file there can
    be opened for writing (tried: an existing file is opened to append and left as it was, a new
    one is created and removed), so ``/proc/version`` or a read-only disk fails before any work."""
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"{path!r} is a directory")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise ValueError(f"the directory {str(folder)!r} does not exist")
    existed = target.exists()
    try:
        with open(target, "a"):
            pass
    except OSError as exc:
        raise ValueError(f"{path!r} is not writable ({exc.strerror or exc})") from None
    if not existed:
        target.unlink()


def text(what: str):
    """A non-empty free-text value (a name checked later against its registry)."""
    def parse(value: str) -> str:
        if not str(value).strip():
            raise argparse.ArgumentTypeError(f"must be {what}, got ''")
        return str(value)
    parse.domain = what
    return parse


#: Common domains.
POSITIVE = Real(0.0, what="a finite number > 0")
NONNEGATIVE = Real(0.0, closed="low", what="a finite number >= 0")
PROBABILITY = Real(0.0, 1.0, closed="high", what="a number in (0, 1]")
DELTA = Real(0.0, 1.0, what="a number in (0, 1)")
#: a privacy parameter: the papers' closed forms divide by epsilon squared, which must stay a normal float
EPSILON = Real(1e-100, 1e6, closed="lowhigh", what="a number in [1e-100, 1e6]")
#: a clip norm or noise scale: its square (a variance) must stay a finite, normal float
SCALE = Real(1e-100, 1e100, closed="lowhigh", what="a number in [1e-100, 1e100]")
SEED = Int(0, 2 ** 32 - 1)
COUNT = Int(1)
