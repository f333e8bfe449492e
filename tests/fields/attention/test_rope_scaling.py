"""RoPE scalings as options of the rotary encoding (float64; transformers' oracle:
tests/pretrained/test_rope_scaling.py and test_load_rope_scaling.py).

Tolerance 1e-12 relative: the same rotations composed in another order (rounding only).
"""

import math

import pytest
import torch

from tpde.fields import (
    ROPE_SCALINGS,
    DynamicNTK,
    GroupedQueryAttention,
    LinearScaling,
    Llama3Scaling,
    LongRoPE,
    RoPE,
    RopeScaling,
    YaRN,
)
from tpde.measures import Empirical

F64 = torch.float64
TIGHT = 1e-12

SCALINGS = {
    "linear": LinearScaling(2.5),
    "dynamic": DynamicNTK(2.0, 16),
    "llama3": Llama3Scaling(3.0, 16, 1.0, 4.0),
    "yarn": YaRN(4.0, 16, attention_factor=1.3),
    "longrope": LongRoPE([1.0, 2.0, 3.0, 4.0], [2.0, 3.0, 5.0, 7.0], 16, 4.0),
}


def _relative(a, b):
    return float((a - b).abs().max() / b.abs().max())


def test_the_table_names_every_scaling_by_its_transformers_name():
    assert set(ROPE_SCALINGS) == {"linear", "dynamic", "llama3", "yarn", "longrope"}
    assert all(ROPE_SCALINGS[name] is type(s) for name, s in SCALINGS.items())
    assert {n for n, c in ROPE_SCALINGS.items() if c.reads_length} == {"dynamic", "longrope"}


@pytest.mark.parametrize("name", list(SCALINGS))
def test_scores_stay_relative_and_scale_by_alpha_squared(name):
    """One L for queries and keys: shifting every position (L fixed) keeps the scores, and
    the scores are α² times those of plain rotations by θ'."""
    scaling = SCALINGS[name]
    rope = RoPE(base=100.0, scaling=scaling)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, 12, 8, generator=g, dtype=F64)
    p = torch.arange(12, dtype=F64)
    length = 40.0  # past C₀ = C = 16
    scores = rope.rotate(q, p, length) @ rope.rotate(k, p, length).mT
    shifted = rope.rotate(q, p + 7, length) @ rope.rotate(k, p + 7, length).mT
    assert _relative(shifted, scores) < TIGHT
    theta = scaling.frequencies(100.0, 8, length)
    angles = p[:, None] * theta  # (n, 4), "half" layout: pair (m, m + 4)

    def turned(x):
        a, b = x[..., :4], x[..., 4:]
        c, s = angles.cos(), angles.sin()
        return torch.cat([a * c - b * s, b * c + a * s], -1)

    plain = turned(q) @ turned(k).mT
    assert _relative(scores, scaling.attention_scaling**2 * plain) < TIGHT


def test_length_defaults_to_the_positions_and_the_attention_shares_one():
    """rotate alone reads L = max(p) + 1; GroupedQueryAttention passes the queries' and keys'
    common L, so evaluating at points with other positions keeps the keys' frequencies."""
    rope = RoPE(base=100.0, scaling=DynamicNTK(2.0, 8))
    assert rope.reads_length and not RoPE().reads_length
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 20, 8, generator=g, dtype=F64)
    p = torch.arange(20, dtype=F64)
    assert _relative(rope.rotate(x, p), rope.rotate(x, p, 20.0)) < TIGHT
    assert _relative(rope.rotate(x, p, 40.0), rope.rotate(x, p, 20.0)) > 1e-3
    d, heads = 8, 1
    W = [torch.randn(8, d, generator=g, dtype=F64) for _ in range(4)]
    attention = GroupedQueryAttention(*W, heads, heads, position=rope)
    mu = Empirical(torch.randn(20, d, generator=g, dtype=F64), positions=p)
    at_own = attention.velocity(mu)
    at_points = attention.velocity(mu, mu.points[:5], positions=p[:5])
    assert _relative(at_points, at_own[:5]) < TIGHT  # L = 20 from the keys, not 5


