"""Stamped results tables: every table in docs/ that a sweep produced names what produced it.

A table is written between markers by ``silodp report PRESET --store S --table KIND --into FILE
--name NAME``::

    <!-- silodp:table name=wbcd preset=wbcd kind=errors commit=845a9cc hash=3f0c... accounting=1 -->
    | epsilon | ... |
    <!-- /silodp:table -->

``hash`` is :func:`grid_hash`: SHA-256 of the sorted config hashes of every run of the grid (each
:attr:`.grid.RunConfig.config_hash` covers data, model, algorithm, hyperparameters, epsilon,
calibration and trial) together with :data:`silodp.accounting.version.ACCOUNTING_VERSION`, the
version every certificate and calibration of a run is made under (the store re-certifies cached
calibrations by the same number). ``commit`` is the code version the store's runs were computed by.
:func:`check_text` recomputes the hash of each block from its preset alone -- no run is repeated --
so a change to a preset, a grid file or the accounting version that would move the numbers makes
the block stale (``tests/test_stale_tables.py``, ``silodp report --check``).

Tables made by other commands (accounting epsilons and noises, sigma_g, the distributed mechanisms;
:mod:`.doctables`) are blocks of ``kind=generated``, written by ``silodp report --generated NAME
--into FILE``: their ``hash`` is :func:`generated_hash` (name, command, config, accounting
version), and a cheap one is also rebuilt and compared byte for byte (:func:`check_generated`).
Tables too expensive to rebuild (audits) and measurements (timings) are ``kind=recorded``: the
body is what their command printed, the stamp the hash of that command and the accounting
version (and, for a measurement, the machine and date), :func:`check_recorded`.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

_ATTR = r"[a-z_]+=[^\s>]+"
BLOCK = re.compile(r"<!-- silodp:table((?: " + _ATTR + r")+) -->\n(.*?)<!-- /silodp:table -->", re.S)
#: a line that opens or closes a stamped block: each must belong to a :data:`BLOCK` match
_MARKER = re.compile(r"^<!-- /?silodp:table", re.M)
#: attributes that select the grid (the rest describe the rendering or record provenance)
GRID_KEYS = ("preset", "quick", "calibration")


def grid_version(spec) -> str:
    """The accounting version of a grid's certificates (:func:`silodp.accounting.version.version`):
    those of the batch sampling each private run's algorithm declares (``sampling``)."""
    from types import SimpleNamespace

    from silodp.accounting.releases import BatchSampling
    from silodp.accounting.version import version
    from silodp.algorithms import ALGORITHMS

    certificate = {BatchSampling.WITH_REPLACEMENT: "with-replacement", BatchSampling.SUBSET: "without-replacement",
                   BatchSampling.BALLS_IN_BINS: "balls-in-bins"}
    used = set()
    for c in spec.expand():
        cls = ALGORITHMS[c.algorithm]
        if cls.private:
            used.add(certificate.get(cls.plan.sampling(SimpleNamespace(replacement=c.replacement))))
    return version(used - {None})


def _hashed(version: str):
    """A version as hashed: the plain core version as the integer it was before certificates had
    versions of their own (so those stamps keep their hashes)."""
    return int(version) if version.isdigit() else version


def grid_hash(spec) -> str:
    """First 16 hex digits of SHA-256 over the grid's sorted run config hashes and the accounting
    version of its certificates: what determines every number a table of that grid shows."""
    payload = {"configs": sorted(c.config_hash for c in spec.expand()), "accounting": _hashed(grid_version(spec))}
    return hashlib.sha256(json.dumps(payload, separators=(",", ":")).encode()).hexdigest()[:16]


def table_version(table) -> str:
    """The accounting version of a generated or recorded table (its declared ``certificates``)."""
    from silodp.accounting.version import version

    return version(getattr(table, "certificates", ()))


def generated_hash(table) -> str:
    """First 16 hex digits of SHA-256 over a :class:`.doctables.DocTable`'s (or ``Recorded``'s)
    name, command, config and the accounting version: what determines its numbers."""
    payload = {"name": table.name, "command": table.command, "config": table.config,
               "accounting": _hashed(table_version(table))}
    return hashlib.sha256(json.dumps(payload, separators=(",", ":"), default=repr).encode()).hexdigest()[:16]


