"""A GGUF file's metadata read as the config.json of the checkpoint it stands for: the keys
half of the GGUF translator (:mod:`tpde.pretrained._gguf` reads the tensors).

**The keys.** The file's family is the one whose GGUF map
(:class:`~tpde.pretrained.families.GGUFMap`, which documents each entry) names its
``general.architecture`` (:func:`~tpde.pretrained._gguf.gguf_family`). Its ``<arch>.<key>``
metadata become config.json keys through :data:`STANDARD_KEYS` (llama.cpp's key → the
family's hyper-parameter, whose config key the family's ``keys`` name) and the map's own
``keys``; a key in neither, nor among the ``equal`` ones checked (:data:`STANDARD_EQUAL` and
the map's), the ``literal``, the ``ignored`` or the RoPE scaling's, is refused naming it (a
RoPE scaling tpde does not read, an expert count: nothing is silently ignored); so is a file
without a key the map lists as ``required`` (Gemma-3's window, which llama.cpp requires). A
window llama.cpp computes without while a Hugging Face config applies it (the map's
``switched_off``: Phi-3's, which it turns off; llama's — Mistral's files —, Qwen2/3's and
StarCoder2's, which it does not read) is read as llama.cpp computes it, with a warning where
the readings differ, or as :func:`~tpde.pretrained.load`'s ``gguf_window`` chooses
(:func:`switched_off`; "file": on every layer, with the map's ``windowed``). An olmo2 file
holding a window w > 0 is OLMo-3 in llama.cpp, and is read as the olmo3 family (the map's
``windowed`` without ``switched_off``: its ``model_type``). An optional key the file lacks
takes llama.cpp's default (the map's ``defaults``: Gemma-2's window and soft-caps, Gemma-3's
RoPE base). What else the file does not carry comes from the family's defaults (its
documented facts), its ``computed`` keys, and the map's ``flags`` (what llama.cpp decides by
the tensors alone: StableLM's QK-norms, Falcon's second norm) and ``fixed`` values (what its
model of every file of the architecture has); the vocabulary size from the tokens when the
file has no ``vocab_size`` (from ``token_embd.weight``'s rows when it has no vocabulary
either); the head is tied when the file has no ``output.weight``.

**RoPE scaling**: the ``<arch>.rope.scaling.*`` keys and RoPE tensors become the
``rope_scaling`` dict of the config.json, read by :func:`tpde.fields.rope_scaling_from_config`
as a folder's:

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

import warnings

import numpy as np

from tpde.pretrained._checkpoint import LoadError
from tpde.pretrained.families.base import Family

__all__ = [
    "NEUTRAL_SCALING",
    "ROPE_SCALING_KEYS",
    "STANDARD_EQUAL",
    "STANDARD_KEYS",
    "check_equal",
    "gguf_config",
    "rope_scaling",
    "switched_off",
]


#: llama.cpp's standard metadata keys (gguf-py ``Keys.LLM``, ``Keys.Attention``,
#: ``Keys.Rope``; without the ``<arch>.`` prefix) → tpde's hyper-parameter; its config.json
#: key is the one the family's ``keys`` give it.
STANDARD_KEYS = {
    "context_length": "context",
    "embedding_length": "hidden",
    "block_count": "layers",
    "feed_forward_length": "mlp_hidden",
    "vocab_size": "vocab",
    "attention.head_count": "heads",
    "attention.head_count_kv": "kv_heads",
    "attention.key_length": "head_dim",
    "attention.layer_norm_rms_epsilon": "norm_eps",
    "attention.layer_norm_epsilon": "norm_eps",
    "attention.sliding_window": "window",
    "rope.freq_base": "rope_base",
    "attn_logit_softcapping": "attn_softcap",
    "final_logit_softcapping": "logit_softcap",
}

#: llama.cpp's standard metadata keys that must equal a hyper-parameter tpde derives (no
#: family of tpde has values of another width; "rotated": the rotated width of a head, the
#: whole head unless the family's ``rotary_fraction`` reads a part): checked, and a file
#: where they differ is refused naming the key.
STANDARD_EQUAL = {
    "attention.value_length": "head_dim",
    "rope.dimension_count": "rotated",
}

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


def _key_map(family: Family) -> dict[str, str]:
    """The family's GGUF metadata key (no prefix) → config.json key: the standard keys of its
    hyper-parameters but the window keys read apart (``switched_off``), and its own."""
    out = {short: family.keys[name][0] for short, name in STANDARD_KEYS.items()
           if name in family.keys and family.keys[name][0] is not None
           and short not in family.gguf.switched_off}  # fmt: skip
    return {**out, **family.gguf.keys}


def gguf_config(
    metadata: dict, shapes, family: Family, rope_freqs=None, rope_factors=None, window=None
) -> tuple[dict, dict]:
    """(the config.json a GGUF file's metadata stands for, config key → the metadata key it
    came from) (module notes); a LoadError for a metadata key of the architecture that tpde
    does not read (named). ``shapes``: the file's tensor name → shape (row-major);
    ``rope_freqs``: the values of a ``rope_freqs.weight`` tensor the family reads (its GGUF
    map's ``rope_freqs``), or None; ``rope_factors``: Phi-3's LongRoPE factors (long, short),
    or None; ``window``: the reading of a window llama.cpp computes without
    (:func:`switched_off`)."""
    spec, keys, equal = family.gguf, _key_map(family), _equal(family)
    prefix = f"{spec.architecture}."
    raw, source, scaling = {"model_type": spec.model_type}, {}, {}
    for key in metadata:
        if not key.startswith(prefix):
            continue
        short = key[len(prefix) :]
        if short in keys:
            raw[keys[short]], source[keys[short]] = metadata[key], key
        elif short in spec.ignored:
            continue
        elif short in spec.literal:
            _check_literal(key, metadata[key], spec.literal[short])
        elif short in ROPE_SCALING_KEYS and family.rotary:
            scaling[short] = metadata[key]
        elif short in spec.switched_off:
            how = spec.switched_off[short].format(arch=spec.architecture)
            if switched_off(key, metadata, window, how):
                name = family.keys.get(STANDARD_KEYS[short], ("sliding_window",))[0]
                raw[name], source[name] = metadata[key], key  # llama: Mistral's (windowed)
                raw.update(spec.windowed)
                _check_windowed(spec, shapes)
        elif short not in equal:
            reads = (*keys, *equal, *spec.literal, *(ROPE_SCALING_KEYS if family.rotary else ()))
            raise LoadError(
                f"the metadata key {key!r} = {metadata[key]!r} changes the computation in a way "
                f"tpde does not implement for {spec.architecture} files (it reads "
                f"{', '.join(prefix + k for k in reads)}); tpde refuses rather than ignore it."
            )
    if spec.windowed and not spec.switched_off:  # olmo2: a window > 0 is OLMo-3 (its map)
        _read_as_windowed(raw, spec, prefix, source)
    for short in spec.required:
        if prefix + short not in metadata:
            raise LoadError(
                f"the metadata key {prefix + short!r} is missing: llama.cpp reads no "
                f"{spec.architecture} file without it (its load_hparams has no default for it), "
                "and tpde refuses rather than guess (llama.cpp's converter always writes it)."
            )
    for short, value in spec.defaults.items():  # llama.cpp's value of an absent optional key
        if prefix + short not in metadata:
            raw[keys[short]] = value
    vocab = family.keys["vocab"][0]
    if vocab not in raw and metadata.get("tokenizer.ggml.tokens"):
        raw[vocab] = len(metadata["tokenizer.ggml.tokens"])
    elif vocab not in raw and len(shapes.get("token_embd.weight", ())) == 2:
        raw[vocab] = shapes["token_embd.weight"][0]  # a file without a vocabulary
    raw["tie_word_embeddings"] = "output.weight" not in shapes
    raw.update(spec.fixed)
    for target, (name, held, absent) in spec.flags.items():
        raw[target] = held if name in shapes else absent
    _llama_cpp_defaults(raw, family)
    for target, rule in spec.computed.items():
        value = rule(raw)
        if value is not None:
            raw[target] = value
    rotated = metadata.get(prefix + "rope.dimension_count")
    if spec.rotary_fraction and rotated is not None:
        raw[spec.rotary_fraction] = _fraction(rotated, _head_dim(raw, family))
        source[spec.rotary_fraction] = prefix + "rope.dimension_count"
    context = raw.get(family.keys["context"][0])
    rope = rope_scaling(scaling, prefix, rope_freqs, context, rope_factors)
    if rope is not None:
        raw["rope_scaling"] = rope
    return raw, source


def _read_as_windowed(raw: dict, spec, prefix: str, source: dict) -> None:
    """olmo2 (``windowed`` without ``switched_off``): a window w > 0 (``sliding_window``) makes
    the file another model in llama.cpp (OLMo-3: ``raw`` takes ``windowed``); 0 is none,
    dropped. Not an integer ≥ 0: refused (llama.cpp reads a uint32)."""
    value = raw.get("sliding_window", 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise LoadError(
            f"the metadata key {prefix + 'attention.sliding_window'!r} = {value!r} is not a "
            "window (an integer ≥ 0, 0 for none)."
        )
    if value:
        raw.update(spec.windowed)
    else:
        raw.pop("sliding_window", None), source.pop("sliding_window", None)


def _check_literal(key: str, value, expected) -> None:
    """A LoadError unless metadata key ``key`` holds the one value tpde reads it at."""
    if value != expected:
        raise LoadError(
            f"the metadata key {key!r} = {value!r} is not {expected!r}, the one value llama.cpp's "
            "converter writes and tpde reads; tpde refuses rather than guess the layout it means."
        )


def _inert(short: str, value, metadata: dict, prefix: str) -> bool:
    """Whether a window key's value changes nothing within the file's context: a sliding
    window of 0 (llama.cpp's "none", which its Phi-3 converter writes) or of at least
    ``context_length`` positions (p_i − p_j < w for every pair the context holds)."""
    context = metadata.get(prefix + "context_length")
    if short != "attention.sliding_window" or isinstance(value, bool):
        return False
    return isinstance(value, int) and (
        value == 0 or (isinstance(context, int) and 0 < context <= value)
    )


def _check_windowed(spec, shapes) -> None:
    """A LoadError where the "file" reading's ``model_type`` (llama's: Mistral, whose
    attention and MLP have no biases) cannot hold the file's biases (named)."""
    biased = sorted(name for name in shapes if name.endswith(".bias"))
    if "model_type" in spec.windowed and biased:
        raise LoadError(
            f"gguf_window='file' reads the window of a {spec.architecture} file as a "
            f"{spec.windowed['model_type']} checkpoint's, which has no biases, but the file "
            f"holds {biased[0]!r}: read it as llama.cpp does (gguf_window None or 'llama.cpp')."
        )


def switched_off(key: str, metadata: dict, reading, how: str) -> bool:
    """Whether to apply the window ``key`` = w of a file whose architecture llama.cpp computes
    without it (the GGUF map's ``switched_off``; ``how``: what llama.cpp does with it, the
    warning's words). llama.cpp's ``llama_model::load_hparams`` (``src/llama-model.cpp``)
    reads Phi-3's and turns it off — LLM_ARCH_PHI3: a window > 0 found, it logs "Phi SWA is
    currently disabled" and sets n_swa = 0, swa_type NONE (llama.cpp PR 13676, 2025; before
    it llama.cpp applied the window on every layer) — and reads none for llama (Mistral's
    files), qwen2, qwen3 and starcoder2 (their cases leave swa_type NONE: every position
    attended).

    Phi-3's converter (``Phi3MiniModel.set_gguf_parameters``) writes the checkpoint's
    ``sliding_window``, 0 for none; the others' write none (a file holding one comes from
    another writer). w = 0 is none in every reading. Otherwise ``reading`` "file" applies w
    on every layer, as a checkpoint's config.json that carries it does (transformers'
    Mistral, Phi-3 and Starcoder2 attention: p_i − p_j < w; Qwen's with
    ``use_sliding_window`` and ``max_window_layers`` 0: the map's ``windowed``);
    "llama.cpp" does not; None (the default) reads it as llama.cpp does and warns where the
    two readings differ within the file's context (0 < w < ``context_length``:
    Phi-3-mini-4k's 2047 of 4096, Mistral-7B-v0.1's 4096 of 32768), naming the key and the
    keyword. A value that is not an integer ≥ 0 is refused (llama.cpp reads a uint32)."""
    value = metadata[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise LoadError(
            f"the metadata key {key!r} = {value!r} is not a window (an integer ≥ 0, 0 for none)."
        )
    prefix = key[: key.index(".") + 1]
    if value == 0 or reading == "llama.cpp":
        return False
    if reading == "file":
        return True
    if not _inert(key[len(prefix) :], value, metadata, prefix):
        context = metadata.get(prefix + "context_length")
        warnings.warn(
            f"the metadata key {key!r} = {value} is a sliding window within the file's context "
            f"({context} positions), which llama.cpp {how}, while a Hugging Face config.json "
            "that carries it applies it on every layer (p_i − p_j < w): read as llama.cpp "
            "computes it, without a window. Pass gguf_window='file' to load(…) to apply it "
            "as the checkpoint does, or gguf_window='llama.cpp' to choose this reading "
            "without this warning.",
            UserWarning,
            stacklevel=6,  # switched_off, gguf_config, open_gguf, loader._open, load: its caller
        )
    return False


def _head_dim(raw: dict, family: Family):
    """The head dimension the config.json ``raw`` says (its head_dim key, else hidden/heads),
    or None where its values are not integers (read_hyper then names them)."""
    key = family.keys["head_dim"][0]
    value = raw.get(key)
    if value is None:
        hidden, heads = (raw.get(family.keys[k][0]) for k in ("hidden", "heads"))
        ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (hidden, heads))
        value = hidden // heads if ints and heads > 0 else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _fraction(rotated, head_dim):
    """r/k as a fraction f with int(k·f) = r (transformers' and tpde's reading), or
    ``rotated`` unchanged where either is not a positive integer (read_hyper names it)."""
    if not (isinstance(rotated, int) and head_dim and 0 < rotated <= head_dim):
        return rotated
    fraction = rotated / head_dim
    while int(head_dim * fraction) < rotated:  # a product rounded below r
        fraction = float(np.nextafter(fraction, 2.0))
    return fraction


def _llama_cpp_defaults(raw: dict, family: Family) -> None:
    """Where the file has no ``head_count_kv`` or ``key_length``: llama.cpp's H_kv = H and
    d_h = d/H (llama_model_loader's), not the config class's defaults an absent config.json
    key takes (Qwen3's 128, Gemma's 256); a null (derived by read_hyper) where d/H is not
    whole, for read_hyper's error."""
    keys = {name: family.keys[name][0] for name in ("hidden", "heads", "kv_heads", "head_dim")}
    hidden, heads = raw.get(keys["hidden"]), raw.get(keys["heads"])
    raw.setdefault(keys["kv_heads"], heads)
    whole = all(isinstance(v, int) and v > 0 for v in (hidden, heads)) and hidden % heads == 0
    if keys["head_dim"] is not None:  # Falcon's is always d/H
        raw.setdefault(keys["head_dim"], hidden // heads if whole else None)


def _equal(family: Family) -> dict[str, str]:
    """The metadata keys checked equal to a hyper-parameter: the standard ones and the
    family's."""
    return {**STANDARD_EQUAL, **family.gguf.equal}


def check_equal(metadata: dict, family: Family, cfg, where: str) -> None:
    """The ``equal`` metadata keys, each equal to the hyper-parameter of the config record
    ``cfg`` it names ("rotated": the rotated width of a head)."""
    prefix = f"{family.gguf.architecture}."
    for short, target in _equal(family).items():
        value = metadata.get(prefix + short)
        if target == "rotated":
            expected = cfg.rotary_dims or cfg.head_dim
        else:
            expected = getattr(cfg, target)
        if value is not None and value != expected:
            raise LoadError(
                f"{where}: the metadata key {prefix + short!r} = {value!r} differs from "
                f"{target} = {expected!r}; tpde implements only equal ones."
            )


# ---------------------------------------------------------------------- RoPE scaling
def rope_scaling(found: dict, prefix: str, freqs, context, factors=None) -> dict | None:
    """transformers' ``rope_scaling`` dict of a file's ``rope.scaling.*`` keys (``found``,
    without the prefix), ``rope_freqs`` values and LongRoPE ``factors`` (long, short), or None
    for unscaled RoPE (module notes)."""
    if factors is not None:
        return _longrope(found, prefix, factors, freqs)
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


def _longrope(found: dict, prefix: str, factors, freqs) -> dict:
    """Phi-3's LongRoPE of a file's factor tensors and ``rope.scaling.attn_factor`` (module
    notes); any other scaling beside them refused."""
    key = prefix + "rope.scaling.attn_factor"
    beside = sorted(repr(prefix + k) for k in found if k != "rope.scaling.attn_factor")
    if beside or freqs is not None:
        beside += ["'rope_freqs.weight'"] if freqs is not None else []
        raise LoadError(
            "the file holds LongRoPE's 'rope_factors_long.weight' and 'rope_factors_short.weight' "
            f"and beside them {', '.join(beside)}; tpde reads the factors with {key!r} alone."
        )
    if "rope.scaling.attn_factor" not in found:
        raise LoadError(
            f"the metadata key {key!r} is missing beside LongRoPE's factor tensors: llama.cpp "
            "would scale by 1, a Hugging Face config by √(1 + ln s/ln C₀); tpde refuses rather "
            "than guess (llama.cpp's converter always writes it)."
        )
    long, short = factors
    return {"rope_type": "longrope", "long_factor": long, "short_factor": short,
            "attention_factor": float(found["rope.scaling.attn_factor"])}  # fmt: skip
