"""ISRL-DP ledger: each silo's whole transcript is one event (paper Definition 4, Appendix A).

ISRL-DP asks that, for every silo i, the full transcript of the messages silo i sends is
(eps, delta)-DP with respect to replacing one record of X_i, conditional on the other silos. The
ledger keeps one event list per silo for the whole run (ledgers that reset each round hide the
real total; cf. Opacus issue #688) and reports per-silo and worst-silo guarantees.

Appendix B (from Lowy & Razaviyayn 2021b): an (eps, delta)-ISRL-DP algorithm is also
(eps, delta)-CDP (record level, the server's output is post-processing of the transcripts) and
(n eps, n e^{(n-1) eps} delta)-user-level DP (group privacy over the n records of a silo).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from silodp.accounting import events as ev
from silodp._validation import check_count, check_delta, check_index, check_nonnegative
from silodp.accounting.accountants import get_accountant


def cdp_guarantee(epsilon: float, delta: float) -> tuple[float, float]:
    """ISRL-DP (eps, delta) implies record-level central DP (eps, delta) (paper Appendix B)."""
    return check_nonnegative("epsilon", epsilon), check_delta("delta", delta)


def user_level_guarantee(epsilon: float, delta: float, n: int) -> tuple[float, float]:
    """ISRL-DP (eps, delta) implies (n eps, n e^{(n-1) eps} delta) user-level DP (Appendix B)."""
    eps = check_nonnegative("epsilon", epsilon)
    dl = check_delta("delta", delta)
    n = check_count("n", n)
    log_delta = math.log(n) + (n - 1) * eps + math.log(dl)
    return n * eps, 1.0 if log_delta >= 0 else math.exp(log_delta)


class IsrlLedger:
    """Per-silo record of released events, interpreted by one named accountant (replace-one)."""

    def __init__(self, num_silos: int, accountant: str = "rdp") -> None:
        self.num_silos = check_count("num_silos", num_silos)
        get_accountant(accountant)  # validate the name early
        self.accountant = accountant
        self._events: dict[int, list[ev.DpEvent]] = defaultdict(list)

    def record(self, silo: int, event: ev.DpEvent, count: int = 1) -> None:
        """Silo ``silo`` released ``count`` more copies of ``event``."""
        silo = check_index("silo", silo, self.num_silos)
        self._events[silo].append(ev.SelfComposedDpEvent(event, check_count("count", count)))

    def silo_epsilon(self, silo: int, delta: float) -> float:
        """Certified epsilon at ``delta`` of silo ``silo`` (0 for a silo that released nothing; an
        unknown silo or a delta outside (0, 1) is a ValueError)."""
        silo = check_index("silo", silo, self.num_silos)
        delta = check_delta("delta", delta)
        events = self._events.get(silo, [])
        if not events:
            return 0.0
        acc = get_accountant(self.accountant, ev.REPLACE_ONE)
        return acc.compose(ev.ComposedDpEvent(events)).get_epsilon(delta)

    def report(self, delta: float, records_per_silo: int | None = None) -> dict[str, Any]:
        """Per-silo epsilons, the worst silo, and the Appendix B implications."""
        dl = check_delta("delta", delta)
        per_silo = {i: self.silo_epsilon(i, dl) for i in range(self.num_silos)}
        worst = max(per_silo, key=lambda i: per_silo[i])
        out = {
            "neighbouring": "replace-one record within a silo (ISRL-DP)",
            "accountant": self.accountant,
            "delta": dl,
            "per_silo_epsilon": per_silo,
            "worst_silo": worst,
            "epsilon": per_silo[worst],
            "cdp": cdp_guarantee(per_silo[worst], dl),
        }
        if records_per_silo is not None:
            out["user_level"] = user_level_guarantee(per_silo[worst], dl, records_per_silo)
        return out
