"""Adversarial inputs, fourth round (issue 28): positions through every wrapper.

A field with positions (causal GroupedQueryAttention, RoPE, Masked) refuses points x without
their positions; before this round every wrapper (Sum, Normalized, LayerSchedule,
MultiHead) called its parts at x with μ's positions, silently, whenever x had μ's number of
points. Each case asserts either the refusal (type and message) or the wrapper's velocity
at x with positions p against the parts evaluated by hand (float64, to 1e-12), and that
positions other than μ's change the result. "fixed" marks the cases that failed before
this round's fix (26 cases; all 26 failed before, the last only for the new
attribute needs_positions).
"""

import pytest
import torch

from tests.adversarial.strategies import F64, cloud, error_table_test
from tpde._scale_safe import unit as normalize
from tpde.fields import (
    MLP,
    Field,
    GroupedQueryAttention,
    LayerNorm,
    LayerSchedule,
    Masked,
    MultiHead,
    Normalized,
    RMSNorm,
    RoPE,
    Softmax,
    Sum,
)
from tpde.measures import Empirical

D, H, HKV, DH, N = 4, 4, 2, 2, 5


def _r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


WQ, WK, WV, WO = (
    _r(H * DH, D, seed=1),
    _r(HKV * DH, D, seed=2),
    _r(HKV * DH, D, seed=3),
    _r(D, H * DH, seed=4),
)
SEQ = Empirical(cloud(N, D), positions=torch.arange(float(N), dtype=F64))
X = _r(N, D, seed=5)  # n new points: the shape that used to pass unnoticed
P = torch.tensor([4.0, 0.0, 2.0, 3.0, 1.0], dtype=F64)  # their positions, not μ's
EYE = torch.eye(D, dtype=F64)


def gqa(**options):
    args = {"Wq": WQ, "Wk": WK, "Wv": WV, "Wo": WO, "heads": H, "kv_heads": HKV}
    return GroupedQueryAttention(**{**args, **options})


def mlp():
    return MLP(_r(6, D, seed=6), _r(6, seed=7), _r(D, 6, seed=8), _r(D, seed=9))


def masked():
    return Masked(Softmax(EYE, EYE, EYE))


# wrapper -> the same velocity assembled by hand from the bare fields (which take positions)
def _rope_plus_mlp():
    a, f = gqa(position=RoPE()), mlp()
    return a + f, lambda x, p: a.velocity(SEQ, x, positions=p) + f.velocity(SEQ, x)


def _pre(field, scheme):
    """Normalized(field, scheme) and its velocity by hand: field on normalised keys/queries."""
    wrapped = Normalized(field, scheme)
    norm = wrapped.scheme.norm
    keys = Empirical(norm(SEQ.points), positions=SEQ.positions)
    return wrapped, norm, keys


def _pre_rms():
    a = gqa()
    wrapped, norm, keys = _pre(a, RMSNorm())
    return wrapped, lambda x, p: a.velocity(keys, norm(x), positions=p)


def _layernorm():
    a = gqa(position=RoPE(), causal=False)
    wrapped, norm, keys = _pre(a, LayerNorm(placement="pre"))
    return wrapped, lambda x, p: a.velocity(keys, norm(x), positions=p)


def _post_layernorm():  # BERT's placement: the field itself, LN after every step
    a = gqa(position=RoPE(), causal=False)
    return Normalized(a, "layernorm"), lambda x, p: a.velocity(SEQ, x, positions=p)


def _smollm_layer():
    a, f = gqa(position=RoPE()), mlp()
    (na, norm, keys), (nf, _, _) = _pre(a, RMSNorm()), _pre(f, RMSNorm())
    return na + nf, lambda x, p: a.velocity(keys, norm(x), positions=p) + f.velocity(keys, norm(x))


def _schedule():
    a, b = gqa(), gqa(position=RoPE())
    return LayerSchedule([a, b]), lambda x, p: a.velocity(SEQ, x, positions=p)


def _multihead_masked():
    h0, h1 = masked(), Masked(Softmax(2 * EYE, EYE, EYE))
    return MultiHead(
        [h0, h1]
    ), lambda x, p: h0.velocity(SEQ, x, positions=p) + h1.velocity(SEQ, x, positions=p)


def _sum_of_sums():
    a, b = masked(), gqa()
    inner = Sum([a, Softmax(EYE, EYE, EYE)])
    return (
        Sum([inner, b]),
        lambda x, p: (
            a.velocity(SEQ, x, positions=p)
            + Softmax(EYE, EYE, EYE).velocity(SEQ, x)
            + b.velocity(SEQ, x, positions=p)
        ),
    )


