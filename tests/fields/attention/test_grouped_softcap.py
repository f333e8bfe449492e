"""Score soft-capping in GroupedQueryAttention (Gemma-2): against a hand-written float64
reference (tolerance 1e-12 relative: the same sums in another order)."""

import math

import pytest
import torch

from tests.fields.attention.test_grouped import _relative, _tokens, _weights
from tpde.fields import GroupedQueryAttention, RoPE

F64 = torch.float64


def _reference(mu, weights, heads, kv_heads, cap, window=None):
    """W_o concat_h softmax_j(c·tanh(s_ij/c) + masks) v_j, with RoPE (base 10⁴), by loops."""
    Wq, Wk, Wv, Wo = weights
    dh = Wq.shape[0] // heads
    x, p = mu.points, mu.positions
    rope = RoPE()
    q = rope.rotate((x @ Wq.T).unflatten(-1, (heads, dh)).transpose(0, 1), p)
    k = rope.rotate((x @ Wk.T).unflatten(-1, (kv_heads, dh)).transpose(0, 1), p)
    v = (x @ Wv.T).unflatten(-1, (kv_heads, dh)).transpose(0, 1)
    out = []
    for h in range(heads):
        g = h * kv_heads // heads
        scores = (q[h] @ k[g].T) / math.sqrt(dh)
        scores = cap * torch.tanh(scores / cap)
        gap = p[:, None] - p[None, :]
        hidden = (gap < 0) if window is None else (gap < 0) | (gap >= window)
        out.append(torch.softmax(scores.masked_fill(hidden, -math.inf), -1) @ v[g])
    return torch.cat(out, -1) @ Wo.T


@pytest.mark.parametrize("window", [None, 3])
def test_capped_velocity_and_probabilities_match_the_reference(window):
    generator = torch.Generator().manual_seed(5)
    weights = [3 * w for w in _weights(generator)]  # scores of order 10: the cap bites
    mu = _tokens(generator)
    field = GroupedQueryAttention(*weights, 4, 2, position=RoPE(), window=window, softcap=2.0)
    expected = _reference(mu, weights, 4, 2, 2.0, window)
    assert _relative(field.velocity(mu), expected) < 1e-12
    uncapped = GroupedQueryAttention(*weights, 4, 2, position=RoPE(), window=window)
    assert _relative(uncapped.velocity(mu), expected) > 1e-3  # the cap changes the field
    probabilities = field.probabilities(mu)
    torch.testing.assert_close(probabilities.sum(-1), torch.ones(4, 9, dtype=F64))
    assert "softcap=2" in repr(field)


def test_a_huge_cap_is_no_cap():
    generator = torch.Generator().manual_seed(6)
    weights, mu = _weights(generator), _tokens(generator)
    capped = GroupedQueryAttention(*weights, 4, 2, position=RoPE(), softcap=1e8)
    plain = GroupedQueryAttention(*weights, 4, 2, position=RoPE())
    assert _relative(capped.velocity(mu), plain.velocity(mu)) < 1e-12


@pytest.mark.parametrize("cap", [0.0, -1.0, math.inf])
def test_softcap_must_be_positive_and_finite(cap):
    weights = _weights(torch.Generator().manual_seed(7))
    with pytest.raises(ValueError, match="softcap"):
        GroupedQueryAttention(*weights, 4, 2, softcap=cap)
