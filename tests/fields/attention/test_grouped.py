"""Grouped-query causal attention with RoPE, ALiBi and sliding windows (float64 oracles).

Tolerances: 1e-12 relative against hand-written float64 references (rounding only: the same
sums in another order); 1e-10 against Hugging Face's LlamaAttention and between engines
(SDPA and KeOps sum in other orders, and their errors grow with the score range).
"""

import math

import pytest
import torch

from tests.conftest import keops_ok
from tpde.fields import (
    ALiBi,
    GaussianNotPreserved,
    GroupedQueryAttention,
    PositionalEncoding,
    RoPE,
)
from tpde.fields.attention.positions import POSITIONAL_ENCODINGS, positional_encoding
from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian, Grid

F64 = torch.float64
TIGHT = 1e-12
ENGINE_TOL = 1e-10


def _weights(generator, d=6, heads=4, kv_heads=2, head_dim=4, bias=False):
    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=F64) / math.sqrt(shape[-1])

    Wq, Wk, Wv = (
        draw(heads * head_dim, d),
        draw(kv_heads * head_dim, d),
        draw(kv_heads * head_dim, d),
    )
    Wo = draw(d, heads * head_dim)
    if not bias:
        return Wq, Wk, Wv, Wo
    biases = draw(heads * head_dim), draw(kv_heads * head_dim), draw(kv_heads * head_dim), draw(d)
    return (Wq, Wk, Wv, Wo), biases


def _tokens(generator, n=9, d=6, positions=None, weights=None):
    points = torch.randn(n, d, generator=generator, dtype=F64)
    positions = torch.arange(n, dtype=F64) if positions is None else positions
    return Empirical(points, weights, positions=positions)


def _relative(a, b):
    return float((a - b).abs().max() / b.abs().max())


def _rotation(p, head_dim, base, style="half"):
    """The (d_h, d_h) rotation R(p) written out: pair m turned by the angle p·base^(−2m/d_h)."""
    R = torch.zeros(head_dim, head_dim, dtype=F64)
    half = head_dim // 2
    for m in range(half):
        angle = float(p) * base ** (-2.0 * m / head_dim)
        a, b = (m, m + half) if style == "half" else (2 * m, 2 * m + 1)
        R[a, a], R[a, b] = math.cos(angle), -math.sin(angle)
        R[b, a], R[b, b] = math.sin(angle), math.cos(angle)
    return R


def _reference(
    mu,
    Wq,
    Wk,
    Wv,
    Wo,
    heads,
    kv_heads,
    *,
    rope=None,
    slopes=None,
    causal=True,
    window=None,
    biases=None,
    keys=None,
    probabilities=False,
):
    """Explicit n × m scores, mask and softmax, head by head (no tpde code); queries at μ's
    tokens, keys at ``keys``' (default μ's). With ``probabilities``: also the softmax
    weights (H, n, m)."""
    keys = mu if keys is None else keys
    x, p, y, r, w = mu.points, mu.positions, keys.points, keys.positions, keys.weights
    dh = Wq.shape[0] // heads
    bq, bk, bv, bo = biases if biases is not None else (0.0,) * 4
    q_all, k_all, v_all = x @ Wq.T + bq, y @ Wk.T + bk, y @ Wv.T + bv
    outputs, weights = [], []
    for h in range(heads):
        g = h // (heads // kv_heads)
        q = q_all[:, h * dh : (h + 1) * dh]
        k = k_all[:, g * dh : (g + 1) * dh]
        v = v_all[:, g * dh : (g + 1) * dh]
        if rope is not None:
            q = torch.stack([_rotation(p[i], dh, rope) @ q[i] for i in range(len(p))])
            k = torch.stack([_rotation(r[j], dh, rope) @ k[j] for j in range(len(r))])
        scores = q @ k.T / math.sqrt(dh) + w.log()
        if slopes is not None:
            scores = scores - slopes[h] * (p[:, None] - r[None, :])
        seen = torch.ones_like(scores, dtype=torch.bool)
        if causal:
            seen = r[None, :] <= p[:, None]
        if window is not None:
            seen = seen & (p[:, None] - r[None, :] < window)
        weights.append(torch.softmax(scores.masked_fill(~seen, -math.inf), dim=-1))
        outputs.append(weights[-1] @ v)
    out = torch.cat(outputs, dim=-1) @ Wo.T + bo
    return (out, torch.stack(weights)) if probabilities else out


