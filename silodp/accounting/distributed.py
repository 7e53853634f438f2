"""Distributed noise for summing clipped vectors under secure aggregation: the binomial protocol
(paper Alg 4-5), the Skellam mechanism (Agarwal, Kairouz & Liu, NeurIPS 2021, "AKL21") and the
distributed discrete Gaussian (Kairouz, Liu & Steinke, ICML 2021, "KLS21").

Every silo clips its vector to l2 norm ``clip`` (C), and the silos share one public random
rotation (sign diagonal D and the normalized Walsh-Hadamard H of size d' = the next power of two,
:func:`silodp.algorithms.shuffle.rotate`). Then:

* **Skellam / discrete Gaussian.** Scale by 1 / ``scale`` (gamma, the real value of one integer
  step; c = C / gamma), round each coordinate randomly up or down (unbiased), retried until the
  rounded vector's norm is at most ``rounded_norm(c, d')`` = min(sqrt(c^2 + d'/4 + sqrt(2 ln(1/beta))
  (c + sqrt(d')/2)), c + sqrt(d')) (KLS21's conditional rounding; the second term holds for every
  rounding, the first fails with probability at most beta per try). The norm inflation is thus
  charged deterministically: two neighbouring silo vectors (replace-one) differ by at most
  Delta2 = 2 rounded_norm in l2 and by Delta1 = min(2 sqrt(d') rounded_norm, 2 rounded_norm^2) in l1
  (an integer vector has ||v||_1 <= ||v||_2^2). Each silo adds integer noise: Pois(v/2) - Pois(v/2)
  per coordinate (Skellam, variance v), or N_Z(0, sigma^2) (discrete Gaussian, sigma >= 1). The
  sum of the n silos that are summed holds Skellam noise of variance mu = n v (a sum of Skellams is
  Skellam), or a sum of n discrete Gaussians.
* **Record level** (``vector_norm`` set, Skellam / discrete Gaussian): each silo's vector is a sum
  of per-record contributions of norm <= ``clip``, clipped to ``vector_norm``; replacing one record
  moves it by at most 2 c in l2 (clipping is non-expansive). Plain randomized rounding
  round(z) = floor(z + V) with V uniform and private to the silo: for every fixed V two vectors
  at distance 2 c round to integer vectors at distance < 2 c + sqrt(d') (each coordinate moves
  by less than |z_k - z'_k| + 1), so Delta2 = 2 c + sqrt(d') and Delta1 = min(sqrt(d') Delta2,
  Delta2^2); the mechanism is the V-mixture of those, whose Renyi divergence is at most the
  largest (joint quasi-convexity).
* **Binomial.** The paper's protocol with the rotation (:mod:`silodp.accounting.pvec`): ``levels``
  g per rotated range, ``noise`` = b trials of Bin(b, 1/2) per coordinate per silo; the server's
  sum is the P_vec totals, certified by :func:`silodp.accounting.pvec.transcript_epsilon`.

Certificates (replace-one, ``rounds`` adaptive releases, n = ``summed`` silos' noise counted):

* Skellam, integer orders alpha > 1 (AKL21, the multi-dimensional Skellam RDP bound):
  eps(alpha) <= alpha Delta2^2 / (2 mu) + min(((2 alpha - 1) Delta2^2 + 6 Delta1) / (4 mu^2),
  3 Delta1 / (2 mu)), mu the aggregate variance. Tested against the exact Renyi divergence.
* Discrete Gaussian (KLS21, Thm 1: the sum of n discrete Gaussians is (1/2) eps^2-concentrated
  DP with (1/2) eps^2 = Delta2^2 / (2 n sigma^2) + tau d' / 4, tau = 10 sum_{k=1}^{n-1}
  exp(-2 pi^2 sigma^2 k / (k + 1))): we charge rho = Delta2^2 / (2 n sigma^2) + tau d' (four times
  the paper's tau term, which is below 1e-30 at sigma >= 2), i.e. RDP alpha rho at every order.
* Conversion to (epsilon, delta): :func:`silodp.accounting.rdp.epsilon_from_rdp` (Balle et al.
  2020, Thm 21).

Modular wrap-around. Secure aggregation returns the sum modulo 2^bits; the server reads the
representative in [-2^(bits-1), 2^(bits-1)). A coordinate wraps when the true sum leaves that
window. Reducing mod 2^bits is post-processing, so wrapping cannot hurt privacy; it corrupts the
estimate. :func:`wrap_probability` bounds P[any coordinate of any round wraps] (union bound over
d' coordinates and the rounds; Chernoff: the rotated signal sum_i (H D x_i / gamma)_j is a
Rademacher sum, sub-Gaussian with variance proxy (M c)^2 / d'; rounding moves each silo by less
than 1; discrete Gaussian noise is sigma-sub-Gaussian (Canonne, Kamath & Steinke 2020); the Skellam sum's
log-MGF is mu (cosh s - 1); binomial: Hoeffding). The calibration spends
:data:`WRAP_SHARE` of delta on it and certifies the rest, so the reported (epsilon, delta) also
covers "the decoded sum is not the true sum" (conservative).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

import numpy as np

from silodp._validation import check_count, check_delta, check_positive, check_probability
from silodp.accounting import events as ev

#: Share of delta that the calibration leaves for the wrap-around probability.
WRAP_SHARE = 0.1
#: Conditional rounding's failure probability per try (KLS21's default e^-1/2; utility only).
ROUNDING_BETA = math.exp(-0.5)
#: Integer Renyi orders (the Skellam bound holds at integer orders).
ORDERS = tuple(sorted(set(range(2, 257)) | {int(a) for a in np.geomspace(256, 1 << 14, 24)}))
#: The binomial's reference levels for the b ~ g^2 model of its search.
REFERENCE_LEVELS = 16
#: The binomial's most levels g: the variance is within 1e-5 of its limit by g = 32 (rounding adds
#: (2 gamma / g)^2 / 4 against the noise's b / 4 ~ 660 g^2 / 4), and the certificate's cost grows as g^2.
MAX_LEVELS = 32
#: The binomial's most noise trials per coordinate of the sum (half of pvec.MAX_TRIALS).
MAX_TRIALS = 5 * 10 ** 12
#: The smallest local sigma of the discrete Gaussian (KLS21 Thm 1 needs sigma >= 1/2).
MIN_SIGMA = 1.0


def rotated_dimension(dimension: int) -> int:
    """d' = the smallest power of two >= ``dimension`` (the Walsh-Hadamard size)."""
    return 1 << (check_count("dimension", dimension) - 1).bit_length()


