"""silodp.algorithms.draws: ``randn`` / ``rand`` equal torch's every bit, and leave the generator in
torch's state byte for byte, over seeds, sizes (every size mod 16 from 16 to 48, 1, 15, large),
shapes, dtypes and engine states; a kind whose self-check fails, or numba missing, runs torch's own
call; a seeded MB-SGD and SPIDER run are the same bit for bit with the compiled draws and without."""

import sys

import numpy as np
import pytest
import torch

from silodp.algorithms import Federation, IsrlMBSGD, IsrlSpider, Problem, draws, mlp

KINDS = {"randn": torch.randn, "rand": torch.rand}
DTYPES = (torch.float32, torch.float64)
SIZES = [1, 15, *range(16, 49), 623, 624, 625, 1000, 83225]
SHAPES = [(25, 37), (3, 5, 7), (4, 1), (2, 8), ()]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _assert_same(ours: torch.Tensor, theirs: torch.Tensor, g_ours, g_theirs) -> None:
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    assert torch.equal(_bits(ours), _bits(theirs))
    assert torch.equal(g_ours.get_state(), g_theirs.get_state())


def _twins(seed: int, skip: int = 0):
    a, b = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    if skip:
        torch.rand(skip, generator=a)
        torch.rand(skip, generator=b)
    return a, b