# ---------------------------------------------------------------------- RoPE


@pytest.mark.parametrize("style", ["half", "interleaved"])
def test_rope_scores_depend_on_relative_positions_only(style, generator):
    q = torch.randn(3, 7, 8, generator=generator, dtype=F64)
    k = torch.randn(3, 7, 8, generator=generator, dtype=F64)
    p = torch.tensor([0.0, 1, 2, 5, 9, 17, 40], dtype=F64)
    rope = RoPE(style=style)
    scores = rope.rotate(q, p) @ rope.rotate(k, p).mT
    for shift in (1.0, 37.0, 1000.0):
        shifted = rope.rotate(q, p + shift) @ rope.rotate(k, p + shift).mT
        assert _relative(shifted, scores) < TIGHT
    # and the rotation is the explicit block rotation R(p)
    explicit = torch.stack([_rotation(p[i], 8, 10000.0, style) @ q[0, i] for i in range(7)])
    assert _relative(rope.rotate(q, p)[0], explicit) < TIGHT


def test_rope_field_is_invariant_under_a_shift_of_all_positions(generator):
    W = _weights(generator)
    mu = _tokens(generator)
    field = GroupedQueryAttention(*W, heads=4, kv_heads=2, position=RoPE(base=100.0))
    shifted = Empirical(mu.points, positions=mu.positions + 25)
    assert _relative(field.velocity(shifted), field.velocity(mu)) < TIGHT


def test_rope_partial_dims_leave_the_other_coordinates(generator):
    x = torch.randn(2, 5, 6, generator=generator, dtype=F64)
    p = torch.arange(5, dtype=F64)
    out = RoPE(dims=4).rotate(x, p)
    torch.testing.assert_close(out[..., 4:], x[..., 4:], rtol=0, atol=0)
    torch.testing.assert_close(out[..., :4], RoPE().rotate(x[..., :4], p), rtol=0, atol=0)


# ---------------------------------------------------------------------- against references


@pytest.mark.parametrize(
    ("options", "reference"),
    [
        ({"position": RoPE(base=100.0)}, {"rope": 100.0}),
        ({"position": "rope"}, {"rope": 10000.0}),
        ({"position": ALiBi()}, {"slopes": [2.0 ** (-8 * h / 4) for h in range(1, 5)]}),
        ({"window": 3}, {"window": 3}),
        ({"position": RoPE(base=50.0), "window": 4}, {"rope": 50.0, "window": 4}),
        ({"causal": False, "position": RoPE()}, {"causal": False, "rope": 10000.0}),
    ],
    ids=["rope", "rope-name", "alibi", "window", "rope-window", "bidirectional-rope"],
)
def test_field_against_the_dense_reference(options, reference, generator):
    W = _weights(generator)
    weights = torch.rand(9, generator=generator, dtype=F64) + 0.2
    mu = _tokens(generator, weights=weights / weights.sum())
    field = GroupedQueryAttention(*W, heads=4, kv_heads=2, **options)
    expected = _reference(mu, *W, 4, 2, **reference)
    assert _relative(field.velocity(mu, engine="dense"), expected) < TIGHT


