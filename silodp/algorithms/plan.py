"""Plans: an algorithm's privacy contract as one object per release kind.

A plan holds what a class of algorithms may release and what that certifies: the transcript of a
run (:meth:`Plan.transcript_config`, from the shared fields, the problem's, the federation's and
the :attr:`~silodp.algorithms.base.FederatedAlgorithm.Config` fields marked
``param(transcript=True)``), the declaration (:meth:`Plan.declaration`, from the family's own
``declare_gaussian`` / ``declare_shuffle``), the calibration toward a target, the certificate of
explicit noise (through the certify cache of :mod:`silodp.algorithms.privacy`), the payload of
``silodp noise --algorithm`` (:meth:`Plan.noise_report`) and **the channel it gives a run**
(:meth:`Plan.channel`): how :class:`~silodp.algorithms.base.Context` computes, records and
releases a message. Every channel releases through :mod:`silodp.algorithms.release` (Gaussian
messages) or P_vec (:mod:`silodp.algorithms.shuffle`), the same code the silo service uses.

One plan per release kind:

* :class:`GaussianPlan` -- ISRL-DP Gaussian messages (paper Alg 1-3, Thm E.1, E.2, F.1), the noise
  standard deviations ``sigmas`` calibrated by :func:`silodp.algorithms.privacy.calibrate_algorithm`
  and certified by the registered accountants;
* :class:`ShufflePlan` -- shuffle-DP through the binomial protocol P_vec (paper Alg 4-5, 7, 8,
  10), certified by the exact P_vec certificates (:mod:`silodp.accounting.pvec`), random
  availability's floor of summed silos charged to delta (Assumption 6);
* :class:`ParticipationPlan` -- DP-SCAFFOLD (Noble, Bellet & Dieuleveut 2022, arXiv:2111.09278,
  Alg 1, Thm 4.1): user sampling's participation mixtures toward a third party and the worst case
  toward the server (:mod:`silodp.accounting.scaffold`).

An algorithm class names its plan (``Plan = ShufflePlan``); ``cls.plan`` is the plan of the class
(what needs no run parameters: declaration, noise report, calibration at a transcript) and
``algo.plan`` the plan of one configured instance (its run's transcript, calibration and channel).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from silodp._validation import RENAMED, refuse_renamed
from silodp.accounting.pvec import rotated_bound
from silodp.accounting.releases import BatchSampling, GaussianRelease, Sent, shuffle_invocations

from . import draws as _draws
from . import grads as _grads
from .privacy import NoiseCalibration, TranscriptConfig
from .release import gaussian_release
from .shuffle import BinomialParams, analyze, as_params, pvec_fast, randomize, rotate, rotation_signs, unrotate

if TYPE_CHECKING:  # (base imports this module: its Context, Batch, Term and algorithm are typed Any here)
    from .federation import Federation
    from .problems import Problem


def shuffle_groups(raw: dict, groups: tuple[str, ...]) -> dict:
    """Binomial parameters per message group from one ``{g, b, p}`` for all groups, or a dict
    keyed by group name (a calibration's ``shuffle``)."""
    if "g" in raw:
        return {g: as_params(raw) for g in groups}
    unknown = sorted(set(raw) - set(groups))
    if unknown or not raw:
        raise ValueError(f"shuffle_params: need (g, b, p) per message group of {list(groups)}, got {sorted(raw)}")
    return {g: as_params(raw[g]) for g in groups if g in raw}  # a group never sent needs none


def batch_sampling(cfg: Any) -> BatchSampling:
    """The batch sampling of the minibatches a class draws with the transcript ``cfg``: those of
    :class:`~silodp.algorithms.federation.BatchSampler` (i.i.d. draws, or disjoint batches
    through one permutation per epoch), or balls-in-bins batches
    (:class:`~silodp.algorithms.federation.BallsInBinsSampler`)."""
    if getattr(cfg, "balls_in_bins", False):
        return BatchSampling.BALLS_IN_BINS
    return BatchSampling.WITH_REPLACEMENT if cfg.replacement else BatchSampling.SHUFFLED


def gaussian_messages(group: str, count: int, sigma: float, contribution: float, batch_size: int, cfg: Any,
                      sampling: BatchSampling | None = None) -> GaussianRelease:
    """What a family's ``declare_gaussian`` writes for one message group: ``count`` messages of
    ``group`` with noise std ``sigma`` over per-record contributions of norm <= ``contribution``
    (clip over the batch size), i.e. noise multiplier sigma / contribution, sampled as ``sampling``
    (default: :func:`batch_sampling` of ``cfg``) over batches of ``batch_size`` of ``cfg.n`` records."""
    how = sampling or batch_sampling(cfg)
    return GaussianRelease(group, count, float(sigma) / contribution, how, batch_size, cfg.n)


def _family(cls: Any, hook: str) -> Any:
    """The family's own declaration hook ``hook`` (``declare_gaussian`` / ``declare_shuffle``)."""
    written = getattr(cls, hook, None)
    if written is None:
        raise NotImplementedError(f"{cls.__name__} writes no {hook} (its plan {cls.Plan.__name__} needs one)")
    return written


# -- channels: how a run's messages are computed, recorded and released ----------------------------
class GaussianChannel:
    """Gaussian messages: the weighted sum of clipped per-record terms (ghost clipping), plus
    N(0, std^2 I) drawn for all silos at once, released by :func:`silodp.algorithms.release.gaussian_release`
    (``offset + (term + noise)`` in float64, refused unless finite)."""

    #: balls-in-bins batches are accounted for Gaussian messages
    balls_in_bins: ClassVar[bool] = True

    def terms(self, ctx: Any, data: Any, w: Any, w_old: Any, diff_clip: Any, grad_method: str) -> torch.Tensor:
        """The weighted sums ``[N, d]`` of every silo's clipped per-record terms (differences
        clipped to ``diff_clip``); a minibatch's records gathered a chunk of silos at a time by the
        kernel (:class:`~silodp.algorithms.federation.Rows`), the fused passes taking each record's
        ``||x||^2 + 1`` from the gather where it computed them."""
        problem, clip = ctx._problem, ctx._problem.clip
        x, y, xsq = data._inputs()
        if w_old is None:
            return _grads.clipped_grad_sum(problem, w, x, y, data._weights, clip, grad_method, xsq=xsq)
        return _grads.clipped_diff_sum(problem, w, w_old, x, y, data._weights, clip, diff_clip, grad_method, xsq=xsq)

    def messages(self, weights: torch.Tensor, a: torch.Tensor) -> int:
        """Messages summed per release (a shuffler's count; none here)."""
        return 0

    def sent(self, ctx: Any, group: str, data: Any, std: Any, bound: Any, messages: int) -> Sent:
        """The ledger entry: noise multiplier ``std`` over the contribution bound, the term's l2
        bound times the largest batch weight (the smallest multiplier over silos and stacked runs)."""
        z = math.inf
        if ctx._ledger.declaration is not None or bound is not None:
            if bound is None:
                raise ValueError(f"release of group {group!r}: its term has no contribution bound (no clip)")
            weight = float(data._weights.max())
            if isinstance(bound, float) and isinstance(std, float):  # the same two float64 operations, unboxed
                product = bound * weight
                z = std / product if product > 0 else math.inf
            else:
                contribution = torch.as_tensor(bound, dtype=torch.float64) * weight
                ratio = torch.as_tensor(std, dtype=torch.float64) / contribution
                z = float(torch.where(contribution > 0, ratio, torch.full_like(ratio, math.inf)).min())
        return Sent(group, data.sampling, data.size, ctx._fed.min_size, noise_multiplier=z)

    def release(self, ctx: Any, group: str, values: torch.Tensor, term: Any, a: torch.Tensor, std: Any,
                offset: torch.Tensor | None, replayed: dict | None) -> tuple:
        """(aggregate, released [N, d], messages): every silo's noised message, the replayed ones
        in their place when replaying, and the server's aggregate of the available silos."""
        weights = term._batch._weights
        mean = values if values.dim() == 2 else torch.einsum("nk,nkd->nd", weights, values)
        scale = ctx._scale(std) if isinstance(std, torch.Tensor) else float(std)
        noise = _draws.randn(mean.shape, ctx._noise_generator(), mean.dtype)  # torch.randn's values, bit for bit
        if noise.device != mean.device:  # drawn from the run's CPU generator, moved to the data
            noise = noise.to(mean.device)
        noise = noise.mul_(scale) if isinstance(scale, float) else noise * scale  # the same products, in place
        messages = gaussian_release(mean, scale, None, None if offset is None else ctx._per_silo_offset(offset),
                                    noise=noise, dtype=mean.dtype)
        released = replayed["messages"] if replayed is not None else messages
        ctx._released[id(released)] = released
        return ctx._aggregate(released, a), released, messages


class ShuffleChannel:
    """Shuffle-DP messages: the silos' per-record vectors go through P_vec with the term's bound;
    the server gets the analyzer's estimate over the number of messages (plus the mean offset)
    and no per-silo message."""

    balls_in_bins: ClassVar[bool] = False

    def terms(self, ctx: Any, data: Any, w: Any, w_old: Any, diff_clip: Any, grad_method: str) -> torch.Tensor:
        """The per-record vectors ``[N, K, d]`` clipped to the clip norm (differences of clipped
        vectors, clipped again to ``diff_clip``)."""
        problem, clip = ctx._problem, ctx._problem.clip
        if w_old is not None:  # a record non-finite at either point: its whole difference is zero
            return _grads.clipped_per_sample_diff(problem, w, w_old, data._x, data._y, clip, diff_clip)
        return _grads.clipped_per_sample(problem, w, data._x, data._y, clip)

    def messages(self, weights: torch.Tensor, a: torch.Tensor) -> int:
        """The records summed by one invocation: every batch member of every available silo."""
        return int(((weights > 0).to(a.dtype) * a[:, None]).sum())

    def sent(self, ctx: Any, group: str, data: Any, std: Any, bound: Any, messages: int) -> Sent:
        """The ledger entry: the protocol parameters (g, b, p, rotate) and the messages summed."""
        params = ctx._shuffle[group]
        return Sent(group, data.sampling, data.size, ctx._fed.min_size, params=params.key(), messages=messages)

    def release(self, ctx: Any, group: str, values: torch.Tensor, term: Any, a: torch.Tensor, std: Any,
                offset: torch.Tensor | None, replayed: dict | None) -> tuple:
        """(aggregate, None, the analyzer's view or None)."""
        bound = torch.clamp(term.bound, min=1e-12) if isinstance(term.bound, torch.Tensor) else max(term.bound, 1e-12)
        agg, view = ctx._shuffle_aggregate(group, values, term._batch._weights, a, bound)
        if offset is not None:
            agg = agg + ctx._offset_mean(offset, a)
        return agg, None, view

    @staticmethod
    def pvec(ctx: Any, term: torch.Tensor, bound: Any, params: BinomialParams, sent: torch.Tensor) -> tuple:
        """P_vec's estimate of the sum of the rows of ``term`` that ``sent`` selects, rotated first
        when ``params.rotate`` (the range becomes :func:`silodp.accounting.pvec.rotated_bound`);
        returns (estimate, the analyzer's view or None). The view, recorded in the transcript, is
        the per-coordinate totals of ones (of the rotated coordinates): all that the shuffled
        labelled bits of :func:`silodp.algorithms.shuffle.pvec_messages` reveal; no per-message
        count is kept."""
        n_msgs = int(sent.sum())
        d = term.shape[-1]
        if params.rotate:
            signs = rotation_signs(d, ctx._gen, term.dtype)
            term, bound = rotate(term, signs), rotated_bound(float(bound), d)
        totals = None
        if ctx._entries is None:
            est = pvec_fast(term, bound, params, ctx._gen, weights=sent)
        else:
            counts = randomize(term, bound, params, ctx._gen)  # what each silo sends (never kept)
            totals = (counts.to(torch.float64) * sent.to(torch.float64).unsqueeze(-1)).sum((0, 1))
            est = analyze(totals, n_msgs, bound, params).to(term.dtype)
        if params.rotate:
            est = unrotate(est, signs, d)
        return est, totals


#: The channels a run may release through (:class:`~silodp.algorithms.context.Context` refuses any
#: other, a subclass included: a plan chooses between them, it cannot bring its own release code).
CHANNELS: tuple[type, ...] = (GaussianChannel, ShuffleChannel)


# -- plans ----------------------------------------------------------------------------------------
class Plan:
    """The privacy contract of the algorithm class ``cls`` (``algo``: one configured instance, for
    what a run needs). Subclasses: one per release kind (module docstring)."""

    Channel: ClassVar[type] = GaussianChannel
    #: the refusal of a private run with neither a target nor explicit noise
    missing_noise: ClassVar[str] = "epsilon: private algorithms need a target epsilon or explicit sigmas"

    def __init__(self, cls: type, algo: Any = None) -> None:
        #: the algorithm class and the configured instance (typed Any: a Config's fields are
        #: instance attributes set from the dataclass)
        self.cls: Any = cls
        self._algo: Any = algo

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.cls.__name__})"

    @property
    def algo(self) -> Any:
        """The configured instance (a run's plan; ``cls.plan`` has none)."""
        if self._algo is None:
            raise TypeError(f"{self!r}: this needs a configured algorithm (use an instance's plan)")
        return self._algo

    # -- the transcript -----------------------------------------------------------------------
    def config_fields(self, problem: Problem, federation: Federation) -> dict:
        """Fields of the class's ``Transcript`` for this run: the shared ones, the problem's and
        the federation's, and the ``Config`` fields marked as entering the transcript
        (:meth:`~silodp.algorithms.config.AlgorithmConfig.transcript_fields`)."""
        a = self.algo
        shared = dict(
            n=federation.min_size, rounds=int(a.rounds), batch_size=int(a.batch_size), clip=problem.clip,
            beta=math.inf if problem.beta is None else problem.beta, num_silos=federation.num_silos,
            silos_per_round=federation.silos_per_round, dimension=problem.dim,
            replacement=self.uses_replacement, balls_in_bins=bool(a.balls_in_bins),
        )
        return {**shared, **a.config.transcript_fields(federation.min_size)}

    def transcript_config(self, problem: Problem, federation: Federation) -> Any:
        """The transcript of a run on ``problem`` and ``federation``."""
        return self.make_transcript(self.config_fields(problem, federation))

    def transcript_names(self) -> tuple[str, ...]:
        """The fields :meth:`transcript` takes: the shared
        :class:`~silodp.algorithms.privacy.TranscriptConfig`'s and the ``Config``'s
        ``param(transcript=True)`` ones."""
        return tuple(f.name for f in dataclasses.fields(self.cls.Transcript))

    def transcript(self, **values: Any) -> Any:
        """The class's transcript of ``values`` (the one public way to build one): the shared
        fields (``n``, ``rounds``, ``batch_size``, ``clip``, ``num_silos``, ...) and the family's own
        (its ``Config``'s ``param(transcript=True)`` fields, validated by the ``Config``; an omitted
        one takes its ``noise_default``). A keyword the class's transcript has not is a ValueError
        naming it (a renamed one, e.g. ``q``, names its new spelling)."""
        names = self.transcript_names()
        unknown = [k for k in values if k not in names]
        if unknown:
            refuse_renamed([k for k in unknown if RENAMED.get(k, ("",))[0] in names])
            raise ValueError(f"{unknown[0]}: not a transcript field of {self.cls.__name__} (fields: {sorted(names)})")
        return self.make_transcript(values)

    def make_transcript(self, values: dict) -> Any:
        """The transcript of ``values``, all of them fields of it (checked by :meth:`transcript`)."""
        return self.cls.Transcript(**values)

    def noise_transcript(self, values: dict) -> Any:
        """The transcript of ``values`` (``silodp noise --algorithm``'s flags) through
        :meth:`transcript`; values it has no field for are ignored."""
        names = self.transcript_names()
        return self.transcript(**{k: v for k, v in values.items() if k in names})

    def transcript_signature(self, cfg: Any) -> str:
        """What ``cfg`` determines for this class (its declaration and reference noise): a field
        that moves it applies to the class (``silodp noise --algorithm`` refuses the others)."""
        out = repr(self.signature_declaration(cfg))
        try:
            return out + repr(self.noise_shape(cfg, 1.0, 1e-5))
        except ValueError as exc:
            return out + str(exc)

    def signature_declaration(self, cfg: Any) -> list:
        """The declaration at reference noise (all noise keys 1)."""
        return self.declaration(cfg, {k: 1.0 for k in self.cls.noise_keys})

    # -- the declaration ----------------------------------------------------------------------
    def sampling(self, cfg: Any) -> BatchSampling:
        """The batch sampling of the minibatches the class draws (:func:`batch_sampling`)."""
        return batch_sampling(cfg)

    @property
    def uses_replacement(self) -> bool:
        """Whether the run's minibatches are drawn with replacement: ``replacement``, else the
        class's ``default_replacement``."""
        a = self.algo
        return bool(self.cls.default_replacement if a.replacement is None else a.replacement)

    @property
    def picks_uniform(self) -> bool:
        """Whether the run's ``w_priv`` is a uniformly random iterate: the algorithm's own rule
        (``output`` None or "random", e.g. Alg 3 line 17) or the last iterate (``output="last"``,
        post-processing)."""
        return bool(self.cls.uniform_output) and self.algo.output != "last"

    def declaration(self, cfg: Any, sigmas: dict) -> list:
        """What one silo releases over the whole run, one release per message group (a
        non-private algorithm releases its messages without noise)."""
        return [GaussianRelease(group, 1, 0.0, BatchSampling.FULL, 1, 1) for group in self.cls.message_groups]

    def shuffle_declaration(self, cfg: Any, budgets: dict | None, params: dict | None = None) -> list:
        """Shuffle-DP's protocol invocations (:class:`ShufflePlan`; none here)."""
        raise NotImplementedError(f"{self.cls.__name__} declares no shuffle invocations")

    def run_declaration(self, problem: Problem, federation: Federation, sigmas: dict, shuffle: dict | None) -> list | None:
        """The releases this run must stay within (None: not private, nothing to check)."""
        if not self.cls.private:
            return None
        return self.declaration(self.transcript_config(problem, federation), sigmas)

    def paper_noise(self, cfg: Any, epsilon: float, delta: float) -> dict:
        """The paper's closed-form noise (``paper_formula``; ValueError where the paper gives none)."""
        cls = self.cls
        if cls.paper_formula is None:
            raise ValueError(f"the paper gives no closed-form noise for {cls.name!r}; use method='tight'")
        return {k: float(v) for k, v in cls.paper_formula(cfg, epsilon, delta).items() if k in cls.noise_keys}

    def noise_shape(self, cfg: Any, epsilon: float, delta: float) -> dict:
        """The noise *shape* a tight calibration scales: the paper's, else each message's
        contribution bound (noise multiplier 1 at scale 1)."""
        try:
            return self.paper_noise(cfg, epsilon, delta)
        except ValueError:
            return {"sigma": cfg.clip / cfg.batch_size}

    # -- calibration and certificates ---------------------------------------------------------
    def calibrate_target(self, cfg: Any, epsilon: float, delta: float, method: str,
                         accountant: str | None) -> NoiseCalibration:
        """The noise of a transcript at (``epsilon``, ``delta``) (validated by the caller,
        :func:`silodp.algorithms.privacy.calibrate_algorithm`): nothing for a non-private class."""
        return NoiseCalibration(self.cls.name, {}, math.inf, delta, "none", method)

    def noise_report(self, cfg: Any, epsilon: float, delta: float, method: str = "both",
                     accountant: str | None = None) -> dict:
        """The noise for (``epsilon``, ``delta``) as plain data (``silodp noise --algorithm``):
        ``method`` "tight" | "paper", or "both" (:func:`silodp.algorithms.privacy.paper_vs_tight`)."""
        from .privacy import calibrate_algorithm, paper_vs_tight

        if method == "both":
            return paper_vs_tight(self.cls, cfg, epsilon, delta, accountant)
        cal = calibrate_algorithm(self.cls, cfg, epsilon, delta, method, accountant)
        return {"algorithm": cal.algorithm, "method": cal.method, "sigmas": cal.sigmas, "epsilon": cal.epsilon,
                "delta": cal.delta, "accountant": cal.accountant, "shuffle": cal.shuffle}

    def calibrate(self, cfg: Any, epsilon: float, delta: float) -> NoiseCalibration:
        """The noise of this run at the target: the declaration calibrated by
        :func:`silodp.algorithms.privacy.calibrate_algorithm` with the run's ``calibration`` and
        ``accountant``."""
        from .privacy import calibrate_algorithm

        return calibrate_algorithm(self.cls, cfg, epsilon, delta, method=self.algo.calibration,
                                   accountant=self.algo.accountant)

    def calibration_settings(self) -> dict:
        """The parameters besides the transcript, the target and ``calibration`` that
        :meth:`calibrate` and :meth:`certify_noise` read (none by default): silodp.experiments
        shares one calibration between the runs that agree on them."""
        return {}

    def certify_noise(self, cfg: Any, sigmas: dict, delta: float) -> float:
        """What Gaussian noise ``sigmas`` certifies at ``delta``: the declaration by
        :func:`silodp.algorithms.privacy.certify` (cached) with the run's ``accountant`` (the tightest when None)."""
        from .privacy import certify

        return certify(self.cls, cfg, sigmas, delta, self.algo.accountant)[0]

    def targeted_epsilon(self, cfg: Any, sigmas: dict, delta: float, certified: float) -> float:
        """The guarantee a target epsilon was met for by noise ``sigmas`` whose certificate is
        ``certified``: the certificate itself."""
        return certified

    def noise_details(self, cfg: Any, sigmas: dict, calibration: NoiseCalibration | None) -> dict:
        """Family-specific facts about the noise that ran (``RunResult.details``): the
        calibration's ``details``, {} by default."""
        return {} if calibration is None else dict(calibration.details)

    def validate(self, problem: Problem, federation: Federation) -> None:
        """The checks that need the problem and the federation (the rest: ``Config``, again, as
        parameters may have been set after construction)."""
        a = self.algo
        a.config  # noqa: B018  (validates the current parameters)
        if a.step_size is None and problem.beta is None:
            raise ValueError("step_size: required when the problem has no smoothness constant beta")
        if self.cls.private and problem.clip is None:
            raise ValueError("clip: private algorithms need a finite per-sample clip (the Lipschitz bound L)")
        if self.cls.private and a.epsilon is None and self.explicit() is None:
            raise ValueError(self.missing_noise)
        if a.w0 is not None and tuple(a.w0.shape) != (problem.dim,):
            raise ValueError(f"w0: must have shape ({problem.dim},), got {tuple(a.w0.shape)}")

    def resolve(self, problem: Problem, federation: Federation) -> tuple:
        """``(sigmas, epsilon, delta, shuffle, details)`` of this run: explicit, calibrated or
        non-private."""
        a = self.algo
        if not self.cls.private:
            return {k: 0.0 for k in self.cls.noise_keys}, math.inf, None, None, {}
        explicit = self.explicit()
        if explicit is not None:
            sigmas, eps, delta, shuffle = self.certify_explicit(problem, federation, explicit)
            return sigmas, eps, delta, shuffle, self.noise_details(self.transcript_config(problem, federation), sigmas, None)
        cfg = self.transcript_config(problem, federation)
        delta = a.delta if a.delta is not None else 1.0 / federation.min_size ** 2
        cal = self.calibrate(cfg, float(a.epsilon), float(delta))
        sigmas = dict(cal.sigmas)
        return sigmas, float(cal.epsilon), float(cal.delta), self.shuffle_of(cal), self.noise_details(cfg, sigmas, cal)

    def explicit(self) -> dict | None:
        """The run's explicit noise parameters (None: calibrate to the target)."""
        return self.algo.sigmas

    def shuffle_of(self, cal: NoiseCalibration) -> dict | None:
        """The protocol parameters per group of a calibration (None: not shuffled)."""
        return None

    def certify_explicit(self, problem: Problem, federation: Federation, explicit: dict) -> tuple:
        """Explicit noise: the certificate is what it certifies (by the accountant chosen, else
        the tightest), at ``delta`` (default 1 / n^2), never the request's ``epsilon``; a run whose
        parameters certify more than a requested ``epsilon`` warns."""
        a = self.algo
        delta = float(a.delta) if a.delta is not None else 1.0 / federation.min_size ** 2
        sigmas, eps, shuffle = self.certify_parameters(problem, federation, explicit, delta)
        if a.epsilon is not None and not eps <= float(a.epsilon) * (1 + 1e-9):
            warnings.warn(f"{a.name}: the explicit noise certifies epsilon {eps:.6g} at delta {delta:.3g}, "
                          f"above the requested {float(a.epsilon):.6g}", stacklevel=5)
        return sigmas, float(eps), delta, shuffle

    def certify_parameters(self, problem: Problem, federation: Federation, explicit: dict, delta: float) -> tuple:
        """(sigmas, epsilon, shuffle) of explicit noise standard deviations."""
        keys = self.cls.noise_keys
        missing = [k for k in keys if k not in explicit]
        if missing:
            raise ValueError(f"sigmas: missing keys {missing} (need {list(keys)})")
        bad = [k for k in keys if not float(explicit[k]) >= 0]
        if bad:
            raise ValueError(f"sigmas: must be >= 0, got {[(k, explicit[k]) for k in bad]}")
        sigmas = {k: float(explicit[k]) for k in keys}
        return sigmas, self.certify_noise(self.transcript_config(problem, federation), sigmas, delta), None

    # -- what callers ask of the noise -------------------------------------------------------
    def noise_arguments(self, sigmas: dict, shuffle: dict | None, scale: float = 1.0) -> dict:
        """The constructor arguments that run the class with this noise: the standard deviations
        ``sigmas`` times ``scale`` (a clip-1 calibration at the run's clip) as ``sigmas``."""
        return {"sigmas": {k: float(v) * scale for k, v in sigmas.items()}}

    def noise_payload(self, sigmas: dict, shuffle: dict | None) -> dict | None:
        """The run's noise as plain data (``silodp run --json``'s ``noise``): the standard
        deviations, ``None`` for an infinite one."""
        return {k: (v if math.isfinite(v) else None) for k, v in sigmas.items()}

    def releases_gaussian_messages(self) -> bool:
        """Whether each silo releases its own Gaussian message (noise std over a contribution
        bound), so that a replay on a neighbouring dataset compares messages: what the audit game,
        the audit mutations and the halved-noise and sensitivity conformance checks act on."""
        return bool(self.cls.private)

    def certify_stored(self, cfg: Any, stored: dict, delta: float, target: float) -> float:
        """What a stored calibration's noise (``stored["sigmas"]``) certifies for the transcript
        ``cfg`` at ``delta`` (:meth:`certify_noise`, with this configured plan's accountant)."""
        return self.certify_noise(cfg, stored["sigmas"], delta)

    # -- the channel --------------------------------------------------------------------------
    def channel(self) -> Any:
        """The channel a run of this plan releases through."""
        return self.Channel()


