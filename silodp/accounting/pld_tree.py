"""Composing many releases' PLDs in O(k log k): identical releases grouped, the rest merged in a
balanced tree.

Composition of privacy loss distributions is a convolution of the loss PMFs (Koskela, Jalko,
Honkela 2020, arXiv:1906.03049, Sec 3; Meiser, Mohammadi 2018), commutative and associative, so
any order and grouping of the same releases certifies the same mechanism:

* identical releases (equal blocks but for their ``count``) are one block of the summed count,
  composed by :meth:`~silodp.accounting.pld.PrivacyLossDistribution.self_compose` (one transform and
  a power, not ``count`` convolutions);
* the distinct ones are merged two at a time, the two with the shortest supports first (a
  Huffman order: a balanced tree for equal sizes), each merge one FFT convolution
  (:func:`silodp.accounting.pld._convolve`), so k releases of support s cost
  O(k s log(k s)) instead of the sequential O(k^2 s log(k s)).

Every merge is the pessimistic composition of :meth:`PrivacyLossDistribution.compose` (its
round-off charge and truncated tails charged to delta as before), so the result is a certificate
whatever the order; only its floating-point error and the tails dropped may differ from the
sequential order's, both charged.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable, Iterable
from typing import Any


def grouped(blocks: Iterable[Any]) -> list[Any]:
    """``blocks`` with identical ones (equal but for ``count``) merged into one of the summed count,
    in order of first appearance."""
    counts: dict[Any, int] = {}
    for block in blocks:
        key = dataclasses.replace(block, count=1)
        counts[key] = counts.get(key, 0) + int(block.count)
    return [dataclasses.replace(key, count=count) for key, count in counts.items()]


def _support(pld: Any) -> int:
    return sum(len(d.masses) for d in pld._directions())


def compose_tree(plds: list[Any]) -> Any:
    """The composition of ``plds`` (:class:`~silodp.accounting.pld.PrivacyLossDistribution`), the two
    with the smallest supports merged first (None when there are none)."""
    heap = [(_support(p), i, p) for i, p in enumerate(plds)]
    heapq.heapify(heap)
    order = len(heap)
    while len(heap) > 1:
        _, _, a = heapq.heappop(heap)
        _, _, b = heapq.heappop(heap)
        merged = a.compose(b)
        heapq.heappush(heap, (_support(merged), order, merged))
        order += 1
    return heap[0][2] if heap else None


def compose_blocks(blocks: Iterable[Any], block_pld: Callable[[Any], Any]) -> Any:
    """The PLD of all ``blocks`` (None when there are none): :func:`grouped`, each group's PLD by
    ``block_pld(block)``, merged by :func:`compose_tree`."""
    return compose_tree([block_pld(b) for b in grouped(blocks)])