def test_biases_ties_and_zero_mass_tokens_against_the_reference(generator):
    W, biases = _weights(generator, bias=True)
    positions = torch.tensor([0.0, 0, 1, 2, 2, 2, 3, 5, 6], dtype=F64)
    weights = torch.rand(9, generator=generator, dtype=F64) + 0.2
    weights[4] = 0.0
    mu = _tokens(generator, positions=positions, weights=weights / weights.sum())
    field = GroupedQueryAttention(
        *W,
        heads=4,
        kv_heads=2,
        position=RoPE(base=30.0),
        bq=biases[0],
        bk=biases[1],
        bv=biases[2],
        bo=biases[3],
    )
    keep = mu.weights > 0
    keys = Empirical(mu.points[keep], mu.weights[keep], positions=positions[keep])
    expected = _reference(mu, *W, 4, 2, rope=30.0, biases=biases, keys=keys)
    for engine in ("dense", "sdpa"):
        assert _relative(field.velocity(mu, engine=engine), expected) < ENGINE_TOL


def test_a_new_encoding_is_one_class(generator):
    """The extension point of docs/EXTENDING.md: a key bias alone, no other edit."""

    class Recency(PositionalEncoding):
        def key_bias(self, positions, heads):
            return 0.3 * positions.expand(heads, -1)  # +0.3 p_j: ALiBi with one slope

    W = _weights(generator)
    mu = _tokens(generator)
    field = GroupedQueryAttention(*W, heads=4, kv_heads=2, position=Recency())
    alibi = GroupedQueryAttention(*W, heads=4, kv_heads=2, position=ALiBi([0.3] * 4))
    for engine in ("dense", "sdpa"):
        got, expected = field.velocity(mu, engine=engine), alibi.velocity(mu, engine=engine)
        assert _relative(got, expected) < TIGHT
    plain = GroupedQueryAttention(*W, heads=4, kv_heads=2, position=PositionalEncoding())
    assert (
        _relative(plain.velocity(mu), GroupedQueryAttention(*W, heads=4, kv_heads=2).velocity(mu))
        < TIGHT
    )


def test_alibi_slopes_match_bloom_for_any_head_count():
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
    build_alibi_tensor = bloom.build_alibi_tensor

    for heads in (4, 8, 12, 9):
        alibi = build_alibi_tensor(torch.ones(1, 6), heads, F64)  # slopes · position
        expected = alibi[:, 0, 1]  # position 1
        torch.testing.assert_close(
            torch.tensor(ALiBi().head_slopes(heads), dtype=F64), expected, rtol=1e-6, atol=0
        )
    assert ALiBi().head_slopes(8) == tuple(2.0**-h for h in range(1, 9))


def test_against_transformers_llama_attention(generator):
    """The convention the SmolLM2 loader uses: rotate-half RoPE, causal, GQA (1e-10)."""
    transformers = pytest.importorskip("transformers")
    LlamaConfig = transformers.LlamaConfig
    LlamaAttention = transformers.models.llama.modeling_llama.LlamaAttention

    d, heads, kv_heads, dh, n, base = 12, 6, 2, 4, 11, 500.0
    config = LlamaConfig(
        hidden_size=d,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=dh,
        rope_theta=base,
        attention_bias=False,
    )
    config._attn_implementation = "sdpa"  # the eager path takes its softmax in float32
    torch.manual_seed(0)
    llama = LlamaAttention(config, layer_idx=0).to(F64).eval()
    x = torch.randn(n, d, generator=generator, dtype=F64)
    # Hugging Face's cos/sin (LlamaRotaryEmbedding) formed in float64 instead of float32
    inv_freq = 1.0 / base ** (torch.arange(0, dh, 2, dtype=F64) / dh)
    angles = torch.arange(n, dtype=F64)[:, None] * inv_freq
    emb = torch.cat([angles, angles], dim=-1)[None]
    with torch.no_grad():
        expected = llama(x[None], position_embeddings=(emb.cos(), emb.sin()))[0][0]
    field = GroupedQueryAttention(
        llama.q_proj.weight.detach(),
        llama.k_proj.weight.detach(),
        llama.v_proj.weight.detach(),
        llama.o_proj.weight.detach(),
        heads=heads,
        kv_heads=kv_heads,
        position=RoPE(base=base),
        causal=True,
    )
    got = field.velocity(Empirical(x, positions=torch.arange(n)))
    assert _relative(got, expected) < ENGINE_TOL