def rounded_norm(c: float, dimension: int, beta: float = ROUNDING_BETA) -> float:
    """The l2 bound after conditional randomized rounding of a vector of norm <= ``c`` in
    ``dimension`` coordinates (KLS21's conditional rounding; module docstring)."""
    d = check_count("dimension", dimension)
    b = check_probability("beta", beta)
    square = c * c + d / 4.0 + math.sqrt(2.0 * math.log(1.0 / b)) * (c + math.sqrt(d) / 2.0)
    return min(math.sqrt(square), c + math.sqrt(d))


def sensitivities(c: float, dimension: int, beta: float = ROUNDING_BETA, record: bool = False) -> tuple[float, float]:
    """(Delta2, Delta1) of one silo's rounded vector under replace-one: of the whole vector
    (conditional rounding), or of one record's contribution with ``record`` (coupled plain
    rounding; module docstring)."""
    if record:
        l2 = 2.0 * c + math.sqrt(dimension)
        return l2, min(math.sqrt(dimension) * l2, l2 * l2)
    r = rounded_norm(c, dimension, beta)
    return 2.0 * r, min(2.0 * math.sqrt(dimension) * r, 2.0 * r * r)


def skellam_rdp(orders: Any, l2: float, l1: float, mu: float) -> np.ndarray:
    """AKL21's multi-dimensional Skellam RDP at integer ``orders`` for aggregate variance ``mu``."""
    a = np.asarray(orders, dtype=float)
    if np.any(a != np.floor(a)) or np.any(a < 2):
        raise ValueError("orders: the Skellam bound holds at integer orders >= 2")
    mu = check_positive("mu", mu)
    first = a * l2 * l2 / (2.0 * mu)
    return first + np.minimum(((2.0 * a - 1.0) * l2 * l2 + 6.0 * l1) / (4.0 * mu * mu), 3.0 * l1 / (2.0 * mu))


def ddg_tau(sigma: float, summed: int) -> float:
    """KLS21's tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 sigma^2 k / (k + 1))."""
    k = np.arange(1, check_count("summed", summed), dtype=float)
    return float(10.0 * np.sum(np.exp(-2.0 * math.pi ** 2 * sigma ** 2 * k / (k + 1.0))))


def ddg_rho(l2: float, sigma: float, summed: int, dimension: int) -> float:
    """The zCDP rho charged for one release of the sum of ``summed`` discrete Gaussians
    N_Z(0, sigma^2)^dimension (module docstring, KLS21 Thm 1)."""
    s = check_positive("sigma", sigma)
    if s < 0.5:
        raise ValueError(f"sigma: KLS21 Thm 1 needs sigma >= 1/2, got {s}")
    return l2 * l2 / (2.0 * summed * s * s) + ddg_tau(s, summed) * dimension


