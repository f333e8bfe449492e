"""Pairwise softmax averages in plain torch: dense, chunked (row blocks) and SDPA.

The primitive is the key-biased softmax average

    out_i = Σ_j exp(q_i·k_j + b_j) v_j / Σ_j exp(q_i·k_j + b_j),

with q (..., n, e), k (..., m, e), v (..., m, f) and an optional key bias b (..., m)
(log-weights of the keys, plus any variant-specific key term).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable
from torch.utils.checkpoint import checkpoint

from tpde._memo import TensorMemo
from tpde._validation import all_finite

# Memory budget for one block of scores in the chunked engine (bytes).
CHUNK_BYTES = 64 * 2**20


def augment_with_bias(q, k, key_bias):
    """Fold a key bias into one extra coordinate: [q, 1]·[k, b] = q·k + b."""
    if key_bias is None:
        return q, k
    ones = torch.ones((*q.shape[:-1], 1), dtype=q.dtype, device=q.device)
    return torch.cat([q, ones], dim=-1), torch.cat([k, key_bias.unsqueeze(-1)], dim=-1)


def dense_scores(q, k, key_bias, softcap=None):
    """Scores q_i·k_j + b_j as a materialised (..., n, m) tensor; with a ``softcap`` c the
    product is capped first, c·tanh(q_i·k_j/c) + b_j (Gemma-2's score soft-cap)."""
    scores = q @ k.transpose(-1, -2)
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    if key_bias is not None:
        scores = scores + key_bias.unsqueeze(-2)
    return scores


def hidden_keys(query_positions, key_positions, window=None):
    """Boolean (n, m) mask of the keys query i does not see: s_j > s_i, or s_i − s_j ≥ window."""
    gap = query_positions.unsqueeze(-1) - key_positions.unsqueeze(-2)
    hidden = gap < 0
    return hidden if window is None else hidden | (gap >= window)


#: The causal mask of self-attention (queries are the keys), remembered for the last
#: positions tensor (a flow's, one for the whole run: :mod:`tpde._memo`), up to this many
#: entries (1 MB of booleans: a larger mask is rebuilt rather than held).
MEMO_MASK_ENTRIES = 2**20


def _causal_masks(positions):
    """(hidden, additive) masks of self-attention at ``positions``: the boolean mask of
    :func:`hidden_keys` and the same as 0 (seen) / −inf (hidden) in the positions' dtype
    (the tokens', in which fields keep positions; None for integer positions)."""
    hidden = hidden_keys(positions, positions)
    if not positions.is_floating_point():
        return hidden, None
    zeros = torch.zeros(hidden.shape, dtype=positions.dtype, device=positions.device)
    return hidden, zeros.masked_fill(hidden, -math.inf)


_CAUSAL_MASKS = TensorMemo(_causal_masks, "positions")


def softmax_weights_dense(q, k, key_bias=None, query_positions=None, key_positions=None,
                          window=None, softcap=None):  # fmt: skip
    """The (..., n, m) softmax weights exp(q_i·k_j + b_j)/Σ_l exp(q_i·k_l + b_l); O(n·m) memory.

    With positions (n,) and (m,), key j is seen by query i only if s_j ≤ s_i (causal), and
    with a ``window`` w only if also s_i − s_j < w (sliding window): a hidden key weighs 0.
    ``softcap``: scores of :func:`dense_scores` capped.

    Self-attention's causal mask on the CPU is added (0 or −inf, one pass: 5 µs on 4 × 128²
    scores where ``masked_fill`` takes 45) rather than filled in. The weights are the same
    bit for bit (s + 0 = s; s − ∞ = −∞), unless a hidden score is +∞ or NaN (an overflow),
    where the sum is NaN: weights that are not all finite are computed again by
    ``masked_fill``, so a query never reads a key it does not see.
    """
    scores = dense_scores(q, k, key_bias, softcap)
    if query_positions is not None:
        n = query_positions.shape[-1]
        if query_positions is key_positions and window is None and n * n <= MEMO_MASK_ENTRIES:
            hidden, additive = _CAUSAL_MASKS(query_positions)  # self-attention's masks, kept
            if scores.device.type == "cpu" and getattr(additive, "dtype", None) == scores.dtype:
                weights = torch.softmax(scores + additive, dim=-1)
                if all_finite(weights):
                    return weights
        else:
            hidden = hidden_keys(query_positions, key_positions, window)
        scores = scores.masked_fill(hidden, -math.inf)
    return torch.softmax(scores, dim=-1)


def softmax_average_dense(
    q, k, v, key_bias=None, query_positions=None, key_positions=None, window=None
):
    """The weights of :func:`softmax_weights_dense` times v (masks as there)."""
    return softmax_weights_dense(q, k, key_bias, query_positions, key_positions, window) @ v


def chunk_rows(n_rows: int, n_cols: int, itemsize: int) -> int:
    """Rows per block so that a (rows, n_cols) block of scores fits CHUNK_BYTES."""
    return max(1, min(n_rows, CHUNK_BYTES // max(1, n_cols * itemsize)))


def in_row_blocks(dense, q, k, *rest, cat_dim: int = -2, sliced: tuple[int, ...] = ()):
    """dense(q_block, k, *rest) over row blocks of q under CHUNK_BYTES, concatenated.

    O(block·m) memory, forward and backward: under autograd each block is checkpointed
    (recomputed in the backward pass). ``sliced``: indices into ``rest`` of per-query
    arguments (shape (n,)), cut along with q.
    """
    rows = chunk_rows(q.shape[-2], k.shape[-2] * math.prod(q.shape[:-2]), q.element_size())
    needs_grad = torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in (q, k, *rest)
    )
    blocks = []
    for start in range(0, q.shape[-2], rows):
        stop = start + rows
        block_rest = [
            r[start:stop] if i in sliced and r is not None else r for i, r in enumerate(rest)
        ]
        args = (q[..., start:stop, :], k, *block_rest)
        if needs_grad:
            blocks.append(checkpoint(dense, *args, use_reentrant=False))
        else:
            blocks.append(dense(*args))
    return torch.cat(blocks, dim=cat_dim)


def softmax_average_chunked(
    q, k, v, key_bias=None, query_positions=None, key_positions=None, window=None
):
    """Row blocks of the dense computation (:func:`in_row_blocks`); masks as in dense."""
    return in_row_blocks(
        softmax_average_dense,
        q,
        k,
        v,
        key_bias,
        query_positions,
        key_positions,
        window,
        sliced=(2,),
    )


def softmax_average_sdpa(
    q, k, v, key_bias=None, query_positions=None, key_positions=None, window=None
):
    """torch's fused scaled_dot_product_attention (flash kernel on CPU, O(n) memory).

    The flash kernels need 4-D inputs and equal head sizes for queries and values, so the
    key bias becomes one extra query/key coordinate and the narrower side is zero-padded.
    With positions, the causal mask s_j ≤ s_i runs as ``is_causal`` on one merged sequence
    (:func:`causal_slots`): no mask is materialised. A sliding window is a boolean
    (n, m) ``attn_mask`` (n·m bytes).
    """
    if window is not None:
        q, k = augment_with_bias(q, k, key_bias)
        visible = ~hidden_keys(query_positions, key_positions, window)
        return _sdpa(q, k, v, is_causal=False, attn_mask=visible)
    if query_positions is not None:
        return _causal_sdpa(q, k, v, key_bias, query_positions, key_positions)
    q, k = augment_with_bias(q, k, key_bias)
    return _sdpa(q, k, v, is_causal=False)


# The CPU flash kernel runs float32 heads narrower than 16 slower than width 16 itself
# (n = 10⁴: 0.18 s at width 3, 0.11 s at width 16); float64 has no such effect.
_SDPA_MIN_WIDTH = {torch.float32: 16}


def _sdpa(q, k, v, is_causal: bool, attn_mask=None):
    """SDPA with scale 1 on (..., L, e) inputs; q, k and v are zero-padded to one width.

    The flash kernel needs equal query and value widths; float32 widths below 16 are
    padded to 16, where the kernel is fastest (zero coordinates change no score).
    ``attn_mask``: boolean (n, m), True where a key is seen.
    """
    e, f = q.shape[-1], v.shape[-1]
    width = max(e, f, _SDPA_MIN_WIDTH.get(q.dtype, 0))
    if e < width:
        q, k = F.pad(q, (0, width - e)), F.pad(k, (0, width - e))
    if f < width:
        v = F.pad(v, (0, width - f))
    batch = q.shape[:-2]
    q4, k4, v4 = (t.reshape(-1, 1, *t.shape[-2:]) for t in (q, k, v))
    out = F.scaled_dot_product_attention(
        q4, k4, v4, attn_mask=attn_mask, scale=1.0, is_causal=is_causal
    )
    return out.reshape(*batch, q.shape[-2], -1)[..., :f]


def causal_slots(query_positions, key_positions):
    """Place keys and queries in one sequence where ``is_causal`` means s_j ≤ s_i.

    SDPA's causal mask lets slot p see slots 0..p. Keys and queries are stably sorted by
    position; the i-th sorted query sees the first c_i sorted keys (c_i = #{j: s_j ≤ s_i},
    ties included, c_i ≥ 1). Key r goes to slot σ_r and the queries with c_i = r + 1 to
    the slots σ_r, σ_r + 1, …, so σ_{r+1} = σ_r + max(1, #{i: c_i = r + 1}). A slot can
    hold a key and a query at once; a slot without a key gets a dummy key that attracts
    nothing, a slot without a query a dummy query whose output is dropped. Without ties
    between self-attending tokens the sequence is the sorted tokens themselves (length n);
    a tie group of size g costs g − 1 extra slots.

    Returns
    -------
    key_slot (m,), query_slot (n,) in the original orders, and the sequence length L.
    """
    key_order = torch.argsort(key_positions, stable=True)
    query_order = torch.argsort(query_positions, stable=True)
    visible = torch.searchsorted(key_positions[key_order], query_positions[query_order], right=True)
    m = key_positions.shape[0]
    gaps = torch.bincount(visible, minlength=m + 1)[1:].clamp_min(1)
    sorted_key_slot = torch.cumsum(gaps, 0) - gaps
    first_of_group = torch.searchsorted(visible, visible)
    rank = torch.arange(visible.shape[0], device=visible.device) - first_of_group
    sorted_query_slot = sorted_key_slot[visible - 1] + rank
    key_slot = torch.empty_like(key_order)
    key_slot[key_order] = sorted_key_slot
    query_slot = torch.empty_like(query_order)
    query_slot[query_order] = sorted_query_slot
    return key_slot, query_slot, int(gaps.sum())


def _in_sequence_order(query_positions, key_positions) -> bool:
    """Whether queries and keys are the same tokens at strictly increasing positions: then
    slot i holds key i and query i, and ``is_causal`` applies to the inputs as they are."""
    if query_positions is not key_positions:
        if query_positions.shape != key_positions.shape:
            return False
        if not torch.equal(query_positions, key_positions):
            return False
    return _INCREASING(query_positions)


def _increasing(positions: torch.Tensor) -> bool:
    return bool((positions[1:] > positions[:-1]).all())


#: Whether positions strictly increase, remembered for the last positions tensor (a flow's,
#: one for the whole run: :mod:`tpde._memo`).
_INCREASING = TensorMemo(_increasing, "positions")


def _causal_sdpa(q, k, v, key_bias, query_positions, key_positions):
    """Causal softmax average as one ``is_causal`` SDPA call on the slots of causal_slots.

    Self-attention of a sequence (queries = keys at increasing positions, the decoder's
    case) needs no slots: one ``is_causal`` call on the inputs, without the gathers and
    without the bias coordinate when there is no bias.
    """
    if _in_sequence_order(query_positions, key_positions):
        q, k = augment_with_bias(q, k, key_bias)
        return _sdpa(q, k, v, is_causal=True)
    key_slot, query_slot, length = causal_slots(query_positions, key_positions)
    n, m = q.shape[-2], k.shape[-2]
    if key_bias is None:
        key_bias = torch.zeros(k.shape[:-1], dtype=k.dtype, device=k.device)
    q, k = augment_with_bias(q, k, key_bias)
    # One padding row each: zeros for dummy queries and values, a key that scores −huge
    # for dummy keys (finite, so that a zero dummy query times it stays 0, not NaN).
    dummy_key = torch.zeros_like(k[..., :1, :])
    dummy_key[..., -1] = torch.finfo(k.dtype).min / 4
    q = torch.cat([q, torch.zeros_like(q[..., :1, :])], dim=-2)
    k = torch.cat([k, dummy_key], dim=-2)
    v = torch.cat([v, torch.zeros_like(v[..., :1, :])], dim=-2)
    q_index = torch.full((length,), n, dtype=torch.long, device=q.device)
    q_index[query_slot] = torch.arange(n, device=q.device)
    k_index = torch.full((length,), m, dtype=torch.long, device=q.device)
    k_index[key_slot] = torch.arange(m, device=q.device)
    out = _sdpa(q[..., q_index, :], k[..., k_index, :], v[..., k_index, :], is_causal=True)
    return out[..., query_slot, :]


# ---------------------------------------------------------------------- unnormalised kernel sums
#
#     out_i = Σ_j φ(q_i·k_j + b_j) v_j        (no normalisation over j)
#
# for the pointwise kernels φ of POINTWISE_KERNELS: sigmoid attention (φ = σ), linear
# attention (φ = identity) and the unnormalised exponential of the USA model (φ = exp,
# softmax's numerator without its normaliser). SDPA cannot express these (it always normalises), so
# they run on dense, chunked, tiled and keops.

POINTWISE_KERNELS = {"sigmoid": torch.sigmoid, "linear": lambda s: s, "exp": torch.exp}


def kernel_sum_dense(q, k, v, key_bias=None, kernel: str = "sigmoid"):
    """One (..., n, m) matrix φ(scores); O(n·m) memory."""
    return POINTWISE_KERNELS[kernel](dense_scores(q, k, key_bias)) @ v


def kernel_sum_chunked(q, k, v, key_bias=None, kernel: str = "sigmoid"):
    """Row blocks of :func:`kernel_sum_dense` (:func:`in_row_blocks`)."""
    return in_row_blocks(kernel_sum_dense, q, k, v, key_bias, kernel)


# ---------------------------------------------------------------------- log-sum-exp reductions
#
#     out_i = log Σ_j exp(q_i·k_j + b_j)
#
# the reduction of log-domain Sinkhorn iterations (Sinkhorn attention).


def logsumexp_dense(q, k, key_bias=None):
    """One (..., n, m) score matrix; O(n·m) memory."""
    return torch.logsumexp(dense_scores(q, k, key_bias), dim=-1)


def logsumexp_chunked(q, k, key_bias=None):
    """Row blocks of :func:`logsumexp_dense` (:func:`in_row_blocks`)."""
    return in_row_blocks(logsumexp_dense, q, k, key_bias, cat_dim=-1)


def _flash_cpu():
    """torch's internal CPU flash-attention op, which also returns the log-normaliser."""
    return getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def flash_logsumexp_available(device: torch.device) -> bool:
    """Whether :func:`logsumexp_sdpa` runs here (CPU tensors, op present in this torch)."""
    return device.type == "cpu" and _flash_cpu() is not None


def _flash(q, k, v):
    """(output, logsumexp) of softmax attention with scale 1; q, k, v: (B, L, e)."""
    out, lse = _flash_cpu()(q[:, None], k[:, None], v[:, None], 0.0, False, scale=1.0)
    return out[:, 0], lse[:, 0].to(q.dtype)


class _FlashLogSumExp(torch.autograd.Function):
    """log Σ_j exp(q_i·k_j) by the fused CPU flash kernel, with an explicit backward.

    ∂L_i/∂q_i = Σ_j P_ij k_j (the flash output with values k) and
    ∂/∂k_j Σ_i g_i L_i = Σ_i g_i P_ij q_i, P_ij = e^{q_i·k_j − L_i}: a second flash call on
    the transposed problem (queries k_j, keys [q_i, −L_i], values g_i q_i) whose output is
    normalised by its own log-sum-exp, which we undo.
    """

    @staticmethod
    def forward(ctx, q, k):
        average, lse = _flash(q, k, k)
        ctx.save_for_backward(q, k, average, lse)
        return lse

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        q, k, average, lse = ctx.saved_tensors
        grad_q = grad_k = None
        if ctx.needs_input_grad[0]:
            grad_q = grad.unsqueeze(-1) * average
        if ctx.needs_input_grad[1]:
            ones = torch.ones_like(k[..., :1])
            queries = torch.cat([k, ones], dim=-1)
            keys = torch.cat([q, -lse.unsqueeze(-1)], dim=-1)
            values = torch.cat([grad.unsqueeze(-1) * q, torch.zeros_like(q[..., :1])], dim=-1)
            out, column_lse = _flash(queries, keys, values)
            grad_k = out[..., :-1] * column_lse.exp().unsqueeze(-1)
        return grad_q, grad_k


def logsumexp_sdpa(q, k, key_bias=None):
    """The fused CPU flash-attention kernel (O(n) memory), first-order differentiable.

    Uses ``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu``, the internal op
    behind SDPA on the CPU, because it also returns the log-normaliser that the public SDPA
    drops. CPU only; :func:`flash_logsumexp_available` says whether this torch has it.
    """
    if not flash_logsumexp_available(q.device):
        raise ValueError(
            f"engine 'sdpa' computes log-sum-exp reductions with torch's CPU flash kernel, "
            f"which is not available for {q.device.type} tensors in torch {torch.__version__}; "
            "use engine='auto', 'chunked' or 'keops'."
        )
    q, k = augment_with_bias(q, k, key_bias)
    batch = q.shape[:-2]
    q3 = q.reshape(-1, *q.shape[-2:]).contiguous()
    k3 = k.reshape(-1, *k.shape[-2:]).contiguous()
    return _FlashLogSumExp.apply(q3, k3).reshape(*batch, q.shape[-2])