# ---------------------------------------------------------------------- GQA and engines

# KeOps compiles each new formula at first use (25–50 s on a fresh clone): its GQA cases run
# with `make test-slow` (the window mask on KeOps is checked there only; the causal and
# key-bias routes are also in the default suite's Masked and softmax engine tests).
ENGINES = [
    "dense",
    "chunked",
    "sdpa",
    pytest.param("keops", marks=[pytest.mark.keops, pytest.mark.slow]),
]


@pytest.mark.parametrize(
    "options",
    [{"position": RoPE(base=100.0), "window": 7}, {"position": ALiBi()}],
    ids=["rope-window", "alibi"],
)
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("dtype", [F64, torch.float32])
def test_grouped_equals_repeated_key_value_heads_on_every_engine(dtype, engine, options, generator):
    """float64 to 1e-10; float32 (KeOps: slow suite) to 1e-5 of the float64 dense field."""
    if engine == "keops" and not keops_ok():
        pytest.skip("KeOps cannot compile here")
    Wq, Wk, Wv, Wo = _weights(generator, heads=6, kv_heads=2)
    weights = torch.rand(40, generator=generator, dtype=F64) + 0.2
    mu = _tokens(generator, n=40, weights=weights / weights.sum())
    # kv head g repeated for query heads 3g, 3g + 1, 3g + 2: H_kv = H, the weights repeated
    repeat = lambda W: W.unflatten(0, (2, 1, -1)).expand(2, 3, -1, -1).flatten(0, 2)  # noqa: E731
    full = GroupedQueryAttention(Wq, repeat(Wk), repeat(Wv), Wo, heads=6, kv_heads=6, **options)
    expected = full.velocity(mu, engine="dense")
    cast = [W.to(dtype) for W in (Wq, Wk, Wv, Wo)]
    grouped = GroupedQueryAttention(*cast, heads=6, kv_heads=2, **options)
    got = grouped.velocity(mu.to(dtype=dtype), engine=engine)
    assert got.dtype == dtype
    assert _relative(got.double(), expected) < (ENGINE_TOL if dtype == F64 else 1e-5)


@pytest.mark.parametrize("engine", ["chunked", "sdpa"])
def test_gradients_match_dense(engine, generator):
    Wq, Wk, Wv, Wo = (W.requires_grad_() for W in _weights(generator))
    points = torch.randn(20, 6, generator=generator, dtype=F64).requires_grad_()
    probe = torch.randn(20, 6, generator=generator, dtype=F64)
    field = GroupedQueryAttention(Wq, Wk, Wv, Wo, heads=4, kv_heads=2, position=RoPE(base=50.0))

    def grads(name):
        out = field.velocity(Empirical(points, positions=torch.arange(20)), engine=name)
        return torch.autograd.grad((out * probe).sum(), (points, Wq, Wk, Wv, Wo))

    for got, expected in zip(grads(engine), grads("dense"), strict=True):
        assert _relative(got, expected) < ENGINE_TOL