@pytest.fixture
def compiled():
    pytest.importorskip("numba")
    return draws


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_values_and_state_equal_torch_bit_for_bit(compiled, kind, dtype):
    """Every size and shape, from a fresh seed and from states part way through a block of 624
    words (0, 1, 311 and 623 words drawn before), over several seeds; each draw continues the last."""
    fn, ours = KINDS[kind], getattr(draws, kind)
    for seed in (0, 1, 7, 2024, 2**40 + 3):
        for skip in (0, 1, 311, 623):
            g1, g2 = _twins(seed, skip)
            for shape in [(n,) for n in SIZES] + SHAPES:
                _assert_same(ours(shape, g1, dtype), fn(shape, generator=g2, dtype=dtype), g1, g2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_many_seeds_on_the_benchmark_shapes(compiled, dtype):
    for seed in range(40):
        g1, g2 = _twins(seed, skip=seed * 37)
        for kind, shape in (("randn", (25, 3329)), ("rand", (25, 1234)), ("randn", (3, 50)), ("rand", (25, 50))):
            _assert_same(getattr(draws, kind)(shape, g1, dtype), KINDS[kind](shape, generator=g2, dtype=dtype), g1, g2)


def test_the_compiled_draws_run_and_match_torch_here(compiled):
    """The canary for a torch upgrade: on an AVX2 / AVX512 CPU every kind passes its self-check
    (the compiled path runs). If this fails after an upgrade, torch changed its draws: re-read its
    sources (the module's docstring lists them); until then every draw is torch's own call."""
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("torch's float32 normals take another kernel on this CPU (the self-check decides)")
    draws.randn(16, torch.Generator(), torch.float32)
    draws.randn(16, torch.Generator(), torch.float64)
    draws.rand(1, torch.Generator(), torch.float32)
    draws.rand(1, torch.Generator(), torch.float64)
    status = draws.status()
    assert {k: status[k] for k in ("randn float32", "randn float64", "rand float32", "rand float64")} == dict.fromkeys(
        ("randn float32", "randn float64", "rand float32", "rand float64"), "numba")


def test_interleaved_with_torch_calls_the_stream_stays_torchs(compiled):
    """Draws of both kinds and dtypes, random sizes, between torch's own calls (its cached scalar
    normal of a small randn included) on one generator: equal to a twin drawing with torch only."""
    plan = np.random.default_rng(0)
    g1, g2 = _twins(11)
    for _ in range(300):
        kind = ("randn", "rand")[plan.integers(2)]
        dtype = DTYPES[plan.integers(2)]
        n = int(plan.choice([1, 3, 15, 16, 17, 100, 700, 1300]))
        if plan.random() < 0.25:  # torch itself on both
            _assert_same(KINDS[kind](n, generator=g1, dtype=dtype), KINDS[kind](n, generator=g2, dtype=dtype), g1, g2)
        else:
            _assert_same(getattr(draws, kind)(n, g1, dtype), KINDS[kind](n, generator=g2, dtype=dtype), g1, g2)


def test_the_cached_normal_in_the_state_is_kept(compiled):
    """A small randn leaves torch's cached Box-Muller value in the generator; a compiled draw keeps it
    (state bytes equal), and the next small randn reads the same cached value on both."""
    for dtype in DTYPES:
        g1, g2 = _twins(5)
        _assert_same(torch.randn(3, generator=g1, dtype=dtype), torch.randn(3, generator=g2, dtype=dtype), g1, g2)
        _assert_same(draws.randn(40, g1, dtype), torch.randn(40, generator=g2, dtype=dtype), g1, g2)
        _assert_same(draws.rand(40, g1, dtype), torch.rand(40, generator=g2, dtype=dtype), g1, g2)
        _assert_same(torch.randn(1, generator=g1, dtype=dtype), torch.randn(1, generator=g2, dtype=dtype), g1, g2)


def test_torchs_call_where_the_compiled_path_does_not_apply(compiled):
    """Another dtype, fewer than 16 normals, no generator (torch's default one): torch's values."""
    for dtype in (torch.float16, torch.bfloat16):
        g1, g2 = _twins(3)
        _assert_same(draws.randn((5, 9), g1, dtype), torch.randn((5, 9), generator=g2, dtype=dtype), g1, g2)
        _assert_same(draws.rand((5, 9), g1, dtype), torch.rand((5, 9), generator=g2, dtype=dtype), g1, g2)
    assert draws.status()["randn float16"].startswith("torch: a dtype")
    torch.manual_seed(9)
    ours = draws.randn(40, None, torch.float32)
    torch.manual_seed(9)
    assert torch.equal(ours, torch.randn(40))


def test_a_state_torch_would_read_past_is_left_to_torch(compiled):
    """``left`` and ``next`` that set_state accepts but that point past the 624 words: the compiled
    pass draws nothing and leaves the generator as it was."""
    g = torch.Generator().manual_seed(0)
    state = g.get_state()
    raw = state.numpy()
    raw[8:12].view(np.int32)[0] = 600  # left
    raw[16:24].view(np.uint64)[0] = 600  # next: 600 + 599 words to read > 624
    g.set_state(state)
    before = g.get_state()
    assert draws._numba_draw(draws._passes()[("randn", torch.float32)], (32,), g, torch.float32) is None
    assert torch.equal(g.get_state(), before)


def _bad(pass_, how: str):
    """The compiled pass with one bit of one value flipped, or of one of the engine's words."""
    def run(state, out):
        ok = pass_(state, out)
        if how == "value":
            out.view(np.uint32 if out.dtype == np.float32 else np.uint64)[out.size // 2] ^= 1
        else:
            state.view(np.int64)[3 + 100] ^= 1  # the 101st state word
        return ok
    return run


@pytest.mark.parametrize("how", ["value", "state"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_mismatch_switches_that_kind_to_torch(compiled, monkeypatch, kind, how):
    """A compiled pass that differs from torch in one bit (or in the generator's state) fails its
    self-check: that kind and dtype run torch's own call (the values still torch's), the others not."""
    passes = draws._passes()
    monkeypatch.setattr(draws, "_STATUS", {})
    monkeypatch.setitem(passes, (kind, torch.float32), _bad(passes[(kind, torch.float32)], how))
    g1, g2 = _twins(4)
    _assert_same(getattr(draws, kind)((25, 33), g1, torch.float32), KINDS[kind]((25, 33), generator=g2), g1, g2)
    status = draws.status()
    assert status[f"{kind} float32"].startswith("torch: ") and "differs" in status[f"{kind} float32"]
    draws.randn(16, torch.Generator(), torch.float64)
    assert status[f"{kind} float32"] == draws.status()[f"{kind} float32"] and draws.status()["randn float64"] == "numba"


def test_without_numba_every_draw_is_torchs(monkeypatch):
    monkeypatch.setitem(sys.modules, "numba", None)  # `import numba` raises ImportError
    monkeypatch.setattr(draws, "_PASSES", None)
    monkeypatch.setattr(draws, "_STATUS", {})
    for kind, dtype in ((k, d) for k in KINDS for d in DTYPES):
        g1, g2 = _twins(2)
        _assert_same(getattr(draws, kind)((3, 40), g1, dtype), KINDS[kind]((3, 40), generator=g2, dtype=dtype), g1, g2)
    assert set(draws.status().values()) == {"torch: numba is not installed"}


def test_the_switch_off_hook_gives_torchs_call(compiled):
    g1, g2 = _twins(8)
    with draws.torch_draws():
        assert set(draws.status().values()) == {"torch: switched off"}
        _assert_same(draws.randn(100, g1, torch.float32), torch.randn(100, generator=g2), g1, g2)
    assert draws.status()["randn float32"] != "torch: switched off"


def _runs(make, fed, problem):
    """The run with the compiled draws and with torch's (the hook), each twice from its seed."""
    with_numba = make().run(problem, fed, seed=5)
    with draws.torch_draws():
        with_torch = make().run(problem, fed, seed=5)
    return with_numba, with_torch


@pytest.mark.parametrize("replacement", [False, True])
@pytest.mark.parametrize("algorithm", ["mb-sgd", "spider"])
def test_seeded_runs_are_the_same_bit_for_bit_with_and_without_the_compiled_draws(compiled, algorithm, replacement):
    """MB-SGD and SPIDER (minibatch keys or indices with replacement, noise of a 19-parameter MLP: a
    size that is not a multiple of 16): iterates, every message and aggregate, batches, ledger."""
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(n, 4, generator=gen) for n in (30, 27, 33)]
    ys = [(torch.rand(n, generator=gen) < 0.5).float() for n in (30, 27, 33)]
    fed = Federation.from_silos(xs, ys).with_availability(2)
    problem = Problem(mlp(4, [3], 1), "logistic", clip=1.0)
    if algorithm == "mb-sgd":
        def make():
            return IsrlMBSGD(sigmas={"sigma": 0.3}, rounds=6, batch_size=8, step_size=0.1, metrics_every=0,
                             record_transcript=True, replacement=replacement)
    else:
        def make():
            return IsrlSpider(rounds=6, batch_size=8, period=3, step_size=0.2, record_transcript=True, metrics_every=0,
                              sigmas={"sigma1": 0.1, "sigma2": 1.0, "sigma2_hat": 0.2}, replacement=replacement)
    ours, theirs = _runs(make, fed, problem)
    assert draws.status()["randn float32"] == "numba"
    assert torch.equal(ours.w_priv, theirs.w_priv) and torch.equal(ours.w_last, theirs.w_last)
    assert len(ours.transcript) == len(theirs.transcript) == (6 if algorithm == "mb-sgd" else 6)
    for a, b in zip(ours.transcript, theirs.transcript):
        assert torch.equal(a["messages"], b["messages"]) and torch.equal(a["aggregate"], b["aggregate"])
        assert torch.equal(a["batch"], b["batch"]) and torch.equal(a["available"], b["available"])
    assert [vars(e) for e in ours.ledger] == [vars(e) for e in theirs.ledger]



def _temper(y: int) -> int:
    """mt19937's output function (as ``mt19937_engine::operator()``), to check the crafted states."""
    y ^= y >> 11
    y ^= (y << 7) & 0x9D2C5680
    y ^= (y << 15) & 0xEFC60000
    return y ^ (y >> 18)


@pytest.mark.parametrize("dtype", DTYPES)
def test_edge_uniforms_give_torchs_values(compiled, dtype):
    """Generators crafted so that the engine's next outputs are chosen (the state words that temper to
    them): both uniforms of each pair sweep the float32 kernel's edge cases (a zero radius whose sign
    torch's fused multiply-add clears, the smallest u1, log's mantissa test, sincos's octants), each
    against every seventh other; torch's values and state on every block, one block a call."""
    sequences = draws._edge_outputs(dtype)
    assert sum(map(len, sequences)) >= 16 * 8 * 10
    for outputs in sequences:
        assert all(_temper(draws._untemper(v)) == v for v in outputs)
        g = draws._generator_with(outputs)  # torch reads exactly these outputs
        words = torch.rand(len(outputs), generator=g, dtype=torch.float32)
        assert torch.equal(words, torch.tensor([v & 0xFFFFFF for v in outputs], dtype=torch.float32) * 2.0**-24)
        step = 16 if dtype == torch.float32 else 32
        for kind in KINDS:
            g1, g2 = draws._generator_with(outputs), draws._generator_with(outputs)
            for _ in range(0, len(outputs), step):
                _assert_same(getattr(draws, kind)(16, g1, dtype), KINDS[kind](16, generator=g2, dtype=dtype), g1, g2)


def test_argsort_rows_is_torchs_argsort(compiled):
    """Keys as the sampler draws them (all different, or padded with 2.0 past a silo's records: ties),
    keys with many ties, and keys the compiled pass declines (negative, -0, NaN, infinite, float64,
    non-contiguous): every index equal to ``keys.argsort(dim=1)``."""
    gen = torch.Generator().manual_seed(0)
    cases = [draws.rand((25, 1234), gen, torch.float32), draws.rand((3, 1), gen, torch.float32)]
    padded = draws.rand((6, 50), gen, torch.float32)
    cases.append(padded.masked_fill(torch.arange(50).unsqueeze(0) >= torch.tensor([50, 40, 50, 1, 49, 50]).unsqueeze(1), 2.0))
    for _ in range(50):
        cases.append((torch.randint(0, 40, (5, 70), generator=gen).float() / 64))  # ties in every row
    odd = torch.rand(4, 30, generator=gen)
    for value in (-0.5, -0.0, float("nan"), float("inf")):
        bad = odd.clone()
        bad[1, 3] = value
        cases.append(bad)
    cases += [odd.double(), odd.t()]
    for keys in cases:
        assert torch.equal(draws.argsort_rows(keys), keys.argsort(dim=1))
    ties = np.zeros(25, dtype=np.bool_)  # the compiled pass takes the sampler's keys
    assert draws._passes()["order"](cases[0].numpy().view(np.uint32), np.empty((25, 1234), dtype=np.int64), ties)
