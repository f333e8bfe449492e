r"""The ends of a :class:`~tpde.pretrained.transformer.Transformer` around its layers: the
embedding of token ids (depth 0), the pooler, the sequence-classification head and the
masked-LM transform (after the final norm).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Embedding", "MaskedLMTransform", "Pooler", "SequenceClassifier", "affine"]


@dataclass(frozen=True, eq=False)
class Pooler:
    r"""The first token's pooled vector p = tanh(W x₀ + b) (BERT's and ALBERT's pooler;
    RoBERTa's classification head's own dense + tanh; Devlin et al., arXiv:1810.04805, §3).

    Attributes
    ----------
    weight : tensor (d, d);  bias : tensor (d,)
    """

    weight: torch.Tensor
    bias: torch.Tensor

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """p of tokens x (..., n, d): shape (..., d), in the wider of x's and W's dtypes."""
        return torch.tanh(affine(x[..., 0, :], self.weight, self.bias))


def affine(x: torch.Tensor, weight: torch.Tensor, bias) -> torch.Tensor:
    """W x + b over the last axis, in the wider of x's and W's dtypes (as ``logits``)."""
    dtype = torch.promote_types(x.dtype, weight.dtype)
    bias = None if bias is None else bias.to(dtype)
    return torch.nn.functional.linear(x.to(dtype), weight.to(dtype), bias)


@dataclass(frozen=True, eq=False)
class SequenceClassifier:
    r"""A sequence-classification head: class logits z = W_c p + b_c of one token's vector p
    (``*ForSequenceClassification``): the pooled first token (BERT, RoBERTa, ALBERT), or
    the last token's final-normed state (every decoder's ``score``, no bias, no soft-cap).

    Attributes
    ----------
    weight : tensor (C, d);  bias : tensor (C,) or None
        C classes (``id2label``).
    pooler : Pooler or None
        The head's own dense + tanh (RoBERTa's ``classifier.dense``); None: it reads the
        model's pooler (BERT, ALBERT), or no pooler (``token`` "last").
    token : "first" or "last"
    """

    weight: torch.Tensor
    bias: torch.Tensor | None
    pooler: Pooler | None = None
    token: str = "first"


@dataclass(frozen=True, eq=False)
class Embedding:
    r"""Token ids → depth-0 tokens: x_i = s·E[id_i] + P[p_i + offset] + T[type_i], then N
    (then W_map · + b_map where the embeddings are narrower than the model: ALBERT).

    Attributes
    ----------
    tokens : tensor (V, d)
        E, the token embedding matrix.
    scale : float
        s (1; √d for Gemma).
    positions : tensor (P, d) or None
        P, learned absolute positions (GPT-2, BERT), read at p_i + ``offset``.
    offset : int
        RoBERTa's position offset (pad_token_id + 1), else 0.
    token_types : tensor (T, d) or None
        BERT's token-type embeddings (type 0 unless given).
    norm : LayerNorm scheme or None
        BERT's embedding LayerNorm.
    projection : (tensor (d, E), tensor (d,)) or None
        ALBERT's map of the E-wide embeddings to the model's width d.
    """

    tokens: torch.Tensor
    scale: float = 1.0
    positions: torch.Tensor | None = None
    offset: int = 0
    token_types: torch.Tensor | None = None
    norm: object = None
    projection: tuple | None = None

    @property
    def max_positions(self) -> int | None:
        """The most positions a sequence may have (the position table's rows), or None."""
        return None if self.positions is None else self.positions.shape[0] - self.offset

    def __call__(self, ids: torch.Tensor, types: torch.Tensor | None = None) -> torch.Tensor:
        x = self.tokens[ids]
        if self.scale != 1.0:
            x = x * torch.tensor(self.scale, dtype=x.dtype, device=x.device)
        if self.positions is not None:
            if ids.shape[-1] > self.max_positions:
                raise ValueError(
                    f"{ids.shape[-1]} tokens, but the learned position table holds "
                    f"{self.max_positions} positions (max_position_embeddings); split the "
                    "sequence into shorter ones."
                )
            x = x + self.positions[self.offset : self.offset + ids.shape[-1]]  # rows p_i + offset
        if self.token_types is not None:  # type 0 unless given: one row, broadcast
            x = x + (self.token_types[0] if types is None else self.token_types[types])
        x = x if self.norm is None else self.norm.norm(x)
        if self.projection is not None:
            weight, bias = self.projection
            x = torch.nn.functional.linear(x, weight, bias)
        return x


@dataclass(frozen=True, eq=False)
class MaskedLMTransform:
    r"""A masked-LM head's transform before its decoder: y = LN(σ(W x + b)).

    BERT (``cls.predictions.transform``), RoBERTa (``lm_head``, σ the erf GELU) and ALBERT
    (``predictions``, W: d → E); the logits are then decoder · y + bias, the decoder tied to
    the token embeddings (Devlin et al., arXiv:1810.04805, §3.1; Lan et al., 1909.11942).

    Attributes
    ----------
    weight : tensor (E, d);  bias : tensor (E,)
    activation : str
        σ, a name of :data:`~tpde.fields.feedforward.activations.ACTIVATIONS`.
    norm : LayerNorm scheme (``.norm``)
    """

    weight: torch.Tensor
    bias: torch.Tensor
    activation: str
    norm: object

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        from tpde.fields.feedforward.activations import resolve_activation

        sigma = resolve_activation(self.activation)[1]
        return self.norm.norm(sigma(torch.nn.functional.linear(x, self.weight, self.bias)))
