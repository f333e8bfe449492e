r"""A checkpoint's RoPE scaling, read from its config the way Hugging Face transformers 5 reads it.

Where a config says it (transformers' ``RotaryEmbeddingConfigMixin`` and Gemma-3's
``convert_rope_params_to_dict``):

- ``rope_parameters`` (transformers 5) or ``rope_scaling`` (transformers 4; it wins where both
  are set): one dict ``{"rope_type": name, <its keys>}`` (``"type"`` is the older spelling);
  ``"default"``, or no dict, is RoPE unscaled;
- per layer type (Gemma-3): ``rope_parameters = {"full_attention": {…}, "sliding_attention":
  {…}}``; a transformers-4 ``rope_scaling`` updates the global (``full_attention``) dict only,
  and the local layers keep their own unscaled RoPE (base ``rope_local_base_freq``);
- ``original_max_position_embeddings`` (C₀) inside the dict, or at the top of the config
  (Phi-3's place), which then wins, as in transformers; ``max_position_embeddings`` is C.

Where transformers fills a gap silently, tpde refuses: a missing C₀ (transformers takes C, which
makes llama3 and YaRN the identity), a key the type does not read, a flat ``rope_parameters``
scaling on a per-layer-type model (transformers ignores it). Every refusal names the key.
"""

from __future__ import annotations

import math
import numbers

from tpde.fields.attention.rope_scaling import (
    ROPE_SCALINGS,
    DynamicNTK,
    LinearScaling,
    Llama3Scaling,
    LongRoPE,
    RopeScaling,
    YaRN,
)

__all__ = ["rope_scaling_from_config", "rope_scaling_from_parameters"]

_LAYER_TYPES = ("full_attention", "sliding_attention")
#: Keys every dict may hold that are not the scaling's (the base and the rotated fraction are
#: read with the rest of the config).
_COMMON = ("rope_type", "type", "rope_theta", "partial_rotary_factor")
#: rope_type → (required keys, optional keys) of transformers' dicts.
_KEYS = {
    "linear": (("factor",), ()),
    "dynamic": (("factor",), ()),
    "llama3": (
        ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"),
        (),
    ),
    "yarn": (
        ("original_max_position_embeddings",),
        (
            "factor",
            "beta_fast",
            "beta_slow",
            "attention_factor",
            "mscale",
            "mscale_all_dim",
            "truncate",
        ),
    ),
    "longrope": (
        ("short_factor", "long_factor", "original_max_position_embeddings"),
        ("factor", "attention_factor"),
    ),
}


def rope_scaling_from_config(
    raw: dict, *, context: int, dims: int, per_layer_type: bool = False, error=ValueError
) -> tuple[RopeScaling | None, RopeScaling | None]:
    """The (global, local) RoPE scalings a config asks for; None where RoPE is unscaled.

    Parameters
    ----------
    raw : dict
        config.json as read (``rope_parameters``, ``rope_scaling``,
        ``original_max_position_embeddings`` are looked at).
    context : int
        C, ``max_position_embeddings`` (dynamic NTK's threshold; C/C₀ is the factor YaRN and
        LongRoPE take where the dict has none).
    dims : int
        The rotated width r of a head (LongRoPE lists r/2 factors).
    per_layer_type : bool
        The model's local layers have a RoPE of their own (Gemma-3); otherwise one scaling
        serves every layer, and both returned scalings are the same.
    error : exception type
        Raised (a ValueError subclass: the loader's ``LoadError``) naming the key.
    """
    legacy, params = raw.get("rope_scaling"), raw.get("rope_parameters")
    for key, value in (("rope_scaling", legacy), ("rope_parameters", params)):
        if value is not None and not isinstance(value, dict):
            raise error(
                f"config.json: {key} must be a dict such as {{'rope_type': 'linear', 'factor': "
                f"2.0}} (or absent); received {value!r}."
            )
    nested = [k for k in _LAYER_TYPES if params is not None and k in params]
    if nested:
        others = sorted(set(params) - set(_LAYER_TYPES))
        if others or not per_layer_type:
            why = (
                f"beside them it holds {others}, which transformers ignores"
                if others
                else "this model has one RoPE for every layer"
            )
            raise error(
                f"config.json: rope_parameters is given per layer type ({', '.join(nested)}), "
                f"but {why}; write one dict of RoPE parameters."
            )
    top = raw.get("original_max_position_embeddings")
    read = dict(context=context, dims=dims, error=error)
    if not per_layer_type:
        flat = legacy or params or {}
        which = "rope_scaling" if legacy else "rope_parameters"
        one = rope_scaling_from_parameters(flat, which, original=top, **read)
        return one, one
    if params is not None and not nested and _kind(params, "rope_parameters", error) != "default":
        raise error(
            "config.json: rope_parameters.rope_type is set on the whole of a model whose layers "
            "have a RoPE per type (transformers ignores it there); give it per layer type, "
            "rope_parameters = {'full_attention': {...}, 'sliding_attention': {...}}."
        )
    table = {k: _dict(params.get(k) if nested else None, k, error) for k in _LAYER_TYPES}
    where = "rope_parameters.full_attention"
    full = table["full_attention"]
    if legacy:
        full, where = {**full, **legacy}, "rope_scaling"
    return (
        rope_scaling_from_parameters(full, where, **read),
        rope_scaling_from_parameters(
            table["sliding_attention"], "rope_parameters.sliding_attention", **read
        ),
    )


