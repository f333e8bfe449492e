r"""Mixtral: as Mistral (Pre-RMSNorm, causal GQA with RoPE, sliding window where
``sliding_window`` says), its MLP a routed mixture of E SwiGLU experts
(:class:`~tpde.fields.MixtureOfExperts`): router logits z = W_r x, the k =
``num_experts_per_tok`` experts of largest softmax probability, weighed by the softmax over
the chosen logits, F(x) = Σ_{e ∈ T(x)} g_e(x) W2_e(silu(W1_e x) ⊙ W3_e x). RoPE base 10⁶
and 8 KV heads where config.json lacks them (``MixtralConfig``'s defaults); ``num_experts``
stands for ``num_local_experts`` (its ``attribute_map``)."""

from __future__ import annotations

from tpde.pretrained.families.base import (
    REQUIRED,
    ROUTER_TRAINING,
    SCORE_HEAD,
    Family,
    register,
)
from tpde.pretrained.families.llama import LLAMA_KEYS, LLAMA_NAMES

__all__ = ["MIXTRAL"]

_MOE = "model.layers.{l}.block_sparse_moe."

MIXTRAL = register(
    Family(
        family="mixtral",
        summary=(
            "as mistral; the MLP a MixtureOfExperts of E SwiGLU experts, top k, renormalised "
            "over the k"
        ),
        model_types=("mixtral",),
        keys={
            **LLAMA_KEYS,
            "kv_heads": ("num_key_value_heads", 8),  # MixtralConfig's default
            "window": ("sliding_window", None),  # MixtralConfig's default: full attention
            "norm_eps": ("rms_norm_eps", 1e-5),
            "rope_base": ("rope_theta", 1e6),  # MixtralConfig's default_theta
            "activation": ("hidden_act", "silu"),
            "experts": ("num_local_experts", REQUIRED),
            "top_k": ("num_experts_per_tok", REQUIRED),
        },
        honoured={},
        names={
            **{r: t for r, t in LLAMA_NAMES.items() if r not in ("gate", "up", "down")},
            "router": _MOE + "gate",
            "expert_gate": _MOE + "experts.{e}.w1",
            "expert_down": _MOE + "experts.{e}.w2",
            "expert_up": _MOE + "experts.{e}.w3",
        },
        biases={},
        norm="rmsnorm",
        placement="pre",
        mlp="moe",
        rotary=True,
        causal=True,
        facts={
            "rope_style": "half",
            "window": "sliding_window: p_i − p_j < w",
            "routing": "softmax over all E, top k, renormalised over the k (always)",
        },
        aliases={"num_experts": "num_local_experts"},
        irrelevant=ROUTER_TRAINING,
        classifiers=SCORE_HEAD,
    )
)
