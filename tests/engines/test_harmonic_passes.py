"""The two passes of the harmonics engine against trigonometric oracles, and its flop count.

Tolerances (float64): tables 1e-13 absolute (row k carries ≈ log₂ k roundings of e^{iψ}),
moments 1e-13 relative to Σ_j w_j (sums of a few hundred terms bounded by w_j), outputs of
the buffered and the autograd path 1e-14 relative (the same operations, in other order).
The flop count is exact: integers.
"""

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import tpde._engines._harmonic_passes as passes
import tpde._engines.harmonics as harmonics

F64 = torch.float64


def _tokens(generator, n, poles=True):
    """(1, 3, n) unit vectors, the first two at the poles (x₁ = x₂ = 0) when ``poles``."""
    x = torch.randn(3, n, generator=generator, dtype=F64)
    if poles:
        x[:, 0] = torch.tensor([0.0, 0.0, 1.0])
        x[:, 1] = torch.tensor([0.0, 0.0, -1.0])
    return (x / x.norm(dim=0)).unsqueeze(0)


def _angles(x):
    """(φ, θ) of tokens (1, 3, n), θ ∈ [0, π] (sin θ ≥ 0), φ = 0 at the poles."""
    x1, x2, z = x[0]
    return torch.atan2(x2, x1), torch.atan2(torch.sqrt(x1 * x1 + x2 * x2), z)


@pytest.mark.parametrize("buffered", [False, True])
def test_tables_are_cosines_and_sines_of_the_angles(generator, buffered):
    x = _tokens(generator, 300)
    store = passes.Buffers() if buffered else None
    K = 41
    t = passes.tables(x, K, store)
    k = torch.arange(K, dtype=F64)[:, None]
    for angle, psi in enumerate(_angles(x)):
        assert (t[0, 0, angle] - torch.cos(k * psi)).abs().max() < 1e-13
        assert (t[0, 1, angle] - torch.sin(k * psi)).abs().max() < 1e-13


