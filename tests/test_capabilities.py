"""Capabilities instead of names: callers ask a registered accountant (``supports()``) or carry
its spec (:class:`silodp.accounting.spec.AccountantSpec`), never compare or parse names; and a
scan of the package (its syntax trees, so docstrings and help texts do not count) finds every
remaining switch on accountant or algorithm names outside the registries. Those left are listed
in ``KNOWN`` with the reason; the list may only shrink (a listed site that is gone fails too)."""

import ast
import pathlib

import pytest

import silodp
from silodp.accounting import REPLACE_ONE, PldAccountant, calibrate
from silodp.accounting import events as ev
from silodp.accounting.accountants import ACCOUNTANTS, get_accountant, register_accountant, unregister_accountant
from silodp.accounting.spec import AccountantSpec
from silodp.algorithms import ALGORITHMS

PACKAGE = pathlib.Path(silodp.__file__).parent
#: the registries themselves (they hold the names), and the modules of data keyed by names, each
#: saying in its docstring why it is one: the papers' choice of algorithms (``experiments/paper.py``),
#: a colour per algorithm (``palette.py``) and the theorem that bounds each algorithm, with its
#: presets (``verify/rates/theorems.py``)
REGISTRIES = {"silodp/accounting/accountants/registry.py", "silodp/algorithms/registry.py", "silodp/_registry.py",
              "silodp/experiments/paper.py", "silodp/palette.py", "silodp/verify/rates/theorems.py"}
#: (file, what) of the switches not yet replaced by a capability, and why they are still there
KNOWN: dict[tuple[str, str], str] = {}


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("frozenset", "set", "tuple") and node.args:
        return _strings(node.args[0])
    return []


def _about_names(text: str) -> bool:
    """Whether an expression's text is about an accountant, an algorithm or a name."""
    return any(w in text for w in ("accountant", "algorithm", "name"))


def _affix(method: str, text: str, names: set[str]) -> bool:
    """Whether ``text`` begins (``startswith``) or ends (``endswith``) some registered name."""
    return bool(text) and any(getattr(n, method)(text) for n in names)


def _substring_test(node: ast.Compare, names: set[str], about_names: bool) -> bool:
    """An ``in`` / ``not in`` against a string literal that is a registered name (``x in "pld"``:
    a substring test, whatever ``x`` is), or, on an expression about names, with a literal that
    is a part of one (``"spider" in name``)."""
    for op, left, right in zip(node.ops, [node.left, *node.comparators], node.comparators):
        if not isinstance(op, (ast.In, ast.NotIn)):
            continue
        if isinstance(right, ast.Constant) and right.value in names:
            return True
        if about_names and isinstance(left, ast.Constant) and isinstance(left.value, str) and len(left.value) >= 3 \
                and any(left.value in n for n in names):
            return True
    return False


def name_switches(root: pathlib.Path = PACKAGE) -> set[tuple[str, str, int]]:
    """(file, what, line) of every label parse (``.split("(")``), comparison of an accountant /
    algorithm / name expression with a registered name, test of a part of a registered name on
    such an expression (``name.startswith("pld")``, ``.endswith``, ``"spider" in name``, ``name in
    "pld"``), and literal table of two or more registered names, in the package's code outside
    :data:`REGISTRIES`."""
    names = set(ACCOUNTANTS) | set(ALGORITHMS)
    found = set()
    for path in sorted(root.rglob("*.py")):
        rel = str(path.relative_to(root.parent))
        if rel in REGISTRIES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            what = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "split" \
                    and node.args and _strings(node.args[0]) == ["("]:
                what = "parses a label"
            elif isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                subject = " ".join(ast.unparse(s) for s in sides)
                if _substring_test(node, names, _about_names(subject)):
                    what = "tests a part of a name"
                elif any(s in names for side in sides for s in _strings(side)) and _about_names(subject):
                    what = "compares a name"
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("startswith", "endswith") and node.args \
                    and _about_names(ast.unparse(node.func.value)) \
                    and any(_affix(node.func.attr, s, names) for s in _strings(node.args[0])):
                what = "tests a part of a name"
            elif isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(set(_strings(node)) & names) >= 2:
                what = "a table of names"
            elif isinstance(node, ast.Dict) and len({k.value for k in node.keys if isinstance(k, ast.Constant)}
                                                    & names) >= 2:
                what = "a table keyed by names"
            if what:
                found.add((rel, what, node.lineno))
    return found


def test_no_name_switch_outside_the_registries_but_the_known_ones():
    found = name_switches()
    new = sorted(f for f in found if f[:2] not in KNOWN)
    assert not new, f"switches on names (ask the registered object instead): {new}"
    gone = sorted(k for k in KNOWN if k not in {f[:2] for f in found})
    assert not gone, f"fixed: remove them from KNOWN: {gone}"


def test_the_scan_finds_a_planted_switch(tmp_path):
    pkg = tmp_path / "silodp"
    pkg.mkdir()
    (pkg / "planted.py").write_text(
        'def f(accountant, label):\n'
        '    if accountant != "pld":\n'
        '        raise ValueError("pld only")\n'
        '    SAFE = {"isrl-prox-sgd", "sdp-prox-sgd"}\n'
        '    return label.split("(")[0], SAFE\n')
    assert {w for _, w, _ in name_switches(pkg)} == {"compares a name", "a table of names", "parses a label"}
    (pkg / "planted.py").write_text(  # parts of registered names: a prefix, a suffix, a substring either way
        'def g(accountant, algorithm):\n'
        '    a = accountant.name.startswith("pld")\n'
        '    b = algorithm.endswith("-svrg")\n'
        '    c = "spider" in algorithm\n'
        '    d = kind not in "pld"\n'
        '    e = accountant.startswith("zz-not-a-name")\n'
        '    f = "x" in algorithm and "sgd" in "a message"\n'
        '    return a, b, c, d, e, f\n')
    assert sorted(line for _, w, line in name_switches(pkg) if w == "tests a part of a name") == [2, 3, 4, 5]


