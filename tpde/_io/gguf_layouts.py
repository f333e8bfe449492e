"""The row layouts llama.cpp's converter writes, undone: a GGUF file's query, key, fused QKV
and per-head norm tensors as the Hugging Face checkpoint it was converted from stores them.
Array operations on the converter's conventions, which name no family and no config key;
the translator (:mod:`tpde.pretrained._gguf`) says which tensors of which family take which
(the GGUF map's ``permuted``, ``qkv_blocks``, ``stacked``), undoes the family-specific ones
itself (Gemma's 1 + w gains, GPT-2's transposition), and turns the ``ValueError`` raised
here into a :class:`~tpde.pretrained.LoadError`. Shapes are listed innermost first in the
file; the arrays come out row-major:

================  ========================================  ==================================
what              the file (llama.cpp's converter)          the checkpoint
================  ========================================  ==================================
llama's           inside each head of dimension k, row      row j·k/2 + i (the two halves of
``attn_q``,       2i + j (i < k/2, j ∈ {0, 1}): adjacent    the rotary pairs;
``attn_k``        rotary pairs (``LlamaModel.permute``)     :func:`unpermute_rotary_rows`, as
                                                            transformers' GGUF loader's
                                                            ``_reverse_permute_weights``)
a fused QKV       the blocks [W_q; W_k; W_v] (H and H_kv    group by group: [q_{g,1} … q_{g,r};
(``attn_qkv``)    heads; ``GPTNeoXModel``, and              k_g; v_g], r = H/H_kv (GPT-NeoX:
                  ``FalconModel``'s "jploski" layout)       r = 1; :func:`interleave_qkv`)
per-head norms    one (H, d_h) tensor (StableLM's           H tensors (d_h,), one per head
                  ``_stack_qk_norm``)                       (``norms.{h}``; :func:`stack_rows`)
================  ========================================  ==================================
"""

from __future__ import annotations

import numpy as np

__all__ = ["interleave_qkv", "stack_rows", "unpermute_rotary_rows"]


def interleave_qkv(weight: np.ndarray, heads: int, kv_heads: int | None = None) -> np.ndarray:
    """A fused QKV weight (or bias) stored as the blocks [W_q; W_k; W_v] (llama.cpp's
    converter) as the checkpoint stores it, group by group: rows [q_{g,1} … q_{g,r}; k_g; v_g]
    for g = 0 … H_kv − 1, r = H/H_kv (GPT-NeoX, H_kv = H: head by head [q_h; k_h; v_h]).

    Parameters
    ----------
    weight : array ((H + 2·H_kv)·k, …)
    heads : int
        H.
    kv_heads : int, optional
        H_kv (default H).

    Returns
    -------
    array ((H + 2·H_kv)·k, …)
        Group g's rows: the file's query rows of heads g·r … g·r + r − 1, then its key and
        value rows of head g.
    """
    kv = heads if kv_heads is None else kv_heads
    rows, rest = weight.shape[0], weight.shape[1:]
    if kv < 1 or heads % kv or rows % (heads + 2 * kv):
        raise ValueError(
            f"a fused QKV weight with {rows} rows cannot be split into q of {heads} heads and k "
            f"and v of {kv} heads each; the file's head counts do not match its tensors."
        )
    k = rows // (heads + 2 * kv)
    q = weight[: heads * k].reshape(kv, heads // kv * k, *rest)
    keys = weight[heads * k : (heads + kv) * k].reshape(kv, k, *rest)
    values = weight[(heads + kv) * k :].reshape(kv, k, *rest)
    return np.ascontiguousarray(np.concatenate([q, keys, values], axis=1).reshape(weight.shape))


def unpermute_rotary_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's rotary row permutation of a query or key weight (module notes).

    Parameters
    ----------
    weight : array (heads·k, d)
        ``attn_q`` (heads = H) or ``attn_k`` (heads = H_kv) as stored in the file.
    heads : int

    Returns
    -------
    array (heads·k, d)
        Row j·k/2 + i of head h is the file's row 2i + j of head h.
    """
    rows = weight.shape[0]
    if rows % (2 * heads):
        raise ValueError(
            f"a rotary weight with {rows} rows cannot be split into {heads} heads of even "
            "dimension; the file's head counts do not match its tensors."
        )
    half = rows // heads // 2
    return np.ascontiguousarray(
        weight.reshape(heads, half, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)
    )


def stack_rows(template: str, stored: str, shape: tuple) -> dict[str, tuple[str, int, tuple]]:
    """The checkpoint's per-head tensors of a stacked (H, d_h) file tensor: name (``template``
    with ``{h}`` = 0 … H − 1) → (the file's name ``stored``, row h, shape (d_h,))."""
    return {template.format(h=h): (stored, h, tuple(shape[1:])) for h in range(shape[0])}
