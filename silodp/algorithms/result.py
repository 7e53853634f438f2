"""The outcome of one federated run."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class RunResult:
    """What :meth:`FederatedAlgorithm.run` returns.

    Attributes
    ----------
    algorithm : CLI name of the algorithm.
    w_priv : the output, by the algorithm's own rule (last iterate or uniform over iterates).
    w_last : the last server iterate.
    history : per logged round: ``round``, ``objective`` (F on the training federation),
        ``grad_mapping_norm`` (||G_eta||), ``accuracy`` (None without labels).
    sigmas : noise standard deviations of the released per-silo messages (0 when non-private).
    epsilon, delta : certified per-silo guarantee of the noise that ran (``inf`` when
        non-private): the calibration's certificate, or what explicit ``sigmas`` / ``shuffle_params``
        certify (never the requested epsilon, see ``target_epsilon``).
    shuffle : binomial protocol parameters per message group (SDP algorithms).
    transcript : when requested, one entry per release: ``round``, ``group``, ``available`` [N],
        ``batch`` [N, K] (or None for full data), ``messages`` (Gaussian: [N, d] per-silo messages;
        shuffle: [N, K, d] randomizer counts), ``aggregate`` [d] (what the server computed).
    ledger : what the run released: one :class:`~silodp.accounting.releases.Sent` per message
        group instance sent (group, sampling, batch size, noise multiplier sigma / C or the shuffle
        parameters), each checked against the algorithm's declaration while the run went on.
    target_epsilon : the epsilon the run was asked for (None: none); a run whose explicit noise
        certifies more warned and reports both.
    details : family-specific facts about the noise (:meth:`silodp.algorithms.plan.Plan.noise_details`;
        DP-SCAFFOLD: ``sigma_g`` and the guarantees toward the server and a third party).
    """

    algorithm: str
    w_priv: torch.Tensor
    w_last: torch.Tensor
    history: dict[str, list] = field(default_factory=dict)
    sigmas: dict[str, float] = field(default_factory=dict)
    epsilon: float | None = None
    delta: float | None = None
    shuffle: dict | None = None
    transcript: list[dict] | None = None
    params: dict = field(default_factory=dict)
    ledger: list = field(default_factory=list)
    target_epsilon: float | None = None
    details: dict = field(default_factory=dict)