class _MixturePld(PldAccountant):
    """Another name, pld's capabilities."""

    name = "toy-mixture-pld"


@pytest.fixture
def another_pld():
    register_accountant(_MixturePld)
    yield _MixturePld.name
    unregister_accountant(_MixturePld.name)


def test_opacus_balls_in_bins_asks_supports_not_the_name(another_pld):
    pytest.importorskip("opacus")
    from silodp.integrations.opacus import opacus_accountant

    assert opacus_accountant(another_pld, "balls-in-bins")  # registered: it supports the epochs
    with pytest.raises(ValueError, match=r"certified by \[.*'pld'.*\] only, got 'rdp'"):
        opacus_accountant("rdp", "balls-in-bins")


def test_dp_scaffold_noise_asks_supports_not_the_name(another_pld):
    from silodp.accounting.scaffold import ScaffoldConfig

    cls = ALGORITHMS["dp-scaffold"]
    cfg = ScaffoldConfig(20, 50, 3, 2, 0.5, 0.2, 1.0, 0)
    ours = cls.plan.noise_report(cfg, 4.0, 1e-5, accountant=another_pld)
    pld = cls.plan.noise_report(cfg, 4.0, 1e-5)
    assert ours["sigma_g"] == pytest.approx(pld["sigma_g"], rel=1e-12)
    with pytest.raises(ValueError, match=r"accountant: 'rdp' does not certify .*those that do: \[.*'pld'"):
        cls.plan.noise_report(cfg, 4.0, 1e-5, accountant="rdp")


def test_a_calibration_carries_its_accountant_spec():
    cal = calibrate(lambda z: ev.SelfComposedDpEvent(ev.GaussianDpEvent(z), 100), 2.0, 1e-5, "pld", REPLACE_ONE)
    assert cal.spec.name == "pld" and "(" in cal.accountant  # the label is for reading
    assert dict(cal.spec.settings) == cal.settings
    again = cal.spec.make(REPLACE_ONE).compose(ev.SelfComposedDpEvent(ev.GaussianDpEvent(cal.noise_multiplier), 100))
    assert again.get_epsilon(1e-5) == cal.epsilon
    assert calibrate(lambda z: ev.GaussianDpEvent(z), 2.0, 1e-5, _MixturePld).spec is None  # not registered


def test_an_accountant_spec_is_validated_against_the_registry():
    assert AccountantSpec.of("rdp") == AccountantSpec("rdp") and AccountantSpec.of(AccountantSpec("rdp")).label == "rdp"
    assert AccountantSpec("pld", {"value_discretization_interval": 0.002}).label == \
        "pld(value_discretization_interval=0.002)"
    with pytest.raises(ValueError, match="accountant: must be one of"):
        AccountantSpec("pld(value_discretization_interval=0.002)")  # a label is not a name
    with pytest.raises(ValueError, match="settings: \\['conversion'\\]"):
        AccountantSpec("pld", {"conversion": "paper"})


def test_a_stored_calibration_is_recertified_from_its_spec_not_its_label():
    """A PLD calibration's label (``pld(value_discretization_interval=0.002)``) is not an
    accountant name: re-certifying a stored calibration by it failed (and every sweep recalibrated);
    the stored spec certifies it again, on the calibration's own grid."""
    from silodp.experiments import execute as ex
    from silodp.experiments.grid import RunConfig

    cfg = RunConfig(dataset="wbcd", algorithm="isrl-mb-sgd", epsilon=2.0, calibration="tight", silos_per_round=2,
                    rounds=5, batch_size=5, step_size=0.5, clip=1.0, trial=0, params={"replacement": True})
    request = ex.calibration_request(cfg)
    cal = ex.calibrate_request(request)
    assert cal["status"] == "ok" and "(" in cal["accountant"] and cal["accountant_spec"]["name"] == "pld"
    assert ex.recertify(request, cal) is None
    assert ex.recertify(request, {**cal, "epsilon": 0.999 * cal["epsilon"]}) is not None  # the check still bites
    legacy = {k: v for k, v in cal.items() if k != "accountant_spec"}  # a row stored before the spec
    assert "cannot re-certify" in ex.recertify(request, legacy)  # refused, so recalibrated: never trusted


def test_an_accountant_is_passed_as_a_spec():
    spec = AccountantSpec("pld", {"value_discretization_interval": 1e-3})
    acc = get_accountant(spec, REPLACE_ONE)
    assert type(acc) is PldAccountant and acc.value_discretization_interval == 1e-3
    fn = lambda z: ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(0.1, ev.GaussianDpEvent(z)), 50)  # noqa: E731
    by_spec = calibrate(fn, 2.0, 1e-5, spec, REPLACE_ONE)
    by_kwargs = calibrate(fn, 2.0, 1e-5, "pld", REPLACE_ONE, value_discretization_interval=1e-3)
    assert by_spec == by_kwargs and by_spec.spec == AccountantSpec("pld", by_spec.settings)
