"""A llama-architecture GGUF file as a :class:`~tpde.pretrained.transformer.Transformer`.

The file is read and checked whole by :func:`tpde.pretrained.gguf_llama.read_llama`
(metadata key by key, every tensor's name and shape, dequantised to float32); the layers
are then the Pre-RMSNorm fields ``Normalized(GQA + RoPE, RMSNorm) + Normalized(SwiGLU,
RMSNorm)`` of the llama entry (:mod:`tpde.pretrained.architectures`).
"""

from __future__ import annotations

import math

import torch

from tpde.fields import GroupedQueryAttention, LayerSchedule, Normalized, RMSNorm, RoPE, SwiGLU
from tpde.pretrained import gguf_llama
from tpde.pretrained._bpe import build_tokenizer
from tpde.pretrained.transformer import Embedding, Layer, Transformer

__all__ = ["from_llama_file", "load_gguf"]


def _layer(l: int, w: dict, config) -> Layer:
    """Block l from the tensors ``w`` (GGUF names): its fields and norms."""
    p = f"blk.{l}"
    attention = GroupedQueryAttention(
        w[f"{p}.attn_q.weight"], w[f"{p}.attn_k.weight"], w[f"{p}.attn_v.weight"],
        w[f"{p}.attn_output.weight"], config.heads, config.kv_heads,
        scale=1 / math.sqrt(config.head_dim), position=RoPE(base=config.rope_base),
        causal=True,
    )  # fmt: skip
    mlp = SwiGLU(w[f"{p}.ffn_gate.weight"], w[f"{p}.ffn_up.weight"], w[f"{p}.ffn_down.weight"])
    n1 = RMSNorm(w[f"{p}.attn_norm.weight"], config.rms_eps)
    n2 = RMSNorm(w[f"{p}.ffn_norm.weight"], config.rms_eps)
    return Layer(attention, mlp, n1, n2, Normalized(attention, n1) + Normalized(mlp, n2))


def from_llama_file(file, dtype: torch.dtype, device, tokenizer) -> Transformer:
    """The Transformer of a read :class:`~tpde.pretrained.gguf_llama.LlamaFile`."""
    config = file.config
    w = {
        name: torch.from_numpy(array).to(dtype=dtype, device=device)
        for name, array in file.tensors.items()
    }
    layers = tuple(_layer(l, w, config) for l in range(config.layers))
    embeddings = w["token_embd.weight"]
    return Transformer(
        config=config,
        layers=layers,
        schedule=LayerSchedule([layer.field for layer in layers]),
        embedding=Embedding(embeddings),
        final_norm=RMSNorm(w["output_norm.weight"], config.rms_eps),
        head=embeddings if config.tied_embeddings else w["output.weight"],
        tokenizer=tokenizer,
        architecture="llama",
    )


def load_gguf(path, dtype: torch.dtype, device) -> Transformer:
    """A GGUF file as a Transformer (see :func:`tpde.pretrained.load`): llama files through
    :func:`~tpde.pretrained.gguf_llama.read_llama`, the architectures of
    :data:`~tpde.pretrained.architectures.GGUF_ARCHITECTURES` (Gemma-3) through their entry."""
    from pathlib import Path

    from tpde.pretrained.architectures import GGUF_ARCHITECTURES
    from tpde.pretrained.gguf_entry import load_gguf_entry

    path = Path(path)
    metadata, stored = gguf_llama._open(path)  # the header is read once, here
    if metadata.get("general.architecture") in GGUF_ARCHITECTURES:
        return load_gguf_entry(path, metadata, stored, dtype, device)
    file = gguf_llama.read_opened(path, metadata, stored)
    return from_llama_file(file, dtype, device, build_tokenizer(file.tokenizer, file.path.name))