@ev._event
class SkellamSumDpEvent(ev.DpEvent):
    """One release of a sum of integer vectors with Skellam noise of aggregate variance
    ``variance`` per coordinate, one record moving the sum by at most ``l2_sensitivity`` in l2
    and ``l1_sensitivity`` in l1 (integer units, the relation's own shift: :func:`sensitivities`
    gives replace-one's, which also bounds add/remove)."""

    l2_sensitivity: float
    l1_sensitivity: float
    variance: float

    def __post_init__(self) -> None:
        for name in ("l2_sensitivity", "l1_sensitivity", "variance"):
            ev._real(self, name, 0.0, math.inf, True, True)
        if self.l1_sensitivity < self.l2_sensitivity:
            raise ValueError(f"SkellamSumDpEvent.l1_sensitivity: must be >= l2_sensitivity, got {self}")

    def rdp(self, orders: Any) -> np.ndarray:
        return skellam_rdp(orders, self.l2_sensitivity, self.l1_sensitivity, self.variance)

    def zcdp_event(self) -> ev.ZCDpEvent:
        """rho-zCDP for generic accountants (every real order; looser than :meth:`rdp`): at integer
        k the bound is k A + min(B1 (2k - 1) / 2 + B0, B) with A = D2^2 / (2 mu); Renyi divergences
        grow with the order, so at alpha in (k - 1, k] it is at most (alpha + 1) A + ..., and every
        such affine bound is at most alpha (2 A + min(B, D2^2 / mu^2 + 3 D1 / (2 mu^2)))."""
        l2, l1, mu = self.l2_sensitivity, self.l1_sensitivity, self.variance
        rest = min(3.0 * l1 / (2.0 * mu), l2 * l2 / mu ** 2 + 3.0 * l1 / (2.0 * mu * mu))
        return ev.ZCDpEvent(2.0 * l2 * l2 / (2.0 * mu) + rest)


@ev._event
class DiscreteGaussianSumDpEvent(ev.DpEvent):
    """One release of a sum of ``summed`` silos' integer vectors, each with N_Z(0, sigma^2) noise
    on its ``dimension`` coordinates, one record moving the sum by at most ``l2_sensitivity``
    (integer units): KLS21 Thm 1, rho of :func:`ddg_rho`."""

    l2_sensitivity: float
    sigma: float
    summed: int
    dimension: int

    def __post_init__(self) -> None:
        ev._real(self, "l2_sensitivity", 0.0, math.inf, True, True)
        ev._real(self, "sigma", 0.5, math.inf, False, True)
        ev._count(self, "summed")
        ev._count(self, "dimension")

    def rdp(self, orders: Any) -> np.ndarray:
        return np.asarray(orders, dtype=float) * self.zcdp_event().rho

    def zcdp_event(self) -> ev.ZCDpEvent:
        return ev.ZCDpEvent(ddg_rho(self.l2_sensitivity, self.sigma, self.summed, self.dimension))


#: The distributed events that the accountants allow-list (silodp.accounting.blocks reads each as
#: its zCDP event).
EVENTS = (SkellamSumDpEvent, DiscreteGaussianSumDpEvent)
#: either distributed sum (what :func:`silodp.accounting.blocks.flatten` reads as zCDP)
DistributedSumEvent = SkellamSumDpEvent | DiscreteGaussianSumDpEvent


class Codec(Protocol):
    """The draws and decodings a simulator supplies to the mechanisms
    (:mod:`silodp.algorithms.distributed` implements them in torch): each mechanism says which of
    them its silo's message and the server's estimate are made of (:meth:`DistributedMechanism.encode`,
    :meth:`~DistributedMechanism.decode`), so no caller compares mechanism names. Arrays are the
    simulator's own type."""

    def round(self, y: Any, p: DistributedParams) -> Any:
        """``y`` over the scale gamma, randomized-rounded to integers (conditional rounding below
        the rounded norm; plain at record level)."""

    def poisson(self, shape: Any, rate: float) -> Any:
        """Independent Poisson(``rate``) integers of ``shape``."""

    def discrete_gaussian(self, shape: Any, sigma: float) -> Any:
        """Independent N_Z(0, ``sigma``^2) integers of ``shape``."""

    def randomize(self, y: Any, p: DistributedParams) -> Any:
        """The binomial protocol's randomizer R_vec of ``y`` on the rotated range (g levels, b trials)."""

    def analyze(self, sums: Any, summed: int, p: DistributedParams) -> Any:
        """The binomial protocol's analyzer A_vec of the centred ``sums`` of ``summed`` silos."""

    def unscale(self, sums: Any, p: DistributedParams) -> Any:
        """The centred integer ``sums`` times the scale gamma (real units)."""


