"""A GGUF file's RoPE scaling — its ``<arch>.rope.scaling.*`` metadata and its per-pair RoPE
tensors — in transformers' spelling: the ``rope_scaling`` dict of the config.json the file
stands for, read by :func:`tpde.fields.rope_scaling_from_config` as a folder's. Part of the
translator (:mod:`tpde.pretrained._gguf`, which hands the keys and the RoPE tensors it read
here, and turns the ``ValueError`` raised here into a
:class:`~tpde.pretrained.LoadError`); apart only for length (``_gguf`` is near the 600-line
limit), and counted with it by ``tools/module_walk.py``.

==========================================  ============================================  ========
the file                                    transformers' ``rope_scaling``                scaling
==========================================  ============================================  ========
``rope.scaling.type`` "none" or absent      (none; a ``factor`` alone: "linear",          —
                                            llama.cpp's default type)
"linear", ``factor`` s                      {"rope_type": "linear", "factor": s}          θ_m/s
"yarn", ``factor``,                         {"rope_type": "yarn", "factor",               YaRN
``original_context_length``,                "original_max_position_embeddings",
``yarn_beta_fast``, ``yarn_beta_slow``      "beta_fast", "beta_slow"}
``rope_freqs.weight`` f (r/2,)              {"rope_type": "longrope", short = long        θ_m/f_m,
(llama.cpp's Llama-3 converter)             = f, s = 1}                                   α = 1
``rope_factors_long.weight``,               {"rope_type": "longrope", "long_factor",      LongRoPE
``rope_factors_short.weight`` (r/2,),       "short_factor", "attention_factor" = a}
``rope.scaling.attn_factor`` a (Phi-3)
==========================================  ============================================  ========

llama.cpp's converter writes Llama-3's schedule (transformers' "llama3") as the tensor of
per-pair divisors f_m — 1 for short wavelengths, s for long ones, 1/((1 − γ_m)/s + γ_m)
between — and no scaling key; llama.cpp divides θ_m by f_m: LongRoPE's θ_m/f_m with equal
short and long factors and α = 1, so the file's model is llama.cpp's exactly (the divisors
as stored, float32) and the folder's Llama3Scaling to their rounding. YaRN's further keys
are read only at the values under which llama.cpp's YaRN is transformers'
(:data:`NEUTRAL_SCALING`). Phi-3's LongRoPE: the long and short factors as two tensors,
α = √(1 + ln s/ln C₀) as ``rope.scaling.attn_factor`` (float32), read as the file holds it
(a file without it is refused: llama.cpp would take α = 1, a Hugging Face config
√(1 + ln s/ln C₀)). transformers and tpde take the long factors for a sequence longer than
C₀, llama.cpp when its context size ``n_ctx`` (a setting of the run) exceeds C₀: the two
agree where llama.cpp runs with n_ctx = the sequence's length.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "FACTOR_TENSORS",
    "FREQS_TENSOR",
    "NEUTRAL_SCALING",
    "ROPE_SCALING_KEYS",
    "rope_scaling",
    "rope_tensor_names",
    "rope_tensors",
]


#: llama.cpp's RoPE-scaling keys (``<arch>.rope.scaling.*``) → the key of transformers'
#: ``rope_scaling`` dict they become (module notes); None: checked equal to the neutral value
#: of :data:`NEUTRAL_SCALING`, else refused.
ROPE_SCALING_KEYS = {
    "rope.scaling.type": "rope_type",
    "rope.scaling.factor": "factor",
    "rope.scaling.original_context_length": "original_max_position_embeddings",
    "rope.scaling.attn_factor": "attention_factor",
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


def rope_scaling(found: dict, prefix: str, freqs, context, factors=None) -> dict | None:
    """transformers' ``rope_scaling`` dict of a file's ``rope.scaling.*`` keys (``found``,
    without the prefix), ``rope_freqs`` values and LongRoPE ``factors`` (long, short), or None
    for unscaled RoPE (module notes)."""
    if factors is not None:
        return _longrope(found, prefix, factors, freqs)
    for short, neutral in NEUTRAL_SCALING.items():
        if short in found and neutral is not None and found[short] != neutral:
            raise ValueError(
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
        raise ValueError(
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
        raise ValueError(
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
            raise ValueError(
                f"the metadata key {prefix + spelled[key]!r} is missing, and {kind!r} RoPE "
                f"scaling needs it (it reads "
                f"{', '.join(prefix + spelled[k] for k in _ALLOWED[kind])})."
            )
    for key in params:
        if key not in _ALLOWED[kind]:
            raise ValueError(
                f"the metadata key {prefix + spelled[key]!r} = {params[key]!r} is not read by "
                f"{kind!r} RoPE scaling (it reads "
                f"{', '.join(prefix + spelled[k] for k in _ALLOWED[kind])}); tpde refuses "
                "rather than ignore it."
            )


def _longrope(found: dict, prefix: str, factors, freqs) -> dict:
    """Phi-3's LongRoPE of a file's factor tensors and ``rope.scaling.attn_factor`` (module
    notes); any other scaling beside them refused."""
    key = prefix + "rope.scaling.attn_factor"
    beside = sorted(repr(prefix + k) for k in found if k != "rope.scaling.attn_factor")
    if beside or freqs is not None:
        beside += ["'rope_freqs.weight'"] if freqs is not None else []
        raise ValueError(
            "the file holds LongRoPE's 'rope_factors_long.weight' and 'rope_factors_short.weight' "
            f"and beside them {', '.join(beside)}; tpde reads the factors with {key!r} alone."
        )
    if "rope.scaling.attn_factor" not in found:
        raise ValueError(
            f"the metadata key {key!r} is missing beside LongRoPE's factor tensors: llama.cpp "
            "would scale by 1, a Hugging Face config by √(1 + ln s/ln C₀); tpde refuses rather "
            "than guess (llama.cpp's converter always writes it)."
        )
    long, short = factors
    return {"rope_type": "longrope", "long_factor": long, "short_factor": short,
            "attention_factor": float(found["rope.scaling.attn_factor"])}  # fmt: skip


# ---------------------------------------------------------------------- RoPE tensors
#: llama.cpp's per-pair divisors f_m (its Llama-3 converter), read where the family's GGUF
#: map sets ``rope_freqs``.
FREQS_TENSOR = "rope_freqs.weight"

#: Phi-3's LongRoPE factors (long, short), read where the family's GGUF map sets
#: ``rope_factors``.
FACTOR_TENSORS = ("rope_factors_long.weight", "rope_factors_short.weight")


def rope_tensor_names(*, freqs: bool, factors: bool) -> tuple[str, ...]:
    """The RoPE tensors a family reads: :data:`FREQS_TENSOR` where its GGUF map sets
    ``freqs`` (``rope_freqs``), :data:`FACTOR_TENSORS` where it sets ``factors``
    (``rope_factors``). The translator dequantises those the file holds (its one tensor read,
    :func:`tpde.pretrained._gguf.dequantised`) and hands them to :func:`rope_tensors`; any
    other stays among the file's tensors, refused there as unexpected."""
    return (FREQS_TENSOR,) * freqs + FACTOR_TENSORS * factors


