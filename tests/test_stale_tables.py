"""No stamped results table in docs/ is older than the code that would regenerate it.

Every ``<!-- silodp:table ... -->`` block records the hash of its grid (every run's config hash
and the accounting version, :func:`silodp.experiments.stamp.grid_hash`). These tests recompute the
hashes from the presets and grid files -- no run is repeated -- so a change that would move a
table's numbers (a preset, a grid file, ``ACCOUNTING_VERSION``) fails here until the table is
regenerated (``silodp reproduce`` + ``silodp report --into``, docs/reproduction.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from silodp.experiments import doctables, stamp

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))


def _block(**attrs) -> str:
    return stamp.render_block(attrs, "| a |\n|---|\n| 1 |")


@pytest.fixture(scope="module")
def quick_attrs():
    spec = stamp.resolve({"preset": "scaffold-synthetic", "quick": "1"})
    return stamp.stamp_attrs("s", "scaffold-synthetic", "scaffold", "abc1234", spec, quick="1")


def test_docs_tables_are_current():
    count, problems = stamp.check_files(DOCS, ROOT)
    assert problems == []
    # WBCD, its claims, the SDP arm, MNIST, its claims, DP-SCAFFOLD's preset (x2: scaffold.md and
    # reproduction.md), its claims, at Noble et al.'s scale, at K T = 1000 (epsilon 10 and 2);
    # and every generated table (the cheap ones rebuilt and compared exactly just now)
    assert count >= 11 + len(doctables.TABLES) + len(doctables.RECORDED)


def test_every_generated_table_is_in_its_doc_once():
    for t in [*doctables.TABLES.values(), *doctables.RECORDED.values()]:
        names = [a.get("name") for a, _ in stamp.blocks((ROOT / t.doc).read_text())]
        assert names.count(t.name) == 1, (t.name, t.doc)


@pytest.fixture
def toy(monkeypatch):
    """A registered generated table that renders its config (exact and instant)."""
    table = doctables.DocTable("toy", "docs/toy.md", lambda k: f"| k |\n|---|\n| {k} |", {"k": 1})
    monkeypatch.setitem(doctables.TABLES, "toy", table)
    return table


def test_generated_table_round_trips_and_goes_stale(toy, monkeypatch):
    block = stamp.generated_block("toy")
    assert stamp.check_text(block) == []
    # the code now prints another number: a cheap table is rebuilt and compared
    monkeypatch.setitem(doctables.TABLES, "toy", doctables.DocTable("toy", toy.doc, lambda k: f"| {k + 1} |", toy.config))
    [problem] = stamp.check_text(block)
    assert "differs from what the code prints now" in problem
    assert "silodp report --generated toy --into docs/toy.md" in problem


def test_expensive_generated_table_is_checked_by_its_hash(toy, monkeypatch):
    import silodp.accounting.version as version

    block = stamp.generated_block("toy")
    monkeypatch.setitem(doctables.TABLES, "toy", doctables.DocTable("toy", toy.doc, lambda k: "other", toy.config,
                                                                       cheap=False))
    assert stamp.check_text(block) == []  # not rebuilt: the stamp still matches
    [problem] = stamp.check_text(block, full=True)  # --check --full rebuilds it
    assert "differs" in problem
    monkeypatch.setattr(version, "ACCOUNTING_VERSION", version.ACCOUNTING_VERSION + 1)
    [problem] = stamp.check_text(block)
    assert "now hash to" in problem and "--generated toy" in problem
    monkeypatch.undo()
    changed = doctables.DocTable("toy", toy.doc, toy.render, {"k": 2}, cheap=False)
    monkeypatch.setitem(doctables.TABLES, "toy", changed)
    [problem] = stamp.check_text(block)
    assert "now hash to" in problem


def test_unknown_generated_table_is_refused():
    [problem] = stamp.check_text(stamp.render_block({"name": "nope", "kind": "generated"}, "| a |"))
    assert "no generated table" in problem
    with pytest.raises(ValueError, match="--generated: no generated table 'nope'"):
        doctables.table("nope")


def test_cli_generated_into(toy, tmp_path, capsys):
    from silodp.cli import main

    doc = tmp_path / "toy.md"
    doc.write_text("a\n<!-- silodp:table name=toy kind=generated -->\n<!-- /silodp:table -->\nb\n")
    assert main(["report", "--generated", "toy", "--into", str(doc)]) == 0
    assert "| 1 |" in doc.read_text() and doc.read_text().startswith("a\n<!-- silodp:table name=toy kind=generated")
    assert main(["report", "--check", str(doc)]) == 0
    capsys.readouterr()
    assert main(["report", "docs/toy.json", "--generated", "toy"]) == 2
    assert "--generated: takes no PRESET" in capsys.readouterr().err


def test_current_stamp_passes_and_round_trips(quick_attrs):
    text = "intro\n" + _block(**quick_attrs) + "\noutro\n"
    assert stamp.check_text(text) == []
    [(attrs, body)] = stamp.blocks(text)
    assert attrs == quick_attrs and body.startswith("| a |")


def test_changed_grid_is_stale(quick_attrs):
    # the same block claiming the full preset: its runs hash differently
    text = _block(**{**quick_attrs, "quick": "0"})
    [problem] = stamp.check_text(text)
    assert "now hashes to" in problem and quick_attrs["hash"] in problem


def test_changed_accounting_version_is_stale(quick_attrs, monkeypatch):
    import silodp.accounting.version as version

    monkeypatch.setattr(version, "ACCOUNTING_VERSION", version.ACCOUNTING_VERSION + 1)
    [problem] = stamp.check_text(_block(**quick_attrs))
    assert "accounting version" in problem
    # a stamp made under the bumped version but with the old hash is stale too (the hash covers it)
    bumped = stamp.grid_version(stamp.resolve(quick_attrs))
    [problem] = stamp.check_text(_block(**{**quick_attrs, "accounting": bumped}))
    assert "now hashes to" in problem


def test_malformed_stamps_are_refused(quick_attrs):
    partial = {k: v for k, v in quick_attrs.items() if k != "hash"}
    [problem] = stamp.check_text(_block(**partial))
    assert "lacks hash" in problem
    [problem] = stamp.check_text(_block(**{**quick_attrs, "preset": "no-such-preset"}))
    assert "error: preset" in problem


def test_replace_block_needs_exactly_one(quick_attrs):
    empty = "<!-- silodp:table name=s preset=scaffold-synthetic -->\n<!-- /silodp:table -->"
    new = _block(**quick_attrs)
    assert stamp.replace_block(f"x\n{empty}\ny", "s", new) == f"x\n{new}\ny"
    with pytest.raises(ValueError, match="name: 0 blocks"):
        stamp.replace_block("x", "s", new)
    with pytest.raises(ValueError, match="name: 2 blocks"):
        stamp.replace_block(empty + "\n" + empty, "s", new)


def test_cli_check(quick_attrs, tmp_path, capsys):
    from silodp.cli import main

    good, stale = tmp_path / "good.md", tmp_path / "stale.md"
    good.write_text(_block(**quick_attrs))
    stale.write_text(_block(**{**quick_attrs, "hash": "0" * 16}))
    assert main(["report", "--check", str(good), "--json"]) == 0
    assert '"tables": 1, "stale": []' in capsys.readouterr().out
    assert main(["report", "--check", str(good), str(stale)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "1 of 2 stamped tables are stale" in err[0]


def test_recorded_table_is_stale_after_an_accounting_bump(monkeypatch, tmp_path, capsys):
    import silodp.accounting.version as version
    from silodp.cli import main

    block = stamp.render_block(stamp.recorded_attrs("audit_sdp"), "| a |")
    assert stamp.check_text(block) == []
    monkeypatch.setattr(version, "ACCOUNTING_VERSION", version.ACCOUNTING_VERSION + 1)
    [problem] = stamp.check_text(block)
    assert "rerun `silodp audit --algorithm sdp-" in problem
    # after rerunning it, the restamp writes the current stamp around the pasted body
    doc = tmp_path / "audit.md"
    doc.write_text(block + "\n")
    assert main(["report", "--recorded", "audit_sdp", "--into", str(doc)]) == 0
    assert stamp.check_text(doc.read_text()) == [] and "| a |" in doc.read_text()
    capsys.readouterr()


def test_measurement_names_machine_and_date():
    with pytest.raises(ValueError, match="--machine"):
        stamp.recorded_attrs("audit_speed")
    attrs = stamp.recorded_attrs("audit_speed", "2-core-shared", "2026-12-02")
    assert attrs["machine"] == "2-core-shared" and attrs["date"] == "2026-12-02"
    assert stamp.check_text(stamp.render_block(attrs, "| a |")) == []
    bare = {k: v for k, v in attrs.items() if k != "machine"}
    [problem] = stamp.check_text(stamp.render_block(bare, "| a |"))
    assert "must name its machine and date" in problem


def test_the_mutation_table_shows_every_utility_mutation_caught():
    """Issue 25's done-when: the docs' table is what the stored suite runs say (checked above), and
    in it every correct run passes and every mutation fails at least one preset."""
    from silodp.verify.rates.mutations import MUTATIONS

    [body] = [b for a, b in stamp.blocks((ROOT / "docs/rates.md").read_text()) if a["name"] == "rates_mutations"]
    verdicts = {line.split(" | ")[0].strip("| "): line.rstrip(" |").split(" | ")[-1]
                for line in body.splitlines() if line.startswith("| ") and not line.startswith("| mutation")}
    assert verdicts == {"correct": "all pass", **{m: "yes" for m in MUTATIONS}}


def test_a_marker_the_parser_cannot_read_fails_the_check(quick_attrs):
    """Fail closed: a stamp that is not a well-formed block (a typo in the marker, a missing end
    marker) is a problem, not a block that is silently never checked."""
    good = _block(**quick_attrs)
    for bad in (good.replace(" kind=", "  kind="), good.replace("<!-- /silodp:table -->", ""),
                good.replace("name=s", "Name=s"), good + "\n<!-- /silodp:table -->"):
        problems = stamp.check_text("intro\n" + bad + "\noutro\n")
        assert any("malformed" in p for p in problems), bad
    # prose that quotes a marker inside a line is not a marker
    assert stamp.check_text("see `<!-- silodp:table name=x -->` markers\n" + good) == []


def test_a_registered_table_missing_from_its_doc_fails_the_check(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    doc = docs / "accounting.md"
    doc.write_text("no tables here\n")
    count, problems = stamp.check_files([doc], tmp_path)
    expected = {t.name for t in [*doctables.TABLES.values(), *doctables.RECORDED.values()] if t.doc == "docs/accounting.md"}
    assert count == 0 and expected and all(any(repr(n) in p and "missing" in p for p in problems) for n in expected)


def test_a_grid_version_names_the_certificates_its_algorithms_declare():
    """From each private algorithm's declared sampling, not from a list of names: every member of the
    DP-SCAFFOLD family draws fresh subsets (without replacement), the noiseless twins certify nothing."""
    from types import SimpleNamespace

    from silodp.algorithms import ALGORITHMS

    specs = {name: SimpleNamespace(expand=lambda name=name: [SimpleNamespace(algorithm=name, replacement=False)])
             for name in ("dp-scaffold", "dp-scaffold-warm", "dp-fedavg", "dp-fedsgd", "scaffold", "isrl-prox-sgd")}
    got = {name: stamp.grid_version(spec) for name, spec in specs.items()}
    assert {got[n] for n in ("dp-scaffold", "dp-scaffold-warm", "dp-fedavg", "dp-fedsgd")} == {"1+without-replacement.2"}
    assert got["scaffold"] == got["isrl-prox-sgd"] == "1" and not ALGORITHMS["scaffold"].private
    mbsgd = SimpleNamespace(expand=lambda: [SimpleNamespace(algorithm="isrl-mb-sgd", replacement=True)])
    assert stamp.grid_version(mbsgd) == "1+with-replacement.2"