@pytest.mark.parametrize("L", [5, 6, 17])
def test_channel_moments_equal_the_four_channels_summed_directly(generator, L):
    """M[c, s, m, k] = Σ_j w_j ch_c(x_j) A_{s,m}(φ_j) T_{m,k}(θ_j), ch = (1, x₁, x₂, x₃),
    A = (cos mφ, sin mφ), T = cos kθ (m even) or sin kθ (m odd), by trigonometric functions."""
    n = 300
    x = _tokens(generator, n)
    w = torch.rand(1, 1, n, generator=generator, dtype=F64) + 0.5
    even, odd = passes.channel_moments(*passes.moments(x, w, L, passes.Buffers()), L)
    phi, theta = _angles(x)
    channels = torch.cat([w[0], w[0] * x[0]])  # (4, n)
    m = torch.arange(L + 1, dtype=F64)[:, None]
    azimuth = torch.stack([torch.cos(m * phi), torch.sin(m * phi)])  # (2, L + 1, n)
    k = torch.arange(L + 1, dtype=F64)[:, None]
    cos, sin = torch.cos(k * theta), torch.sin(k * theta)  # (L + 1, n)
    direct_even = torch.einsum("cj,smj,kj->csmk", channels, azimuth[:, 0::2], cos)
    direct_odd = torch.einsum("cj,smj,kj->csmk", channels, azimuth[:, 1::2], sin[1:])
    scale = float(w.sum())
    assert even.shape == (1, 4, 2, L // 2 + 1, L + 1)
    assert odd.shape == (1, 4, 2, (L + 1) // 2, L)
    assert float((even[0] - direct_even).abs().max()) / scale < 1e-13
    assert float((odd[0] - direct_odd).abs().max()) / scale < 1e-13


def test_buffered_and_autograd_paths_agree(generator):
    points = _tokens(generator, 700, poles=False)[0].T.contiguous()
    weights = torch.rand(700, generator=generator, dtype=F64)
    buffered = harmonics.sphere_sums(points, weights, 10.0)
    tracked = harmonics.sphere_sums(points.requires_grad_(), weights, 10.0)
    assert tracked.requires_grad
    relative = (buffered - tracked.detach()).abs().max() / buffered.abs().max()
    assert float(relative) < 1e-14


def _contraction(n, L):
    """Flops of the azimuth contraction of pass 2, entry by entry: for every channel c,
    azimuth row (s, m) and token, one multiply-add."""
    return sum(2 * n for c in range(4) for s in range(2) for m in range(L + 1))


@pytest.mark.parametrize(("clouds", "L"), [(1, 5), (1, 6), (2, 9)])
def test_flops_equals_the_counted_products_and_contraction(generator, clouds, L):
    """flops(n, L) = the matrix products' flops counted by torch's FlopCounterMode during
    one evaluation (n a multiple of the chunk: no padding) + the azimuth contraction."""
    n = 10 * passes.CHUNK
    points = torch.randn(clouds, n, 3, generator=generator, dtype=F64)
    points = points / points.norm(dim=-1, keepdim=True)
    weights = torch.rand(clouds, n, generator=generator, dtype=F64)
    harmonics.sphere_sums(points, weights, 2.0, L)  # the kernels, cached outside the count
    assert torch.get_num_threads() == 1  # the counting mode sees the calling thread only
    with FlopCounterMode(display=False) as counter:
        harmonics.sphere_sums(points, weights, 2.0, L)
    counted = counter.get_total_flops() + clouds * _contraction(n, L)
    assert harmonics.flops(n, L) * clouds == counted


def test_flops_are_about_twenty_per_term_and_token():
    """≈ 20(L + 1)² per token at large n (module notes of the passes)."""
    for L in (18, 38, 103):
        per_token = harmonics.flops(10**6, L) / 10**6
        assert math.isclose(per_token / (L + 1) ** 2, 20, rel_tol=0.05)


def _cloud(generator, clouds, n):
    points = torch.randn(clouds, n, 3, generator=generator, dtype=F64)
    weights = torch.rand(clouds, n, generator=generator, dtype=F64) + 0.1
    return points / points.norm(dim=-1, keepdim=True), weights


@pytest.mark.parametrize(("clouds", "n"), [(1, 5001), (3, 701)])
def test_blocks_across_chunk_boundaries_and_odd_n(generator, monkeypatch, clouds, n):
    """Pass-1 tables of 3 chunks (a block's chunks multiplied part by part, the last part
    short and padded), pass-2 blocks of 1000 tokens (not a whole number of chunks), odd n:
    the buffered path against the autograd one (separate code: new tensors, _chunked) and
    against itself with the default sizes (the same chunk sums; the products' rounding may
    move by an ulp with the number of columns)."""
    points, weights = _cloud(generator, clouds, n)
    beta = torch.tensor([10.0, 1.0, 30.0][:clouds], dtype=F64)
    default = harmonics.sphere_sums(points, weights, beta)
    monkeypatch.setattr(passes, "TABLE_TOKENS", 3 * passes.CHUNK)
    monkeypatch.setattr(harmonics, "SYNTHESIS_TOKENS", 1000)
    small = harmonics.sphere_sums(points, weights, beta)
    tracked = harmonics.sphere_sums(points.clone().requires_grad_(), weights, beta).detach()
    scale = small.abs().max()
    assert float((small - tracked).abs().max() / scale) < 1e-14
    assert float((small - default).abs().max() / scale) < 1e-14


def test_a_plan_follows_its_array(generator):
    """A plan is rebuilt when its array is reallocated (a larger request of the same name),
    so its views never point into freed memory."""
    store, like = passes.Buffers(), torch.zeros(1, dtype=F64)
    built = []

    def build(array):
        built.append(array)
        return array

    first = store.plan("a", (4,), like, build)
    assert store.plan("a", (4,), like, build) is first and len(built) == 1
    larger = store.plan("a", (8,), like, build)
    again = store.plan("a", (4,), like, build)
    assert len(built) == 3
    assert again.data_ptr() == larger.data_ptr() != first.data_ptr()


def test_two_threads_give_the_same_sums_and_keep_the_caller_on_one(generator, monkeypatch):
    """With 2 torch threads the blocks go to 2 Python threads (the same sums: each block's
    arithmetic does not depend on the thread), while the calling thread runs torch on one
    thread in between (no OpenMP thread left spinning on the workers' cores) and gets its
    thread count back after."""
    points, weights = _cloud(generator, 1, 9001)
    one = harmonics.sphere_sums(points, weights, 10.0)
    seen = []
    original = passes.channel_moments

    def recording(*args):
        seen.append(torch.get_num_threads())
        return original(*args)

    monkeypatch.setattr(passes, "channel_moments", recording)
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        two = harmonics.sphere_sums(points, weights, 10.0)
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(previous)
    assert seen == [1] and after == 2
    assert float((one - two).abs().max() / one.abs().max()) < 1e-14


def test_first_rows_written_once_are_the_tables_rows_bit_for_bit(generator):
    """first_rows (pass 1 writes them for every token, pass 2 reads them) equals the row
    1 of the autograd path's tables, the two poles included (φ = 0 there: cos 1, sin 0),
    with and without a pole in the block (the pole branch is taken only when one is)."""
    for poles in (True, False):
        x = _tokens(generator, 300, poles=poles)
        out = passes.first_rows(x, torch.full((1, 2, 2, 300), math.nan, dtype=F64))
        assert torch.equal(out, passes.tables(x, 2, None)[..., 1, :])
        if poles:
            assert out[0, :, 0, :2].tolist() == [[1.0, 1.0], [0.0, 0.0]]


def test_a_plans_init_runs_when_its_array_was_used_by_another_plan():
    """init (a table's row 0, the padding) runs when a plan is built and again only after
    another plan of the same array was used, whose views may have written over it."""
    store, like = passes.Buffers(), torch.zeros(1, dtype=F64)
    inits = []
    for tag in ("a", "a", "a", "b", "a", "a"):
        store.plan("x", (4,), like, lambda array: array, tag, lambda _, t=tag: inits.append(t))
    assert inits == ["a", "b", "a"]
