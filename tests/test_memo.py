"""tpde._memo: the one-entry memos of facts a flow's fields re-derive at every call (the
weights' logs, whether they are positive, whether positions increase) — remembered only
while the tensor, and a tensor result, are unchanged; never across autograd or inference
mode. Exact comparisons: a remembered result is the computed one, bit for bit."""

from __future__ import annotations

import torch
from torch.autograd import forward_ad

from tpde._memo import TensorMemo
from tpde.fields import GroupedQueryAttention
from tpde.measures import Empirical


def _counting(compute):
    calls = []

    def counted(tensor):
        calls.append(1)
        return compute(tensor)

    return TensorMemo(counted), calls


def test_a_memo_recomputes_after_an_in_place_edit_or_for_another_tensor():
    memo, calls = _counting(torch.log)
    w = torch.full((4,), 0.25, dtype=torch.float64)
    first = memo(w)
    assert memo(w) is first and len(calls) == 1
    w.mul_(2.0)  # the same tensor, new values
    torch.testing.assert_close(memo(w), torch.log(w), rtol=0, atol=0)
    assert len(calls) == 2
    other = torch.full((4,), 0.25, dtype=torch.float64)  # equal values, another tensor
    memo(other)
    assert len(calls) == 3


def test_a_memo_recomputes_a_result_its_caller_edited():
    memo, calls = _counting(torch.log)
    w = torch.full((4,), 0.25, dtype=torch.float64)
    memo(w).add_(1.0)  # a caller edits the result it received
    torch.testing.assert_close(memo(w), torch.log(w), rtol=0, atol=0)
    assert len(calls) == 2


def test_a_memo_never_serves_autograd_or_inference_tensors():
    memo, calls = _counting(torch.log)
    w = torch.full((4,), 0.25, dtype=torch.float64, requires_grad=True)
    for _ in range(2):  # a graph each time: two backward passes work
        memo(w).sum().backward()
    assert len(calls) == 2
    torch.testing.assert_close(w.grad, 2 / w.detach(), rtol=0, atol=0)
    plain = torch.full((4,), 0.25, dtype=torch.float64)
    with torch.inference_mode():
        inside = memo(plain)
        frozen = torch.full((4,), 0.25, dtype=torch.float64)  # no version counter
        memo(frozen)
        memo(frozen)
    outside = memo(plain)  # not the inference tensor computed inside
    assert outside is not inside and not outside.is_inference()
    assert len(calls) == 6


def test_attention_follows_weights_edited_in_place(generator):
    """Softmax attention reads edited weights (the remembered log-weights are not reused)."""
    d = 8
    W = [torch.randn(d, d, generator=generator, dtype=torch.float64) for _ in range(4)]
    field = GroupedQueryAttention(*W, heads=2, kv_heads=2, causal=False)
    points = torch.randn(6, d, generator=generator, dtype=torch.float64)
    mu = Empirical(points)
    before = field.velocity(mu)
    mu.weights.copy_(torch.tensor([0.5, 0.125, 0.125, 0.125, 0.0625, 0.0625], dtype=torch.float64))
    fresh = Empirical(points, weights=mu.weights.clone())
    torch.testing.assert_close(field.velocity(mu), field.velocity(fresh), rtol=0, atol=0)
    assert not torch.allclose(field.velocity(mu), before)


def test_the_dense_causal_mask_follows_positions_edited_in_place(generator):
    """Self-attention's remembered causal mask is rebuilt after an in-place edit of the
    positions (here reversed: every query then sees the other keys)."""
    from tpde._engines import softmax_weights

    q = torch.randn(2, 6, 3, generator=generator, dtype=torch.float64)
    k = torch.randn(2, 6, 3, generator=generator, dtype=torch.float64)
    p = torch.arange(6, dtype=torch.float64)
    first = softmax_weights(q, k, query_positions=p, key_positions=p)
    assert bool((first.triu(1) == 0).all())
    p.copy_(torch.arange(5, -1, -1, dtype=torch.float64))
    again = softmax_weights(q, k, query_positions=p, key_positions=p)
    fresh = softmax_weights(q, k, query_positions=p.clone(), key_positions=p.clone())
    torch.testing.assert_close(again, fresh, rtol=0, atol=0)
    assert bool((again.tril(-1) == 0).all())


