"""The one release primitive (silodp.algorithms.release) against a malicious server's numbers.

Each leak of issue 34 that lives in the numbers has a test here that failed before the fix:
leak 1 (a finite model aimed at one record: ``inf - inf`` logits made the clip factor, then the
whole message, NaN), leak 4 (the clipped update rounded onto the server's float grid before the
noise: the release centre moved 3.87 C between neighbours instead of 2 C) and leak 5 (the SecAgg+
silo encoded a NaN term). Property tests (hypothesis) then run every message kind over adversarial
finite models: the release is finite and two neighbouring datasets' clipped sums differ by at most
the declared replace-one sensitivity.
"""

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from silodp.algorithms import Problem, lenet, linear_model, mlp
from silodp.algorithms.grads import (
    clipped_diff_sum,
    clipped_grad_sum,
    clipped_per_sample,
    clipped_per_sample_diff,
    per_sample_grads,
)
from silodp.algorithms.release import (
    REFUSALS,
    Refusal,
    check_model,
    clip_rows,
    clip_update,
    gaussian_release,
    log_norms,
    noise_std,
)
from silodp.integrations.secagg import checked_models, clipped_grads

MAX = torch.finfo(torch.float64).max
METHODS = ("ghost", "materialize")


def aimed_model(d: int, a: int, b: int, t_a: float, t_b: float) -> torch.Tensor:
    """Issue 34's leak-1 model: ``w[a] = MAX / t_a``, ``w[b] = -MAX / t_b``; a record's logit is
    ``inf - inf = NaN`` exactly when ``x_a > t_a`` and ``x_b > t_b``."""
    w = torch.zeros(d + 1, dtype=torch.float64)
    w[a], w[b] = MAX / t_a, -MAX / t_b
    return w


