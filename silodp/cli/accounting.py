"""``silodp epsilon | noise | shuffle``: the accounting layer from the shell (no torch import)."""

from __future__ import annotations

import argparse
import math

from silodp.accounting import ACCOUNTANTS, CalibrationMethod, Sampling
from silodp.accounting.accountants import accountant_choices
from silodp.cli import emit, refuse
from silodp.cli.tables import columns, num, pairs
from silodp.cli.domains import COUNT, DELTA, EPSILON, PROBABILITY, SCALE, Int, PathArg, Real, text

#: flags of `noise`'s algorithm mode (the algorithms' own transcript flags are generated from
#: their configs once --algorithm is given: silodp.cli.params), and of the generic mechanism mode
ALGORITHM_FLAGS = ("--method", "--n", "--rounds", "--batch-size", "--clip", "--beta", "--silos", "--silos-per-round",
                   "--dimension", "--without-replacement")
MECHANISM_FLAGS = ("--steps", "--sampling", "--q", "--dataset-size", "--relation", "--value-discretization-interval",
                   "--log-mass-truncation-bound")

PLD_FLAGS = ("--value-discretization-interval", "--log-mass-truncation-bound")
#: `noise --algorithm`'s shared transcript flags -> (the transcript field, a probe value); a flag,
#: shared or an algorithm's own, applies when moving it alone changes that algorithm's transcript
#: signature (:func:`_applicable`)
TRANSCRIPT_FLAGS = {"--rounds": ("rounds", 7), "--batch-size": ("batch_size", 50), "--clip": ("clip", 2.0),
                    "--beta": ("beta", 5.0), "--silos": ("num_silos", 5), "--silos-per-round": ("silos_per_round", 2),
                    "--dimension": ("dimension", 7), "--without-replacement": ("replacement", False)}
#: the fixed configuration the probes move from
PROBE_BASE = dict(n=1000, rounds=10, batch_size=100, clip=1.0, beta=math.inf, num_silos=4, silos_per_round=None,
                  dimension=1, replacement=True)


#: ``--accountant`` choices read live from the registry (one registered after this import is a choice too)
ACCOUNTANT_CHOICES = accountant_choices("all")
SAMPLING_CHOICES = tuple(s.value for s in Sampling)
METHOD_CHOICES = (*(m.value for m in CalibrationMethod), "both")


