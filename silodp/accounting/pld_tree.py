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

Many distinct releases (at least :data:`PRODUCT_MIN`) are instead composed at once, as the PRV
accountant does (Gopi, Lee & Wutschitz 2021, Sec 5; Koskela, Jalko, Prediger & Honkela 2021,
Sec 4): on one circular grid of M points sized for the *composed* support, the composed PMF is the
inverse transform of the product of the k forward transforms (:func:`compose_product`): k rFFTs of
M points and one inverse, no intermediate merges. M is set by two Chernoff bounds on the sum of the
losses; the mass they leave out wraps around: below, to larger losses (pessimistic), above, to
smaller ones, which is charged (:func:`_window`). From :data:`GROUPED_MIN` PMFs on, the product runs
in two levels (:func:`compose_grouped`): about sqrt(k) groups of similar supports, each on the
shorter circle its own sum needs, then one product of the groups' PMFs, so most transforms run a
few times shorter; a ledger (:func:`compose_blocks`) builds and composes such groups one run of
consecutive releases at a time, so only one run's PLDs are ever held.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import numpy as np


def grouped(blocks: Iterable[Any]) -> list[Any]:
    """``blocks`` with identical ones (equal but for ``count``) merged into one of the summed count,
    in order of first appearance."""
    counts: dict[Any, int] = {}
    for block in blocks:  # (a block of count 1 is its own key: no copy)
        key = block if block.count == 1 else dataclasses.replace(block, count=1)
        counts[key] = counts.get(key, 0) + int(block.count)
    return [key if count == 1 else dataclasses.replace(key, count=count) for key, count in counts.items()]


def _support(pld: Any) -> int:
    return sum(len(d.masses) for d in pld._directions())


#: Fewest PLDs :func:`compose_tree` composes by :func:`compose_product` (below: pairwise merges).
PRODUCT_MIN = 16
#: Ln of the mass of the exact composition that :func:`compose_product`'s window may leave out on
#: each side (it wraps around; twice the upper side's is charged): 1e-12, a charge of 2e-12 next to
#: the product's floating-point charge of ~5e-10 for 1000 releases (a window ~10% shorter than
#: at 1e-14, so ~10% fewer transform operations).
LOG_WINDOW_TAIL = math.log(1e-12)
#: Relative slack on each computed moment generating function (summation and exp round-off of a few
#: ulps per term over at most ``pld.MAX_POINTS`` terms: (n + 8) u < 1e-8).
_MGF_SLACK = 1e-8


def _log_mgf(pmf: Any, t: float, centre: float) -> float:
    """An upper bound on log sum_j m_j e^{t l_j} (the finite masses of ``pmf``), computed about
    ``centre``: :func:`_log_mgfs` of one PMF."""
    return _log_mgfs(_rows([pmf]), t, np.array([float(centre)]))


#: Exponent below which :func:`_log_mgfs` bounds a row of terms by e^_MGF_FLOOR times its masses.
_MGF_FLOOR = -40.0


_STEPS_CACHE: list[np.ndarray] = [np.arange(0.0)]


def _steps(n: int) -> np.ndarray:
    """0.0, 1.0, ..., n - 1 (a read-only view of one shared array, grown as needed)."""
    if len(_STEPS_CACHE[0]) < n:
        steps = np.arange(float(max(n, 2 * len(_STEPS_CACHE[0]))))
        steps.flags.writeable = False
        _STEPS_CACHE[0] = steps
    return _STEPS_CACHE[0][:n]


#: Grid points per row of :func:`_rows` (the blocks of the coarse copy on which :func:`_window`
#: searches its t, and the rows of :func:`_log_mgfs`).
_SEARCH_BLOCK = 64
#: Golden-section steps of that search over t in [1e-3, 30] / spread: 16 narrow it to 0.5% of t
#: (the bound is flat near its optimum; any t gives a valid bound).
_SEARCH_STEPS = 16


class _Rows(NamedTuple):
    """Every PMF's masses, each padded with zeros to whole rows of :data:`_SEARCH_BLOCK` points,
    stacked: ``matrix`` (rows x B), each row's first grid index (``first``, exact integers as
    floats), the first row of each PMF (``starts``) and the grid interval."""

    matrix: np.ndarray
    first: np.ndarray
    starts: np.ndarray
    interval: float


