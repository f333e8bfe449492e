"""A GGUF file's RoPE scaling (llama.cpp's ``<arch>.rope.scaling.*`` keys and a Llama-3
``rope_freqs.weight`` tensor) as the ``rope_scaling`` dict of the config.json it stands for,
read by :func:`tpde.fields.rope_scaling_from_config` as a folder's.

==========================================  ======================================  ========
the file                                    transformers' ``rope_scaling``          scaling
==========================================  ======================================  ========
``rope.scaling.type`` "none" or absent      (none; a ``factor`` alone: "linear",    —
                                            llama.cpp's default type)
"linear", ``factor`` s                      {"rope_type": "linear", "factor": s}    θ_m/s
"yarn", ``factor``,                         {"rope_type": "yarn", "factor",         YaRN
``original_context_length``,                "original_max_position_embeddings",
``yarn_beta_fast``, ``yarn_beta_slow``      "beta_fast", "beta_slow"}
``rope_freqs.weight`` f (r/2,)              {"rope_type": "longrope", short = long  θ_m/f_m,
(llama.cpp's Llama-3 converter)             = f, s = 1}                             α = 1
==========================================  ======================================  ========

llama.cpp's converter writes Llama-3's schedule (transformers' "llama3") as the tensor of
per-pair divisors f_m — 1 for short wavelengths, s for long ones, 1/((1 − γ_m)/s + γ_m)
between — and no scaling key; llama.cpp divides θ_m by f_m. That is LongRoPE's θ_m/f_m with
equal short and long factors and α = 1 (s = 1), an existing option, so the file's model is
llama.cpp's exactly (the divisors as stored, float32) and the folder's Llama3Scaling to their
rounding. YaRN's further keys are read only at the values under which llama.cpp's YaRN is
transformers' (:data:`NEUTRAL_SCALING`); "longrope" files (Phi-3) and any other key are
refused, naming the key.
"""

from __future__ import annotations

from tpde.pretrained._checkpoint import LoadError

__all__ = ["NEUTRAL_SCALING", "ROPE_SCALING_KEYS", "rope_scaling"]

#: llama.cpp's RoPE-scaling keys (``<arch>.rope.scaling.*``) → the key of transformers'
#: ``rope_scaling`` dict they become (module notes); None: checked equal to the neutral value
#: of :data:`NEUTRAL_SCALING`, else refused.
ROPE_SCALING_KEYS = {
    "rope.scaling.type": "rope_type",
    "rope.scaling.factor": "factor",
    "rope.scaling.original_context_length": "original_max_position_embeddings",
    "rope.scaling.yarn_beta_fast": "beta_fast",
    "rope.scaling.yarn_beta_slow": "beta_slow",
    "rope.scaling.yarn_ext_factor": None,
    "rope.scaling.yarn_attn_factor": None,
    "rope.scaling.yarn_log_multiplier": None,
    "rope.scaling.finetuned": None,
}
#: The values of llama.cpp's YaRN keys under which its YaRN is transformers': the whole ramp
#: (ext_factor 1), α = g(s) (attn_factor 1: llama.cpp multiplies g(s) by it, transformers'
#: ``attention_factor`` replaces g(s), so any other value has two readings), no DeepSeek
#: log multiplier; ``finetuned`` changes nothing (None: any value).
NEUTRAL_SCALING = {
    "rope.scaling.yarn_ext_factor": 1.0,
    "rope.scaling.yarn_attn_factor": 1.0,
    "rope.scaling.yarn_log_multiplier": 0.0,
    "rope.scaling.finetuned": None,
}

#: The keys each scaling reads, and those it needs.
_ALLOWED = {
    "linear": ("factor",),
    "yarn": ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow"),
}
_REQUIRED = {"linear": ("factor",), "yarn": ("factor", "original_max_position_embeddings")}


def rope_scaling(found: dict, prefix: str, freqs, context) -> dict | None:
    """transformers' ``rope_scaling`` dict of a file's ``rope.scaling.*`` keys (``found``,
    without the prefix) and ``rope_freqs`` values, or None for unscaled RoPE (module notes)."""
    for short, neutral in NEUTRAL_SCALING.items():
        if short in found and neutral is not None and found[short] != neutral:
            raise LoadError(
                f"the metadata key {prefix + short!r} = {found[short]!r} is a RoPE scaling "
                f"tpde does not implement (it reads this key only at {neutral!r}, where "
                "llama.cpp's YaRN is transformers'); tpde refuses rather than ignore it."
            )
    factor = "rope.scaling.factor" in found
    kind = found.get("rope.scaling.type", "linear" if factor else "none")
    params = {ROPE_SCALING_KEYS[k]: v for k, v in found.items()
              if ROPE_SCALING_KEYS[k] not in (None, "rope_type")}  # fmt: skip
    if kind == "none" and params.get("factor", 1.0) == 1.0 and set(params) <= {"factor"}:
        params = None
    elif kind not in _ALLOWED:
        raise LoadError(
            f"the metadata key {prefix + 'rope.scaling.type'!r} = {kind!r} (with "
            f"{sorted(prefix + k for k in found)}) is a RoPE scaling tpde does not read from "
            "GGUF files (it reads 'none', 'linear' and 'yarn'; LongRoPE's per-pair factors "
            "come from a folder's config.json); tpde refuses rather than ignore it."
        )
    else:
        _check_scaling_keys(kind, params, prefix)
    if freqs is None:
        return None if params is None else {"rope_type": kind, **params}
    if params is not None:
        raise LoadError(
            f"the file holds both the RoPE scaling {prefix + 'rope.scaling.type'!r} = {kind!r} "
            "and a 'rope_freqs.weight' tensor; tpde reads one of them, not both."
        )
    factors = [float(f) for f in freqs]
    # θ'_m = θ_m / f_m with α = 1: LongRoPE with equal short and long factors and s = 1
    return {"rope_type": "longrope", "short_factor": factors, "long_factor": factors,
            "original_max_position_embeddings": context, "factor": 1.0}  # fmt: skip


def _check_scaling_keys(kind: str, params: dict, prefix: str) -> None:
    """Every key the scaling ``kind`` needs present and none it does not read."""
    spelled = {v: k for k, v in ROPE_SCALING_KEYS.items() if v}
    for key in _REQUIRED[kind]:
        if key not in params:
            raise LoadError(
                f"the metadata key {prefix + spelled[key]!r} is missing, and {kind!r} RoPE "
                f"scaling needs it (it reads "
                f"{', '.join(prefix + spelled[k] for k in _ALLOWED[kind])})."
            )
    for key in params:
        if key not in _ALLOWED[kind]:
            raise LoadError(
                f"the metadata key {prefix + spelled[key]!r} = {params[key]!r} is not read by "
                f"{kind!r} RoPE scaling (it reads "
                f"{', '.join(prefix + spelled[k] for k in _ALLOWED[kind])}); tpde refuses "
                "rather than ignore it."
            )