class GaussianPlan(Plan):
    """ISRL-DP Gaussian messages: the family's ``declare_gaussian`` given the noise standard
    deviations (keys ``noise_keys``), calibrated by the paper's formula or the tight scaling
    (:func:`silodp.algorithms.privacy.calibrate_algorithm`), certified by the registered accountants."""

    def declaration(self, cfg: Any, sigmas: dict) -> list:
        """The family's Gaussian releases at noise ``sigmas`` (validated: the class's keys, >= 0)."""
        cls = self.cls
        if not cls.private:
            return super().declaration(cfg, sigmas)
        missing = [k for k in cls.noise_keys if k not in sigmas]
        if missing:
            raise ValueError(f"sigmas for {cls.name} must contain {cls.noise_keys}, missing {missing}")
        bad = [(k, v) for k, v in sigmas.items() if not float(v) >= 0]
        if bad:
            raise ValueError(f"sigmas: must be >= 0, got {bad}")
        return self.declare(cfg, {k: float(v) for k, v in sigmas.items()})

    def declare(self, cfg: Any, sigmas: dict) -> list:
        """The Gaussian releases of one silo: the family's ``declare_gaussian``."""
        return _family(self.cls, "declare_gaussian")(cfg, sigmas)

    def calibrate_target(self, cfg: Any, epsilon: float, delta: float, method: str,
                         accountant: str | None) -> NoiseCalibration:
        """``paper``: the paper's closed-form noise and what it really certifies; ``tight``: the
        noise shape scaled by the smallest factor the accountant certifies (rounded toward more noise)."""
        from silodp.accounting import REPLACE_ONE, CalibrationMethod, tightest_calibration
        from silodp.accounting.spec import AccountantSpec

        from .privacy import _registered, certify, privacy_event

        cls = self.cls
        if not cls.private:
            return super().calibrate_target(cfg, epsilon, delta, method, accountant)
        if method == CalibrationMethod.PAPER.value:
            sig = self.paper_noise(cfg, epsilon, delta)
            certified, acc = certify(cls, cfg, sig, delta, accountant)
            spec = AccountantSpec.of(accountant) if accountant is not None else _registered(acc)
            return NoiseCalibration(cls.name, sig, certified, delta, acc, method, spec=spec)
        ref = self.noise_shape(cfg, epsilon, delta)

        def scaled(c: float) -> dict[str, float]:
            return {k: v * c for k, v in ref.items()}

        cal = tightest_calibration(lambda c: privacy_event(cls, cfg, scaled(c)), epsilon, delta, accountant,
                                   REPLACE_ONE)
        return NoiseCalibration(cls.name, scaled(cal.noise_multiplier), cal.epsilon, delta, cal.accountant, method,
                                spec=cal.spec)



