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
from torch.utils.checkpoint import checkpoint

# Memory budget for one block of scores in the chunked engine (bytes).
CHUNK_BYTES = 64 * 2**20


def augment_with_bias(q, k, key_bias):
    """Fold a key bias into one extra coordinate: [q, 1]·[k, b] = q·k + b."""
    if key_bias is None:
        return q, k
    ones = torch.ones((*q.shape[:-1], 1), dtype=q.dtype, device=q.device)
    return torch.cat([q, ones], dim=-1), torch.cat([k, key_bias.unsqueeze(-1)], dim=-1)


def dense_scores(q, k, key_bias):
    """Scores q_i·k_j + b_j as a materialised (..., n, m) tensor."""
    scores = q @ k.transpose(-1, -2)
    if key_bias is not None:
        scores = scores + key_bias.unsqueeze(-2)
    return scores


def softmax_average_dense(q, k, v, key_bias=None):
    """One (..., n, m) score matrix; O(n·m) memory."""
    return torch.softmax(dense_scores(q, k, key_bias), dim=-1) @ v


def chunk_rows(n_rows: int, n_cols: int, itemsize: int) -> int:
    """Rows per block so that a (rows, n_cols) block of scores fits CHUNK_BYTES."""
    return max(1, min(n_rows, CHUNK_BYTES // max(1, n_cols * itemsize)))


def softmax_average_chunked(q, k, v, key_bias=None):
    """Row blocks of the dense computation; O(block·m) memory, forward and backward.

    Under autograd each block is checkpointed (recomputed in the backward pass), so
    gradients also stay within the block budget.
    """
    rows = chunk_rows(q.shape[-2], k.shape[-2] * math.prod(q.shape[:-2]), q.element_size())
    needs_grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (q, k, v, key_bias)
    )
    blocks = []
    for start in range(0, q.shape[-2], rows):
        q_block = q[..., start : start + rows, :]
        if needs_grad:
            out = checkpoint(softmax_average_dense, q_block, k, v, key_bias, use_reentrant=False)
        else:
            out = softmax_average_dense(q_block, k, v, key_bias)
        blocks.append(out)
    return torch.cat(blocks, dim=-2)


def softmax_average_sdpa(q, k, v, key_bias=None):
    """torch's fused scaled_dot_product_attention (flash kernel on CPU, O(n) memory).

    The flash kernels need 4-D inputs and equal head sizes for queries and values, so the
    key bias becomes one extra query/key coordinate and the narrower side is zero-padded.
    """
    q, k = augment_with_bias(q, k, key_bias)
    e, f = q.shape[-1], v.shape[-1]
    if e < f:
        q, k = F.pad(q, (0, f - e)), F.pad(k, (0, f - e))
    elif f < e:
        v = F.pad(v, (0, e - f))
    batch = q.shape[:-2]
    q4, k4, v4 = (t.reshape(-1, 1, *t.shape[-2:]) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q4, k4, v4, scale=1.0)
    return out.reshape(*batch, q.shape[-2], -1)[..., :f]
