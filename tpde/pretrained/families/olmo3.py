"""OLMo-3: OLMo-2's output-norm decoder x ← x + N₂(f(x)) (QK-RMSNorm over the whole
projection, H·d_h) with local (sliding-window) and global layers, 3 local : 1 global (layer
l global iff (l + 1) mod 4 = 0; ``layer_types`` overrides it), and a RoPE per layer type: the
global layers take the checkpoint's scaling (``rope_scaling``, or
``rope_parameters.full_attention``: OLMo-3's YaRN), the local ones none.

The RoPE bases, as transformers 5's ``Olmo3Config.convert_rope_params_to_dict`` reads them:
``rope_parameters.<type>.rope_theta`` where config.json gives them per type; otherwise the
global layers take ``rope_theta`` and the local ones Olmo3Config's default 5·10⁵ (the
converter pops ``rope_theta`` once, for the global layers). OLMo-3's checkpoints hold
``rope_theta`` 5·10⁵, where every reading agrees. A ``sliding_window_pattern`` other than 4
is refused: Olmo3Config ignores it (Gemma's reading applies it).

GGUF: llama.cpp's converter writes OLMo-3 as ``olmo2`` with ``attention.sliding_window``;
its ``load_hparams`` (LLM_ARCH_OLMO2: a window > 0 found, ``set_swa_pattern(4)``, layer l local
iff l mod 4 < 3; later ``attention.sliding_window_pattern``, default 4) and its olmo2 graph
(the local layers' RoPE unscaled: ``freq_scale`` and ``attn_factor`` 1, ``ext_factor`` 0,
the one ``rope.freq_base``) read such a file as this family: the olmo2 map's ``windowed``
(:mod:`tpde.pretrained.families.olmo2`) names it, so this entry has no map of its own.
"""

from __future__ import annotations

from tpde.pretrained.families.base import GATED_BIASES, SCORE_HEAD, Family, register
from tpde.pretrained.families.gemma2 import GEMMA_HONOURED
from tpde.pretrained.families.llama import LLAMA_HONOURED, LLAMA_KEYS
from tpde.pretrained.families.olmo2 import OLMO2

__all__ = ["OLMO3"]

#: Olmo3Config's ``default_theta``: its RoPE base where config.json gives none, and the local
#: layers' where config.json gives ``rope_theta`` alone (module notes).
OLMO3_THETA = 500_000.0

OLMO3 = register(
    Family(
        family="olmo3",
        summary=(
            "as olmo2; 3 local : 1 global layers (layer_types); RoPE per layer type (global "
            "scaled, e.g. YaRN; local not)"
        ),
        model_types=("olmo3",),
        keys={
            **LLAMA_KEYS,
            "norm_eps": ("rms_norm_eps", 1e-5),
            "rope_base": ("rope_theta", OLMO3_THETA),
            # no top-level key: rope_parameters.sliding_attention.rope_theta, else 5·10⁵
            "rope_local_base": (None, OLMO3_THETA),
            "window": ("sliding_window", 4096),
        },
        honoured={
            **LLAMA_HONOURED,
            "layer_types": GEMMA_HONOURED["layer_types"],
            # Olmo3Config ignores it (its default layer_types: every 4th layer global)
            "sliding_window_pattern": (4,),
        },
        names=OLMO2.names,
        biases=GATED_BIASES,
        norm="rmsnorm",
        placement="output",
        mlp="swiglu",
        rotary=True,
        causal=True,
        qk_norm_whole=True,
        window_pattern=4,
        facts={
            "rope_style": "half",
            "qk_norm": "RMSNorm over the whole projection",
            "pattern": "3 local : 1 global (layer_types)",
            "rope": "the global layers scaled (YaRN), the local ones not",
        },
        classifiers=SCORE_HEAD,
    )
)