def test_time_dependent_and_batched_parameters(generator):
    Wq, Wk, Wv, Wo = _weights(generator)
    mu = _tokens(generator)
    moving = GroupedQueryAttention(
        lambda t: (1 + t) * Wq, Wk, Wv, Wo, heads=4, kv_heads=2, position=RoPE()
    )
    assert moving.time_dependent
    fixed = GroupedQueryAttention(1.5 * Wq, Wk, Wv, Wo, heads=4, kv_heads=2, position=RoPE())
    assert _relative(moving.velocity(mu, t=0.5), fixed.velocity(mu)) < TIGHT
    batched = GroupedQueryAttention(
        torch.stack([Wq, 1.5 * Wq]), Wk, Wv, Wo, heads=4, kv_heads=2, position=RoPE()
    )
    out = batched.velocity(mu)
    assert out.shape == (2, 9, 6)
    assert _relative(out[1], fixed.velocity(mu)) < TIGHT
    clouds = Empirical(torch.stack([mu.points, 2 * mu.points]), positions=mu.positions)
    both = fixed.velocity(clouds)
    assert (
        _relative(both[1], fixed.velocity(Empirical(2 * mu.points, positions=mu.positions))) < TIGHT
    )


def test_rope_tables_follow_in_place_edits_of_the_positions(generator):
    x = torch.randn(4, 5, 8, generator=generator, dtype=F64)
    p = torch.arange(5, dtype=F64)
    rope = RoPE()
    first = rope.rotate(x, p)
    p.add_(3.0)  # same tensor, new values: the cached table must not be reused
    assert _relative(rope.rotate(x, p), RoPE().rotate(x, p.clone())) < TIGHT
    assert not torch.allclose(rope.rotate(x, p), first)
    assert rope == RoPE()  # the cache is no field: equality and hashing unchanged
    assert hash(rope) == hash(RoPE())


def test_rope_tables_are_shared_by_equal_ropes_only(generator):
    """Layers' equal RoPEs share one table per positions tensor; a RoPE of another base,
    width, style or scaling at the same positions gets its own angles (exact: the same
    float64 angles either way)."""
    x = torch.randn(4, 5, 8, generator=generator, dtype=F64)
    p = torch.arange(5, dtype=F64)
    ropes = [RoPE(), RoPE(base=100.0), RoPE(dims=4), RoPE(style="interleaved"), RoPE()]
    alone = [rope.rotate(x, p.clone()) for rope in ropes]  # each on its own positions
    for _ in range(2):  # alternating on one positions tensor, as a model's layers do
        for rope, expected in zip(ropes, alone, strict=True):
            torch.testing.assert_close(rope.rotate(x, p), expected, rtol=0, atol=0)
    q = torch.arange(5, dtype=F64)  # consecutive equal RoPEs: one table
    assert RoPE()._table(q, 8, F64, None) is RoPE()._table(q, 8, F64, None)
    assert not torch.allclose(alone[0], alone[1])


def test_window_mask_of_the_engine_primitive(generator):
    from tpde._engines import softmax_average

    q = torch.randn(2, 3, 4, generator=generator, dtype=F64)
    k = torch.randn(2, 5, 4, generator=generator, dtype=F64)
    v = torch.randn(2, 5, 3, generator=generator, dtype=F64)
    keys = torch.tensor([0.0, 1, 2, 3, 4], dtype=F64)
    queries = torch.tensor([4.0, 2.5, 1.0], dtype=F64)
    expected = torch.cat(
        [
            torch.softmax(q[:, i : i + 1] @ k[:, lo:hi].mT, dim=-1) @ v[:, lo:hi]
            for i, (lo, hi) in enumerate([(3, 5), (1, 3), (0, 2)])  # keys in (p − 2, p]
        ],
        dim=-2,
    )
    for engine in ("dense", "chunked", "sdpa"):
        got = softmax_average(
            q, k, v, engine=engine, query_positions=queries, key_positions=keys, window=2.0
        )
        assert _relative(got, expected) < TIGHT
    with pytest.raises(
        ValueError, match=r"a query at position 9 sees no key in its window \(7, 9\]"
    ):
        softmax_average(q, k, v, query_positions=queries + 5, key_positions=keys, window=2.0)
    with pytest.raises(ValueError, match="a sliding window needs query_positions"):
        softmax_average(q, k, v, window=2.0)
    with pytest.raises(ValueError, match=r"window must be > 0; received 0\.0"):
        softmax_average(q, k, v, query_positions=queries, key_positions=keys, window=0.0)