class DistributedMechanism:
    """One kind of distributed noise: what :class:`DistributedParams` asks of its ``mechanism``
    instead of comparing its name (the noise's variance, the event it releases, its tail, its
    certificate and calibration, what a silo draws and how the server decodes). One instance per
    kind, registered in :data:`MECHANISM_KINDS`."""

    #: the name ``DistributedParams.mechanism`` carries (the CLI's ``--mechanism``)
    name: ClassVar[str] = ""
    #: the JSON name of its noise parameter (``silodp distributed``)
    noise_name: ClassVar[str] = ""
    #: whether it certifies record level (``vector_norm``: a silo's vector of many records)
    record_level: ClassVar[bool] = True
    #: the smallest local noise the calibration tries
    min_noise: ClassVar[float] = 1e-6

    def check(self, p: DistributedParams) -> None:
        """ValueError naming the field for a configuration this mechanism cannot run."""

    def noise_variance(self, noise: float) -> float:
        """One silo's noise variance per coordinate (integer units) at noise parameter ``noise``."""
        raise NotImplementedError

    def event(self, p: DistributedParams, l2: float, l1: float) -> ev.DpEvent:
        """The event of one release of ``p`` (sensitivities ``l2``, ``l1`` in integer units)."""
        raise ValueError(f"mechanism: {self.name!r} has no distributed event (its certificate is pvec's)")

    def log_tail(self, p: DistributedParams, t: float) -> float:
        """log of a bound on P[S_j >= t] for one coordinate's centred sum S_j (module docstring)."""
        raise NotImplementedError

    def certified_epsilon(self, p: DistributedParams, delta: float) -> float:
        """The certificate of ``p`` at ``delta`` (wrap not charged here): its event's RDP."""
        return _rdp_epsilon(p, delta)

    def calibrate(self, base: dict[str, Any], eps: float, dp_delta: float, budget: float) -> DistributedParams:
        """The finest configuration of ``base`` certifying ``eps`` at ``dp_delta`` with a wrap
        probability within ``budget``."""
        return _calibrate_scale(self, base, eps, dp_delta, budget)

    def extra(self, p: DistributedParams) -> dict[str, Any]:
        """Its own parameters beside the noise, as ``summary`` prints them."""
        return {}

    def encode(self, codec: Codec, y: Any, p: DistributedParams) -> Any:
        """One silo's integer vector for its rotated, clipped vector ``y`` (before the modular
        reduction): ``y`` over gamma, randomized-rounded, plus this kind's integer noise
        (:meth:`draw`), in that order of draws."""
        rounded = codec.round(y, p)
        return rounded + self.draw(codec, y.shape, p)

    def draw(self, codec: Codec, shape: Any, p: DistributedParams) -> Any:
        """One silo's integer noise of ``shape`` at noise parameter ``p.noise``."""
        raise NotImplementedError

    def centre(self, p: DistributedParams, summed: int) -> int:
        """The integer the server's decoding window is centred on for a sum of ``summed`` silos:
        0 (zero-mean noise)."""
        return 0

    def decode(self, codec: Codec, sums: Any, summed: int, p: DistributedParams) -> Any:
        """The estimate of the sum of ``summed`` silos' rotated vectors from the centred integer
        ``sums``: back to real units (times gamma)."""
        return codec.unscale(sums, p)


class Binomial(DistributedMechanism):
    """The paper's binomial protocol with the rotation (P_vec, certified by :mod:`silodp.accounting.pvec`)."""

    name, noise_name, record_level = "binomial", "trials", False

    def check(self, p: DistributedParams) -> None:
        if int(p.levels) < 1 or p.noise != int(p.noise):
            raise ValueError(f"levels: the binomial needs levels >= 1 and integer trials, got {p}")

    def noise_variance(self, noise: float) -> float:
        return noise / 4.0

    def log_tail(self, p: DistributedParams, t: float) -> float:  # Hoeffding
        s = t - p.silos * p.levels / 2.0 - 0.5
        return -2.0 * s * s / (p.silos * p.noise) if s > 0 else 0.0

    def certified_epsilon(self, p: DistributedParams, delta: float) -> float:
        from silodp.accounting import pvec

        return float(pvec.transcript_epsilon((_binomial_group(p),), delta, pvec.default_interval(1.0)))

    def calibrate(self, base: dict[str, Any], eps: float, dp_delta: float, budget: float) -> DistributedParams:
        return _calibrate_binomial(base, eps, dp_delta, budget)

    def extra(self, p: DistributedParams) -> dict[str, Any]:
        return {"levels": p.levels}

    def encode(self, codec: Codec, y: Any, p: DistributedParams) -> Any:
        """The randomizer R_vec (its binomial noise is part of it)."""
        return codec.randomize(y, p)

    def centre(self, p: DistributedParams, summed: int) -> int:
        """The middle of the binomial sum: ``summed`` (g + b) / 2."""
        return summed * (p.levels + int(p.noise)) // 2

    def decode(self, codec: Codec, sums: Any, summed: int, p: DistributedParams) -> Any:
        """The analyzer A_vec."""
        return codec.analyze(sums, summed, p)