def rope_tensors(path, read: dict, metadata: dict, architecture: str) -> tuple:
    """(the values f_m of a ``rope_freqs.weight`` tensor, the LongRoPE factors (long, short))
    of a file, checked: one positive value per rotated pair; None for each not in ``read``.

    Parameters
    ----------
    path : Path
        The file (for the messages).
    read : dict
        The RoPE tensors read (name → (shape, float32 values)): those of
        :func:`rope_tensor_names` the file holds.
    metadata : dict
        The file's metadata (the rotated width of a head: ``rope.dimension_count``, else
        ``attention.key_length``, else ``embedding_length``/``attention.head_count``).
    architecture : str
        ``general.architecture`` (the metadata keys' prefix).
    """
    out = []
    for names in ((FREQS_TENSOR,), FACTOR_TENSORS):
        held = [n for n in names if n in read]
        if not held:
            out.append(None)
            continue
        if len(held) < len(names):
            missing = next(n for n in names if n not in read)
            raise ValueError(
                f"{path}: the file holds {held[0]!r} but not {missing!r}; LongRoPE needs both "
                "(the long factors past the original context, the short ones within it)."
            )
        values = [_pair_values(path, n, *read[n], metadata, architecture) for n in names]
        out.append(values[0] if len(values) == 1 else tuple(v.tolist() for v in values))
    return tuple(out)


def _pair_values(path, name, shape, values, metadata, architecture) -> np.ndarray:
    """Tensor ``name`` (its ``shape`` and float32 ``values``): one positive value per rotated
    pair, float64."""
    values = np.asarray(values, dtype=np.float64)
    prefix = f"{architecture}."
    rotated = metadata.get(
        prefix + "rope.dimension_count", metadata.get(prefix + "attention.key_length")
    )
    if rotated is None:
        hidden, heads = (
            metadata.get(prefix + k) for k in ("embedding_length", "attention.head_count")
        )
        rotated = (
            hidden // heads
            if isinstance(hidden, int) and isinstance(heads, int) and heads
            else None
        )
    if len(shape) != 1 or (isinstance(rotated, int) and shape[0] * 2 != rotated):
        raise ValueError(
            f"{path}: the tensor {name!r} has shape {shape}; the metadata implies "
            f"({rotated // 2 if isinstance(rotated, int) else '?'},) (one value per rotated "
            "pair of a head)."
        )
    if not (values > 0).all():
        raise ValueError(
            f"{path}: the tensor {name!r} holds divisors ≤ 0; RoPE frequencies are divided by "
            "positive ones."
        )
    return values