class ShufflePlan(Plan):
    """Shuffle-DP through the binomial protocol P_vec: the family's ``declare_shuffle`` (the
    protocol invocations and the paper's per-invocation budgets), the protocol's parameters
    calibrated and certified by the exact P_vec certificates of the whole transcript
    (:func:`silodp.algorithms.privacy.certify_shuffle`), released through :class:`ShuffleChannel`."""

    Channel = ShuffleChannel
    missing_noise = "epsilon: shuffle algorithms need a target epsilon or explicit shuffle_params"
    #: Share of delta that random availability's floor of summed silos may charge (its tail).
    availability_share: ClassVar[float] = 0.01

    def transcript_config(self, problem: Problem, federation: Federation) -> Any:
        """The run's transcript with the floor of summed silos (:meth:`summed_floor`)."""
        cfg = super().transcript_config(problem, federation)
        return dataclasses.replace(cfg, **self.summed_floor(cfg, federation))

    def summed_floor(self, cfg: Any, federation: Federation) -> dict:
        """Under random availability (Assumption 6): declare the fewest silos whose messages are
        summed, :func:`silodp.accounting.distributed.availability_floor` over every invocation
        with tail :attr:`availability_share` delta, charged to delta; under secure aggregation,
        its reconstruction threshold (no sum of fewer is revealed: nothing charged); {} otherwise."""
        if not self.cls.private:
            return {}
        if federation.reconstruction_threshold is not None:
            return {"silos_per_round": federation.reconstruction_threshold, "charged_delta": 0.0}
        if federation.availability != "random":
            return {}
        from silodp.accounting.distributed import availability_floor

        a = self.algo
        delta = a.delta if a.delta is not None else 1.0 / federation.min_size ** 2
        draws = sum(r.count for r in _family(self.cls, "declare_shuffle")(cfg, None, None))
        floor, charge = availability_floor(federation.num_silos, int(federation.silos_per_round or federation.num_silos),
                                           max(draws, 1),
                                           self.availability_share * delta)
        return {"silos_per_round": floor, "charged_delta": charge}

    def declaration(self, cfg: Any, sigmas: dict) -> list:
        """The protocol invocations at the budgets ``sigmas`` = ``{"epsilon", "delta"}``."""
        if not self.cls.private:
            return super().declaration(cfg, sigmas)
        return self.shuffle_declaration(cfg, sigmas)

    def signature_declaration(self, cfg: Any) -> list:
        return self.shuffle_declaration(cfg, {"epsilon": 1.0, "delta": 1e-5})

    def shuffle_declaration(self, cfg: Any, budgets: dict | None, params: dict | None = None) -> list:
        """``declare_shuffle`` in ``cfg.dimension`` coordinates: the paper's per-invocation budgets
        (``budgets``: the target ``{"epsilon", "delta"}``; None: the structure only), the deltas,
        where all the invocations a record can enter would spend more than ``budgets["delta"]``
        (the paper's budgets assume each record is used once), shrunk so that they spend half of it.
        With ``params`` (per group (g, b, p, rotate)) attached, each invocation's epsilon is what
        those parameters certify at its delta for one message
        (:func:`silodp.accounting.pvec.invocation_epsilon`), so that the generic event of
        :func:`~silodp.accounting.releases.releases_event` stays sound."""
        eps, dl = (budgets["epsilon"], budgets["delta"]) if budgets else (None, None)
        return shuffle_invocations(_family(self.cls, "declare_shuffle")(cfg, eps, dl), cfg.dimension, dl, params)

    def run_declaration(self, problem: Problem, federation: Federation, sigmas: dict, shuffle: dict | None) -> list | None:
        if not self.cls.private:
            return None
        cfg = self.transcript_config(problem, federation)
        return self.shuffle_declaration(cfg, None, {g: p.key() for g, p in (shuffle or {}).items()})

    def calibrate_target(self, cfg: Any, epsilon: float, delta: float, method: str,
                         accountant: str | None) -> NoiseCalibration:
        """The binomial protocol's parameters of every group (:func:`silodp.algorithms.privacy._calibrate_shuffle`)."""
        from silodp.accounting import CalibrationMethod

        from .privacy import _calibrate_shuffle

        if not self.cls.private:
            return super().calibrate_target(cfg, epsilon, delta, method, accountant)
        return _calibrate_shuffle(self.cls, cfg, epsilon, delta, CalibrationMethod(method), accountant)

    def explicit(self) -> dict | None:
        return self.algo.shuffle_params

    def noise_arguments(self, sigmas: dict, shuffle: dict | None, scale: float = 1.0) -> dict:
        """The binomial protocol's (g, b, p) per message group, as they are: P_vec normalizes every
        message by its bound, so they do not depend on the clip (ValueError without them)."""
        if not shuffle:
            raise ValueError("shuffle_params: a shuffle-DP run needs the protocol parameters per message group, "
                             "got none")
        return {"shuffle_params": shuffle}

    def noise_payload(self, sigmas: dict, shuffle: dict | None) -> dict | None:
        """The protocol parameters per message group."""
        return shuffle

    def releases_gaussian_messages(self) -> bool:
        """No: the silos' per-record vectors go through P_vec, the server sees the shuffled sum."""
        return False

    def certify_stored(self, cfg: Any, stored: dict, delta: float, target: float) -> float:
        """The P_vec certificate of the stored (g, b, p, rotate) per message group
        (:func:`silodp.algorithms.privacy.certify_shuffle`), by the stored accountant at the
        ``target``'s grid."""
        from .privacy import certify_shuffle

        params = {grp: (v["g"], v["b"], v["p"], v["rotate"]) for grp, v in stored["shuffle"].items()}
        return certify_shuffle(self.cls, cfg, params, delta, stored["accountant"], target=target)[0]

    def shuffle_of(self, cal: NoiseCalibration) -> dict | None:
        return shuffle_groups(cal.shuffle, self.cls.message_groups)

    def certify_parameters(self, problem: Problem, federation: Federation, explicit: dict, delta: float) -> tuple:
        """(no sigmas, what the explicit protocol parameters certify, the parameters per group)."""
        from .privacy import certify_shuffle

        a = self.algo
        shuffle = shuffle_groups(explicit, self.cls.message_groups)
        eps, _ = certify_shuffle(self.cls, self.transcript_config(problem, federation),
                                 {g: p.key() for g, p in shuffle.items()}, delta, a.accountant, a.epsilon)
        return {}, eps, shuffle