def test_evaluation_points_with_positions(generator):
    W = _weights(generator)
    mu = _tokens(generator)
    field = GroupedQueryAttention(*W, heads=4, kv_heads=2, position=RoPE())
    own = field.velocity(mu)
    at = field.velocity(mu, mu.points[[2, 5]], positions=mu.positions[[2, 5]])
    assert _relative(at, own[[2, 5]]) < TIGHT


def test_positions_travel_through_integrate(generator):
    W = _weights(generator)
    mu = _tokens(generator, n=6)
    field = GroupedQueryAttention(*W, heads=4, kv_heads=2, position=RoPE())
    trajectory = integrate(field, mu, 0.2, dt=0.1, method="rk4")
    final = trajectory.measures[-1]
    torch.testing.assert_close(final.positions, mu.positions, rtol=0, atol=0)
    assert not torch.allclose(final.points, mu.points)
    # the first token sees only itself: with no key but itself its velocity is W_o v(x_0)
    first = Empirical(mu.points[:1], positions=mu.positions[:1])
    torch.testing.assert_close(field.velocity(mu)[0], field.velocity(first)[0])


def test_a_field_without_positions_runs_on_grids(generator):
    W = _weights(generator, d=2, heads=2, kv_heads=1, head_dim=2)
    field = GroupedQueryAttention(*W, heads=2, kv_heads=1, causal=False)
    grid = Grid(torch.full((4, 4), 1 / 16, dtype=F64), [-1.0, -1.0], [1.0, 1.0])
    expected = field.velocity(grid.to_empirical())
    torch.testing.assert_close(field.velocity(grid), expected)


# ---------------------------------------------------------------------- bad input


