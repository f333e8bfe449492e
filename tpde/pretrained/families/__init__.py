r"""The families :func:`tpde.pretrained.load` reads: one module per family, each registering
its :class:`~tpde.pretrained.families.base.Family` entry when imported.

Every module of this folder is imported here (a new module is found, with no list to
edit): a new family is one file — its config keys, its weight names, its GGUF map and its
pieces — plus its test. The record and the registry live in
:mod:`~tpde.pretrained.families.base`, which imports none of them.

=============  ======================  =========  ==========  =====================================
family         model_type              norm       placement   attention, feed-forward, positions
=============  ======================  =========  ==========  =====================================
llama          llama                   RMSNorm    pre         causal GQA + RoPE (half); SwiGLU
mistral        mistral                 RMSNorm    pre         as llama, sliding window, no biases
qwen2          qwen2                   RMSNorm    pre         as llama, with Q/K/V biases;
                                                              use_sliding_window: the window on
                                                              layers ≥ max_window_layers
qwen3          qwen3                   RMSNorm    pre         as llama, per-head QK-RMSNorm
gpt2           gpt2                    LayerNorm  pre         causal MHA with biases, fused QKV in
                                                              transposed Conv1D weights; GELU-tanh
                                                              MLP; learned absolute positions
bert           bert, roberta           LayerNorm  post        bidirectional MHA with biases; GELU
                                                              MLP; learned positions (RoBERTa:
                                                              offset pad + 1) and token types,
                                                              then the embedding LayerNorm;
                                                              the masked-LM head, pooler and
                                                              sequence-classification head
                                                              where present
gpt_neox       gpt_neox                LayerNorm  pre,        fused QKV per head; partial RoPE
                                                  parallel    (rotary_pct); two norms; GELU MLP
phi            phi                     LayerNorm  pre,        partial RoPE; one norm; GELU-tanh
                                                  parallel    MLP; final LayerNorm; head bias;
                                                              qk_layernorm: per-head QK-LayerNorm
gptj           gptj                    LayerNorm  pre,        interleaved RoPE on rotary_dim; one
                                                  parallel    norm; no Q/K/V/O biases; head bias
albert         albert                  LayerNorm  post        as bert, ONE shared layer applied L
                                                              times (autonomous), or G groups of
                                                              k blocks (layer i: group ⌊i/(L/G)⌋);
                                                              embeddings of width E mapped to d;
                                                              MLM head, pooler, classifier
gemma2         gemma2                  RMSNorm    sandwich    GQA + RoPE, query_pre_attn_scalar,
                                                              score soft-cap; GeGLU (tanh); local/
                                                              global layers; √d embedding; final
                                                              logit soft-cap; gains 1 + w
gemma3         gemma3_text             RMSNorm    sandwich    as gemma2 without soft-caps, per-head
                                                              QK-RMSNorm, local RoPE base
olmo2          olmo2                   RMSNorm    output      as llama, QK-RMSNorm over the whole
                                                              projection
olmo3          olmo3                   RMSNorm    output      as olmo2; 3 local : 1 global layers
                                                              (layer_types); RoPE per layer type
                                                              (global scaled, e.g. YaRN; local not)
starcoder2     starcoder2              LayerNorm  pre         GQA + RoPE with biases (use_bias);
                                                              GELU-tanh MLP; sliding window
gpt_bigcode    gpt_bigcode             LayerNorm  pre         as gpt2 (nn.Linear weights);
                                                              multi_query: one key/value head,
                                                              [W_q; W_k; W_v]; else fused per head
bloom          bloom                   LayerNorm  pre         ALiBi (bias formed in float32), no
                                                              position table; embedding LayerNorm;
                                                              fused QKV per head; BLOOM's GELU-tanh
falcon         falcon                  LayerNorm  pre,        grouped (new_decoder_architecture),
                                                  parallel    multi-query or per-head fused QKV;
                                                  or not      one or two norms; RoPE, or ALiBi
                                                              (bfloat16, before the 1/√d_h scale)
mixtral        mixtral                 RMSNorm    pre         as mistral; the MLP a MixtureOfExperts
                                                              of E SwiGLU experts, top k,
                                                              renormalised over the k
qwen2_moe      qwen2_moe               RMSNorm    pre         as qwen2; MixtureOfExperts (top k,
                                                              renormalised if norm_topk_prob) plus
                                                              a σ-gated shared SwiGLU expert
phi3           phi3                    RMSNorm    pre         as llama with fused QKV and gate_up;
                                                              LongRoPE; sliding window
gemma          gemma                   RMSNorm    pre         as llama; GeGLU (legacy gelu read as
                                                              GELU-tanh); √d embedding; gains 1 + w
olmo           olmo                    LayerNorm  pre         as llama; parameter-free LayerNorm
                                       (no γ, b)              (γ = 1, b = 0); clip_qkv
granite        granite                 RMSNorm    pre         as llama; embedding, residual,
                                                              attention and logit multipliers
                                                              (the residual one: a time-scale)
cohere         cohere                  LayerNorm  pre,        interleaved RoPE; LayerNorm without
                                       (no b)     parallel    bias; per-head QK-norm gains;
                                                              logit_scale
stablelm       stablelm                LayerNorm  pre         partial RoPE; per-head QK-LayerNorm
                                                              gains; optional parallel residual
=============  ======================  =========  ==========  =====================================

GGUF files: the families with a ``gguf`` map (llama — Mistral files too, which llama.cpp
writes as llama —, qwen2, qwen3, gemma2, gemma3, olmo2 — OLMo-3's files too, which
llama.cpp writes as olmo2 with a window, read as olmo3 —, phi (llama.cpp's ``phi2``), gpt2,
gpt_neox (``gptneox``), starcoder2, phi3, stablelm and falcon), through the one translator
:mod:`tpde.pretrained._gguf`.

Every key of transformers' config class of a family is read or listed as irrelevant
(:data:`~tpde.pretrained.families.base.COMMON_IRRELEVANT`, ``Family.irrelevant``); a key
config.json lacks reads as that class's default (tests/pretrained/test_config_keys.py).

Every layer is the field ``Normalized(attention, N₁) + Normalized(mlp, N₂)`` (MATH.md §8):
its Lie–Trotter step of size 1 with Euler sub-steps is the network's block. A parallel block
(``parallel``: GPT-NeoX, Phi, GPT-J, Falcon's default) is
``Sum([Parallel([Normalized(attention, N₁), Normalized(mlp, N₂)])])``, one part whose Euler
step is x + Attn(N₁x) + F(N₂x) (N₂ = N₁ where the block has one norm). Every decoder (all
but bert and albert) reads the ``score`` head of its ``*ForSequenceClassification`` (W_s
N_out(x_L)_{n−1}, the last token, no bias, no soft-cap); bert and albert read their
classifiers on the pooled first token. A mixture-of-experts MLP (mixtral, qwen2_moe) is one
feed-forward field (:class:`~tpde.fields.MixtureOfExperts`); ``Transformer.split(mu,
experts=True)`` splits its sub-step into the per-expert terms g_e(x) F_e(N₂x) (0 where
expert e is not routed).
"""

import importlib
import pkgutil

from tpde.pretrained.families.base import (
    ACTIVATIONS_HF,
    ARCHITECTURES,
    FAMILIES,
    REQUIRED,
    Architecture,
    Family,
    GGUFMap,
    register,
)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "ACTIVATIONS_HF",
    "ARCHITECTURES",
    "FAMILIES",
    "REQUIRED",
    "Architecture",
    "Family",
    "GGUFMap",
    "register",
]