def _mechanism_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=COUNT, default=1, help="number of composed steps (default 1)")
    p.add_argument("--delta", type=DELTA, required=True, help="target delta in (0, 1)")
    p.add_argument("--sampling", choices=SAMPLING_CHOICES, default="none")
    p.add_argument("--q", type=PROBABILITY, default=None, help="sampling ratio in (0, 1] (with --sampling)")
    p.add_argument("--dataset-size", type=COUNT, default=None,
                   help="records n (needed for with/without-replacement sampling: batch = ceil(q n), rounded up)")
    p.add_argument("--relation", choices=("add-remove", "replace-one"), default="add-remove",
                   help="neighbouring relation (default add-remove, as dp-accounting, Opacus and Flower; "
                        "ISRL-DP and fixed-size batches are replace-one)")
    p.add_argument("--accountant", choices=ACCOUNTANT_CHOICES, default=None,
                   help="default: the tightest certificate (gdp, exact, without subsampling; else the "
                        "better of pld and rdp, and advanced for sampling with replacement)")
    p.add_argument("--value-discretization-interval", type=Real(1e-9, 1.0, closed="high"), default=None,
                   help="pld grid step in privacy loss (epsilon: default 1e-4; noise: chosen from the steps)")
    p.add_argument("--log-mass-truncation-bound", type=Real(-700.0, 0.0, closed="low"), default=None,
                   help="pld: ln of the tail mass cut per side and composition, charged to delta "
                        "(epsilon: default ln 1e-15; noise: chosen from delta)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _flag_setting(flag: str) -> str:
    return flag[2:].replace("-", "_")


def _pld_settings(args) -> dict:
    """The accountant settings given on the command line (validated by the accountant); those
    the named accountant does not take (its ``SETTINGS``) would be ignored, so they are refused."""
    if args.accountant not in (None, "all"):
        taken = getattr(ACCOUNTANTS[args.accountant], "SETTINGS", ())
        refuse(args, [f for f in PLD_FLAGS if _flag_setting(f) not in taken],
               f"to --accountant {args.accountant} (not its settings)")
    names = [_flag_setting(f) for f in PLD_FLAGS]
    return {k: getattr(args, k) for k in names if getattr(args, k) is not None}


def _settings_used(args, name: str) -> dict:
    """The complete settings (defaults filled in) an ``epsilon`` certificate of ``name`` depends on."""
    from silodp.accounting import get_accountant
    return get_accountant(name, _relation(args), **_kwargs(args, name)).settings()


def _with_settings(args, payload: dict, names) -> None:
    """``payload["<name>_settings"]`` for each of ``names`` that takes settings (``pld_settings``)."""
    for name in names:
        if getattr(ACCOUNTANTS[name], "SETTINGS", ()):
            payload[f"{name}_settings"] = _settings_used(args, name)


def _event_file(args):
    """The event of ``--event FILE`` (a dp-accounting event as JSON, docs/cli.md), or None."""
    from silodp.accounting import event_json

    if args.event is None:
        return None
    refuse(args, ("--noise-multiplier", *MECHANISM_FLAGS[:4]), "with --event (the file is the whole mechanism)")
    try:
        with open(args.event, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ValueError(f"--event: cannot read {args.event!r} ({exc.strerror or exc})") from None
    return event_json.loads(text)


def _event_fn(args):
    from silodp.accounting.releases import sampled_steps

    def make(z: float):
        return sampled_steps(args.steps, z, args.sampling, args.q, args.dataset_size)

    make(1.0)  # validate the flags once, before any work
    return make


def _batch(args, payload: dict) -> str:
    """The batch ceil(q n) of with/without-replacement sampling, put in ``payload`` and as the
    human line's suffix (rounded up, toward more privacy loss; empty for other samplings)."""
    from silodp._validation import batch_from_rate

    if args.sampling not in (Sampling.WITHOUT_REPLACEMENT.value, Sampling.WITH_REPLACEMENT.value):
        return ""
    payload["batch_size"] = batch_from_rate("q", args.q, args.dataset_size)
    return f", batch {payload['batch_size']} of {args.dataset_size} records (ceil(q n))"


def _units(args, payload: dict, event=None) -> str:
    """The units silodp read, put in ``payload`` (``sensitivity`` in units of C, ``units``) and
    returned as the human line's suffix; under replace-one with a fixed-size batch (or an event
    file, which may hold one) also how to convert dp-accounting's RDP convention (docs/accounting.md,
    "Units, side by side")."""
    from silodp.accounting import events as ev

    rel = _relation(args)
    sens = ev.sensitivity(rel)
    payload["sensitivity"] = sens
    payload["units"] = f"noise_multiplier = sigma / C; sensitivity applied {'C' if sens == 1 else f'{sens:g}C'} ({args.relation})"
    fixed = args.sampling in (Sampling.WITHOUT_REPLACEMENT.value, Sampling.WITH_REPLACEMENT.value) or event is not None
    if rel == ev.REPLACE_ONE and fixed:
        payload["units"] += ("; dp-accounting's RdpAccountant reads a fixed-size batch's noise_multiplier under "
                             "replace-one as sigma / (2C): pass twice its value here")
    return f"; {payload['units']}"


def _relation(args):
    from silodp.accounting import events as ev
    return ev.REPLACE_ONE if args.relation == "replace-one" else ev.ADD_OR_REMOVE_ONE


def _names(args) -> list[str]:
    from silodp.accounting import ACCOUNTANTS
    return list(ACCOUNTANTS) if args.accountant == "all" else [args.accountant]


def _kwargs(args, name: str) -> dict:
    from silodp.accounting.calibration import settings_for
    return settings_for(name, _pld_settings(args))


def _for_each(args, compute, event=None):
    """Run ``compute(name)`` per requested accountant. Under ``all`` an accountant that does not
    support the mechanism (``event``, default the flags' at noise 1), or cannot certify it at these
    settings, gives None (JSON null)."""
    from silodp.accounting import get_accountant

    event = _event_fn(args)(1.0) if event is None else event
    out: dict[str, object] = {}
    for name in _names(args):
        reason = get_accountant(name, _relation(args), **_kwargs(args, name)).unsupported_reason(event)
        if reason and args.accountant != "all":
            raise ValueError(f"--accountant {name} cannot certify this mechanism: {reason}")
        if reason:
            out[name] = None
            continue
        try:
            out[name] = compute(name)
        except (ValueError, ArithmeticError):
            if args.accountant != "all":
                raise
            out[name] = None
    return out


DPSGD_FLAGS = ("--batch-size", "--epochs")


def _dpsgd(args) -> dict | None:
    """``--dataset-size N --batch-size B --epochs E`` (TensorFlow Privacy's
    ``compute_dp_sgd_privacy`` inputs) as the equivalent Poisson call: rate ``q = B / N`` and
    ``steps = ceil(E N / B)`` (rounded up, toward more privacy loss), set on ``args``; returns the
    statement's facts, or None when neither flag was given."""
    from silodp.cli import given, refuse

    if not given(args, *DPSGD_FLAGS):
        return None
    refuse(args, ("--steps", "--q", "--sampling", "--event"),
           "with --batch-size/--epochs (they set Poisson sampling at q = B/N and steps = ceil(E N / B))")
    missing = [f for f, v in (("--dataset-size", args.dataset_size), ("--batch-size", args.batch_size),
                              ("--epochs", args.epochs)) if v is None]
    if missing:
        raise ValueError(f"{missing[0]}: required with --batch-size/--epochs (--dataset-size N --batch-size B "
                         "--epochs E)")
    n, b = args.dataset_size, args.batch_size
    if b > n:
        raise ValueError(f"--batch-size: must be at most --dataset-size ({n}), got {b}")
    args.sampling, args.q, args.dataset_size = Sampling.POISSON.value, b / n, None
    args.steps = math.ceil(args.epochs * n / b)
    return {"dataset_size": n, "batch_size": b, "epochs": args.epochs, "sampling": args.sampling, "q": args.q,
            "steps": args.steps}


def _statement(facts: dict, payload: dict, delta: float) -> str:
    """The human privacy statement of a ``--dataset-size/--batch-size/--epochs`` call."""
    name = payload.get("accountant") or "each accountant below"
    return (f"DP-SGD privacy statement: {facts['dataset_size']} examples, batches of {facts['batch_size']} "
            f"expected (Poisson sampling at rate q = B/N = {num(facts['q'])}), {num(facts['epochs'])} epochs = "
            f"{facts['steps']} steps (ceil(E N / B)), noise_multiplier {num(payload['noise_multiplier'])} "
            f"(sigma / C).\nRecord-level ({payload['relation']}) guarantee, certified by {name} at "
            f"delta={num(delta)}; it assumes Poisson batches (shuffled fixed-size batches are not "
            f"covered: see silodp-pld-shuffled) and says nothing of hyperparameter tuning runs.\n")


def _epsilon(args) -> int:
    from silodp.accounting import epsilon, tightest_epsilon
    from silodp._validation import check_delta, check_positive

    facts = _dpsgd(args)
    head = ""
    delta = check_delta("delta", args.delta)
    _pld_settings(args)  # refuses pld settings another accountant would ignore
    event = _event_file(args)
    if event is None:
        if args.noise_multiplier is None:
            raise ValueError("--noise-multiplier: required (or --event FILE)")
        event = _event_fn(args)(check_positive("noise-multiplier", args.noise_multiplier))
    if args.accountant is None:  # the tightest certificate among the accountants that support it
        eps, name = tightest_epsilon(event, delta, _relation(args), _pld_settings(args))
        payload = {"epsilon": eps, "accountant": name, "relation": args.relation}
        if facts:
            payload.update(facts, noise_multiplier=args.noise_multiplier)
            head = _statement(facts, payload, delta)
        _with_settings(args, payload, [name])
        batch = _batch(args, payload) + _units(args, payload, args.event)
        emit(payload, args.json, f"{head}epsilon at delta={num(delta)} ({args.relation}{batch})\n"
                                 + columns(("accountant", "epsilon"), [(name, eps)]))
        return 0
    results = _for_each(args, lambda name: epsilon(event, delta, name, _relation(args), **_kwargs(args, name)), event)
    payload = {"epsilon": results[_names(args)[0]]} if args.accountant != "all" else dict(results)
    payload["relation"] = args.relation
    if facts:
        payload.update(facts, noise_multiplier=args.noise_multiplier, accountant=args.accountant)
        head = _statement(facts, payload, delta)
    _with_settings(args, payload, [n for n in _names(args) if results[n] is not None])
    batch = _batch(args, payload) + _units(args, payload, args.event)
    human = columns(("accountant", "epsilon"), [(k, "unsupported" if v is None else v) for k, v in results.items()])
    emit(payload, args.json, f"{head}epsilon at delta={num(delta)} ({args.relation}{batch})\n{human}")
    return 0


def _noise_human(eps: float, delta: float, setting: str, results: dict) -> str:
    """The generic noise answer per accountant (``None``: unsupported) as a table."""
    rows = [(k, "unsupported", None) if v is None else (k, v["noise_multiplier"], v["epsilon"]) for k, v in results.items()]
    return (f"noise for epsilon={num(eps)}, delta={num(delta)} ({setting}); noise_multiplier = sigma / C\n"
            + columns(("accountant", "noise_multiplier", "certified epsilon"), rows))


def _noise_generic(args) -> int:
    from silodp.accounting import tightest_calibration
    from silodp._validation import check_delta, check_positive

    eps = check_positive("epsilon", args.epsilon)
    delta = check_delta("delta", args.delta)
    _pld_settings(args)  # refuses pld settings another accountant would ignore

    def one(name: str | None) -> dict:
        cal = tightest_calibration(_event_fn(args), eps, delta, name, _relation(args), _pld_settings(args))
        out = {"noise_multiplier": cal.noise_multiplier, "epsilon": cal.epsilon, "accountant": cal.accountant}
        if cal.spec is not None and cal.spec.settings:  # the label (with settings) is for reading; the spec
            out["accountant_spec"] = cal.spec.to_json()  # is what a script reads back
        if cal.settings:  # named by the accountant that took them (its spec), as ``epsilon``'s
            out[f"{cal.spec.name}_settings" if cal.spec is not None else "settings"] = cal.settings
        if cal.note:
            out["note"] = cal.note
        return out

    if args.accountant is None:  # the smallest certified noise among the supporting accountants
        payload = {**one(None), "relation": args.relation}
        batch = _batch(args, payload) + _units(args, payload)
        emit(payload, args.json, _noise_human(eps, delta, f"{args.relation}{batch}", {payload["accountant"]: payload}))
        return 0
    results = _for_each(args, one)
    payload = dict(results[_names(args)[0]]) if args.accountant != "all" else dict(results)
    payload["relation"] = args.relation
    batch = _batch(args, payload) + _units(args, payload)
    emit(payload, args.json, _noise_human(eps, delta, f"{args.relation}{batch}", results))
    return 0


def _probe(f, value):
    """Another valid value of the config field ``f`` (from ``value``, its default in `noise`)."""
    domain = f.metadata["domain"]
    if isinstance(domain, tuple):
        return next(v for v in domain if v != value)
    if domain in ("count", "count0"):
        return 3 if value is None else int(value) + 2
    return 0.05 if value is None else float(value) / 2


def _applicable(cls, own: dict) -> set[str]:
    """The flags (shared and the algorithm's own, ``own``: flag -> field) that change ``cls``'s
    transcript signature, each moved alone from :data:`PROBE_BASE` (a flag whose value the class
    refuses does not apply either)."""
    base = {**PROBE_BASE, **{f.name: f.metadata["noise_default"] for f in own.values()}}

    def signature(values) -> str | None:
        try:
            return cls.plan.transcript_signature(cls.plan.noise_transcript(values))
        except ValueError:
            return None

    ref = signature(base)
    moves = {flag: {name: value} for flag, (name, value) in TRANSCRIPT_FLAGS.items()}
    moves.update({flag: {f.name: _probe(f, base[f.name])} for flag, f in own.items()})
    return {flag for flag, change in moves.items() if (sig := signature({**base, **change})) is not None and sig != ref}


def _noise_algorithm(args) -> int:
    """An algorithm's noise at a budget through its class: the transcript of the flags
    (``noise_transcript``), the flags that move nothing refused, its ``noise_report``."""
    from silodp.algorithms.registry import algorithm_class
    from silodp.cli.params import dest

    cls = algorithm_class(args.algorithm)
    own = args.algorithm_flags
    unused = (set(TRANSCRIPT_FLAGS) | set(own)) - _applicable(cls, own)
    refuse(args, sorted(unused), f"to {cls.name} (it changes neither its transcript nor its noise)")
    if not cls.calibration_methods:
        refuse(args, ["--method"], f"to {cls.name} (its noise has one calibration)")
    values = {name: getattr(args, flag.lstrip("-").replace("-", "_")) for flag, (name, _) in TRANSCRIPT_FLAGS.items()
              if flag not in ("--silos", "--without-replacement")}
    values.update(n=args.n, num_silos=args.silos, replacement=not args.without_replacement)
    values.update({f.name: getattr(args, dest(f)) for f in own.values()})
    cfg = cls.plan.noise_transcript(values)
    accountant = None if args.accountant == "all" else args.accountant
    method = args.method if cls.calibration_methods else "both"
    payload = cls.plan.noise_report(cfg, args.epsilon, args.delta, method, accountant)
    emit(payload, args.json, _algorithm_human(payload, args.epsilon)
         if "sigmas" in payload or "paper_sigmas" in payload else pairs(payload))
    return 0


def _algorithm_human(p: dict, target: float) -> str:
    """``noise --algorithm``: one row per noise scale (and the certified epsilon), one column per
    calibration (``both``: paper, tight, tight/paper); a shuffle-DP protocol's parameters per
    message group."""
    head = f"{p['algorithm']}: noise for target epsilon={num(target)}, delta={num(p['delta'])} ({p['accountant']})"
    if "method" in p:
        rows = [*p["sigmas"].items(), ("certified epsilon", p["epsilon"])]
        lines = [head, columns(("", p["method"]), rows)]
    else:
        ratio = p["tight_over_paper"]
        rows = [(k, v, p["tight_sigmas"].get(k), ratio.get(k)) for k, v in p["paper_sigmas"].items()]
        rows.append(("certified epsilon", p["paper_certified_epsilon"], p["tight_certified_epsilon"], None))
        lines = [head, columns(("", "paper", "tight", "tight/paper"), rows)]
    if p.get("shuffle"):
        keys = list(next(iter(p["shuffle"].values())))
        lines += ["shuffle protocol per message group", columns(("group", *keys), [(g, *v.values()) for g, v in p["shuffle"].items()])]
    return "\n".join(lines)


def _noise(args) -> int:
    if args.algorithm is not None:
        refuse(args, MECHANISM_FLAGS, "with --algorithm (the algorithm's own transcript is calibrated)")
        return _noise_algorithm(args)
    refuse(args, ALGORITHM_FLAGS, "without --algorithm")
    return _noise_generic(args)


def _shuffle(args) -> int:
    from silodp.accounting import shuffle_bounds

    res = shuffle_bounds(args.eps0, args.n, args.delta)
    human = columns(("bound", "epsilon"), [(k, "n/a (condition fails)" if v is None else v) for k, v in res.items()])
    emit(res, args.json, f"shuffled epsilon for eps0={num(args.eps0)}, n={args.n}, delta={num(args.delta)}\n{human}")
    return 0


def register(sub) -> None:
    from silodp.cli.params import generate_on_algorithm

    p = sub.add_parser("epsilon", help="certified epsilon of a (subsampled) Gaussian mechanism, or of a "
                                       "dp-accounting event")
    p.add_argument("--noise-multiplier", type=Real(1e-4, closed="low"), default=None,
                   help="sigma / C, C the per-record contribution bound (clip norm), under every relation")
    p.add_argument("--event", type=PathArg("in"), default=None, metavar="FILE",
                   help="a dp-accounting event as JSON (to_named_tuple's fields, docs/cli.md) instead of "
                        "--noise-multiplier/--steps/--sampling")
    _mechanism_flags(p)
    g = p.add_argument_group("DP-SGD statement (TensorFlow Privacy's compute_dp_sgd_privacy)")
    g.add_argument("--batch-size", type=COUNT, default=None,
                   help="B, with --dataset-size N and --epochs E: Poisson sampling at q = B/N, ceil(E N / B) steps")
    g.add_argument("--epochs", type=Real(0.0, closed=""), default=None, help="E (with --batch-size)")
    p.set_defaults(handler=_epsilon)

    p = sub.add_parser("noise", help="noise multiplier for a budget, or noise of a paper's algorithm")
    p.add_argument("--epsilon", type=EPSILON, required=True)
    _mechanism_flags(p)
    g = p.add_argument_group("algorithm mode (--algorithm NAME)")
    g.add_argument("--algorithm", type=text("an algorithm name"), default=None, help="e.g. isrl-prox-sgd, isrl-spider, sdp-prox-sgd")
    g.add_argument("--method", choices=METHOD_CHOICES, default="both")
    g.add_argument("--n", type=COUNT, default=1000, help="records per silo")
    g.add_argument("--rounds", type=Int(1, 10 ** 7), default=10, help="R (epochs E for SVRG)")
    g.add_argument("--batch-size", type=COUNT, default=100, help="K (K1 for SPIDER)")
    g.add_argument("--clip", type=SCALE, default=1.0, help="per-sample clip norm L")
    g.add_argument("--beta", type=Real(0.0, math.inf, closed="high"), default=math.inf, help="smoothness (SPIDER)")
    g.add_argument("--silos", type=COUNT, default=1, help="N")
    g.add_argument("--silos-per-round", type=COUNT, default=None, help="M")
    g.add_argument("--dimension", type=Int(1, 10 ** 8), default=1, help="d (shuffle protocol)")
    g.add_argument("--without-replacement", action="store_true", help="minibatches without replacement")
    p.set_defaults(handler=_noise)
    generate_on_algorithm(p, transcript_only=True,
                          title="the algorithm's own transcript parameters (generated from its config)")

    p = sub.add_parser("shuffle", help="amplification by shuffling of an eps0-LDP randomizer")
    p.add_argument("--eps0", type=EPSILON, required=True)
    p.add_argument("--n", type=COUNT, required=True, help="number of parties")
    p.add_argument("--delta", type=DELTA, required=True)
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_shuffle)