class ParticipationPlan(GaussianPlan):
    """DP-SCAFFOLD (Noble, Bellet & Dieuleveut 2022, arXiv:2111.09278, Alg 1): the transcript is a
    :class:`~silodp.accounting.scaffold.ScaffoldConfig`; the declaration is what one user
    releases toward the server in the worst case (sampled every round); a target is met toward
    ``privacy_against`` (:func:`silodp.accounting.scaffold.scaffold_sigma_g`: user sampling's
    participation mixtures toward a third party); the certificate is toward the server, both
    guarantees in the run's details. The plan of a non-private twin (SCAFFOLD, FedAvg) reports
    the generic noiseless report."""

    def transcript_config(self, problem: Problem, federation: Federation) -> Any:
        a = self.algo
        n = federation.min_size
        return self.make_transcript(dict(num_silos=federation.num_silos, n=n, rounds=int(a.rounds),
                                         local_steps=int(a.local_steps), user_sampling=float(a.user_sampling),
                                         data_sampling=a.batch(federation) / n, clip=problem.clip,
                                         warm_steps=a.n_warm()))

    def transcript_names(self) -> tuple[str, ...]:
        """The silos, records, rounds, data sampling and clip, and the ``Config``'s transcript fields."""
        from .config import own_fields

        own = tuple(f.name for f in own_fields(self.cls.Config) if f.metadata["transcript"])
        return ("num_silos", "n", "rounds", "clip") + tuple(dict.fromkeys(own + ("data_sampling",)))

    def make_transcript(self, values: dict) -> Any:
        """A :class:`~silodp.accounting.scaffold.ScaffoldConfig` (users, records, rounds, local
        steps, both samplings, clip, warm steps), the family's own values validated by its ``Config``."""
        from silodp.accounting.scaffold import ScaffoldConfig

        from .config import own_fields

        own = {f.name: values[f.name] for f in own_fields(self.cls.Config)
               if f.metadata["transcript"] and f.name in values}
        config = self.cls.Config(**own)
        return ScaffoldConfig(values["num_silos"], values["n"], values["rounds"], config.local_steps,
                              config.user_sampling, values["data_sampling"], values["clip"],
                              values["warm_steps"] if "warm_steps" in own else config.warm())

    def transcript_signature(self, cfg: Any) -> str:
        """Everything in the ScaffoldConfig (it determines both guarantees)."""
        return repr(cfg)

    def noise_report(self, cfg: Any, epsilon: float, delta: float, method: str = "both",
                     accountant: str | None = None) -> dict:
        """sigma_g toward the server and toward a third party
        (:func:`silodp.accounting.scaffold.noise_report`), by ``accountant`` (default ``pld``): one
        whose ``supports()`` accepts the sampling-pattern mixtures of the third-party guarantee,
        else a ValueError naming those that do."""
        from silodp.accounting.scaffold import noise_report

        if not self.cls.private:
            return super().noise_report(cfg, epsilon, delta, method, accountant)
        report = noise_report(epsilon, delta, num_users=cfg.num_users, records_per_user=cfg.records_per_user,
                              rounds=cfg.rounds, local_steps=cfg.local_steps, user_sampling=cfg.user_sampling,
                              data_sampling=cfg.data_sampling, clip=cfg.clip, warm_steps=cfg.warm_steps,
                              accountant=accountant or "pld")
        return {**report, "algorithm": self.cls.name}

    def sampling(self, cfg: Any) -> BatchSampling:
        """Every local step draws a fresh uniform subset of m records (Noble et al. Alg 1)."""
        return BatchSampling.SUBSET

    def declare(self, cfg: Any, sigmas: dict) -> list:
        """K T noisy gradients "grad" (and the warm start's "warm"), each the mean of m records
        of a fresh subset, multiplier sigma / (C / m) = 2 sigma_g; the same event as
        :func:`silodp.accounting.scaffold.server_event`."""
        m, n = cfg.batch_size, cfg.records_per_user
        z = sigmas["sigma"] / (cfg.clip / m)
        out = [GaussianRelease("grad", cfg.local_steps * cfg.rounds, z, BatchSampling.SUBSET, m, n)]
        if cfg.warm_steps:
            out.append(GaussianRelease("warm", cfg.warm_steps, z, BatchSampling.SUBSET, m, n))
        return out

    def validate(self, problem: Problem, federation: Federation) -> None:
        super().validate(problem, federation)
        m = self.algo.batch(federation)
        if m > federation.min_size:
            raise ValueError(f"batch_size: must be <= the smallest user size {federation.min_size}, got {m}")
        if federation.silos_per_round != federation.num_silos:
            raise ValueError("silos_per_round: DP-SCAFFOLD samples users itself (user_sampling); use all silos")

    def calibrate(self, cfg: Any, epsilon: float, delta: float) -> NoiseCalibration:
        """sigma_g toward ``privacy_against`` (:func:`silodp.accounting.scaffold.scaffold_sigma_g`,
        accountant pld unless chosen); the certificate is toward the server, both in ``details``."""
        from silodp.accounting.scaffold import certified_epsilon, scaffold_sigma_g
        from silodp.accounting.spec import AccountantSpec

        a = self.algo
        cal = scaffold_sigma_g(cfg, epsilon, delta, a.privacy_against, a.participation, a.accountant or "pld")
        eps = {o: certified_epsilon(cfg, cal.sigma_g, delta, o, a.participation) for o in ("server", "third-party")}
        details = {"sigma_g": cal.sigma_g, "epsilon_server": eps["server"], "epsilon_third_party": eps["third-party"]}
        return NoiseCalibration(a.name, {"sigma": cfg.noise_std(cal.sigma_g)}, eps["server"], delta,
                                cal.accountant, a.calibration, details=details,
                                spec=AccountantSpec.of(a.accountant or "pld"))

    def calibration_settings(self) -> dict:
        """The observer a target calibrates toward and the rounds charged toward the server."""
        return {"privacy_against": self.algo.privacy_against, "participation": self.algo.participation}

    def certify_noise(self, cfg: Any, sigmas: dict, delta: float) -> float:
        """The guarantee toward the server of noise std ``sigmas["sigma"]`` (sigma_g = sigma over
        the std of sigma_g = 1; :func:`silodp.accounting.scaffold.certified_epsilon` with the run's
        ``participation``, accountant pld unless chosen, evaluated on that accountant's own grid).
        Noise outside the accountant's domain (none, or tiny): the declaration's certificate (the
        worst-case server event, which dominates), ``inf`` for none."""
        from silodp.accounting.scaffold import certified_epsilon
        from silodp.accounting.spec import AccountantSpec

        from .privacy import certify

        a = self.algo
        accountant = AccountantSpec.of(a.accountant or "pld").name
        try:
            return certified_epsilon(cfg, sigmas["sigma"] / cfg.noise_std(1.0), delta, "server", a.participation,
                                     accountant)
        except ValueError:
            return certify(self.cls, cfg, sigmas, delta)[0]

    def targeted_epsilon(self, cfg: Any, sigmas: dict, delta: float, certified: float) -> float:
        """The guarantee toward ``privacy_against`` (both: the larger), ``certified`` toward the server."""
        from silodp.accounting.scaffold import certified_epsilon

        a = self.algo
        against = ("server", "third-party") if a.privacy_against == "both" else (a.privacy_against,)
        return max(certified if o == "server" else certified_epsilon(cfg, sigmas["sigma"] / cfg.noise_std(1.0), delta,
                                                                     o, a.participation) for o in against)

    def noise_details(self, cfg: Any, sigmas: dict, calibration: NoiseCalibration | None) -> dict:
        """sigma_g (explicit noise: sigma over the noise std of sigma_g = 1), the effective batch m,
        and the guarantees toward each observer (None where not computed)."""
        out = {"sigma_g": sigmas["sigma"] / cfg.noise_std(1.0), "epsilon_server": None, "epsilon_third_party": None}
        out.update(super().noise_details(cfg, sigmas, calibration))
        return {**out, "batch_size": cfg.batch_size}