class Skellam(DistributedMechanism):
    """Skellam noise Pois(v/2) - Pois(v/2) per coordinate (AKL21)."""

    name, noise_name = "skellam", "local_variance"

    def noise_variance(self, noise: float) -> float:
        return noise

    def draw(self, codec: Codec, shape: Any, p: DistributedParams) -> Any:
        """Pois(v/2) - Pois(v/2) per coordinate."""
        first = codec.poisson(shape, p.noise / 2.0)
        return first - codec.poisson(shape, p.noise / 2.0)

    def event(self, p: DistributedParams, l2: float, l1: float) -> ev.DpEvent:
        return SkellamSumDpEvent(l2, l1, p.summed * p.noise)

    def log_tail(self, p: DistributedParams, t: float) -> float:  # the Skellam sum's log-MGF
        s0, signal = _rounded_tail(p, t)
        if s0 <= 0:
            return 0.0
        from scipy.optimize import minimize_scalar  # slow to import: off the CLI's light paths

        lam = p.silos * p.noise / 2.0  # each side's Poisson mean in the sum of M Skellams

        def log_mgf(u: float) -> float:
            return u * u * signal / 2.0 + 2.0 * lam * (math.cosh(u) - 1.0) - u * s0

        best = minimize_scalar(log_mgf, bounds=(0.0, 50.0), method="bounded", options={"xatol": 1e-10})
        return min(0.0, float(best.fun))


class DiscreteGaussian(DistributedMechanism):
    """Discrete Gaussian noise N_Z(0, sigma^2) per coordinate (KLS21)."""

    name, noise_name, min_noise = "discrete-gaussian", "local_sigma", MIN_SIGMA

    def check(self, p: DistributedParams) -> None:
        if p.noise < 0.5:
            raise ValueError(f"noise: the discrete Gaussian's sigma must be >= 1/2, got {p.noise}")

    def noise_variance(self, noise: float) -> float:  # at most sigma^2 (Canonne, Kamath & Steinke 2020)
        return noise ** 2

    def draw(self, codec: Codec, shape: Any, p: DistributedParams) -> Any:
        """N_Z(0, sigma^2) per coordinate."""
        return codec.discrete_gaussian(shape, p.noise)

    def event(self, p: DistributedParams, l2: float, l1: float) -> ev.DpEvent:
        return DiscreteGaussianSumDpEvent(l2, p.noise, p.summed, p.padded)

    def log_tail(self, p: DistributedParams, t: float) -> float:  # sigma-sub-Gaussian noise
        s0, signal = _rounded_tail(p, t)
        return -s0 * s0 / (2.0 * (signal + p.silos * p.noise ** 2)) if s0 > 0 else 0.0


#: Every kind of distributed noise by its name, in the order tables list them.
MECHANISM_KINDS: dict[str, DistributedMechanism] = {m.name: m for m in (Binomial(), Skellam(), DiscreteGaussian())}
#: Their names (``--mechanism``'s choices).
MECHANISMS = tuple(MECHANISM_KINDS)
#: The JSON name of each mechanism's noise parameter.
NOISE_NAMES = {name: m.noise_name for name, m in MECHANISM_KINDS.items()}


def get_mechanism(name: str) -> DistributedMechanism:
    """The mechanism object named ``name`` (ValueError naming ``mechanism`` otherwise)."""
    if name not in MECHANISM_KINDS:
        raise ValueError(f"mechanism: must be one of {', '.join(MECHANISMS)}, got {name!r}")
    return MECHANISM_KINDS[name]


