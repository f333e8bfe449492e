"""GroupedQueryAttention's QKV clip (OLMo's clip_qkv) and per-head QK-norms (a tuple of norms:
StableLM's qk_layernorm, Cohere's use_qk_norm) against a hand-written float64 reference
(tolerance 1e-12 relative: the same sums in another order)."""

import math

import pytest
import torch

from tests.fields.attention.test_grouped import _relative, _tokens, _weights
from tpde.fields import GroupedQueryAttention, LayerNorm, RMSNorm, RoPE

F64 = torch.float64


def _reference(mu, weights, heads, kv_heads, clip=None, q_norms=None, k_norms=None):
    """W_o concat_h causal-softmax(R q_h · R k_g / √d_h) v_g by loops over heads, with
    q, k, v clamped to [−clip, clip] and head h normalised by its own norm (LN per head)."""
    Wq, Wk, Wv, Wo = weights
    dh = Wq.shape[0] // heads
    x, p = mu.points, mu.positions

    def project(W, count, norms):
        y = x @ W.T
        y = y if clip is None else torch.clamp(y, -clip, clip)
        y = y.unflatten(-1, (count, dh)).transpose(0, 1)  # (count, n, d_h)
        if norms is None:
            return y
        out = []
        for h, (gain, bias) in enumerate(norms):
            c = y[h] - y[h].mean(-1, keepdim=True)
            out.append(c / torch.sqrt((c * c).mean(-1, keepdim=True) + 1e-5) * gain + bias)
        return torch.stack(out)

    rope = RoPE()
    q, k = (
        rope.rotate(project(Wq, heads, q_norms), p),
        rope.rotate(project(Wk, kv_heads, k_norms), p),
    )
    v = project(Wv, kv_heads, None)
    out = []
    for h in range(heads):
        g = h * kv_heads // heads
        scores = (q[h] @ k[g].T) / math.sqrt(dh)
        hidden = p[:, None] < p[None, :]
        out.append(torch.softmax(scores.masked_fill(hidden, -math.inf), -1) @ v[g])
    return torch.cat(out, -1) @ Wo.T


def test_clip_matches_the_reference_and_bites():
    generator = torch.Generator().manual_seed(8)
    weights = [2 * w for w in _weights(generator)]
    mu = _tokens(generator)
    field = GroupedQueryAttention(*weights, 4, 2, position=RoPE(), clip=0.8)
    expected = _reference(mu, weights, 4, 2, clip=0.8)
    assert _relative(field.velocity(mu), expected) < 1e-12
    plain = GroupedQueryAttention(*weights, 4, 2, position=RoPE())
    assert _relative(plain.velocity(mu), expected) > 1e-2  # the clip changes the field
    huge = GroupedQueryAttention(*weights, 4, 2, position=RoPE(), clip=1e8)
    assert _relative(huge.velocity(mu), plain.velocity(mu)) < 1e-14
    torch.testing.assert_close(field.probabilities(mu).sum(-1), torch.ones(4, 9, dtype=F64))
    assert "clip=0.8" in repr(field)


@pytest.mark.parametrize("clip", [0.0, -1.0, math.inf])
def test_clip_must_be_positive_and_finite(clip):
    weights = _weights(torch.Generator().manual_seed(9))
    with pytest.raises(ValueError, match="clip"):
        GroupedQueryAttention(*weights, 4, 2, clip=clip)


def _head_norms(generator, count, dh=4):
    pairs = [(1 + torch.randn(dh, generator=generator, dtype=F64),
              torch.randn(dh, generator=generator, dtype=F64)) for _ in range(count)]  # fmt: skip
    return pairs, tuple(LayerNorm(g, b, 1e-5, placement="pre") for g, b in pairs)


def _normed_field(seed: int):
    """(field, weights, μ, (q pairs, q norms), (k pairs, k norms)): 4 query and 2 key-value
    heads under RoPE with per-head LayerNorms of random gains and biases."""
    generator = torch.Generator().manual_seed(seed)
    weights, mu = _weights(generator), _tokens(generator)
    q_pairs, q_norms = _head_norms(generator, 4)
    k_pairs, k_norms = _head_norms(generator, 2)
    field = GroupedQueryAttention(*weights, 4, 2, position=RoPE(), q_norm=q_norms, k_norm=k_norms)
    return field, weights, mu, (q_pairs, q_norms), (k_pairs, k_norms)


def test_per_head_norms_match_the_reference():
    field, weights, mu, (q_pairs, q_norms), (k_pairs, k_norms) = _normed_field(10)
    expected = _reference(mu, weights, 4, 2, q_norms=q_pairs, k_norms=k_pairs)
    assert _relative(field.velocity(mu), expected) < 1e-12
    shared = GroupedQueryAttention(
        *weights, 4, 2, position=RoPE(), q_norm=q_norms[0], k_norm=k_norms[0]
    )  # one gain for every head: another field
    assert _relative(shared.velocity(mu), expected) > 1e-3


def test_per_head_norms_are_checked():
    generator = torch.Generator().manual_seed(11)
    weights = _weights(generator)
    _, norms = _head_norms(generator, 4)
    with pytest.raises(ValueError, match="one norm per head, 2 of them; received 4"):
        GroupedQueryAttention(*weights, 4, 2, k_norm=norms)
    mixed = (*norms[:3], RMSNorm(torch.ones(4, dtype=F64), 1e-5))
    with pytest.raises(ValueError, match="share one class and one eps"):
        GroupedQueryAttention(*weights, 4, 2, q_norm=mixed)
    wide = (*norms[:3], LayerNorm(torch.ones(16, dtype=F64), None, 1e-5, placement="pre"))
    with pytest.raises(ValueError, match=r"per-head q_norm gain must have shape \(4,\)"):
        GroupedQueryAttention(*weights, 4, 2, q_norm=wide)
    with pytest.raises(TypeError, match="not nested sequences"):
        GroupedQueryAttention(*weights, 4, 2, q_norm=(norms[:2], *norms[1:]))
