r"""Tiny random checkpoints of every registered family, without transformers.

:func:`random_checkpoint` writes a Hugging Face folder — ``config.json`` and
``model.safetensors`` — of a tiny model of any family of
:data:`~tpde.pretrained.families.FAMILIES` with every parameter drawn at random;
:func:`random_model` loads one as a :class:`~tpde.pretrained.Transformer`. Such a model is the
control of a study of trained weights (random weights carry no trained structure), and a
genuine checkpoint of its family: transformers reads the folder and computes what tpde
computes (tests/pretrained/test_random_models.py).

Nothing here is specific to a family. The config is the family's own keys
(``Family.keys``) at the tiny sizes of :data:`SIZES` (by hyper-parameter, so that GPT-2's
``n_embd`` and Llama's ``hidden_size`` both get d), every boolean switch the family reads
turned on (its bias keys, its optional roles — QK-norms —, its parallel-block key, its
sliding-window switch), local and global layers alternating where the family has both
(``layer_types``), ALBERT's groups as one group of two blocks, and the values the family
declares in ``Family.random_config`` (a layout its ``reads`` keys select: Falcon's grouped
attention; a RoPE scaling: Llama's llama3). The tensor names and shapes are the loader's own
(:func:`tpde.pretrained._build.expected_shapes` of the config record
:func:`~tpde.pretrained._config.read_hyper` reads from that config), so the folder holds
exactly the tensors :func:`~tpde.pretrained.load` reads, with the pooler where the family has
one. The options at non-default values (grouped-query attention, biases, partial RoPE,
windows, soft-caps, multipliers, experts) are those the family's keys name; the rest of a
family's kind is its own (interleaved RoPE for GPT-J and Cohere, ALiBi for BLOOM, sandwich
norms for Gemma-2/3, ALBERT's shared blocks).

The draws (seeded, float64, stored in ``dtype``)::

    linear weight W (out × in), router, head       N(0, 1/in)       (RMS kept by x ↦ Wx)
    token, position and token-type tables          N(0, 1)          (RMS-1 tokens)
    norm gain (the effective one, γ = offset + w)  1 + N(0, s²)     (Gemma stores w = γ − 1)
    bias, norm bias, masked-LM bias                N(0, s²)

with s = ``spread`` (0.5 by default: a gain of 1 or a bias of 0, which the default
initialisation of transformers leaves, would hide a wrong gain or bias).

Tokens: these checkpoints have no tokenizer. Give a sentence as a tensor of token ids in
[0, vocab) (``vocab`` of :data:`SIZES`, 48), e.g. ``model.embed(torch.arange(8))``; or skip the
embedding and hand any :class:`~tpde.measures.Empirical` cloud of dimension d to the fields.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import torch

from tpde._validation import check_float_dtype
from tpde._validation import require_package as _require
from tpde.pretrained._build import _CONV1D, _NORMS, expected_shapes
from tpde.pretrained._config import read_hyper
from tpde.pretrained.families.base import FAMILIES, Family

__all__ = ["SIZES", "random_checkpoint", "random_config", "random_model"]

#: The tiny hyper-parameters (canonical names of ``Family.keys``) of a random checkpoint:
#: each written under the family's own config key where the family has one (``head_dim``:
#: d/H, the only value every family reads alike — GPT-NeoX, Phi and StableLM size RoPE by the
#: key and their projections by d/H); ``kv_heads`` 2 < H = 4 (grouped-query attention) where
#: its key is not the heads' own; the window 3 shorter than the tokens of a
#: test; soft-caps, multipliers and the clip at values that change the output.
SIZES = {
    "layers": 2,
    "hidden": 16,
    "heads": 4,
    "kv_heads": 2,
    "mlp_hidden": 24,
    "vocab": 48,
    "context": 32,
    "norm_eps": 1e-5,
    "rope_base": 100.0,
    "rope_local_base": 20.0,
    "window": 3,
    "window_from": 1,
    "embedding_size": 8,
    "query_scalar": 12,
    "attn_softcap": 5.0,
    "logit_softcap": 5.0,
    "embed_scale": 2.0,
    "attention_scale": 0.3,
    "residual_scale": 0.5,
    "logit_scale": 0.5,
    "clip_qkv": 2.0,
    "experts": 4,
    "top_k": 2,
    "normalize_top_k": True,
    "shared_hidden": 12,
    "tied": False,
}

#: The rotated share of each head where the family reads a partial rotary width.
ROTARY_FRACTION = 0.5
#: Tables whose rows are tokens (drawn N(0, 1), not N(0, 1/in)).
_TABLES = ("embed", "positions", "token_types")


def _entry(family) -> Family:
    """The registered family ``family``, or a ValueError listing the known ones."""
    if not isinstance(family, str) or family not in FAMILIES:
        raise ValueError(
            f"family must be one of the registered families ({', '.join(FAMILIES)}; "
            f"tpde.pretrained.ARCHITECTURES); received {family!r}."
        )
    return FAMILIES[family]


def _sizes(sizes) -> dict:
    """:data:`SIZES` with ``sizes`` (hyper-parameter → value) over it; unknown names refused."""
    sizes = dict(sizes or {})
    unknown = sorted(set(sizes) - set(SIZES))
    if unknown:
        raise ValueError(
            f"sizes names {', '.join(map(repr, unknown))}, which are not hyper-parameters of a "
            f"random checkpoint; use {', '.join(SIZES)}."
        )
    return {**SIZES, **sizes}


def _switches(entry: Family) -> dict:
    """Every boolean config key ``entry`` reads, at the value that turns its option on: the
    parallel block first (StableLM's post-attention norm exists only without it), then the
    bias keys, the optional roles (a pair: held at the key's value) and the window switch."""
    out = {}
    if isinstance(entry.parallel, str | tuple):
        out[entry.parallel if isinstance(entry.parallel, str) else entry.parallel[0]] = True
    for flag in entry.biases.values():
        if isinstance(flag, str | tuple):
            out[flag if isinstance(flag, str) else flag[0]] = True
    for flag in entry.optional.values():
        key, value = (flag, True) if isinstance(flag, str) else flag
        out.setdefault(key, value)
    if entry.window_switch:
        out[entry.window_switch] = True
    return out


def _hyper(entry: Family, sizes: dict) -> dict:
    """The family's own config keys at ``sizes`` (module notes)."""
    out = {}
    heads_key = entry.keys["heads"][0]
    for name, (key, _) in entry.keys.items():
        if key is None or (name == "kv_heads" and key == heads_key):
            continue  # a fixed value, or no key/value heads of their own
        if name == "head_dim":
            out[key] = sizes["hidden"] // sizes["heads"]
        elif name == "rotary":
            head_dim = sizes["hidden"] // sizes["heads"]
            fraction = entry.facts.get("rotary") == "fraction"
            out[key] = ROTARY_FRACTION if fraction else int(head_dim * ROTARY_FRACTION)
        elif name in sizes:
            out[key] = sizes[name]
    if entry.window_pattern is not None:  # local and global layers alternating
        out["layer_types"] = [
            "full_attention" if l % 2 else "sliding_attention" for l in range(sizes["layers"])
        ]
    if entry.layer_groups is not None:  # ALBERT: one group of two blocks, on every layer
        out.update(dict(zip(entry.layer_groups, (1, 2), strict=True)))
    return out


def random_config(family: str, *, sizes: dict | None = None) -> dict:
    """The config.json of a tiny random checkpoint of ``family`` (module notes).

    Parameters
    ----------
    family : str
        A registered family (:data:`~tpde.pretrained.families.FAMILIES`).
    sizes : dict, optional
        Hyper-parameters (names of :data:`SIZES`) over their tiny defaults.

    Returns
    -------
    dict
        ``model_type`` (the family's first), its keys at the sizes, its switches on, its
        ``random_config``, and ``pad_token_id`` 0 (a token id below the vocabulary: transformers
        sizes its embeddings' padding row by it).

    Raises
    ------
    ValueError
        An unknown family (the known ones listed) or hyper-parameter name.
    """
    entry, sizes = _entry(family), _sizes(sizes)
    declared = {"model_type": entry.model_types[0], "pad_token_id": 0, **entry.random_config}
    if isinstance(declared.get("rope_parameters"), dict):  # its base is the sizes' one
        rope = {"rope_theta": sizes["rope_base"], **declared["rope_parameters"]}
        declared["rope_parameters"] = rope
    layout = _layout(entry, declared)
    return {**_hyper(layout, sizes), **_switches(layout), **declared}


def _layout(entry: Family, raw: dict) -> Family:
    """The family's entry for the config ``raw`` (its ``variant``'s pick, Falcon's layouts)."""
    return entry.variant(raw) if entry.variant is not None else entry


def _draw(spec: tuple, entry: Family, spread: float, g) -> torch.Tensor:
    """One tensor of ``expected_shapes``' ``spec`` (role, block, part, stored shape), drawn as
    the module notes tabulate."""
    role, _, part, shape = spec
    base = role.split("/")[0]  # an expert's role names its expert
    z = torch.randn(shape, generator=g, dtype=torch.float64, device="cpu")
    if part.startswith("weight") and base in _NORMS:
        return 1.0 - entry.gain_offset + spread * z  # the effective gain 1 + N(0, s²)
    if not part.startswith("weight"):
        return spread * z  # biases and norm biases
    if base in _TABLES:
        return z
    fan_in = shape[0] if entry.conv1d and base in _CONV1D else shape[-1]  # linear maps, head
    return z / math.sqrt(fan_in)


def random_checkpoint(
    family: str,
    folder,
    *,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    sizes: dict | None = None,
    spread: float = 0.5,
) -> Path:
    """Write a tiny checkpoint of ``family`` with every parameter drawn at random.

    Parameters
    ----------
    family : str
        A registered family (:data:`~tpde.pretrained.families.FAMILIES`, e.g. "llama").
    folder : str or Path
        Where to write ``config.json`` and ``model.safetensors`` (created if absent).
    seed : int
        The draws' seed (the same seed, family and sizes: the same tensors).
    dtype : torch.dtype
        The stored dtype (float32 by default; float64 for an exact oracle comparison).
    sizes : dict, optional
        Hyper-parameters over :data:`SIZES` (``{"hidden": 64, "layers": 4}``).
    spread : float
        s of the biases' N(0, s²) and of the gains' 1 + N(0, s²) (module notes).

    Returns
    -------
    Path
        The folder, which :func:`tpde.pretrained.load` (and transformers) reads.

    Raises
    ------
    ValueError
        An unknown family (the known ones listed) or hyper-parameter; ``spread`` not > 0.
    TypeError
        ``dtype`` not floating.
    """
    check_float_dtype(dtype)
    if isinstance(spread, bool) or not isinstance(spread, int | float) or not spread > 0:
        raise ValueError(f"spread must be a number > 0; received {spread!r}.")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int; received {seed!r}.")
    raw = random_config(family, sizes=sizes)
    layout = _layout(_entry(family), raw)
    cfg = read_hyper(raw, layout)
    prefix = layout.prefixes[0]
    pooler = {f"{prefix}{layout.pooler}.weight": ()} if layout.pooler else {}
    expected = expected_shapes(cfg, layout, raw, prefix, pooler)
    g = torch.Generator().manual_seed(seed)
    tensors = {
        name: _draw(spec, layout, spread, g).to(dtype).contiguous()
        for name, spec in expected.items()
    }
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(raw, indent=1))
    _require("safetensors")
    from safetensors.torch import save_file

    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def random_model(
    family: str,
    *,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    device="cpu",
    sizes: dict | None = None,
    spread: float = 0.5,
):
    """A tiny random model of ``family`` as a :class:`~tpde.pretrained.Transformer`.

    The checkpoint of :func:`random_checkpoint`, stored in float64 in a temporary folder,
    loaded by :func:`tpde.pretrained.load`. Its tokens are ids in [0, vocab)
    (``model.embed(torch.arange(n))``; module notes).

    Parameters
    ----------
    family, seed, sizes, spread
        As :func:`random_checkpoint`.
    dtype : torch.dtype
        The loaded model's dtype (float64 by default).
    device : str or torch.device
        Where the model's weights live.

    Returns
    -------
    Transformer
        The loaded model.

    Raises
    ------
    ValueError, TypeError
        As :func:`random_checkpoint` and :func:`~tpde.pretrained.load`.
    """
    from tpde.pretrained.loader import load

    with tempfile.TemporaryDirectory() as folder:
        random_checkpoint(family, folder, seed=seed, dtype=torch.float64, sizes=sizes,
                          spread=spread)  # fmt: skip
        return load(folder, dtype=dtype, device=device)
