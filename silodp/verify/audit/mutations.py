"""Deliberately broken variants of the library's mechanisms: the privacy bugs an audit must catch.

Each :class:`Mutation` keeps the *claim* of the correct mechanism (the accounting layer's
certified epsilon for the intended configuration) and changes what is actually released. It acts
in both games:

* vectorized (:func:`silodp.verify.audit.game.build_plan`): a clip function, a noise factor per
  release, the minibatch sampling, or one noise draw shared by all releases;
* end to end: :meth:`Mutation.context` is the channel instrument
  (:mod:`silodp.verify.instruments`) that breaks the real algorithm the same way (pass it as
  ``algo.run(..., context=mutation.context())``).

The bugs (the first five are found in the two papers' public code, see issue 7):

============================== ======================================================================
``halve-noise``                 noise std halved after calibration
``per-layer-clip``              each parameter tensor clipped to L separately (norm up to
                                sqrt(#tensors) L), accounted as if the whole gradient were clipped
``median-clip``                 clip threshold = median per-sample gradient norm of the batch
                                (data-dependent), noise calibrated to that threshold
``missing-k``                   noise calibrated for the batch *average* (sensitivity 2L/K) added
                                to the batch *sum*: the released average has std sigma / K
``spider-sensitivity``          SPIDER/SVRG differences noised as if their sensitivity were
                                2L/K instead of 4L/K: their std is halved
``shared-seed``                 every release (all rounds, all silos) draws the same noise
``with-replacement-as-disjoint`` minibatches drawn with replacement, accounted as disjoint
                                batches (parallel composition)
``noise-on-average-not-sum``    each silo adds sigma / sqrt(M): calibrated so that the *average* of
                                M silos' messages has the noise one message needs (valid only behind
                                secure aggregation; the ISRL-DP server sees every summand)
============================== ======================================================================

Shuffle-DP bugs (:data:`SDP_MUTATIONS`, audited end to end by :func:`silodp.verify.audit.sdp.audit_sdp`):

============================== ======================================================================
``sdp-reuse-charged-once``      records reused across epochs (R K > n, here 16 rounds of full
                                batches) charged one P_vec invocation (one round's certificate)
``sdp-norm-unclipped``          messages not clipped to L before P_vec: only the per-coordinate
                                clamp to the rotated range gamma bounds them (l2 norm up to
                                gamma sqrt(d'), not L), while the claim is the l2-aware certificate
============================== ======================================================================

Dropping the rotation is *not* among them: the certificate holds for every orthogonal map and for
none (:mod:`silodp.accounting.pvec_l2`: clamping is non-expansive), so an unrotated message at the
rotated range is clamped (biased), not less private (``tests/accounting/test_pvec_l2.py`` checks
the level shifts of rotated and unrotated messages against the certificate's bounds).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import torch

from silodp.algorithms import grads as _grads
from silodp.algorithms.models import PARAMETRIC
from silodp.verify.audit.game import ClipFn, clip_whole
from silodp.verify.instruments import mutated_context, unclipped_trials

CLIPS = ("whole", "per-layer", "median")


def clip_per_layer(model, clip: float) -> ClipFn:
    """Clip every parameter tensor (each layer's weight and bias) to ``clip`` separately."""
    slices = [s for layer, pair in zip(model.layers, model.slices) if isinstance(layer, PARAMETRIC) for s in pair]

    def fn(raw: torch.Tensor):
        out = raw.clone()
        for sl in slices:
            out[..., sl] = _grads.clip_rows(raw[..., sl], clip)
        return out, float(clip)

    return fn


def clip_median(raw: torch.Tensor):
    """Clip to the median per-sample gradient norm of the batch: of all rows of ``raw`` ``[K, d]``
    (one silo's batch), or of each silo's rows of ``raw`` ``[N, K, d]`` (thresholds ``[N]``)."""
    norms = raw.norm(dim=-1)
    if raw.dim() == 3:
        threshold = norms.median(dim=-1).values
        return _grads.clip_rows(raw, threshold[:, None]), threshold.clamp_min(1e-300)
    threshold = float(norms.flatten().median())
    return _grads.clip_rows(raw, threshold), max(threshold, 1e-300)


@dataclasses.dataclass(frozen=True)
class Mutation:
    """A privacy bug: what changes in the released messages while the claim stays the same.

    ``noise_factor(group, batch_size, silos_per_round)`` scales a release's noise std;
    ``clip`` is "whole" | "per-layer" | "median"; ``params`` are algorithm parameters the broken
    code uses (the claim is calibrated without them); ``shared_noise``: one draw for all releases.
    ``algorithm`` names the algorithm of the scenario where docs/audit.md reports its detection.
    """

    name: str
    description: str
    algorithm: str
    noise_factor: Callable[[str, int, int], float] | None = None
    clip: str = "whole"
    params: dict = dataclasses.field(default_factory=dict)
    shared_noise: bool = False
    groups: tuple[str, ...] | None = None

    def clip_fn(self, problem) -> ClipFn:
        if self.clip == "per-layer":
            return clip_per_layer(problem.model, problem.clip)
        if self.clip == "median":
            return clip_median
        return clip_whole(problem.clip)

    def check(self, algo) -> None:
        """ValueError when the bug has nothing to act on in ``algo``."""
        if not algo.plan.releases_gaussian_messages():
            raise ValueError(f"mutation: {self.name!r} applies to Gaussian ISRL-DP algorithms, not {algo.name!r}")
        if self.groups is not None and not set(self.groups) & set(algo.message_groups):
            raise ValueError(f"mutation: {self.name!r} needs a message group in {self.groups}; "
                             f"{algo.name!r} sends {algo.message_groups}")

    def context(self, checked: bool = False) -> type:
        """The channel that realizes this bug in a real run (:func:`silodp.verify.instruments.mutated_context`;
        ``checked``: with the run-time check of the declaration on)."""
        return mutated_context(self, checked)


MUTATIONS: dict[str, Mutation] = {m.name: m for m in (
    Mutation("halve-noise", "noise standard deviation halved after calibration", "isrl-prox-sgd",
             noise_factor=lambda group, k, m: 0.5),
    Mutation("per-layer-clip", "each parameter tensor clipped to L (norm up to sqrt(#tensors) L), accounted "
             "as whole-gradient clipping to L", "isrl-prox-sgd", clip="per-layer"),
    Mutation("median-clip", "clip threshold and noise scale set to the batch's median gradient norm "
             "(data-dependent)", "isrl-prox-sgd", clip="median"),
    Mutation("missing-k", "noise calibrated for the batch average (2L/K) added to the batch sum: the "
             "released average has std sigma/K", "isrl-prox-sgd", noise_factor=lambda group, k, m: 1.0 / k),
    Mutation("spider-sensitivity", "SPIDER differences noised as if their sensitivity were 2L/K, not 4L/K "
             "(std halved)", "isrl-spider", noise_factor=lambda group, k, m: 0.5 if group == "diff" else 1.0,
             groups=("diff",)),
    Mutation("shared-seed", "every release of every silo and round draws the same noise", "isrl-prox-sgd",
             shared_noise=True),
    Mutation("with-replacement-as-disjoint", "minibatches drawn with replacement, accounted as disjoint "
             "batches (parallel composition)", "isrl-prox-sgd", params={"replacement": True}),
    Mutation("noise-on-average-not-sum", "each silo adds sigma/sqrt(M), so that the average over M silos "
             "carries the noise one message needs", "isrl-prox-sgd",
             noise_factor=lambda group, k, m: 1.0 / math.sqrt(m)),
)}


@dataclasses.dataclass(frozen=True)
class SdpMutation:
    """A shuffle-DP privacy bug: the claim is calibrated with ``claim_params`` (scenario
    parameters overridden), the run uses the scenario's parameters, ``params`` and ``context``;
    ``scenario``: fields of the algorithm's audit scenario to change where the bug is detected
    (one feature: 2 coordinates, one of them the canary's); ``context``: builds the stacked-trials
    context of the buggy runs (None: the correct one)."""

    name: str
    description: str
    algorithm: str
    params: dict
    claim_params: dict = dataclasses.field(default_factory=dict)
    scenario: dict = dataclasses.field(default_factory=dict)
    context: Callable[[], type] | None = None


SDP_MUTATIONS: dict[str, SdpMutation] = {m.name: m for m in (
    SdpMutation("sdp-reuse-charged-once", "records reused in 16 rounds of full batches, charged one P_vec "
                "invocation", "sdp-prox-sgd", dict(rounds=16), claim_params=dict(rounds=1), scenario=dict(d=1)),
    SdpMutation("sdp-norm-unclipped", "messages not clipped to L before P_vec, bounded only by the clamp to the "
                "rotated range, claimed with the l2-aware certificate", "sdp-prox-sgd", {}, scenario=dict(d=63),
                context=unclipped_trials),
)}


def get_sdp_mutation(name: str) -> SdpMutation:
    if name not in SDP_MUTATIONS:
        raise ValueError(f"mutation: must be one of {sorted(SDP_MUTATIONS)}, got {name!r}")
    return SDP_MUTATIONS[name]


def get_mutation(name: str) -> Mutation:
    if name not in MUTATIONS:
        raise ValueError(f"mutation: must be one of {sorted(MUTATIONS)}, got {name!r}")
    return MUTATIONS[name]