def neighbours(k: int = 8, d: int = 4, seed: int = 0):
    """A silo of ``k`` records in [-1, 1]^d and its neighbour with record 3 replaced by one above
    both thresholds (x_0 = x_1 = 0.9)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(1, k, d, generator=gen, dtype=torch.float64) * 0.8 - 0.4  # |x| <= 0.4: below the thresholds
    y = torch.randint(0, 2, (1, k), generator=gen).double()
    x2 = x.clone()
    x2[0, 3, :2] = 0.9
    return x, x2, y


@pytest.mark.parametrize("method", METHODS)
def test_leak1_a_record_aimed_at_contributes_zero_not_a_nan_message(method):
    problem = Problem(linear_model(4), "logistic", clip=1.0)
    x, x2, y = neighbours()
    w = aimed_model(4, 0, 1, 0.5, 0.5)
    weights = torch.full((1, 8), 1 / 8, dtype=torch.float64)
    clean = clipped_grad_sum(problem, w, x, y, weights, 1.0, method)
    aimed = clipped_grad_sum(problem, w, x2, y, weights, 1.0, method)
    assert torch.isfinite(clean).all() and torch.isfinite(aimed).all()  # before the fix: aimed was all NaN
    assert float((clean - aimed).norm()) <= 2 * 1.0 / 8 * (1 + 1e-12)  # replace-one: 2 C / K
    # the aimed record contributes exactly zero: removing it from the sum changes nothing
    keep = torch.ones(1, 8, dtype=torch.bool)
    keep[0, 3] = False
    without = clipped_grad_sum(problem, w, x2, y, weights * keep, 1.0, method)
    assert torch.equal(aimed, without)


def test_leak1_per_sample_rows_and_secagg_terms_are_finite():
    problem = Problem(linear_model(4), "logistic", clip=1.0)
    _, x2, y = neighbours()
    w = aimed_model(4, 0, 1, 0.5, 0.5)
    rows = clipped_per_sample(problem, w, x2, y, 1.0)
    assert torch.isfinite(rows).all() and float(rows[0, 3].abs().max()) == 0.0
    # leak 5, the SecAgg+ silo: its logistic terms (bias last) at the aimed model
    terms = clipped_grads(w.numpy(), x2[0].numpy(), y[0].numpy(), 1.0)  # same layout: weights, bias last
    assert np.isfinite(terms).all() and np.abs(terms[3]).max() == 0.0
    assert (np.linalg.norm(terms, axis=1) <= 1.0 + 1e-12).all()
    with pytest.raises(Refusal, match="not finite"):
        checked_models([np.full(5, np.nan)], 5)
    with pytest.raises(Refusal, match="shape"):
        checked_models([np.zeros(4)], 5)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("diff_clip", [None, 0.5])
def test_shuffle_differences_drop_the_whole_record_non_finite_at_either_point(method, diff_clip):
    """The shuffle path's per-record differences: a record non-finite at one point (the aimed
    model) is a zero contribution of that record, its finite side dropped too, as the Gaussian
    path (``clipped_diff_sum``) does; before, only the non-finite side was zeroed and the record
    released ``-clip(grad f0(w_old, x))``, a term the aimed record chose to send."""
    problem = Problem(linear_model(4), "logistic", clip=1.0)
    _, x2, y = neighbours()
    w, w_old = aimed_model(4, 0, 1, 0.5, 0.5), torch.full((5,), 0.3, dtype=torch.float64)
    rows = clipped_per_sample_diff(problem, w, w_old, x2, y, 1.0, diff_clip, method)
    assert torch.isfinite(rows).all() and float(rows[0, 3].abs().max()) == 0.0
    old_side = clipped_per_sample(problem, w_old, x2, y, 1.0)[0, 3]
    assert float(old_side.norm()) > 0.1  # the finite side the old composition released
    for point in (w, w_old):  # either order: the record is dropped
        other = w_old if point is w else w
        rows = clipped_per_sample_diff(problem, point, other, x2, y, 1.0, diff_clip, method)
        assert float(rows[0, 3].abs().max()) == 0.0
    # the other records equal the difference of their clipped gradients; the sum equals the Gaussian path's
    ref = clipped_per_sample(problem, w, x2, y, 1.0) - clipped_per_sample(problem, w_old, x2, y, 1.0)
    finite = [torch.isfinite(per_sample_grads(problem, p.expand(1, -1), x2, y)).all(-1)[0] for p in (w, w_old)]
    keep = finite[0] & finite[1]  # record 3 (and any other record the aimed model makes non-finite) dropped
    assert not keep[3] and keep.sum() >= 4
    assert float(rows[0, ~keep].abs().max()) == 0.0
    ref = ref if diff_clip is None else clip_rows(ref, diff_clip)
    rows = clipped_per_sample_diff(problem, w, w_old, x2, y, 1.0, diff_clip, method)
    assert torch.allclose(rows[0, keep], ref[0, keep], rtol=1e-12, atol=0)
    weights = torch.full((1, 8), 1 / 8, dtype=torch.float64)
    gaussian = clipped_diff_sum(problem, w, w_old, x2, y, weights, 1.0, diff_clip, method)
    assert torch.allclose(torch.einsum("nk,nkd->nd", weights, rows), gaussian, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("method", METHODS)
def test_norms_do_not_overflow(method):
    """A record whose squared norm overflows (gradient ~1e160) is clipped to norm C in its own
    direction, not dropped and not NaN."""
    problem = Problem(linear_model(3), "squared", clip=0.5)
    x = torch.zeros(1, 2, 3, dtype=torch.float64)
    x[0, 0, 0] = 1e160  # gradient (0 - y) x = -1e160 e_0, and the bias -1
    y = torch.ones(1, 2, dtype=torch.float64)
    out = clipped_grad_sum(problem, torch.zeros(4, dtype=torch.float64), x, y, torch.ones(1, 2, dtype=torch.float64),
                           0.5, method)
    expected = torch.tensor([[-0.5, 0.0, 0.0, -0.5 - 0.5e-160]], dtype=torch.float64)  # record 2: bias -1, clipped
    assert torch.allclose(out, expected, rtol=1e-12, atol=1e-300)
    row = clip_rows(torch.tensor([[3e300, 4e300], [3e-320, 4e-320], [math.inf, 0.0]], dtype=torch.float64), 1.0)
    assert torch.allclose(row[0], torch.tensor([0.6, 0.8], dtype=torch.float64))
    assert torch.equal(row[2], torch.zeros(2, dtype=torch.float64))
    assert float(log_norms(torch.tensor([[3e300, 4e300]], dtype=torch.float64))[0]) == pytest.approx(math.log(5e300))


def test_ordinary_rows_are_clipped_bit_for_bit_as_before():
    gen = torch.Generator().manual_seed(3)
    g = torch.randn(4, 6, 5, generator=gen, dtype=torch.float64)
    before = g * torch.clamp(1.0 / torch.clamp((g * g).sum(-1).sqrt(), min=1e-30), max=1.0).unsqueeze(-1)
    assert torch.equal(clip_rows(g, 1.0), before)


def _release_centre(old_value: float, direction: float, trials: int, seed: int) -> np.ndarray:
    from silodp.integrations.flower import privatize

    d = 15
    old = [np.full(d, old_value)]
    new = [old[0] + direction]  # on the grid: norm sqrt(15), clipped to C = 1 (0.258 per coordinate)
    rng = np.random.default_rng(seed)
    out = np.stack([privatize(new, old, 1.0, 2.0, rng)[0] - old_value for _ in range(trials)])  # exact differences
    return out.mean(0)


def test_leak4_noise_meets_the_clipped_update_before_the_servers_grid():
    """``old`` at 1.5 * 2**51 (a float grid of 0.5): with the noise added after ``old``, the release
    centres of two neighbouring updates (+C and -C along one direction) were 3.87 C apart (each
    coordinate's 0.258 rounded to 0.5); noise first, they are 2 C apart, as the certificate assumes.
    Monte Carlo, 4,000 draws of noise std 2 per coordinate: the centre's standard error is 0.032 per
    coordinate, 0.12 in norm; tolerance 0.4."""
    old = 1.5 * 2.0 ** 51
    gap = np.linalg.norm(_release_centre(old, 1.0, 4000, 1) - _release_centre(old, -1.0, 4000, 2))
    assert abs(gap - 2.0) < 0.4, gap


def test_noise_first_then_the_offset_exactly():
    """``offset + (term + noise)``: with term 0.2, noise 0.1 and an offset on a 0.5 grid, the sum
    rounds up to the next grid point (0.3 > 0.25); ``(offset + term) + noise`` would stay."""
    offset = torch.full((3,), 1.5 * 2.0 ** 51, dtype=torch.float64)
    out = gaussian_release(torch.full((3,), 0.2, dtype=torch.float64), 0.1, None, offset,
                           noise=torch.full((3,), 0.1, dtype=torch.float64))
    assert torch.equal(out - offset, torch.full((3,), 0.5, dtype=torch.float64))


def test_a_non_finite_release_is_refused_with_a_fixed_text():
    with pytest.raises(Refusal) as info:
        gaussian_release(torch.zeros(3), 1.0, torch.Generator().manual_seed(0), torch.tensor([MAX, 0.0, 0.0]) * 2)
    assert str(info.value) == REFUSALS["non-finite"]
    with pytest.raises(Refusal, match="noise"):
        gaussian_release(torch.zeros(3), math.nan, None)
    from silodp.integrations.flower import privatize

    with pytest.raises(Refusal, match="not be finite"):  # float32 arrays at 3e38: the noised release overflows
        privatize([np.full(4, 3.4e38, np.float32)], [np.full(4, 3.4e38, np.float32)], 1.0, 1e38,
                  np.random.default_rng(0))


def test_a_non_finite_update_is_the_zero_update():
    assert torch.equal(clip_update(torch.tensor([math.nan, 1.0]), 1.0), torch.zeros(2))
    assert torch.allclose(clip_update(torch.tensor([3e307, 4e307], dtype=torch.float64), 2.0),
                          torch.tensor([1.2, 1.6], dtype=torch.float64))


@pytest.mark.parametrize("model,shape,loss", [(linear_model(4), (4,), "logistic"), (mlp(5, [7, 3]), (5,), "logistic"),
                                              (linear_model(4, 3), (4,), "softmax"), (linear_model(2), (2,), "squared"),
                                              (lenet(1, 16, 4), (1, 16, 16), "softmax")])
def test_check_model_passes_ordinary_models_and_refuses_unevaluable_ones(model, shape, loss):
    problem = Problem(model, loss, clip=1.0)
    w = model.init(torch.Generator().manual_seed(0)) + 0.1
    check_model(problem, w, 10.0)  # an ordinary model passes
    for bad in (torch.full_like(w, MAX / 4), torch.where(torch.arange(model.dim) == 0, MAX / 2, w)):
        with pytest.raises(Refusal) as info:
            check_model(problem, bad, 10.0)
        assert str(info.value) == REFUSALS["model"]
    with pytest.raises(Refusal, match="shape"):
        check_model(problem, w[:-1], 10.0)
    with pytest.raises(ValueError, match="input_bound"):
        check_model(problem, w, math.inf)


def test_check_model_refuses_the_aimed_model_without_reading_a_record():
    problem = Problem(linear_model(4), "logistic", clip=1.0)
    with pytest.raises(Refusal):
        check_model(problem, aimed_model(4, 0, 1, 0.5, 0.5), 1.0)


# -- property tests: every message kind over adversarial finite models ------------------------
HOSTILE = st.one_of(
    st.sampled_from([0.0, 1.0, -1.0, MAX, -MAX, MAX / 3, 5e-324, -5e-324, 2.2250738585072014e-308, 1e154, -1e154,
                     1e-154, 1e300, -1e300]),
    st.floats(-1e3, 1e3, allow_nan=False),
    st.floats(allow_nan=False, allow_infinity=False),
)
PROPERTY = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _models():
    return st.sampled_from([(linear_model(4), "logistic"), (mlp(4, [3]), "logistic"), (linear_model(4, 3), "softmax"),
                            (linear_model(4), "squared")])


@PROPERTY
@given(spec=_models(), data=st.data(), method=st.sampled_from(METHODS), clip=st.sampled_from([1e-3, 1.0, 50.0]))
def test_property_grad_messages_are_finite_and_within_the_sensitivity(spec, data, method, clip):
    model, loss = spec
    problem = Problem(model, loss, clip=clip)
    w = torch.tensor(data.draw(st.lists(HOSTILE, min_size=model.dim, max_size=model.dim)), dtype=torch.float64)
    x, x2, y = neighbours(6, 4, seed=data.draw(st.integers(0, 3)))
    if loss == "softmax":
        y = (y * 2).clamp(max=2)
    weights = torch.full((1, 6), 1 / 6, dtype=torch.float64)
    a = clipped_grad_sum(problem, w, x, y, weights, clip, method)
    b = clipped_grad_sum(problem, w, x2, y, weights, clip, method)
    assert torch.isfinite(a).all() and torch.isfinite(b).all()
    assert float((a - b).norm()) <= 2 * clip / 6 * (1 + 1e-9)
    released = gaussian_release(a[0], 1.0, torch.Generator().manual_seed(0))
    assert torch.isfinite(released).all()


@PROPERTY
@given(data=st.data(), clip=st.sampled_from([1e-3, 1.0]), diff_clip=st.sampled_from([None, 0.5]))
def test_property_diff_messages_are_finite_and_within_the_sensitivity(data, clip, diff_clip):
    problem = Problem(mlp(4, [3]), "logistic", clip=clip)
    d = problem.model.dim
    w, w_old = (torch.tensor(data.draw(st.lists(HOSTILE, min_size=d, max_size=d)), dtype=torch.float64)
                for _ in range(2))
    x, x2, y = neighbours(5, 4, seed=data.draw(st.integers(0, 3)))
    bound = 2 * clip if diff_clip is None else diff_clip

    def diff(xs):
        return clipped_per_sample_diff(problem, w, w_old, xs, y, clip, diff_clip).sum(1)

    a, b = diff(x), diff(x2)
    assert torch.isfinite(a).all() and torch.isfinite(b).all()
    assert float((a - b).norm()) <= 2 * bound * (1 + 1e-9)


@PROPERTY
@given(data=st.data())
def test_property_update_releases_are_finite_and_within_the_sensitivity(data):
    from silodp.integrations.flower import privatize

    old = np.array(data.draw(st.lists(st.floats(-1e300, 1e300, allow_nan=False), min_size=5, max_size=5)))
    new_a = np.array(data.draw(st.lists(HOSTILE, min_size=5, max_size=5)))
    new_b = np.array(data.draw(st.lists(HOSTILE, min_size=5, max_size=5)))
    centres = []
    for new in (new_a, new_b):
        with np.errstate(over="ignore", invalid="ignore"):
            delta = torch.from_numpy(new - old)
        centres.append(clip_update(delta, 1.0))
        try:
            out = privatize([new], [old], 1.0, 1.0, np.random.default_rng(0))[0]
        except Refusal:  # refused: nothing released (an offset near MAX plus noise can overflow)
            continue
        assert np.isfinite(out).all()
    assert float((centres[0] - centres[1]).norm()) <= 2.0 * (1 + 1e-12)


@PROPERTY
@given(data=st.data())
def test_property_secagg_terms_are_finite_and_clipped(data):
    w = np.array(data.draw(st.lists(HOSTILE, min_size=5, max_size=5)))
    x, x2, y = neighbours(6, 4, seed=data.draw(st.integers(0, 3)))
    a = clipped_grads(w, x[0].numpy(), y[0].numpy(), 1.0).sum(0)
    b = clipped_grads(w, x2[0].numpy(), y[0].numpy(), 1.0).sum(0)
    assert np.isfinite(a).all() and np.isfinite(b).all()
    assert np.linalg.norm(a - b) <= 2.0 * (1 + 1e-9)


def test_a_zero_row_keeps_factor_one_even_at_a_zero_clip():
    from silodp.algorithms.release import factors_from_log_norms

    got = factors_from_log_norms(torch.tensor([-math.inf, 0.0, math.nan], dtype=torch.float64), torch.tensor(0.0))
    assert torch.equal(got, torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_all_finite_matches_the_entrywise_test(dtype):
    """all_finite (a sum first) agrees with isfinite(t).all() on exact small cases: an infinity,
    a NaN, infinities of both signs (their sum is NaN), and finite entries whose sum overflows."""
    from silodp.algorithms.release import all_finite

    big = torch.finfo(dtype).max
    cases = [torch.ones(3, 4, dtype=dtype), torch.tensor([1.0, math.inf], dtype=dtype),
             torch.tensor([math.nan, 1.0], dtype=dtype), torch.tensor([math.inf, -math.inf], dtype=dtype),
             torch.tensor([-math.inf, 0.0], dtype=dtype), torch.full((4,), big, dtype=dtype),
             torch.tensor([big, -big, big], dtype=dtype), torch.zeros(0, dtype=dtype)]
    for t in cases:
        assert all_finite(t) == bool(torch.isfinite(t).all()), t
    assert all_finite(torch.full((4,), big, dtype=dtype))  # the sum overflows, the entries are finite
    assert not all_finite(torch.tensor([math.inf, -math.inf], dtype=dtype))


@pytest.mark.parametrize("z, clip", [(1.1, 0.1), (0.7, 3.0), (2.9, 1e-3), (1 / 3, 7.0), (5.0, 1.0)])
def test_noise_std_rounds_toward_more_privacy(z, clip):
    """``noise_std`` is z C rounded up: the multiplier it realises is never below the one a ledger
    charges, and it is at most one ulp above z C."""
    std = noise_std(z, clip)
    assert std / clip >= z and std >= z * clip and std <= math.nextafter(z * clip, math.inf) * (1 + 1e-15)


def _float32_magnitudes(gen: torch.Generator, n: int) -> torch.Tensor:
    """Signed float32 values of every magnitude from the subnormals (1e-44) to 1e38."""
    exps = torch.rand(n, generator=gen, dtype=torch.float64) * 82 - 44
    signs = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0).to(torch.float64)
    return (signs * 10.0 ** exps).to(torch.float32)


def test_a_float32_release_is_the_float64_sum_rounded_once_bit_for_bit():
    """``dtype=float32`` with float32 term and noise and no offset adds in float32: bit for bit the
    float64 route (``(term + noise)`` in float64, then one rounding to float32; Figueroa's double
    rounding theorem, 53 >= 2 * 24 + 2), over random pairs of every magnitude (subnormals included),
    pairs of close magnitudes (cancellation) and exact ties (1 + 2^-24 rounds to even)."""
    gen = torch.Generator().manual_seed(0)
    a, b = _float32_magnitudes(gen, 200_000), _float32_magnitudes(gen, 200_000)
    close = (a * (1 + torch.randn(200_000, generator=gen) * 1e-3)).to(torch.float32)
    ties = torch.tensor([1.0, 1.0 + 2.0 ** -23, 3.0, -1.0, 2.0 ** -126], dtype=torch.float32)
    halves = torch.tensor([2.0 ** -24, 2.0 ** -24, 2.0 ** -23, -(2.0 ** -24), 2.0 ** -150], dtype=torch.float32)
    for term, noise in [(a, b), (a, -close), (ties, halves)]:
        want = (term.to(torch.float64) + noise.to(torch.float64)).to(torch.float32)
        got = gaussian_release(term, 1.0, None, noise=noise.clone(), dtype=torch.float32)
        assert got.dtype == torch.float32 and torch.equal(got.view(torch.int32), want.view(torch.int32))
    # with an offset (float64 or float32, per silo or broadcast) the sum stays in float64, noise
    # first, and is rounded once at the end
    term, noise = a[:1000].view(10, 100), b[:1000].view(10, 100)
    for offset in (_float32_magnitudes(gen, 1000).view(10, 100).to(torch.float64), _float32_magnitudes(gen, 1000).view(10, 100),
                   _float32_magnitudes(gen, 100)):
        got = gaussian_release(term, 1.0, None, offset, noise=noise.clone(), dtype=torch.float32)
        want = (offset.to(torch.float64) + (term.to(torch.float64) + noise.to(torch.float64))).to(torch.float32)
        assert torch.equal(got.view(torch.int32), want.view(torch.int32))


@pytest.mark.parametrize("offset", [None, torch.zeros(3, dtype=torch.float64)])
def test_a_release_finite_in_float64_but_not_in_its_dtype_is_refused(offset):
    """3e38 + 3e38 is finite in float64 and infinite in float32: released as float32 it is refused
    (the float64 route rounded to float32 afterwards released an infinity)."""
    term = torch.full((3,), 3e38, dtype=torch.float32)
    assert torch.isfinite(gaussian_release(term, 1.0, None, offset, noise=term.clone())).all()  # float64
    with pytest.raises(Refusal) as info:
        gaussian_release(term, 1.0, None, offset, noise=term.clone(), dtype=torch.float32)
    assert str(info.value) == REFUSALS["non-finite"]