def recorded_attrs(name: str, machine: str | None = None, date: str | None = None) -> dict:
    """The stamp of the recorded table ``name`` (:class:`.doctables.Recorded`): a measured one
    needs the ``machine`` it ran on and the ``date`` (ISO, default today)."""
    import datetime

    from .doctables import recorded

    t = recorded(name)
    attrs = {"name": name, "kind": "recorded", "hash": generated_hash(t), "accounting": table_version(t)}
    if t.measured:
        if not machine:
            raise ValueError(f"--machine: the measured table {name!r} needs the machine it was measured on")
        attrs.update(machine=machine, date=date or datetime.date.today().isoformat())
    for key, value in attrs.items():
        if re.search(r"[\s>]", value):
            raise ValueError(f"{key}: a stamp value must be non-empty without spaces, got {value!r}")
    return attrs


def check_recorded(attrs: dict, label: str) -> list[str]:
    """Problems of one ``kind=recorded`` block: unknown name, a measured one without machine and
    date, or a hash that its command or the accounting version no longer give."""
    from .doctables import RECORDED

    t = RECORDED.get(attrs.get("name", ""))
    if t is None:
        return [f"{label}: no recorded table of that name (silodp/experiments/doctables.py)"]
    rerun = f"rerun `{t.command}`, paste its table, then silodp report --recorded {t.name} --into {t.doc}"
    if t.measured and not (attrs.get("machine") and attrs.get("date")):
        return [f"{label}: a measurement must name its machine and date ({rerun} --machine M)"]
    if attrs.get("hash") != generated_hash(t):
        return [f"{label}: stamp hash {attrs.get('hash')} but its command or accounting version now hash to "
                f"{generated_hash(t)} ({rerun})"]
    return []


def generated_block(name: str) -> str:
    """The stamped block of the generated table ``name``, rebuilt now."""
    from .doctables import table

    t = table(name)
    attrs = {"name": name, "kind": "generated", "hash": generated_hash(t), "accounting": table_version(t)}
    return render_block(attrs, t.body())


def check_generated(attrs: dict, body: str, label: str, full: bool = False) -> list[str]:
    """Problems of one ``kind=generated`` block: unknown name, stale hash, or (a cheap table, or any
    with ``full``) a body that differs from the table rebuilt now."""
    from .doctables import TABLES

    t = TABLES.get(attrs.get("name", ""))
    if t is None:
        return [f"{label}: no generated table of that name (silodp/experiments/doctables.py)"]
    rerun = f"regenerate: {t.command}"
    if attrs.get("hash") != generated_hash(t):
        return [f"{label}: stamp hash {attrs.get('hash')} but its command, config or accounting version now hash "
                f"to {generated_hash(t)} ({rerun})"]
    if (t.cheap or full) and body.rstrip() != t.body():
        return [f"{label}: the table differs from what the code prints now ({rerun})"]
    return []


def resolve(attrs: dict, root: str | Path = "."):
    """The :class:`.grid.GridSpec` a block's attributes name (a grid file path is relative to
    ``root``, the repository; ``calibration``: comma-separated, replacing the grid's)."""
    from .reproduce import resolve_grid

    preset = attrs["preset"]
    if preset.endswith((".json", ".toml")):
        preset = str(Path(root) / preset)
    spec = resolve_grid(preset, quick=attrs.get("quick") == "1")
    if attrs.get("calibration"):
        spec = spec.with_calibrations(attrs["calibration"].split(","))
    return spec


def stamp_attrs(name: str, preset: str, kind: str, commit: str, spec, **extra) -> dict:
    """The attributes of a block, in marker order."""
    attrs = {"name": name, "preset": preset, "kind": kind}
    attrs.update({k: str(v) for k, v in extra.items() if v not in (None, False, "")})
    attrs.update(commit=commit, hash=grid_hash(spec), accounting=grid_version(spec))
    for key, value in attrs.items():
        if not value or re.search(r"[\s>]", value):
            raise ValueError(f"{key}: a stamp value must be non-empty without spaces, got {value!r}")
    return attrs