@dataclasses.dataclass(frozen=True)
class DistributedParams:
    """One configuration of a distributed-noise sum, as every silo runs it.

    ``noise``: the binomial's trials b per silo, the Skellam's local variance v, or the discrete
    Gaussian's local sigma (integer units). ``scale``: gamma, the real value of one integer step
    (binomial: the rotated range's half-width over g / 2). ``levels``: g (binomial only).
    ``silos``: M that send; ``summed``: the fewest whose noise the certificate counts."""

    mechanism: str
    dimension: int
    clip: float
    silos: int
    summed: int
    bits: int
    rounds: int
    noise: float
    scale: float
    levels: int = 0
    beta: float = ROUNDING_BETA
    #: record level (module docstring): the bound on each silo's vector, ``clip`` then bounding
    #: one record's contribution; 0: the vector itself is clipped to ``clip``
    vector_norm: float = 0.0

    def __post_init__(self) -> None:
        kind = get_mechanism(self.mechanism)
        check_count("dimension", self.dimension)
        check_positive("clip", self.clip)
        check_count("silos", self.silos)
        check_count("summed", self.summed)
        if self.summed > self.silos:
            raise ValueError(f"summed: at most silos={self.silos}, got {self.summed}")
        if not 2 <= int(self.bits) <= 62:
            raise ValueError(f"bits: must be in [2, 62], got {self.bits}")
        check_count("rounds", self.rounds)
        check_positive("noise", self.noise)
        check_positive("scale", self.scale)
        check_probability("beta", self.beta)
        if self.vector_norm and (not kind.record_level or not self.vector_norm >= self.clip):
            raise ValueError(f"vector_norm: record level needs Skellam or discrete Gaussian and vector_norm >= clip, "
                             f"got {self.vector_norm} ({self.mechanism})")
        kind.check(self)

    @property
    def kind(self) -> DistributedMechanism:
        """The mechanism object of :attr:`mechanism` (its noise, certificate and calibration)."""
        return get_mechanism(self.mechanism)

    @property
    def modulus(self) -> int:
        return 1 << int(self.bits)

    @property
    def bound(self) -> float:
        """The l2 bound on each silo's vector."""
        return self.vector_norm or self.clip

    @property
    def padded(self) -> int:
        return rotated_dimension(self.dimension)

    def noise_variance(self) -> float:
        """Variance of one silo's noise per coordinate, in integer units (the discrete
        Gaussian's is at most sigma^2, Canonne, Kamath & Steinke 2020)."""
        return self.kind.noise_variance(self.noise)

    def variance(self, silos: int | None = None) -> float:
        """Per-coordinate variance of the decoded sum of ``silos`` (default M) vectors: noise plus
        randomized rounding (at most 1/4 per silo and coordinate), gamma^2 times that, the same
        per original coordinate after the inverse rotation (orthogonal)."""
        m = self.silos if silos is None else silos
        return self.scale ** 2 * m * (self.noise_variance() + 0.25)


def release_event(p: DistributedParams) -> ev.DpEvent:
    """The event of one release of ``p`` (Skellam or discrete Gaussian; the binomial's is
    :func:`silodp.accounting.pvec`'s certificate, not an event here)."""
    return p.kind.event(p, *sensitivities(p.clip / p.scale, p.padded, p.beta, record=bool(p.vector_norm)))


def _binomial_group(p: DistributedParams, trials: int | None = None) -> Any:
    from silodp.accounting import pvec, pvec_l2

    return pvec.PvecGroup(p.rounds, p.levels, int(p.noise if trials is None else trials), p.summed, p.padded,
                          l2=pvec_l2.shift_l2(p.levels, p.dimension, True))


def _rdp_epsilon(p: DistributedParams, delta: float) -> float:
    from silodp.accounting import rdp

    orders = np.asarray(ORDERS, dtype=float)
    event = release_event(p)
    assert isinstance(event, EVENTS)  # what every mechanism with an event releases
    return rdp.epsilon_from_rdp(orders, p.rounds * event.rdp(orders), delta)


def _log_tail(p: DistributedParams, t: float) -> float:
    """log of a bound on P[S_j >= t] for one coordinate's centred sum S_j (module docstring)."""
    return p.kind.log_tail(p, t)


def _rounded_tail(p: DistributedParams, t: float) -> tuple[float, float]:
    """(s0, signal) of the rounded mechanisms' tail: the threshold less the rounding's at most one
    step per silo, and the rotated signal's sub-Gaussian variance proxy (module docstring)."""
    return t - p.silos, (p.silos * p.bound / p.scale) ** 2 / p.padded


def wrap_probability(p: DistributedParams) -> float:
    """Bound on P[some coordinate of some round leaves the decoding window] (module docstring)."""
    log_one = _log_tail(p, p.modulus / 2.0 - 1.0)
    return min(1.0, 2.0 * p.rounds * p.padded * math.exp(log_one))