def test_a_new_tensor_of_the_same_bits_reads_the_memo():
    """A forward pass builds its weights and positions afresh: a new tensor holding the
    same bits as the one remembered is mapped to it (tpde._memo.canonical), one comparison
    instead of every fact recomputed; the value served is the computed one, bit for bit."""
    memo, calls = _counting(torch.log)
    w = torch.full((5,), 0.2, dtype=torch.float64)
    first = memo(w)
    again = torch.full((5,), 0.2, dtype=torch.float64)  # another tensor, the same bits
    assert memo(again) is first and memo(again) is first and len(calls) == 1
    again.mul_(2.0)  # the new tensor edited after it was mapped: compared again
    torch.testing.assert_close(memo(again), torch.log(again), rtol=0, atol=0)
    assert len(calls) == 2


def test_canonical_tells_bits_apart_and_follows_edits_of_the_earlier_tensor():
    """Bits, not values: −0.0 and 0.0 are different tensors (a fact may read the sign of
    a zero); the earlier tensor edited in place no longer stands for the new one."""
    from tpde._memo import canonical

    zero = torch.zeros(3, dtype=torch.float64)
    assert canonical(zero, "test-zero") is zero
    assert canonical(-torch.zeros(3, dtype=torch.float64), "test-zero") is not zero
    earlier = torch.arange(4, dtype=torch.float32)
    assert canonical(earlier, "test-edit") is earlier
    later = torch.arange(4, dtype=torch.float32)
    assert canonical(later, "test-edit") is earlier
    earlier.add_(1.0)  # the earlier tensor changed: the later one is its own again
    assert canonical(later, "test-edit") is later
    other = torch.arange(4, dtype=torch.float64)
    assert canonical(other, "test-edit") is other  # another dtype: never mapped
    grad = torch.arange(4, dtype=torch.float32, requires_grad=True)
    assert canonical(grad, "test-edit") is grad  # autograd tensors are never mapped


def test_rope_tables_are_shared_by_positions_of_the_same_bits(generator):
    """RoPE's tables are read again for new positions of the same bits (a new forward pass),
    and recomputed for positions edited in place; the rotation is the fresh one's, bit for
    bit."""
    from tpde.fields import RoPE

    rope = RoPE()
    x = torch.randn(2, 6, 4, generator=generator, dtype=torch.float64)
    p = torch.arange(6, dtype=torch.float64)
    first = rope.rotate(x, p)
    tables = rope._cached[1]
    q = torch.arange(6, dtype=torch.float64)
    torch.testing.assert_close(rope.rotate(x, q), first, rtol=0, atol=0)
    assert rope._cached[1] is tables
    q.mul_(2.0)  # edited: other angles
    fresh = RoPE().rotate(x, q.clone())
    torch.testing.assert_close(rope.rotate(x, q), fresh, rtol=0, atol=0)
    assert not torch.equal(fresh, first)


def test_dual_tensors_of_forward_ad_are_never_mapped():
    """Inside forward_ad.dual_level a dual tensor has requires_grad False; mapped to an earlier
    plain tensor of the same primal bits, a memo would serve facts without its tangent."""
    from tpde._memo import canonical

    plain = torch.arange(4, dtype=torch.float64)
    assert canonical(plain, "test-dual") is plain
    with forward_ad.dual_level():
        dual = forward_ad.make_dual(torch.arange(4, dtype=torch.float64), torch.ones(4).double())
        assert canonical(dual, "test-dual") is dual
        memo = TensorMemo(lambda t: 2.0 * t, "test-dual")
        memo(plain)
        tangent = forward_ad.unpack_dual(memo(dual)).tangent
        assert tangent is not None and torch.equal(tangent, torch.full((4,), 2.0).double())