def render_block(attrs: dict, body: str) -> str:
    head = " ".join(f"{k}={v}" for k, v in attrs.items())
    return f"<!-- silodp:table {head} -->\n{body.rstrip()}\n<!-- /silodp:table -->"


def blocks(text: str) -> list[tuple[dict, str]]:
    """``(attributes, body)`` of every stamped block in ``text``."""
    return [(dict(a.split("=", 1) for a in m[1].split()), m[2]) for m in BLOCK.finditer(text)]


def replace_block(text: str, name: str, block: str) -> str:
    """``text`` with the block called ``name`` replaced by ``block`` (the block must exist:
    write an empty ``<!-- silodp:table name=NAME preset=P -->`` / ``<!-- /silodp:table -->``
    pair where the table goes)."""
    found = [m for m in BLOCK.finditer(text) if dict(a.split("=", 1) for a in m[1].split()).get("name") == name]
    if len(found) != 1:
        raise ValueError(f"name: {len(found)} blocks named {name!r} (need exactly one <!-- silodp:table name={name} "
                         f"... --> ... <!-- /silodp:table --> pair)")
    m = found[0]
    return text[:m.start()] + block + text[m.end():]


def check_text(text: str, root: str | Path = ".", where: str = "", full: bool = False) -> list[str]:
    """One line per stale or malformed block of ``text``: its stamp no longer matches the hash
    (grid or accounting version) the current code computes for its preset, or a generated table
    differs from what its command prints now (:func:`check_generated`; ``full``: every one rebuilt)."""
    problems, hashes = [], {}
    parsed = set()
    for m in BLOCK.finditer(text):
        parsed.update((m.start(), m.end() - len("<!-- /silodp:table -->")))
    for m in _MARKER.finditer(text):  # fail closed: a marker no block parses is never checked otherwise
        if m.start() not in parsed:
            line = text.count("\n", 0, m.start()) + 1
            problems.append(f"{where}line {line}: malformed stamp marker (need '<!-- silodp:table key=value ... -->', "
                            "a newline, the table, '<!-- /silodp:table -->')")
    for attrs, body in blocks(text):
        label = f"{where}table {attrs.get('name', '?')!r}"
        if attrs.get("kind") == "generated":
            problems += check_generated(attrs, body, label, full)
            continue
        if attrs.get("kind") == "recorded":
            problems += check_recorded(attrs, label)
            continue
        missing = [k for k in ("name", "preset", "kind", "commit", "hash", "accounting") if k not in attrs]
        if missing:
            problems.append(f"{label}: stamp lacks {', '.join(missing)}")
            continue
        key = tuple(attrs.get(k) for k in GRID_KEYS)
        if key not in hashes:
            try:
                spec = resolve(attrs, root)
                hashes[key] = (grid_hash(spec), grid_version(spec))
            except (ValueError, KeyError) as exc:
                hashes[key] = (f"error: {exc}", None)
        if hashes[key][1] is not None and attrs["accounting"] != hashes[key][1]:
            problems.append(f"{label}: made under accounting version {attrs['accounting']}, now {hashes[key][1]} "
                            "(regenerate: silodp reproduce + silodp report --into)")
            continue
        if hashes[key][0] != attrs["hash"]:
            problems.append(f"{label}: stamp hash {attrs['hash']} but preset {attrs['preset']} now hashes to "
                            f"{hashes[key][0]} (regenerate: silodp reproduce + silodp report --into)")
    return problems


def check_files(paths, root: str | Path = ".", full: bool = False) -> tuple[int, list[str]]:
    """(number of stamped blocks, problems) over ``paths``; a generated or recorded table whose doc
    (relative to ``root``) is one of ``paths`` must be there exactly once."""
    from .doctables import RECORDED, TABLES

    count, problems = 0, []
    for path in paths:
        text = Path(path).read_text()
        found = blocks(text)
        count += len(found)
        problems += check_text(text, root, f"{path}: ", full)
        names = [a.get("name") for a, _ in found]
        for t in [*TABLES.values(), *RECORDED.values()]:
            if (Path(root) / t.doc).resolve() == Path(path).resolve() and names.count(t.name) != 1:
                problems.append(f"{path}: table {t.name!r} is missing or repeated ({names.count(t.name)} blocks; "
                                f"need one)")
    return count, problems