#: the derived transcript class of each algorithm class (one class object, so transcripts compare equal)
_TRANSCRIPTS: dict = {}


def derived_transcript(cls: Any) -> type:
    """The transcript dataclass of an algorithm class that names none: the shared
    :class:`~silodp.algorithms.privacy.TranscriptConfig` plus the ``Config`` fields marked
    ``param(transcript=True)`` that it lacks (default: the field's ``noise_default``, else its
    default), so a family's own transcript field needs no parallel ``Transcript`` class."""
    from .config import own_fields

    shared = {f.name for f in dataclasses.fields(TranscriptConfig)}
    extra = tuple((f.name, f.type, f.metadata["noise_default"] if f.metadata["noise_default"] is not None else f.default)
                  for f in own_fields(cls.Config) if f.metadata["transcript"] and f.name not in shared)
    if not extra:
        return TranscriptConfig
    key = (cls.Config, extra)
    if key not in _TRANSCRIPTS:
        config = cls.Config

        def __post_init__(self: Any) -> None:
            """The shared checks, then the family's fields by its ``Config`` (a None only where
            the field's transcript default is None)."""
            TranscriptConfig.__post_init__(self)
            own = {name: getattr(self, name) for name, _, _ in extra}
            for name, _, default in extra:
                if own[name] is None and default is not None:
                    raise ValueError(f"{name}: a transcript needs a value, got None")
            config(**own)

        fields = [(name, kind, dataclasses.field(default=default)) for name, kind, default in extra]
        made = dataclasses.make_dataclass(f"{cls.Config.__name__}Transcript", fields, bases=(TranscriptConfig,),
                                          frozen=True, namespace={"__post_init__": __post_init__})
        made.__module__ = cls.Config.__module__
        made.__doc__ = f"The shared transcript and {cls.Config.__name__}'s own transcript fields (derived)."
        _TRANSCRIPTS[key] = made
    return _TRANSCRIPTS[key]


class TranscriptOf:
    """``cls.Transcript`` where a class names none: :func:`derived_transcript` (a class may still
    name one, e.g. DP-SCAFFOLD's :class:`~silodp.accounting.scaffold.ScaffoldConfig`)."""

    def __get__(self, algo: Any, cls: Any) -> type:
        return derived_transcript(cls)


class PlanOf:
    """``cls.plan``: the plan of the class; ``algo.plan``: the plan of the configured instance."""

    def __get__(self, algo: Any, cls: Any) -> Plan:
        return cls.Plan(cls, algo)  # type: ignore[no-any-return]
