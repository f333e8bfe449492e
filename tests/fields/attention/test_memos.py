"""What attention remembers across calls (ALiBi's key bias, per-head QK-norm gains) is what
it would compute afresh, and an in-place edit of an input or of a remembered result is seen.

Comparisons are ``torch.equal``: a remembered tensor is the computed one, bit for bit."""

from __future__ import annotations

import torch

from tests.fields.attention.test_grouped_clip import _head_norms, _normed_field
from tpde.fields import ALiBi, GroupedQueryAttention, RoPE
from tpde.fields.attention.grouped import _build_head_gains, _head_gains

F64 = torch.float64


def test_alibi_bias_is_shared_by_equal_alibis_and_equal_positions():
    positions = torch.arange(7, dtype=F64)
    first = ALiBi(rounding="float32").key_bias(positions, 4)
    again = ALiBi(rounding="float32").key_bias(positions.clone(), 4)  # a new forward's
    assert again is first
    assert torch.equal(first, ALiBi(rounding="float32")._key_bias(positions, 4))
    other = ALiBi(rounding="float32").key_bias(positions, 8)  # another H: another table
    assert other.shape == (8, 7)


def test_alibi_bias_sees_in_place_edits_of_positions_and_of_the_result():
    alibi, positions = ALiBi(), torch.arange(5, dtype=F64)
    first = alibi.key_bias(positions, 2).clone()
    positions[0] = 3.0  # an edit of the positions: read again
    edited = alibi.key_bias(positions, 2)
    assert torch.equal(edited, alibi._key_bias(positions, 2))
    assert not torch.equal(edited, first)
    edited.zero_()  # a caller edits the remembered table: built again
    assert torch.equal(alibi.key_bias(positions, 2), alibi._key_bias(positions, 2))


def test_alibi_bias_keeps_the_graph_of_positions_that_require_grad():
    positions = torch.arange(4, dtype=F64, requires_grad=True)
    ALiBi().key_bias(positions, 2).sum().backward()
    assert positions.grad is not None and bool((positions.grad > 0).all())


def test_per_head_gains_follow_in_place_edits():
    field, weights, mu, _, (_, k_norms) = _normed_field(3)
    before = field.velocity(mu)
    assert torch.equal(field.velocity(mu), before)  # remembered: the same bits
    field.q_norm[1].gamma.mul_(2.0)
    after = field.velocity(mu)
    fresh = GroupedQueryAttention(
        *weights, 4, 2, position=RoPE(), q_norm=tuple(field.q_norm), k_norm=k_norms
    )  # (a tuple of new norms is a new key)
    assert not torch.equal(after, before)
    assert torch.equal(after, fresh.velocity(mu))


def test_remembered_gains_edited_by_a_caller_are_built_again():
    _, norms = _head_norms(torch.Generator().manual_seed(4), 3)
    like = torch.zeros(2, 4, dtype=F64)
    _, gains, biases = _head_gains(norms, like)
    expected = _build_head_gains(norms, like)
    assert torch.equal(gains, expected[1]) and torch.equal(biases, expected[2])
    gains.zero_()
    assert torch.equal(_head_gains(norms, like)[1], expected[1])


def test_per_head_gains_that_require_grad_get_their_gradient():
    _, norms = _head_norms(torch.Generator().manual_seed(5), 2)
    heads = torch.randn(2, 3, 4, dtype=F64, generator=torch.Generator().manual_seed(6))
    _head_gains(norms, heads)  # remembered without a graph; requires_grad_ bumps no version
    norms[0].gamma.requires_grad_(True)
    _, gains, _ = _head_gains(norms, heads)
    (heads * gains).sum().backward()
    assert norms[0].gamma.grad is not None


def test_per_head_gains_of_inference_tensors_are_built():
    with torch.inference_mode():
        _, norms = _head_norms(torch.Generator().manual_seed(7), 2)
    like = torch.zeros(2, 4, dtype=F64)
    for _ in range(2):
        gains = _head_gains(norms, like)[1]
        assert torch.equal(gains, _build_head_gains(norms, like)[1])


def test_rope_tables_of_positions_that_require_grad_keep_their_graph():
    # Remembered tables would carry the first call's graph, freed by its backward pass: the
    # second backward raised "Trying to backward through the graph a second time".
    positions = torch.arange(4, dtype=F64, requires_grad=True)
    for _ in range(2):
        cos, sin = RoPE()._table(positions, 4, F64, None)
        (cos.sum() + sin.sum()).backward()
    assert positions.grad is not None
