"""OLMo-2: an output-norm decoder x ← x + N₂(f(x)) on each sublayer (no norm before it),
a QK-RMSNorm over the whole projection (H·d_h), otherwise as llama. GGUF: llama.cpp's
``olmo2`` files (rotary rows not interleaved). One holding a sliding window w > 0 is read as
the olmo3 family (the map's ``windowed``): llama.cpp's converter writes OLMo-3 as olmo2, and
its ``load_hparams`` (LLM_ARCH_OLMO2: a window > 0 found, swa_type STANDARD and
``set_swa_pattern(4)``; later ``llama_model_olmo2::load_arch_hparams`` in
``src/models/olmo2.cpp``, the pattern from ``attention.sliding_window_pattern``, default 4)
reads it as OLMo-3's 3 local : 1 global layers, the local layers' RoPE unscaled with the one
``rope.freq_base`` (:func:`llamacpp_olmo3_layers`, :func:`llamacpp_olmo3_rope`); a window of
0 is none (OLMo-2)."""

from __future__ import annotations

from tpde.pretrained._checkpoint import LoadError
from tpde.pretrained.families.base import (
    GATED_BIASES,
    SCORE_HEAD,
    Family,
    GGUFMap,
    register,
)
from tpde.pretrained.families.llama import LLAMA_HONOURED, LLAMA_KEYS, LLAMA_NAMES

__all__ = ["OLMO2", "PATTERN_KEY", "llamacpp_olmo3_layers", "llamacpp_olmo3_rope"]

#: The config.json key an olmo2 file's ``attention.sliding_window_pattern`` is read into, for
#: :func:`llamacpp_olmo3_layers` alone (no Hugging Face config has it: Olmo3Config ignores a
#: ``sliding_window_pattern``, which the olmo3 family refuses unless 4).
PATTERN_KEY = "llamacpp_sliding_window_pattern"


def llamacpp_olmo3_layers(raw: dict):
    """The ``layer_types`` llama.cpp gives an olmo2 file read as OLMo-3 (``raw``: the
    config.json read so far, :data:`PATTERN_KEY` the file's
    ``attention.sliding_window_pattern``): one flag per layer (True: local) as listed, or a
    period p, layer l local iff p = 0 or l mod p < p − 1 (``llama_hparams::set_swa_pattern``;
    p = 4 where the file has none). None where the file is not read as OLMo-3 (or its layer
    count is not an integer: read_hyper names it); a LoadError for a pattern of another type."""
    if raw.get("model_type") != "olmo3":
        return None
    layers, pattern = raw.get("num_hidden_layers"), raw.get(PATTERN_KEY, 4)
    if isinstance(pattern, list) and all(isinstance(p, bool) for p in pattern):
        local = pattern  # read_hyper checks one per layer
    elif isinstance(pattern, int) and not isinstance(pattern, bool) and pattern >= 0:
        if not isinstance(layers, int):
            return None
        local = [pattern == 0 or l % pattern < pattern - 1 for l in range(layers)]
    else:
        raise LoadError(
            f"the metadata key 'olmo2.attention.sliding_window_pattern' = {pattern!r} is "
            "neither a period (an integer ≥ 0) nor one flag per layer (booleans)."
        )
    return ["sliding_attention" if s else "full_attention" for s in local]


def llamacpp_olmo3_rope(raw: dict):
    """The ``rope_parameters`` of an olmo2 file read as OLMo-3: its local layers unscaled at
    the file's one base (llama.cpp's olmo2 graph: ``freq_base`` on every layer,
    ``freq_scale`` and ``attn_factor`` 1, ``ext_factor`` 0 on the local ones); the global
    layers' scaling is the file's (its ``rope_scaling``). None where not OLMo-3 or the file
    holds no base (Olmo3Config's default then serves both)."""
    if raw.get("model_type") != "olmo3" or "rope_theta" not in raw:
        return None
    return {"sliding_attention": {"rope_type": "default", "rope_theta": raw["rope_theta"]}}


OLMO2 = register(
    Family(
        family="olmo2",
        summary=("as llama, QK-RMSNorm over the whole projection"),
        model_types=("olmo2",),
        keys={**LLAMA_KEYS, "norm_eps": ("rms_norm_eps", 1e-5)},
        honoured={**LLAMA_HONOURED, "clip_qkv": (None,)},
        names={
            **{k: v for k, v in LLAMA_NAMES.items() if k not in ("attn_norm", "mlp_norm")},
            "attn_post_norm": "model.layers.{l}.post_attention_layernorm",
            "mlp_post_norm": "model.layers.{l}.post_feedforward_layernorm",
            "q_norm": "model.layers.{l}.self_attn.q_norm",
            "k_norm": "model.layers.{l}.self_attn.k_norm",
        },
        biases=GATED_BIASES,
        norm="rmsnorm",
        placement="output",
        mlp="swiglu",
        rotary=True,
        causal=True,
        qk_norm_whole=True,
        facts={"rope_style": "half", "qk_norm": "RMSNorm over the whole projection"},
        classifiers=SCORE_HEAD,
        gguf=GGUFMap(
            architecture="olmo2",
            model_type="olmo2",
            # llama_model::load_hparams, LLM_ARCH_OLMO2 (src/llama-model.cpp): a window > 0
            # makes the file OLMo-3 (module notes)
            keys={
                "attention.sliding_window": "sliding_window",
                "attention.sliding_window_pattern": PATTERN_KEY,
            },
            windowed={"model_type": "olmo3"},
            # rope.freq_base is optional in llama_model::load_hparams (10⁴), not OLMo-3's 5·10⁵
            defaults={"rope.freq_base": 10_000.0},
            computed={"layer_types": llamacpp_olmo3_layers, "rope_parameters": llamacpp_olmo3_rope},
            notes=(
                "a window > 0 (llama.cpp's converter writes OLMo-3 so): read as the olmo3 "
                "family, llama.cpp's pattern (``sliding_window_pattern``, a period or a flag per "
                "layer; 4 where absent: 3 local : 1 global), the local layers' RoPE unscaled at "
                "the one ``rope.freq_base``"
            ),
        ),
    )
)