def _rows(pmfs: list[Any]) -> _Rows:
    """:class:`_Rows` of ``pmfs`` (one grid)."""
    b = _SEARCH_BLOCK
    counts = [-(-len(p.masses) // b) for p in pmfs]
    starts = np.zeros(len(pmfs), dtype=np.intp)
    np.cumsum(counts[:-1], out=starts[1:])
    padded = np.zeros(int(sum(counts)) * b)
    first = np.empty(len(padded) // b)
    for p, start, count in zip(pmfs, starts, counts):
        padded[start * b:start * b + len(p.masses)] = p.masses
        first[start:start + count] = _steps(count)
        first[start:start + count] *= b
        first[start:start + count] += p.offset
    return _Rows(padded.reshape(-1, b), first, starts, pmfs[0].interval)


def _log_mgfs(rows: _Rows, t: float, centres: np.ndarray) -> float:
    """An upper bound on sum_i log sum_j m_ij e^{t l_ij} over the PMFs i of ``rows`` (their finite
    masses), each computed about its ``centres[i]`` (no overflow near the mean; einsum, not BLAS,
    whose threads spin on a busy machine), each PMF's sum inflated by :data:`_MGF_SLACK`; +inf when
    a term overflows. With point j = B r + i of a row r starting at grid index f_r, the exponent is
    t h f_r - t c + (t h) i, so a row's sum is one exponential times the dot of its masses with the
    B column factors e^{t h i} (rows + B exponentials, not one per point); a row whose every
    exponent is below :data:`_MGF_FLOOR` is bounded by e^_MGF_FLOOR times its masses' sum (the
    padding's zeros add nothing). Each term is off by a few ulps (two exponentials, a product, and
    the exponents' own rounding, ~1e-13 relative at most) and each PMF's sum by its additions'
    round-off, inside the slack ((n + 8) u < 1e-8)."""
    b, h = _SEARCH_BLOCK, rows.interval
    shift = np.repeat(t * centres, np.diff(np.append(rows.starts, len(rows.first))))
    exponent = rows.first * (t * h)
    exponent -= shift  # each row's first exponent
    largest = exponent + (t * h * (b - 1) if t > 0 else 0.0)  # each row's largest exponent
    with np.errstate(over="ignore", invalid="ignore"):
        columns = np.exp(_steps(b) * (t * h))
        value = np.exp(exponent, out=exponent)
        value *= np.einsum("ij,j->i", rows.matrix, columns)
        low = largest < _MGF_FLOOR
        value[low] = math.exp(_MGF_FLOOR) * rows.matrix[low].sum(axis=1)
        totals = np.add.reduceat(value, rows.starts)
    if not np.all(np.isfinite(totals)):
        return math.inf
    return float(np.sum(t * centres + np.log(totals * (1.0 + _MGF_SLACK))))


def _coarse(rows: _Rows) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every PMF's masses summed in rows of :data:`_SEARCH_BLOCK` points (:func:`_rows`) at the
    row's mean loss, the rows without mass dropped: (masses, losses, each row's PMF's mean, the first
    kept row of each PMF). Only to locate t; the bound itself is computed on the exact masses. (A
    row's mean loss is its first loss plus h times its masses' mean index.)"""
    mass = rows.matrix.sum(axis=1)
    moment = np.einsum("ij,j->i", rows.matrix, _steps(_SEARCH_BLOCK))
    keep = mass > 0
    kept = np.add.reduceat(keep.astype(np.intp), rows.starts)  # kept rows per PMF
    mass = mass[keep]
    loss = (rows.first[keep] + moment[keep] / mass) * rows.interval
    starts = np.zeros(len(kept), dtype=np.intp)
    np.cumsum(kept[:-1], out=starts[1:])
    centre = np.array([float(np.einsum("i,i->", mass[a:a + k], loss[a:a + k]) / np.sum(mass[a:a + k]))
                       for a, k in zip(starts, kept)])
    return mass, loss, np.repeat(centre, kept), starts


def _edge(rows: _Rows, coarse: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], sign: float,
          log_tail: float) -> float:
    """A point e with mass{sign S >= e} <= e^log_tail for S the sum of the losses of the PMFs of
    ``rows``: the Chernoff bound (K(t) - log_tail) / t, K(t) = sum_i log sum_j m_ij e^{t sign l_ij}
    (Markov's inequality, valid for the sub-probability measures of the finite masses) at the t
    minimising it on :func:`_coarse`'s copy (golden section on log t; any t > 0 is valid), computed
    on the exact masses (:func:`_log_mgfs`); +inf when it overflows."""
    from silodp.accounting import pld

    mass, loss, centre, starts = coarse
    loss, centre = sign * loss, sign * centre
    spread = max(float(np.sqrt(np.einsum("i,i->", mass, (loss - centre) ** 2))), rows.interval)
    offsets, centres = loss - centre, float(np.sum(centre[starts]))
    work = np.empty(len(mass))

    def bound(t: float) -> float:
        with np.errstate(over="ignore"):
            np.multiply(offsets, t, out=work)
            np.maximum(work, -300.0, out=work)
            sums = np.add.reduceat(np.multiply(mass, np.exp(work, out=work), out=work), starts)
        return float((t * centres + np.sum(np.log(sums)) - log_tail) / t)

    # around sqrt(-2 log_tail) / sigma, the optimum for a Gaussian sum: 8 / sigma at 1e-14
    t = pld._argmin_over_t(bound, spread, 1e-3, 30.0, _SEARCH_STEPS)
    means = sign * centre[starts]  # the PMFs' own means (unsigned)
    return (_log_mgfs(rows, sign * t, means) - log_tail) / t


def _window(pmfs: list[Any], log_tail: float) -> tuple[int, int, float]:
    """Grid indices (lo, hi) such that the composition of ``pmfs`` has mass at most e^log_tail below
    lo and at most e^log_tail above hi (:func:`_edge` on each side), and the mass charged for the
    upper one (:func:`compose_product`; 0 when hi is the support's top). lo > hi when a bound
    overflows."""
    h = pmfs[0].interval
    first = sum(p.offset for p in pmfs)
    last = first + sum(len(p.masses) - 1 for p in pmfs)
    rows = _rows(pmfs)
    coarse = _coarse(rows)
    upper, lower = _edge(rows, coarse, 1.0, log_tail), -_edge(rows, coarse, -1.0, log_tail)
    if not (math.isfinite(upper) and math.isfinite(lower)):
        return 1, 0, 0.0
    lo, hi = max(first, math.floor(lower / h) - 1), min(last, math.ceil(upper / h) + 1)
    charge = 0.0 if hi == last else 2.0 * math.exp(log_tail)
    return lo, hi, charge


#: Whether ``np.fft.rfft`` takes ``out=`` (numpy >= 2.0).
_RFFT_OUT = np.lib.NumpyVersion(np.__version__) >= "2.0.0"


def _rfft_into(x: np.ndarray, size: int, out: np.ndarray) -> np.ndarray:
    """``np.fft.rfft(x, size)`` written into ``out`` (size // 2 + 1 complex values)."""
    if _RFFT_OUT:
        return np.fft.rfft(x, size, out=out)
    out[:] = np.fft.rfft(x, size)
    return out


def compose_product(pmfs: list[Any], log_mass_truncation_bound: float,
                    log_window_tail: float = LOG_WINDOW_TAIL) -> Any:
    """The composition of the :class:`~silodp.accounting.pld.LossPmf` ``pmfs`` (one grid) as the
    inverse rFFT of the product of their rFFTs on one circular grid of M points covering
    :func:`_window`'s range (a PMF longer than M folded onto it); None when a bound overflows or a
    PMF has no finite mass.

    Certificate. Let c be the exact convolution of the inputs (each tail outside [lo, lo + M) at most
    e^LOG_WINDOW_TAIL) and c' the PMF that moves c's lower tail to where the circle folds it (each
    point g < lo to g + jM in [lo, lo + M): up) and its upper tail to +inf: c' dominates c. The
    circular convolution equals c on [lo, lo + M) plus both tails folded in, so its l1 distance to
    c' (finite masses and the mass at +inf together) is twice the upper tail, at most
    2 e^LOG_WINDOW_TAIL, charged as round-off (delta is 1-Lipschitz in the masses). Floating point, as :func:`pld._convolve`:
    each forward transform is off by e_i = _fft_error(M, sqrt(M) ||x_i||_2) in l2 and every exact
    |X_i| <= 1, so the product of the computed transforms is off by prod(1 + e_i) - 1 (induction on
    P_m' - P_m = (P_{m-1}' - P_{m-1}) X_m' + P_{m-1} E_m); each of the k - 1 complex products
    rounds with relative error <= sqrt(2) gamma_2 (Higham 2002, Lemma 3.5), g = (1 + sqrt(2)
    gamma_2)^(k-1) - 1 in all, so the computed product is off from the product of the computed
    transforms by g / (1 - g) times its own norm, plus at most 2^-1060 per coefficient and product
    for underflow; then :func:`pld._inverse_roundoff`. The inputs' own round-off a_i propagates as
    prod(1 + a_i) - 1 (as :meth:`LossPmf.compose`; a PMF folded onto the circle adds its sums' error,
    (rows - 1) u per mass, to its a_i), and the result is truncated as every merge is."""
    from silodp.accounting import pld

    pld._same_grid(pmfs)
    if any(not np.any(p.masses > 0) for p in pmfs):  # a release with no finite loss (non-private)
        return None
    lo, hi, charge = _window(pmfs, log_window_tail)
    if lo > hi:
        return None
    size = pld._next_fast_length(hi - lo + 1)
    u = max(pld._unit(p.masses) for p in pmfs)
    # the product accumulates in place and each transform lands in one work array (``out=``: no
    # fresh spectrum-sized pages per release; the same products as a fresh array each)
    product, work = np.empty(size // 2 + 1, dtype=complex), np.empty(size // 2 + 1, dtype=complex)
    log_spectrum, log_inputs, log_finite = 0.0, 0.0, 0.0
    for i, p in enumerate(pmfs):
        x = p.masses
        if len(x) > size:  # folded onto the circle (a circular convolution folds its inputs)
            rows = -(-len(x) // size)
            folded = x[:size].copy()  # the rows added in order, as a zero-padded reshape's sum over axis 0
            for r in range(1, rows):
                piece = x[r * size:(r + 1) * size]
                folded[:len(piece)] += piece
            x = folded
            log_inputs += math.log1p((rows - 1) * u * 1.01 * float(np.sum(x)))  # the sums' round-off, l1
        if i == 0:
            _rfft_into(x, size, product)
        else:
            np.multiply(product, _rfft_into(x, size, work), out=product)
        log_spectrum += math.log1p(pld._fft_error(size, math.sqrt(size) * pld._l2(x), u))
        log_inputs += math.log1p(p.roundoff)
        log_finite += math.log1p(-p.infinity_mass)
    k = len(pmfs)
    g = math.expm1((k - 1) * math.log1p(math.sqrt(2.0) * pld.gamma(2, u)))
    spectrum_error = (math.expm1(log_spectrum) + g / (1.0 - g) * pld._spectral_norm(product, size)
                      + k * math.sqrt(size) * 2.0 ** -1060)
    out = np.fft.irfft(product, size)
    fresh = pld._inverse_roundoff(out, size, spectrum_error)
    base = sum(p.offset for p in pmfs)  # the composed index g sits at (g - base) mod size
    masses = np.maximum(np.roll(out, base - lo), 0.0)  # indices lo .. lo + size - 1, tails folded in
    roundoff = math.expm1(log_inputs) + fresh + charge
    out_pmf = pld.LossPmf(pmfs[0].interval, lo, masses, -math.expm1(log_finite), roundoff)
    return out_pmf.truncate(log_mass_truncation_bound)


#: Fewest PMFs :func:`compose_grouped` composes in two levels (below: one product).
GROUPED_MIN = 64


def compose_grouped(pmfs: list[Any], log_mass_truncation_bound: float) -> Any:
    """The composition of the :class:`~silodp.accounting.pld.LossPmf` ``pmfs`` (one grid) by
    :func:`compose_product` in two levels, for at least :data:`GROUPED_MIN` of them: sorted by
    support, cut into about sqrt(k) groups of neighbouring supports, each group's product on the
    circle its own window needs, then the product of the groups' PMFs on the whole composition's
    circle (None when a product declines; then the caller's pairwise tree answers).

    The window of a sum grows with the spread of the sum, about sqrt(k) times a term's, so a group
    of ~sqrt(k) PMFs needs a circle a few times shorter than all k (1000 Poisson Gaussians at
    q = 0.01: ~13e3 points against ~53e3): the k forward transforms, which dominate, run at the
    groups' sizes, and only ~sqrt(k) at the full one. Certificate: composition is associative and
    each product is one (:func:`compose_product`: its round-off, wrapped upper tail and truncation
    charged; a group's PMF carries its round-off into the next product as an input's, as every
    merge's does). Each group's window leaves out e^LOG_WINDOW_TAIL / groups per side, so the
    wrapped tails charged in all stay below twice the single product's charge."""
    k = len(pmfs)
    if k < GROUPED_MIN:
        return compose_product(pmfs, log_mass_truncation_bound)
    order = sorted(range(k), key=lambda i: len(pmfs[i].masses))
    cuts, tail = _runs(k)
    parts = []
    for cut in cuts:
        part = [pmfs[i] for i in order[cut]]
        out = compose_product(part, log_mass_truncation_bound, tail)
        if out is None:
            return None
        parts.append(out)
    return compose_product(parts, log_mass_truncation_bound)


def _runs(k: int) -> tuple[list[slice], float]:
    """The ~sqrt(k) consecutive runs that :func:`compose_grouped` and :func:`compose_blocks` cut k
    PMFs into, and the log tail each run's window leaves out per side (e^LOG_WINDOW_TAIL / runs)."""
    runs = math.isqrt(k)
    return [slice(r * k // runs, (r + 1) * k // runs) for r in range(runs)], LOG_WINDOW_TAIL - math.log(runs)


def _float64(plds: list[Any]) -> bool:
    return all(d.masses.dtype == np.float64 for p in plds for d in p._directions())


def _product(plds: list[Any], compose: Callable[[list[Any], float], Any]) -> Any:
    """The composition of ``plds`` by ``compose`` (a product of :class:`LossPmf` lists and a
    truncation bound), direction by direction; None when a PLD is not float64 or a product declines."""
    if not _float64(plds):
        return None
    bound = min(p.log_mass_truncation_bound for p in plds)
    remove = compose([p.remove for p in plds], bound)
    symmetric = all(p.add is None for p in plds)
    add = None if symmetric else compose([p.add or p.remove for p in plds], bound)
    if remove is None or not (symmetric or add is not None):
        return None
    return type(plds[0])(remove, add, bound)


def compose_tree(plds: list[Any]) -> Any:
    """The composition of ``plds`` (:class:`~silodp.accounting.pld.PrivacyLossDistribution`): at
    least :data:`PRODUCT_MIN` of them in float64 by :func:`compose_grouped`, direction by direction;
    else (or when the product declines) the two with the smallest supports merged first (None when
    there are none)."""
    if len(plds) >= PRODUCT_MIN:
        product = _product(plds, compose_grouped)
        if product is not None:
            return product
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


def _support_order(block: Any) -> tuple[float, float, float]:
    """A guess at the order of blocks' supports without building them (any order certifies the
    same): more steps, a larger sampling probability, less noise, longer (a field a block lacks
    counts as 1, 1 and +inf)."""
    return (float(getattr(block, "count", 1)), float(getattr(block, "q", 1.0)),
            -float(getattr(block, "noise_multiplier", math.inf)))


def compose_blocks(blocks: Iterable[Any], block_pld: Callable[[Any], Any]) -> Any:
    """The PLD of all ``blocks`` (None when there are none): :func:`grouped`, each group's PLD by
    ``block_pld(block)``, merged by :func:`compose_tree`. From :data:`GROUPED_MIN` distinct blocks
    on, streamed: about sqrt(k) runs of consecutive blocks, each built and composed by one product
    on its own circle (as a group of :func:`compose_grouped`; a run whose product declines by
    :func:`compose_tree`) and dropped before the next is built, then the runs' PLDs by
    :func:`compose_tree`: the same certificate as :func:`compose_grouped` (runs in the ledger's
    order instead of sorted by support: a run of unlike releases only needs a longer circle), with
    one run's PLDs in memory instead of all k (1000 releases: ~8 MB instead of ~250 MB of fresh
    pages). Runs are cut from the blocks sorted by :func:`_support_order`, longest first, so that
    like releases share a circle and later (shorter) runs reuse the memory of earlier ones. When the first run is not float64 (the accountant's extended-precision pass),
    every PLD is built and merged by :func:`compose_tree` as for fewer blocks."""
    distinct = grouped(blocks)
    k = len(distinct)
    if k < max(GROUPED_MIN, PRODUCT_MIN):
        return compose_tree([block_pld(b) for b in distinct])
    distinct.sort(key=_support_order, reverse=True)  # the longest first: later runs reuse their pages
    cuts, tail = _runs(k)
    parts = []
    for cut in cuts:
        plds = [block_pld(b) for b in distinct[cut]]
        if cut.start == 0 and not _float64(plds):
            return compose_tree(plds + [block_pld(b) for b in distinct[cut.stop:]])
        part = _product(plds, lambda pmfs, bound: compose_product(pmfs, bound, tail))
        parts.append(compose_tree(plds) if part is None else part)
    return compose_tree(parts)