def test_bad_input_raises(generator):
    Wq, Wk, Wv, Wo = _weights(generator)
    with pytest.raises(TypeError, match="causal must be True or False; received 1"):
        GroupedQueryAttention(Wq, Wk, Wv, Wo, heads=4, kv_heads=2, causal=1)
    with pytest.raises(
        ValueError, match=r"batch shapes of the weights do not broadcast: Wq \(2,\), Wk \(3,\)"
    ):
        GroupedQueryAttention(
            torch.stack([Wq] * 2), torch.stack([Wk] * 3), Wv, Wo, heads=4, kv_heads=2
        )
    field = GroupedQueryAttention(Wq, Wk, Wv, Wo, heads=4, kv_heads=2)
    tokens = _tokens(generator)
    with pytest.raises(ValueError, match="evaluates at points x other than μ's tokens only with"):
        field.particle_velocity(0.0, tokens, tokens.points[:3], "dense")
    with pytest.raises(ValueError, match="heads = 4 is not a multiple of kv_heads = 3"):
        GroupedQueryAttention(Wq, Wk, Wv, Wo, heads=4, kv_heads=3)
    with pytest.raises(ValueError, match="kv_heads must be a positive integer"):
        GroupedQueryAttention(Wq, Wk, Wv, Wo, heads=4, kv_heads=0)
    with pytest.raises(
        ValueError,
        match=r"Wk must have shape \(\.\.\., 8, 6\) = \(\.\.\., H_kv·d_h, d\) to fit Wq of "
        r"shape \(16, 6\).*received Wk of shape \(6, 6\)",
    ):
        GroupedQueryAttention(Wq, Wk[:6], Wv[:6], Wo, heads=4, kv_heads=2)
    # issue 28: the wrong weight is named (Wq, Wo, Wv agree on d_h), not Wv checked after it
    with pytest.raises(ValueError, match=r"Wk has shape \(7, 6\), but Wq, Wo, Wv give the head"):
        GroupedQueryAttention(Wq, Wk[:7], Wv, Wo, heads=4, kv_heads=2)
    with pytest.raises(
        ValueError,
        match=r"Wo has shape \(16, 6\), but Wq, Wk, Wv give the head dimension d_h = 4: Wo"
        r" must have shape \(\.\.\., 6, 16\)",
    ):
        GroupedQueryAttention(Wq, Wk, Wv, Wo.T, heads=4, kv_heads=2)
    with pytest.raises(
        ValueError,
        match=r"a multiple of H = 4 query heads; received Wq of shape "
        r"\(15, 6\)",
    ):
        GroupedQueryAttention(Wq[:15], Wk, Wv, Wo[:, :15], heads=4, kv_heads=2)
    odd = _weights(generator, heads=2, kv_heads=1, head_dim=3)
    with pytest.raises(ValueError, match="head dimension d_h = 3 is odd"):
        GroupedQueryAttention(*odd, heads=2, kv_heads=1, position=RoPE())
    with pytest.raises(ValueError, match="dims must be even; received dims=3"):
        RoPE(dims=3)
    with pytest.raises(ValueError, match="RoPE dims = 6 exceeds the head dimension d_h = 4"):
        GroupedQueryAttention(Wq, Wk, Wv, Wo, heads=4, kv_heads=2, position=RoPE(dims=6))
    with pytest.raises(ValueError, match="ALiBi has 3 slopes but the attention has H = 4"):
        GroupedQueryAttention(Wq, Wk, Wv, Wo, heads=4, kv_heads=2, position=ALiBi([1, 2, 3]))
    with pytest.raises(ValueError, match="slopes must be a non-empty sequence of finite positive"):
        ALiBi([1.0, -1.0])
    with pytest.raises(ValueError, match=r"window must be > 0.*received window=0.0"):
        GroupedQueryAttention(Wq, Wk, Wv, Wo, heads=4, kv_heads=2, window=0.0)
    with pytest.raises(TypeError, match=r"window must be a real number; received '2'"):
        GroupedQueryAttention(Wq, Wk, Wv, Wo, heads=4, kv_heads=2, window="2")
    with pytest.raises(ValueError, match=r"sliding window .* needs causal=True"):
        GroupedQueryAttention(Wq, Wk, Wv, Wo, heads=4, kv_heads=2, causal=False, window=2)
    with pytest.raises(ValueError, match="position must be None, a positional encoding"):
        positional_encoding("sinusoid")
    assert set(POSITIONAL_ENCODINGS) == {"rope", "alibi"}


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ({}, "causal attention"),
        ({"causal": False, "position": RoPE()}, "RoPE positional encoding"),
        ({"causal": False, "position": ALiBi()}, "ALiBi positional encoding"),
    ],
)
def test_positions_missing_raise(options, why, generator):
    W = _weights(generator)
    field = GroupedQueryAttention(*W, heads=4, kv_heads=2, **options)
    bare = Empirical(torch.randn(5, 6, generator=generator, dtype=F64))
    with pytest.raises(ValueError, match=f"{why} needs token positions, but this Empirical"):
        field.velocity(bare)
    flat = GroupedQueryAttention(*_weights(generator, d=2), heads=4, kv_heads=2, **options)
    with pytest.raises(ValueError, match=f"{why} needs token positions, and a Grid"):
        flat.velocity(Grid(torch.full((2, 2), 0.25, dtype=F64), [0.0, 0.0], [1.0, 1.0]))
    tokens = _tokens(generator)
    with pytest.raises(ValueError, match=f"{why} at points x needs their positions"):
        field.velocity(tokens, tokens.points[:2])
    with pytest.raises(ValueError, match="pass x too, or drop positions"):
        field.velocity(tokens, positions=tokens.positions)
    with pytest.raises(GaussianNotPreserved, match=f"{why} needs token positions, and a Gaussian"):
        field.velocity(
            Gaussian(torch.zeros(6, dtype=F64), torch.eye(6, dtype=F64)),
            torch.zeros(1, 6, dtype=F64),
        )
