r"""One model class for every architecture: a pretrained Transformer as tpde fields.

A model is an embedding, L layers as a :class:`~tpde.fields.LayerSchedule` of tpde
fields, a final norm and an output head. Layer l is the field on depth-time [l, l + 1)

    Γ_l = Normalized(Attn_l, N₁) + Normalized(F_l, N₂)        (MATH.md §8)

whose Lie–Trotter step of size 1 with Euler sub-steps (attention part, then MLP part, each
part's projection after its sub-step) is the network's block, for every norm placement:
Pre-norm (x ← x + Attn(N₁x); x ← x + F(N₂x)) and Post-norm (x ← N₁(x + Attn x);
x ← N₂(x + F x)). The **per-sublayer split** of :meth:`Transformer.split` is that step's
sub-steps: v_{l,k} = x_{l,k+1} − x_{l,k}, so x_{l+1} − x_l = Σ_k v_{l,k} exactly (each
velocity after the norms that act on it).

:func:`tpde.pretrained.load` builds one from a Hugging Face folder or a GGUF file;
:func:`tpde.pretrained.load_smollm2` is one too.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tpde._validation import as_tensor, check_finite
from tpde.fields import Field, GroupedQueryAttention, LayerSchedule, Parallel, Sum
from tpde.measures import Empirical
from tpde.pretrained._ends import Embedding, MaskedLMTransform, Pooler, SequenceClassifier, affine

__all__ = [
    "DecoderLayer",
    "Embedding",
    "Layer",
    "LayerGroup",
    "MaskedLMTransform",
    "Pooler",
    "SequenceClassifier",
    "Transformer",
    "check_layer_index",
]


@dataclass(frozen=True, eq=False)
class Layer:
    """One block, its pieces by name.

    Attributes
    ----------
    attention : GroupedQueryAttention
        The attention sublayer (W_Q, W_K, W_V, W_O, positions, mask); no norm, no residual.
    mlp : Field
        The feed-forward sublayer (:class:`~tpde.fields.SwiGLU` or
        :class:`~tpde.fields.MLP`); no norm, no residual.
    attention_norm, mlp_norm : RMSNorm or LayerNorm scheme
        N₁ and N₂ (``.norm(x)``; placement "pre": the sublayer reads N(x); "post": the
        sublayer's step ends with N).
    field : Field
        The block, ``Normalized(attention, N₁) + Normalized(mlp, N₂)``; a parallel block
        (GPT-NeoX, Phi, GPT-J) ``Sum([Parallel([Normalized(attention, N₁),
        Normalized(mlp, N₂)])])``, stepped as one.
    """

    attention: GroupedQueryAttention
    mlp: Field
    attention_norm: object
    mlp_norm: object
    field: Field

    @property
    def parts(self) -> tuple[Field, ...]:
        """The sublayers in order (attention, MLP), each with its norm: the split's parts
        (a parallel block's branches)."""
        return tuple(
            branch
            for part in self.field.parts
            for branch in (part.branches if isinstance(part, Parallel) else (part,))
        )


#: SmolLM2's name for a block (the same class).
DecoderLayer = Layer


@dataclass(frozen=True, eq=False)
class LayerGroup:
    r"""Blocks applied in order as one layer: ALBERT's layer group (``inner_group_num`` =
    k > 1 blocks, Lan et al., arXiv:1909.11942, §3.1).

    Its field is the sum of the blocks' parts in order, Σ_b [Normalized(Attn_b, N_{b,1}) +
    Normalized(F_b, N_{b,2})], whose Lie–Trotter step at h = 1 applies block 1, …, block k:
    the group. A group that several layers apply is one object, repeated in the schedule.

    Attributes
    ----------
    blocks : tuple of k :class:`Layer`
    field : Field
        ``Sum`` of every block's parts, in order (2k parts).
    """

    blocks: tuple[Layer, ...]
    field: Field

    @classmethod
    def of(cls, blocks) -> LayerGroup:
        """The group of ``blocks`` (Layers), its field the sum of their parts in order."""
        return cls(tuple(blocks), Sum([p for block in blocks for p in block.field.parts]))

    @property
    def parts(self) -> tuple[Field, ...]:
        """The sublayers in order (attention, MLP of block 1, …): the split's parts."""
        return tuple(part for block in self.blocks for part in block.parts)


def check_layer_index(index, count: int) -> int:
    """``index`` as a layer index of a model of ``count`` layers, or a TypeError (not an int)
    or an IndexError naming the range."""
    if isinstance(index, bool) or not isinstance(index, int):
        raise TypeError(f"layer index must be an int; received {index!r}.")
    if not 0 <= index < count:
        raise IndexError(
            f"layer index {index} is out of range: the model has {count} layers (0 … {count - 1})."
        )
    return index


@dataclass(frozen=True, eq=False)
class Transformer:
    """A pretrained Transformer as tpde objects (module notes: equations).

    Attributes
    ----------
    config : object
        The hyper-parameters read from the files (``layers``, ``hidden``, ``heads``,
        ``kv_heads``, ``head_dim``, ``vocab``, ``context`` …).
    layers : tuple of L :class:`Layer` or :class:`LayerGroup` (ALBERT's groups of blocks)
    schedule : LayerSchedule
        ``layers[l].field`` on depth-time [l, l + 1).
    embedding : Embedding
    final_norm : RMSNorm or LayerNorm scheme, or None (Post-norm encoders have none)
    head : tensor (V, d) or None
        The output head: logits = head · T(N(x)) (+ ``head_bias``), T the
        ``head_transform`` (identity for decoders). ``head is embeddings`` when tied. None
        for an encoder without a language-model head.
    tokenizer : tokenizers.Tokenizer or None
        None when the folder has no tokenizer: :meth:`embed` then takes token ids.
    architecture : str
        The family (:data:`tpde.pretrained.ARCHITECTURES`).
    head_bias : tensor (V,) or None
    head_transform : MaskedLMTransform or None
        A masked-LM head's transform (BERT, RoBERTa, ALBERT), applied before ``head``.
    logit_cap : float or None
        Final-logit soft-cap c (Gemma-2): logits c·tanh(z/c).
    logit_scale : float
        A factor a of the logits, a·z before any cap (Cohere's ``logit_scale``, Granite's
        1/``logits_scaling``: the inverse temperature of the next-token distribution); 1
        for the other families.
    pooler : Pooler or None
        The pooler where the files hold one (BERT, RoBERTa, ALBERT): :meth:`pooled`.
    classifier : SequenceClassifier or None
        The sequence-classification head of a ``*ForSequenceClassification``:
        :meth:`class_logits`.
    """

    config: object
    layers: tuple[Layer | LayerGroup, ...]
    schedule: LayerSchedule
    embedding: Embedding
    final_norm: object
    head: torch.Tensor | None
    tokenizer: object
    architecture: str = "llama"
    head_bias: torch.Tensor | None = None
    head_transform: MaskedLMTransform | None = None
    logit_cap: float | None = None
    pooler: Pooler | None = None
    classifier: SequenceClassifier | None = None
    logit_scale: float = 1.0

    @property
    def embeddings(self) -> torch.Tensor:
        """The token embedding matrix E (V, d)."""
        return self.embedding.tokens

    @property
    def context(self) -> int:
        """The most tokens a sequence may have (``max_position_embeddings``; with dynamic NTK
        RoPE scaling, which acts beyond it, the length where the scaling starts)."""
        return int(self.config.context)

    def layer(self, index: int) -> Layer | LayerGroup:
        """``layers[index]``, with a clear error for an index out of range."""
        return self.layers[check_layer_index(index, len(self.layers))]

    # ------------------------------------------------------------------ tokens
    def token_ids(self, sentence: str) -> torch.Tensor:
        """Token ids of one sentence (as the tokenizer adds specials), shape (n,), CPU.

        Raises
        ------
        ValueError
            An empty sentence, one longer than the context, or a model without tokenizer.
        """
        if not isinstance(sentence, str):
            raise TypeError(f"a sentence must be a str; received {type(sentence).__name__}.")
        if self.tokenizer is None:
            raise ValueError(
                "this model was loaded without a tokenizer (no tokenizer.json): pass token ids, "
                "model.embed(torch.tensor([...])), instead of text."
            )
        if not sentence.strip():
            raise ValueError(f"a sentence must be a non-empty string; received {sentence!r}.")
        check_unicode(sentence, "the sentence")
        ids = self.tokenizer.encode(sentence).ids
        if not ids:
            raise ValueError(
                f"the sentence {sentence!r} encodes to no tokens with this model's tokenizer "
                "(none of its characters is in the vocabulary): a token measure needs one. "
                "Check the text, or pass token ids, model.embed(torch.tensor([...]))."
            )
        self._check_length(len(ids))
        return torch.tensor(ids, dtype=torch.long, device="cpu")  # token ids: host data

    def _check_length(self, n: int) -> None:
        scalings = getattr(self.config, "rope_scaling", ())  # dynamic NTK is for n > context
        if n > self.context and not any(getattr(s, "beyond_context", False) for s in scalings):
            raise ValueError(
                f"a sequence of {n} tokens is longer than the model's context length "
                f"({self.context} tokens); split it into shorter sequences."
            )

    def _ids(self, ids) -> torch.Tensor:
        ids = ids if isinstance(ids, torch.Tensor) else torch.as_tensor(ids, device="cpu")
        if ids.dtype in (torch.bool,) or ids.is_floating_point() or ids.is_complex():
            raise TypeError(f"token ids must be integers; received dtype {ids.dtype}.")
        if ids.ndim != 1 or ids.numel() == 0:
            raise ValueError(
                f"token ids must be a non-empty 1-d sequence (n,); received shape "
                f"{tuple(ids.shape)}."
            )
        vocab = self.embeddings.shape[0]
        if int(ids.min()) < 0 or int(ids.max()) >= vocab:
            raise ValueError(
                f"token ids must lie in 0 … {vocab - 1} (the vocabulary); received ids from "
                f"{int(ids.min())} to {int(ids.max())}."
            )
        self._check_length(ids.numel())
        return ids.to(device=self.embeddings.device, dtype=torch.long)

    def embed(self, sentences) -> list[Empirical]:
        """One token measure per sentence: depth-0 tokens, positions 0 … n − 1.

        Parameters
        ----------
        sentences : str, tensor of token ids (n,), or a non-empty list of them

        Returns
        -------
        list of Empirical
            Points (n, d) in the model's dtype and device, uniform weights, positions
            ``torch.arange(n)``.

        Raises
        ------
        ValueError
            A sentence longer than the context C (``max_position_embeddings``; unless a RoPE
            scaling reaches beyond it, dynamic NTK). Learned positions stop at C; RoPE layers
            rotate any position, as transformers' do (extrapolated, unscaled): an
            ``Empirical`` with positions ≥ C built by hand goes through ``hidden_states``.
        """
        if isinstance(sentences, str | torch.Tensor):
            sentences = [sentences]
        if not isinstance(sentences, list | tuple) or not sentences:
            raise ValueError(
                f"sentences must be a str or a non-empty list of str (or of token-id tensors); "
                f"received {sentences!r}."
            )
        out = []
        for index, item in enumerate(sentences):
            if not isinstance(item, str | torch.Tensor):
                raise TypeError(
                    f"a sentence must be a str (or a tensor of token ids); received "
                    f"{type(item).__name__} {item!r} at index {index} of sentences."
                )
            text = isinstance(item, str)
            ids = self.token_ids(item).to(self.embeddings.device) if text else self._ids(item)
            positions = torch.arange(len(ids), device=self.embeddings.device)
            out.append(Empirical(self.embedding(ids), positions=positions))
        return out

    # ------------------------------------------------------------------ outputs
    def _points(self, points) -> torch.Tensor:
        x = as_tensor(points, "points")
        d = int(self.config.hidden)
        if x.ndim < 2 or x.shape[-1] != d or x.shape[-2] < 1:
            raise ValueError(
                f"points must be tokens of shape (..., n, {d}) with n >= 1 (the model's "
                f"width); received shape {tuple(x.shape)}."
            )
        check_finite(x, "points")
        return x

    def logits(self, points: torch.Tensor) -> torch.Tensor:
        """head · T(N_out(x)) + b: next-token logits (..., n, V) of the last hidden states
        (masked-token logits for an encoder with its masked-LM head; in the wider of the
        tokens' and the model's dtypes), times ``logit_scale``; c·tanh(z/c) of them with a
        ``logit_cap`` c."""
        if self.head is None:
            raise ValueError(
                f"this {self.architecture} checkpoint has no language-model head: use its "
                "hidden states (model.hidden_states)."
            )
        x = self._points(points)
        normed = x if self.final_norm is None else self.final_norm.norm(x)
        if self.head_transform is not None:
            normed = self.head_transform(normed)
        dtype = torch.promote_types(normed.dtype, self.head.dtype)
        out = normed.to(dtype) @ self.head.T.to(dtype)
        out = out if self.head_bias is None else out + self.head_bias.to(dtype)
        out = out if self.logit_scale == 1.0 else out * self.logit_scale
        return out if self.logit_cap is None else self.logit_cap * torch.tanh(out / self.logit_cap)

    def pooled(self, points: torch.Tensor) -> torch.Tensor:
        """The pooler's output p = tanh(W x₀ + b) (..., d) of the last hidden states x
        (..., n, d): BERT's and ALBERT's ``pooler_output``."""
        if self.pooler is None:
            raise ValueError(
                f"this {self.architecture} checkpoint has no pooler (the files hold no pooler "
                "weights): use its hidden states (model.hidden_states)."
            )
        return self.pooler(self._points(points))

    def class_logits(self, points: torch.Tensor) -> torch.Tensor:
        """Sequence-classification logits z = W_c p + b_c (..., C) of the last hidden states
        x (..., n, d): a ``*ForSequenceClassification`` model's ``logits``. p is the pooled
        first token (:meth:`pooled`, or the head's own dense + tanh for RoBERTa), or for a
        decoder (``score``) the final-normed last token N_out(x)_{n−1}: tpde's sequences
        carry no padding, so a sequence must end at its last real token (transformers reads
        the last token that is not ``pad_token_id``)."""
        head = self.classifier
        if head is None:
            raise ValueError(
                f"this {self.architecture} checkpoint has no sequence-classification head "
                "(config.json's architectures names no *ForSequenceClassification)."
            )
        x = self._points(points)
        if head.token == "last":
            normed = x if self.final_norm is None else self.final_norm.norm(x)
            pooled = normed[..., -1, :]
        else:
            pooled = self.pooler(x) if head.pooler is None else head.pooler(x)
        return affine(pooled, head.weight, head.bias)

    def attention_weights(self, points: torch.Tensor, index: int, block: int = 0) -> torch.Tensor:
        """The attention probabilities (..., H, n, n) of layer ``index`` on tokens x: the
        probabilities of its attention field on the tokens it reads (N₁(x) for a Pre-norm
        layer, x for a Post-norm one) at positions 0 … n − 1; rows sum to 1, column 0 is
        the share on the first token (the "attention sink"). ``block``: the block of an
        ALBERT layer group (:class:`LayerGroup`; x then the tokens that block reads)."""
        layer = self.layer(index)
        blocks = getattr(layer, "blocks", (layer,))
        if isinstance(block, bool) or not isinstance(block, int):
            raise TypeError(f"block must be an int; received {block!r}.")
        if not 0 <= block < len(blocks):
            raise IndexError(
                f"block must be an int in 0 … {len(blocks) - 1} (the blocks of layer {index}); "
                f"received {block!r}."
            )
        layer = blocks[block]
        x = self._points(points)
        norm = layer.attention_norm
        seen = norm.norm(x) if norm is not None and norm.placement == "pre" else x
        positions = torch.arange(seen.shape[-2], device=seen.device)
        return layer.attention.probabilities(Empirical(seen, positions=positions))

    def hidden_states(self, mu: Empirical, *, method: str = "lie-trotter", dt: float = 1.0,
                      **options) -> torch.Tensor:  # fmt: skip
        """Tokens at depths 0, 1, …, L: shape (L + 1, ..., n, d).

        With the defaults (Lie–Trotter, Euler sub-steps, h = 1) these are the network's
        hidden states (every block's output, before the final norm). Other ``method``,
        ``dt`` and ``options`` (``rtol``, ``atol``, ``max_steps``, ``engine``) of
        :func:`tpde.flows.integrate` give the continuous-depth flow at the integer depths.
        A flow that stops before depth L (a blow-up: tokens no longer finite in the dtype)
        raises FloatingPointError naming the depth and status.
        """
        from tpde.flows import integrate

        _check_mu(mu)
        unknown = sorted(set(options) - HIDDEN_STATE_OPTIONS)
        if unknown:
            raise TypeError(
                f"hidden_states takes the options {', '.join(sorted(HIDDEN_STATE_OPTIONS))} of "
                f"tpde.flows.integrate; received {', '.join(unknown)} (the depths 0 … L fix "
                "t0, t1, save and events)."
            )
        layers = len(self.layers)
        trajectory = integrate(
            self.schedule, mu, float(layers), dt=dt, method=method, save=layers + 1,
            events=(), **options,
        )  # fmt: skip
        if len(trajectory.measures) < layers + 1:  # stopped early: no silent short stack
            raise FloatingPointError(
                f"the flow stopped at depth {float(trajectory.times[-1]):g} of {layers} with "
                f"status {str(trajectory.status)!r}: the hidden states past it are not finite "
                f"in {mu.points.dtype}. Load the model in float64, or keep the states before "
                f"it with tpde.flows.integrate(model.schedule, mu, {layers}.0, "
                f"save={layers + 1}, events=())."
            )
        return torch.stack([m.points for m in trajectory.measures])

    def split(self, mu: Empirical, *, engine: str = "auto", experts: bool = False) -> torch.Tensor:
        r"""The per-sublayer velocities v_{l,k}: shape (L, K, ..., n, d), K sublayers a layer.

        v_{l,k} = x_{l,k+1} − x_{l,k}, the k-th sub-step of layer l's Lie–Trotter step at
        h = 1 (x_{l,0} = x_l, x_{l,K} = x_{l+1}; k = 0 attention, k = 1 MLP; an ALBERT layer
        group of b blocks has K = 2b: attention, MLP of each block in order), each after
        the norms that act on it: Pre-norm v = f(N(x)), Post-norm v = N(x + f(x)) − x. A
        parallel block (one Euler step x + Σ_b f_b(N_b x)) contributes its branches'
        velocities v_{l,b} = f_b(N_b x_l), all at x_l. So x_{l+1} − x_l = Σ_k v_{l,k} for
        every placement. With ``experts=True`` the MLP sub-step of a mixture-of-experts layer
        (every layer's, same E) is its per-expert terms v_{l,e} = g_e F_e(N₂x) (0 where e
        is not routed; the shared expert last, :meth:`MixtureOfExperts.expert_velocities`):
        K = 1 + E (+ 1), and still x_{l+1} − x_l = Σ_k v_{l,k}.
        """
        _check_mu(mu)
        x, out = mu.points, []
        for l, layer in enumerate(self.layers):
            steps = []
            for part in layer.field.parts:
                if experts and _experts_part(layer, part, l):
                    terms = layer.mlp.expert_velocities(float(l), layer.mlp_norm.norm(x))
                    steps.extend(terms)
                    x = x + terms.sum(0)
                    continue
                x = self._sub_step(part, mu.with_points(x), float(l), engine, steps)
            out.append(torch.stack(steps))
        return torch.stack(out)

    @staticmethod
    def _sub_step(part: Field, mu: Empirical, t: float, engine: str, steps: list):
        """One part's step from mu's points; appends its velocities (a parallel block's one
        per branch) to ``steps`` and returns the new points."""
        x = mu.points
        if isinstance(part, Parallel) and not part.supports("projection"):
            velocities = [b.velocity(mu, t=t, engine=engine) for b in part.branches]
            steps.extend(velocities)
            return x + sum(velocities[1:], velocities[0])
        new = x + part.velocity(mu, t=t, engine=engine)
        if part.supports("projection"):
            new = part.project(new)
        steps.append(new - x)
        return new


#: The options of :func:`tpde.flows.integrate` that :meth:`Transformer.hidden_states` passes on.
HIDDEN_STATE_OPTIONS = frozenset({"rtol", "atol", "max_steps", "engine"})


def check_unicode(sentence: str, name: str) -> None:
    """Raise unless ``sentence`` is valid Unicode (a lone surrogate such as '\\ud800', from
    a bad decode, cannot be tokenised)."""
    try:
        sentence.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(
            f"{name} is not valid Unicode: {err.reason} at position {err.start} "
            f"({sentence[err.start : err.end]!r}); decode the text with errors='replace'."
        ) from None


def _experts_part(layer, part: Field, l: int) -> bool:
    """Whether ``part`` is the Pre-norm MLP of a mixture-of-experts layer (else a
    ValueError for a layer that has no experts: its split has no per-expert terms)."""
    from tpde.fields import MixtureOfExperts

    if not isinstance(getattr(layer, "mlp", None), MixtureOfExperts):
        raise ValueError(
            f"split(experts=True) splits a mixture-of-experts MLP into its experts; layer {l} "
            "has a dense MLP. Use split(mu) (experts=False)."
        )
    inner = part.children()  # the Pre-norm MLP: Normalized(mlp), its one child the MoE
    return len(inner) == 1 and inner[0] is layer.mlp and layer.mlp_norm.placement == "pre"


def _check_mu(mu) -> None:
    if not isinstance(mu, Empirical):
        raise TypeError(
            f"mu must be an Empirical of tokens with positions (model.embed(sentence)[0]); "
            f"received {type(mu).__name__}."
        )