def certified_epsilon(p: DistributedParams, delta: float) -> float:
    """The certified epsilon of ``p`` at ``delta``: the mechanism's certificate at delta minus the
    wrap probability (+inf when that leaves nothing)."""
    dl = check_delta("delta", delta)
    w = wrap_probability(p)
    if w >= dl:
        return math.inf
    return p.kind.certified_epsilon(p, dl - w)


def _bisect(feasible: Callable[[float], bool], lo: float, hi: float, steps: int = 48) -> float:
    """The smallest x in [lo, hi] (geometric bisection) with ``feasible(x)``; ``feasible(hi)`` holds."""
    for _ in range(steps):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if feasible(mid) else (mid, hi)
    return hi


def _local_noise(kind: DistributedMechanism, base: dict[str, Any], epsilon: float, delta: float) -> float:
    """The smallest local noise certifying ``epsilon`` at ``delta`` (wrap not charged here)."""
    def ok(v: float) -> bool:
        return _rdp_epsilon(DistributedParams(kind.name, noise=v, **base), delta) <= epsilon

    lo = kind.min_noise
    if ok(lo):
        return lo
    hi = lo
    while not ok(hi):
        hi *= 16.0
        if hi > 1e30:
            raise ValueError(f"epsilon={epsilon:g} is unreachable at delta={delta:g}")
    return _bisect(ok, lo, hi)


@functools.lru_cache(maxsize=256)
def calibrate(mechanism: str, dimension: int, clip: float, silos: int, bits: int, epsilon: float, delta: float,
              rounds: int = 1, summed: int | None = None, vector_norm: float | None = None) -> DistributedParams:
    """The finest configuration at ``bits`` that certifies (``epsilon``, ``delta``) with
    ``summed`` silos' noise (default all ``silos``) and a wrap probability at most WRAP_SHARE delta:
    Skellam / discrete Gaussian: the smallest step gamma whose calibrated noise keeps the wrap
    within budget; binomial: the most levels g (trials b by :func:`pvec.calibrate_noise`)."""
    eps, dl = check_positive("epsilon", epsilon), check_delta("delta", delta)
    base: dict[str, Any] = dict(dimension=check_count("dimension", dimension), clip=check_positive("clip", clip),
                                silos=check_count("silos", silos),
                                summed=check_count("summed", silos if summed is None else summed),
                                bits=int(bits), rounds=check_count("rounds", rounds))
    kind = get_mechanism(mechanism)
    if vector_norm:
        if not kind.record_level:
            raise ValueError(f"vector_norm: the {kind.name} certifies one record per message (the SDP algorithms)")
        base["vector_norm"] = check_positive("vector_norm", vector_norm)
    return kind.calibrate(base, eps, (1.0 - WRAP_SHARE) * dl, WRAP_SHARE * dl)


def _calibrate_scale(kind: DistributedMechanism, base: dict[str, Any], eps: float, dp_delta: float,
                     budget: float) -> DistributedParams:
    """Skellam / discrete Gaussian: the smallest step gamma whose calibrated local noise keeps the
    wrap probability within ``budget``."""
    def at(gamma: float) -> DistributedParams:
        scaled = dict(base, scale=gamma)
        return DistributedParams(kind.name, noise=_local_noise(kind, scaled, eps, dp_delta), **scaled)

    def fits(gamma: float) -> bool:
        return wrap_probability(at(gamma)) <= budget

    hi = base.get("vector_norm", base["clip"])
    while not fits(hi):
        hi *= 8.0
        if hi > base.get("vector_norm", base["clip"]) * 1e12:
            raise ValueError(f"bits: {base['bits']} bits cannot hold the sum of {base['silos']} silos at epsilon={eps:g}")
    return at(_bisect(fits, hi * 1e-9, hi, steps=40))