def rope_scaling_from_parameters(
    params: dict, where: str, *, context: int, dims: int, original=None, error=ValueError
) -> RopeScaling | None:
    """One dict of RoPE parameters as its scaling (None for ``"default"``).

    ``where`` names the dict in messages (``"rope_parameters"``); ``original``, when not None,
    replaces the dict's ``original_max_position_embeddings`` (a top-level config key). Keyword
    arguments as :func:`rope_scaling_from_config`.
    """
    kind = _kind(params, where, error)
    if kind == "default":
        _no_other_keys(params, where, (), kind, error)
        return None
    required, optional = _KEYS[kind]
    _no_other_keys(params, where, required + optional, kind, error)
    values = dict(params)
    if original is not None and "original_max_position_embeddings" in required:
        if isinstance(original, bool) or not isinstance(original, numbers.Integral) or original < 1:
            raise error(
                "config.json: original_max_position_embeddings (the top-level key, which wins "
                f"over {where}'s) must be a positive integer; received {original!r}."
            )
        values["original_max_position_embeddings"] = original
    for key in required:
        if values.get(key) is None:
            raise error(
                f"config.json: {where}.{key} is missing, and {kind!r} RoPE scaling needs it "
                f"(it reads {', '.join(required)})."
            )
    cls, args = _arguments(kind, values, where, context, error)
    try:  # what the class checks beyond the keys' types and signs
        scaling = cls(*args)
        scaling.check(dims)
    except (TypeError, ValueError) as cause:
        raise error(f"config.json: {where} ({kind!r} RoPE scaling): {cause}") from None
    return scaling


def _arguments(kind: str, p: dict, where: str, context: int, error) -> tuple:
    """(class, arguments) of the scaling ``kind`` from its dict ``p``, each key checked."""

    def number(key, default=None):
        value = p.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise error(f"config.json: {where}.{key} must be a number; received {value!r}.")
        if not (math.isfinite(value) and value > 0):
            raise error(f"config.json: {where}.{key} must be finite and > 0; received {value!r}.")
        return value

    def integer(key):
        value = p[key]
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise error(
                f"config.json: {where}.{key} must be a positive integer; received {value!r}."
            )
        return int(value)

    if kind == "linear":
        return LinearScaling, (number("factor"),)
    if kind == "dynamic":
        return DynamicNTK, (number("factor"), context)
    original = integer("original_max_position_embeddings")
    if kind == "llama3":
        levels = number("low_freq_factor"), number("high_freq_factor")
        return Llama3Scaling, (number("factor"), original, *levels)
    factor = number("factor", context / original)  # transformers: C/C₀ where factor is None
    if kind == "yarn":
        truncate = p.get("truncate", True)
        if not isinstance(truncate, bool):
            raise error(
                f"config.json: {where}.truncate must be true or false; received {truncate!r}."
            )
        return YaRN, (
            factor, original, number("beta_fast", 32.0), number("beta_slow", 1.0),
            number("attention_factor"), number("mscale"), number("mscale_all_dim"), truncate,
        )  # fmt: skip
    for key in ("short_factor", "long_factor"):
        if not isinstance(p[key], list | tuple):
            raise error(
                f"config.json: {where}.{key} must be a list of numbers; received {p[key]!r}."
            )
    lists = p["short_factor"], p["long_factor"]
    return LongRoPE, (*lists, original, factor, number("attention_factor"))


def _kind(params: dict, where: str, error) -> str:
    kind = params.get("rope_type", params.get("type", "default"))
    if kind != "default" and (not isinstance(kind, str) or kind not in ROPE_SCALINGS):
        raise error(
            f"config.json: {where}.rope_type = {kind!r} is a RoPE scaling tpde does not "
            f"implement (it reads 'default', {', '.join(map(repr, ROPE_SCALINGS))})."
        )
    return kind


def _no_other_keys(params: dict, where: str, reads: tuple, kind: str, error) -> None:
    unknown = sorted(set(params) - set(_COMMON) - set(reads))
    if unknown:
        raise error(
            f"config.json: {where} holds {unknown}, which {kind!r} RoPE does not read (it reads "
            f"{', '.join(reads) or 'rope_theta only'}); remove them rather than have them ignored."
        )


def _dict(value, where: str, error) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise error(f"config.json: rope_parameters.{where} must be a dict; received {value!r}.")
    return value
