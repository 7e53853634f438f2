"""``pvec`` and ``pvec-pld``: the certificates of the binomial shuffle protocol P_vec (paper Alg 4-5)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from silodp.accounting import events as ev
from silodp._validation import check_positive
from silodp.accounting.accountants.base import Accountant
from silodp.accounting.accountants.registry import register_accountant
from silodp.accounting.blocks import UnsupportedEventError, flatten

if TYPE_CHECKING:
    from silodp.accounting import pvec

@register_accountant
class PvecAccountant(Accountant):
    """The exact certificates of the binomial protocol P_vec (paper Alg 4-5, Thm D.2) over a
    whole transcript of :class:`~silodp.accounting.events.PvecDpEvent` invocations: the better of
    the l2-aware Renyi moments (:mod:`silodp.accounting.pvec_l2`) and the per-coordinate discrete
    PLD composed over coordinates, invocations and with-replacement multiplicities
    (:func:`silodp.accounting.pvec.transcript_epsilon`; both are sound, so is their minimum).

    Understands compositions (adaptive and parallel) of P_vec invocations, each alone or inside a
    :class:`~silodp.accounting.events.SampledWithReplacementDpEvent` (a record drawn k ~ Bin(K, 1/n)
    times moves k messages), and non-private releases; anything else (a Gaussian step) is refused.
    Defined under ``REPLACE_ONE`` only (one record's message replaced shifts the levels by at most
    g; removing it would also change the noise trials). ``value_discretization_interval``: the PLD
    grid (default :func:`silodp.accounting.pvec.default_interval` at epsilon 1).
    """

    name = "pvec"
    SETTINGS = ("value_discretization_interval",)
    #: whether the l2-aware certificate competes (False: the per-coordinate PLD alone)
    l2_aware: ClassVar[bool] = True

    def __init__(self, neighbouring: ev.NeighboringRelation | None = None,
                 value_discretization_interval: float | None = None, *,
                 neighboring_relation: ev.NeighboringRelation | None = None) -> None:
        from silodp.accounting import pvec

        super().__init__(neighbouring, neighboring_relation=neighboring_relation)
        self.value_discretization_interval = (pvec.default_interval(1.0) if value_discretization_interval is None
                                              else check_positive("value_discretization_interval",
                                                                  value_discretization_interval))

    def _flatten(self, event: ev.DpEvent, count: int = 1) -> list[Any]:
        items = pvec_items(event, count, self.l2_aware)
        if items and self.neighbouring != ev.REPLACE_ONE:
            raise UnsupportedEventError(f"{self.name} certifies P_vec under REPLACE_ONE only "
                                        "(pass neighbouring=REPLACE_ONE)")
        return items

    def _check_block(self, block: Any) -> None:
        """Nothing left to check: the walk (:func:`pvec_items`) validated every item."""

    def groups(self, event: ev.DpEvent | None = None) -> tuple[Any, ...]:
        """The :class:`~silodp.accounting.pvec.PvecGroup` of every invocation composed so far (of
        ``event`` alone, when given), as this accountant certifies them."""
        items = self._blocks if event is None else self._flatten(event)
        return tuple(b for b in items if getattr(b, "kind", None) is None)

    def __len__(self) -> int:
        return sum(getattr(b, "count", getattr(b, "uses", 0)) for b in self._blocks)

    def _epsilon(self, delta: float) -> float:
        from silodp.accounting import pvec

        return float(pvec.transcript_epsilon(self.groups(), delta, self.value_discretization_interval))


@register_accountant
class PvecPldAccountant(PvecAccountant):
    """:class:`PvecAccountant`'s per-coordinate discrete PLD alone (no l2 bound): the certificate
    before the l2-aware one, for comparison (docs/shuffle.md)."""

    name = "pvec-pld"
    l2_aware = False


def pvec_items(event: ev.DpEvent, count: int = 1, l2: bool = True) -> list[Any]:
    """The P_vec groups (:class:`silodp.accounting.pvec.PvecGroup`, ``uses`` invocations each) and
    non-private blocks of ``event`` repeated ``count`` times; without ``l2`` the groups carry no l2
    bound. Fail closed: anything but compositions of P_vec invocations (alone or sampled with
    replacement) and non-private releases is an :class:`UnsupportedEventError` naming it."""
    return flatten(event, count, leaf=lambda one, uses: [_pvec_group(one, uses, l2)])


def _pvec_group(event: ev.DpEvent, uses: int, l2: bool) -> "pvec.PvecGroup":
    from silodp.accounting import pvec

    one, extra = event, dict[str, Any]()
    if type(event) is ev.SampledWithReplacementDpEvent:
        one = event.event
        extra = dict(with_replacement=True, batch_size=event.sample_size, dataset_size=event.source_dataset_size)
    if type(one) is not ev.PvecDpEvent:
        raise UnsupportedEventError(f"pvec certifies P_vec invocations only (PvecDpEvent), got {one}")
    ev.revalidate(one)
    return pvec.PvecGroup(uses, one.levels, one.trials, one.messages, one.dimension,
                          l2=one.l2_shift if l2 else None, **extra)