def _calibrate_binomial(base: dict[str, Any], eps: float, dp_delta: float, budget: float) -> DistributedParams:
    from silodp.accounting import pvec

    gamma_rot = pvec.rotated_bound(base["clip"], base["dimension"])

    def at(g: int) -> DistributedParams:
        probe = DistributedParams("binomial", noise=1, scale=1.0, levels=g, **base)
        (b,), _ = pvec.calibrate_noise((_binomial_group(probe, 1),), (1.0,), eps, dp_delta, pvec.default_interval(1.0))
        return DistributedParams("binomial", noise=b, scale=2.0 * gamma_rot / g, levels=g, **base)

    # b grows as g^2 (the certificate is scale-free in the shift over the noise's sd): the wrap
    # bound then caps g in closed form; step down 5% at a time until the exact check passes
    m, logs = base["silos"], math.log(2.0 * base["rounds"] * rotated_dimension(base["dimension"]) / budget)
    ref = at(REFERENCE_LEVELS)
    per = ref.noise / REFERENCE_LEVELS ** 2
    g = math.floor((2.0 ** (base["bits"] - 1) - 1.5) / (m / 2.0 + math.sqrt(m * per * logs / 2.0)))
    g = min(g, MAX_LEVELS, math.floor(math.sqrt(0.5 * MAX_TRIALS / (m * per))))
    for _ in range(64):
        if g < 1:
            break
        p = ref if g == REFERENCE_LEVELS else at(g)
        if wrap_probability(p) <= budget:
            return p
        g = min(g - 1, math.floor(0.95 * g))
    raise ValueError(f"bits: {base['bits']} bits cannot hold the binomial sum of {m} silos")


def central_variance(dimension: int, clip: float, epsilon: float, delta: float, rounds: int = 1) -> float:
    """Central DP's per-coordinate variance for the same transcript: the analytic Gaussian (Balle &
    Wang 2018) on ``rounds`` releases of the sum, replace-one sensitivity 2 ``clip`` (R Gaussian
    releases at sigma are one at sigma / sqrt(R))."""
    from silodp.accounting import gaussian

    sigma = gaussian.sigma_for_budget(epsilon, delta, sensitivity=2.0 * clip * math.sqrt(check_count("rounds", rounds)))
    return sigma * sigma


def availability_floor(num_silos: int, mean_silos: int, draws: int, tail: float) -> tuple[int, float]:
    """Random availability (paper Assumption 6: M_r = max(1, Bin(N, M/N)) silos per draw): the
    largest floor k whose lower tail over ``draws`` independent draws, draws P[M_r < k] (union
    bound), is at most ``tail``; returns (k, that charge). A declaration at k certifies every
    draw of at least k silos; the charge goes to delta (the ledger refuses a sum of fewer)."""
    from silodp.accounting import _binomial

    n, m = check_count("num_silos", num_silos), check_count("mean_silos", mean_silos)
    if m > n:
        raise ValueError(f"mean_silos: at most num_silos={n}, got {m}")
    draws, tail = check_count("draws", draws), check_probability("tail", tail)
    best, charge = 1, 0.0
    for k in range(2, n + 1):
        c = draws * float(_binomial.cdf(k - 1, n, m / n))
        if c > tail:
            break
        best, charge = k, c
    return best, charge


def summary(p: DistributedParams, epsilon: float, delta: float) -> dict[str, Any]:
    """What ``silodp distributed`` prints for ``p`` at the target (``epsilon``, ``delta``)."""
    var = p.variance()
    central = central_variance(p.dimension, p.clip, epsilon, delta, p.rounds)
    out: dict[str, Any] = {"mechanism": p.mechanism, "noise_parameter": p.noise,
                           "noise_parameter_name": p.kind.noise_name, "scale": p.scale, **p.kind.extra(p)}
    out.update(bits=int(p.bits), modulus=p.modulus, wrap_probability=wrap_probability(p), variance=var,
               central_variance=central, ratio=var / central, epsilon=certified_epsilon(p, delta),
               delta=delta, silos=p.silos, summed=p.summed, rounds=p.rounds)
    return out


def comparison_table(dimension: int = 1024, clip: float = 1.0, silos: int = 10, rounds: int = 50,
                     epsilon: float = 3.0, delta: float = 1e-5, bits: tuple[int, ...] = tuple(range(8, 25, 2))) -> str:
    """Markdown: each mechanism's variance over central DP's at equal (``epsilon``, ``delta``) per
    secure-aggregation bit width, with its certified epsilon (rounded up); "-" where the sum does
    not fit in that many bits at any noise (docs/shuffle.md, ``benchmarks/distributed_table.py``)."""
    from silodp._validation import round_up

    lines = ["| bits | binomial: ratio (g, eps) | Skellam: ratio (eps) | discrete Gaussian: ratio (eps) |",
             "|---|---|---|---|"]
    for width in bits:
        cells = []
        for mech in MECHANISMS:
            try:
                p = calibrate(mech, dimension, clip, silos, width, epsilon, delta, rounds)
            except ValueError:
                cells.append("-")
                continue
            s = summary(p, epsilon, delta)
            extra = "".join(f"{'g' if k == 'levels' else k} = {v}, " for k, v in p.kind.extra(p).items())
            cells.append(f"{round_up(s['ratio'], 3)} ({extra}{round_up(s['epsilon'], 4)})")
        lines.append(f"| {width} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