def test_unscaled_dynamic_and_short_longrope_are_rope():
    p = torch.arange(16, dtype=F64)
    x = torch.randn(2, 16, 8, generator=torch.Generator().manual_seed(2), dtype=F64)
    plain = RoPE(base=100.0).rotate(x, p)
    assert _relative(RoPE(base=100.0, scaling=DynamicNTK(3.0, 16)).rotate(x, p), plain) < TIGHT
    ones = LongRoPE([1.0] * 4, [9.0] * 4, 16, 1.0)
    assert _relative(RoPE(base=100.0, scaling=ones).rotate(x, p), plain) < TIGHT
    assert math.isclose(YaRN(4.0, 16).attention_scaling, 1 + 0.1 * math.log(4.0))


def test_partial_rotary_scales_only_the_rotated_coordinates():
    rope = RoPE(base=100.0, dims=4, scaling=YaRN(4.0, 16, attention_factor=2.0))
    x = torch.randn(1, 5, 8, generator=torch.Generator().manual_seed(3), dtype=F64)
    out = rope.rotate(x, torch.arange(5, dtype=F64))
    assert torch.equal(out[..., 4:], x[..., 4:])
    assert _relative(out[..., :4].norm(dim=-1), 2 * x[..., :4].norm(dim=-1)) < TIGHT


_BAD = [
    (lambda: LinearScaling(0.0), ValueError, r"LinearScaling factor must be finite and > 0"),
    (lambda: LinearScaling("2"), TypeError, r"LinearScaling factor must be a number"),
    (lambda: DynamicNTK(2.0, 0), ValueError,
     r"DynamicNTK context must be a positive int; received 0"),
    (lambda: Llama3Scaling(8.0, 64, 4.0, 1.0), ValueError,
     r"needs high_freq_factor > low_freq_factor; received 1\.0 ≤ 4\.0"),
    (lambda: Llama3Scaling(-1.0, 64), ValueError, r"Llama3Scaling factor must be finite and > 0"),
    (lambda: YaRN(4.0, 16, beta_fast=0.0), ValueError, r"YaRN beta_fast must be finite and > 0"),
    (lambda: YaRN(4.0, 16, truncate="yes"), TypeError, r"YaRN truncate must be True or False"),
    (lambda: YaRN(4.0, 16, attention_factor=-1.0), ValueError,
     r"YaRN attention_factor must be finite and > 0"),
    (lambda: LongRoPE(2.0, [1.0], 16, 2.0), TypeError,
     r"LongRoPE short_factor must be a sequence of numbers"),
    (lambda: LongRoPE([1.0, -1.0], [1.0, 1.0], 16, 2.0), ValueError,
     r"LongRoPE short_factor\[1\] must be finite and > 0"),
    (lambda: RoPE(scaling="yarn"), TypeError, r"RoPE scaling must be None or a RopeScaling"),
    (lambda: RoPE(scaling=LongRoPE([1.0] * 3, [1.0] * 3, 16, 2.0)).check(8, 1), ValueError,
     r"LongRoPE short_factor has 3 factors, but the rotated width r = 8 has 4 pairs"),
    (lambda: RoPE(dims=2, scaling=DynamicNTK(2.0, 16)).check(8, 1), ValueError,
     r"DynamicNTK raises the base to the power r/\(r − 2\).*received r = 2"),
    (lambda: RopeScaling().frequencies(1e4, 8), NotImplementedError,
     r"RopeScaling does not define its frequencies"),
]  # fmt: skip


@pytest.mark.parametrize("index", range(len(_BAD)))
def test_bad_scalings_are_refused(index):
    make, error, match = _BAD[index]
    with pytest.raises(error, match=match):
        make()


def test_a_wrong_longrope_table_is_refused_by_the_attention():
    rope = RoPE(scaling=LongRoPE([1.0] * 3, [1.0] * 3, 16, 2.0))
    W = [torch.eye(8, dtype=F64)] * 4
    with pytest.raises(ValueError, match=r"LongRoPE short_factor has 3 factors"):
        GroupedQueryAttention(*W, 1, 1, position=rope)
