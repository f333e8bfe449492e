r"""Qwen2-MoE (Qwen1.5-MoE): as Qwen2 (Q/K/V biases as ``qkv_bias`` says, every layer global),
its MLP a routed mixture of E SwiGLU experts of width ``moe_intermediate_size`` plus a shared
expert (width ``shared_expert_intermediate_size``) gated by σ(w_sᵀx):
F(x) = Σ_{e ∈ T(x)} g_e(x) F_e(x) + σ(w_sᵀx) S(x), g_e = p_e (the softmax over all E) or,
with ``norm_topk_prob``, p_e renormalised over the k chosen
(:class:`~tpde.fields.MixtureOfExperts`). Every layer sparse: ``mlp_only_layers`` and
``decoder_sparse_step`` ≠ 1 (dense layers between, of width ``intermediate_size``) are
refused. 16 KV heads where config.json lacks them (``Qwen2MoeConfig``'s default).

Every layer global: ``use_sliding_window`` true is refused. transformers' Qwen2-MoE then
slides a window ``sliding_window`` over the layers l < ``max_window_layers`` with l even
(its ``layer_types``: not Qwen2's l ≥ ``max_window_layers``), a pattern tpde does not read;
no released Qwen1.5-MoE sets it. Those two keys count only then (transformers sets the
window to 0 otherwise)."""

from __future__ import annotations

from tpde.pretrained.families.base import (
    REQUIRED,
    ROUTER_TRAINING,
    SCORE_HEAD,
    Family,
    register,
)
from tpde.pretrained.families.llama import LLAMA_HONOURED, LLAMA_KEYS, LLAMA_NAMES

__all__ = ["QWEN2_MOE"]

_MLP = "model.layers.{l}.mlp."

QWEN2_MOE = register(
    Family(
        family="qwen2_moe",
        summary=(
            "as qwen2; MixtureOfExperts (top k, renormalised if norm_topk_prob) plus a σ-gated "
            "shared SwiGLU expert"
        ),
        model_types=("qwen2_moe",),
        keys={
            **LLAMA_KEYS,
            "kv_heads": ("num_key_value_heads", 16),  # Qwen2MoeConfig's default
            "activation": ("hidden_act", "silu"),
            "mlp_hidden": ("moe_intermediate_size", REQUIRED),
            "experts": ("num_experts", REQUIRED),
            "top_k": ("num_experts_per_tok", REQUIRED),
            "normalize_top_k": ("norm_topk_prob", False),
            "shared_hidden": ("shared_expert_intermediate_size", REQUIRED),
        },
        honoured={
            **{k: v for k, v in LLAMA_HONOURED.items() if k != "hidden_act"},
            "use_sliding_window": (False,),  # every layer global
            "layer_types": ("full_attention",),
            "mlp_only_layers": ([], None),
            "decoder_sparse_step": (1,),
        },
        names={
            **{r: t for r, t in LLAMA_NAMES.items() if r not in ("gate", "up", "down")},
            "router": _MLP + "gate",
            "expert_gate": _MLP + "experts.{e}.gate_proj",
            "expert_up": _MLP + "experts.{e}.up_proj",
            "expert_down": _MLP + "experts.{e}.down_proj",
            "shared_gate": _MLP + "shared_expert.gate_proj",
            "shared_up": _MLP + "shared_expert.up_proj",
            "shared_down": _MLP + "shared_expert.down_proj",
            "shared_router": _MLP + "shared_expert_gate",
        },
        biases=dict.fromkeys("qkv", ("qkv_bias", True)),
        norm="rmsnorm",
        placement="pre",
        mlp="moe",
        rotary=True,
        causal=True,
        facts={
            "rope_style": "half",
            "routing": "softmax over all E, top k; renormalised over the k if norm_topk_prob",
        },
        irrelevant={
            **{k: v for k, v in ROUTER_TRAINING.items() if k != "router_jitter_noise"},
            **dict.fromkeys(
                ("sliding_window", "max_window_layers"),
                "the window and its layers count only with use_sliding_window, which is refused",
            ),
            "intermediate_size": "the width of dense MLP layers (mlp_only_layers, "
            "decoder_sparse_step ≠ 1, num_experts 0), which are refused: every layer is sparse",
        },
        classifiers=SCORE_HEAD,
    )
)