def _post_ln_masked():
    a = masked()
    sphere = Empirical(normalize(SEQ.points), positions=SEQ.positions)

    def by_hand(x, p):
        q = normalize(x)
        v = a.velocity(sphere, q, positions=p)
        return v - (v * q).sum(-1, keepdim=True) * q

    return Normalized(a, "post-ln"), by_hand


WRAPPERS = {
    "rope-plus-mlp": _rope_plus_mlp,
    "pre-rmsnorm-gqa": _pre_rms,
    "layernorm-rope": _layernorm,
    "post-layernorm-rope": _post_layernorm,
    "smollm2-layer": _smollm_layer,
    "schedule": _schedule,
    "multihead-masked": _multihead_masked,
    "sum-of-sums": _sum_of_sums,
    "post-ln-masked": _post_ln_masked,
}


def _measure_for(name):
    return Empirical(normalize(SEQ.points), positions=SEQ.positions) if "post-ln" in name else SEQ


@pytest.mark.parametrize("name", WRAPPERS)
def test_a_wrapper_refuses_new_points_without_positions(name):  # fixed: all 8 wrappers
    wrapper, _ = WRAPPERS[name]()
    with pytest.raises(ValueError, match=r"at points x needs their positions: pass positions"):
        wrapper.velocity(_measure_for(name), X)


@pytest.mark.parametrize("name", WRAPPERS)
def test_positions_travel_through_the_wrapper(name):  # fixed: positions= was refused
    wrapper, by_hand = WRAPPERS[name]()
    mu = _measure_for(name)
    got = wrapper.velocity(mu, X, positions=P)
    torch.testing.assert_close(got, by_hand(X, P), rtol=1e-12, atol=1e-12)
    # other positions give another velocity: they are used, not μ's
    assert float((got - wrapper.velocity(mu, X, positions=torch.arange(5.0))).abs().max()) > 1e-6
    # at μ's own tokens nothing changed: positions are μ's
    torch.testing.assert_close(
        wrapper.velocity(mu), wrapper.velocity(mu, mu.points, positions=mu.positions)
    )


class _UserWrapper(Field):
    """A wrapper defined outside tpde that does not pass positions on."""

    def __init__(self, field):
        self.field, self.dim = field, field.dim

    def particle_velocity(self, t, mu, x, engine, info=None):
        return 2 * self.field.particle_velocity(t, mu, x, engine, info)


ERRORS = {
    "user-wrapper-hides-positions": (  # fixed: used μ's positions for x
        lambda: _UserWrapper(gqa()).velocity(SEQ, X),
        ValueError,
        r"causal attention evaluates at points x other than μ's tokens only with their "
        r"positions.*must pass positions on",
    ),
    "user-wrapper-masked": (  # fixed
        lambda: _UserWrapper(masked()).velocity(SEQ, X),
        ValueError,
        "masked attention evaluates at points x other than μ's tokens",
    ),
    "sum-positions-without-positional-part": (  # fixed: TypeError (unexpected keyword)
        lambda: (mlp() + gqa(causal=False)).velocity(SEQ, X, positions=P),
        ValueError,
        "positions were given, but this field uses none",
    ),
    "normalized-positions-without-x": (  # fixed: TypeError (unexpected keyword)
        lambda: Normalized(gqa(), RMSNorm()).velocity(SEQ, positions=P),
        ValueError,
        "pass x too, or drop positions",
    ),
    "sum-positions-wrong-shape": (
        lambda: (gqa() + mlp()).velocity(SEQ, X, positions=P[:3]),
        ValueError,
        r"positions must have shape \(5,\) to match x \(5, 4\); received \(3,\)",
    ),
    "sum-names-its-positional-part": (
        lambda: (mlp() + Normalized(gqa(), RMSNorm())).velocity(SEQ, X[:3]),
        ValueError,
        r"Sum \(its part GroupedQueryAttention uses positions\) at points x needs their "
        r"positions: pass positions of shape \(3,\)",
    ),
    "schedule-negative-positions": (
        lambda: LayerSchedule([gqa(), mlp()]).velocity(SEQ, X, positions=-P),
        ValueError,
        "positions must be ≥ 0",
    ),
}

test_bad_input_raises_a_clear_error = error_table_test(ERRORS)


def test_plain_fields_and_wrappers_without_positions_are_unchanged():
    field = mlp() + Softmax(EYE, EYE, EYE)
    mu = Empirical(SEQ.points)
    torch.testing.assert_close(
        field.velocity(mu, X), mlp().velocity(mu, X) + Softmax(EYE, EYE, EYE).velocity(mu, X)
    )
    assert not field.needs_positions and all(WRAPPERS[n]()[0].needs_positions for n in WRAPPERS)
