"""A GGUF file (llama.cpp's format) as a :class:`~tpde.pretrained._checkpoint.Source`: the one
translator from the file's ``general.architecture`` keys and tensor names to the config.json
and the state dict a Hugging Face folder of the same model holds: this module reads the
file's tensors as the checkpoint's, :mod:`tpde.pretrained._gguf_keys` its metadata as the
config.json.

**The file** is read by :mod:`tpde._io.gguf_file`, as a folder's by safetensors: its container
checked whole (a truncated or corrupt file is refused before anything is built), every
tensor's type checked dequantisable by the ``gguf`` package before any is read, each tensor
then dequantised (float32). Its ``tokenizer.ggml.*`` vocabulary becomes a tokenizer in
:mod:`tpde._io.gguf_tokenizer` (GPT-2 byte-level BPE or Gemma's SentencePiece BPE, as the
family's GGUF map says); a file without one gives a model whose
:meth:`~tpde.pretrained.Transformer.embed` takes token ids.

**The tensors.** gguf-py's ``TensorNameMap`` of the architecture (llama.cpp's own table)
maps each of the family's checkpoint names to the file's, so every check of the folder path
(missing, unexpected — refused by name, never dropped —, wrong shape) applies, its messages
naming the file's names. The converter's layouts are undone so that the weights are the
checkpoint's (shapes are listed innermost first in the file; the arrays come out row-major):

================  ========================================  ==================================
what              the file (llama.cpp's converter)          the checkpoint
================  ========================================  ==================================
llama's           inside each head of dimension k, row      row j·k/2 + i (the two halves of
``attn_q``,       2i + j (i < k/2, j ∈ {0, 1}): adjacent    the rotary pairs;
``attn_k``        rotary pairs (``LlamaModel.permute``)     :func:`unpermute_rotary_rows`, as
                                                            transformers' GGUF loader's
                                                            ``_reverse_permute_weights``)
a fused QKV       the blocks [W_q; W_k; W_v] (H and H_kv    group by group: [q_{g,1} … q_{g,r};
(``attn_qkv``)    heads; ``GPTNeoXModel``, and              k_g; v_g], r = H/H_kv (GPT-NeoX:
                  ``FalconModel``'s "jploski" layout)       r = 1; :func:`interleave_qkv`)
per-head norms    one (H, d_h) tensor (StableLM's           H tensors (d_h,), one per head
                  ``_stack_qk_norm``)                       (``norms.{h}``; :func:`stack_rows`)
Gemma's norms     the gains 1 + w                           w (``stored_gain_offset``)
GPT-2's Conv1D    (out, in)                                 (in, out) (``transposed``)
================  ========================================  ==================================

The RoPE tensors (``rope_freqs.weight``, Phi-3's ``rope_factors_*``) are read here, their
values checked (one positive value per rotated pair) and handed to
:func:`~tpde.pretrained._gguf_keys.gguf_config` (module notes there).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

from tpde._io import gguf_file
from tpde._io.gguf_tokenizer import gguf_tokenizer
from tpde._validation import require_package as require
from tpde.pretrained._build import _CONV1D
from tpde.pretrained._checkpoint import LoadError, Source
from tpde.pretrained._gguf_keys import check_equal, gguf_config
from tpde.pretrained.families.base import FAMILIES, Family

__all__ = [
    "dequantised",
    "gguf_family",
    "interleave_qkv",
    "open_gguf",
    "rope_tensors",
    "stack_rows",
    "unpermute_rotary_rows",
]


_NORMS = ("norm",)  # a role whose name ends so is a norm (its gain possibly stored 1 + w)

_LAYER = re.compile(r"^blk\.(\d+)\.")


def _blocks(metadata: dict, stored: dict, architecture: str) -> int:
    """How many blocks to name: the file's block count, or its highest ``blk.N`` + 1."""
    count = metadata.get(f"{architecture}.block_count")
    count = count if isinstance(count, int) and not isinstance(count, bool) else 0
    found = [int(m.group(1)) + 1 for name in stored if (m := _LAYER.match(name))]
    return max([count, *found])


def _tensor_names(family: Family, blocks: int) -> tuple[dict[str, str], dict[str, str]]:
    """(the file's tensor stem → the checkpoint's, the checkpoint's stem → its role), by
    gguf-py's ``TensorNameMap``; a role the converter stacked (the map's ``stacked``) by its
    merged name, standing for the checkpoint's per-head stems (``{h}`` left in them)."""
    gguf = require("gguf")
    arch = {name: arch for arch, name in gguf.MODEL_ARCH_NAMES.items()}
    table = gguf.get_tensor_name_map(arch[family.gguf.architecture], blocks)
    out, roles = {}, {}
    for role, template in family.names.items():
        merged = family.gguf.stacked.get(role, template)
        per_layer = "{l}" in template
        for l in range(blocks) if per_layer else [None]:
            stem = template.format(l=l, h="{h}") if per_layer else template
            stored = table.get_name(merged.format(l=l) if per_layer else merged)
            if stored is not None:
                out[stored], roles[stem] = stem, role
    return out, roles


def _renamer(to_checkpoint: dict[str, str], transposed: set[str]):
    """A message naming checkpoint tensors → naming the file's (each with its checkpoint
    name after it; ``transposed``: the checkpoint names whose shapes the messages give as the
    folder stores them, (in, out)), its config the file's metadata."""
    pairs = [(hf, stored) for stored, hf in to_checkpoint.items()]
    pairs.sort(key=lambda pair: -len(pair[0]))  # "…layers.1" after "…layers.10"

    def rename(message: str) -> str:
        for hf, stored in pairs:
            for part in ("weight", "bias"):
                if "{h}" in hf:  # a row of a stacked tensor
                    pattern = re.escape(f"'{hf}.{part}'").replace(re.escape("{h}"), r"(\d+)")
                    message = re.sub(pattern, lambda m, hf=hf, stored=stored, part=part:
                                     f"'{stored}.{part}' (row {m[1]}: "
                                     f"{hf.format(h=m[1])}.{part})", message)  # fmt: skip
                    continue
                name = f"{hf}.{part}"
                note = ", shapes (in, out) as the folder stores it" if name in transposed else ""
                message = message.replace(f"'{name}'", f"'{stored}.{part}' ({name}{note})")
        return message.replace("the config implies", "the metadata implies").replace(
            "than its config.json says", "than its metadata says"
        )

    return rename


def gguf_family(architecture, where: str) -> Family:
    """The family that reads GGUF files of ``general.architecture`` = ``architecture``, or a
    LoadError naming the file and the architecture and listing those tpde reads."""
    for entry in FAMILIES.values():
        if entry.gguf is not None and entry.gguf.architecture == architecture:
            return entry
    known = ", ".join(e.gguf.architecture for e in FAMILIES.values() if e.gguf is not None)
    raise LoadError(
        f"{where} holds a model of architecture {architecture!r} (general.architecture); "
        f"tpde reads GGUF files of {known}."
    )


def _loading(read, *args):
    """``read(*args)`` of :mod:`tpde._io`, its ValueError (which names the file) a LoadError."""
    try:
        return read(*args)
    except ValueError as err:
        raise LoadError(str(err)) from None


def dequantised(path: Path, name: str, qtype, raw) -> np.ndarray:
    """Tensor ``name`` of the file, dequantised (float32; :func:`tpde._io.gguf_file.dequantise`:
    a type ``gguf`` cannot dequantise or a value not finite refused, as a LoadError)."""
    return _loading(gguf_file.dequantise, path, name, qtype, raw)


def _open_container(path: Path, vocabulary: bool = True) -> tuple[dict, dict]:
    require("gguf")
    try:
        return gguf_file.read_container(path, vocabulary=vocabulary)
    except ValueError as err:
        raise LoadError(
            f"{path} is not a readable GGUF file ({err}); check that it was written "
            "completely (e.g. compare its size with the original)."
        ) from None


def open_gguf(path: Path, window=None, *, chosen: bool = False, vocabulary=True) -> Source:
    """The GGUF file as a :class:`~tpde.pretrained._checkpoint.Source` (module notes);
    ``window``: the reading of a window llama.cpp computes without
    (:func:`~tpde.pretrained._gguf_keys.switched_off`);
    ``chosen``: whether the caller chose it (a ValueError for a file without such a window);
    ``vocabulary`` False: the ``tokenizer.ggml.*`` arrays unread, the tokenizer None."""
    metadata, stored = _open_container(path, vocabulary)
    family = gguf_family(metadata.get("general.architecture"), str(path))
    if chosen and not family.gguf.switched_off:
        having = sorted(f.gguf.architecture for f in FAMILIES.values()
                        if f.gguf is not None and f.gguf.switched_off)  # fmt: skip
        raise ValueError(
            f"gguf_window chooses how to read a window llama.cpp turns off or does not read, "
            f"which only {', '.join(having)} files have; {path} holds a "
            f"{family.gguf.architecture} model, which has one reading: leave gguf_window None."
        )
    _loading(gguf_file.check_types, path, stored)
    freqs, factors = rope_tensors(path, stored, metadata, family.gguf)
    shapes = {n: t[1] for n, t in stored.items()}
    try:
        raw, source = gguf_config(metadata, shapes, family, freqs, factors, window)
        named = family if family.variant is None else family.variant(raw)  # Falcon's layout
    except LoadError as err:
        raise LoadError(f"{path} (GGUF metadata read as config.json): {err}") from None
    to_checkpoint, roles = _tensor_names(named, _blocks(metadata, stored, family.gguf.architecture))
    by_name, shapes, transposed = {}, {}, set()
    for name in stored:
        stem, _, part = name.rpartition(".")
        hf = f"{to_checkpoint[stem]}.{part}" if stem in to_checkpoint else name
        if "{h}" in hf and len(stored[name][1]) == 2:  # (H, d_h): one tensor per head
            for each, (_, row, shape) in stack_rows(hf, name, stored[name][1]).items():
                by_name[each], shapes[each] = (name, row), shape
            continue
        by_name[hf], shapes[hf] = name, stored[name][1]
        if family.gguf.transposed and part == "weight" and roles.get(_stem(hf)) in _CONV1D:
            shapes[hf] = shapes[hf][::-1]  # as the folder stores it, (in, out)
            transposed.add(hf)
    raw.update({k: v for k, v in _bias_keys(named, shapes).items() if k not in family.gguf.fixed})

    def read(cfg, expected, dtype, device):
        check_equal(metadata, family, cfg, str(path))
        return _read(path, stored, by_name, expected, family, cfg, dtype, device)

    return Source(
        where=str(path),
        raw=raw,
        shapes=shapes,
        read=read,
        tokenizer=(lambda: _loading(gguf_tokenizer, path, metadata, family.gguf.tokenizer))
        if vocabulary
        else lambda: None,
        key_name=lambda key: _metadata_key(path, source, key),
        said="the file holds",
        rename=_renamer(to_checkpoint, transposed),
        context=f"{path} (GGUF metadata read as config.json): ",
        bytes=path.stat().st_size,
    )


def _stem(name: str) -> str:
    """A tensor name without its part (``.weight``, ``.bias``)."""
    return name.rpartition(".")[0]


def _bias_keys(family: Family, shapes: dict) -> dict[str, bool]:
    """The config keys that say whether a role has a bias (``attention_bias``): in a GGUF
    file, true where the file holds the role's bias (of block 0, or the global tensor)."""
    out = {}
    for role, flag in family.biases.items():
        key = flag[0] if isinstance(flag, tuple) else flag
        if isinstance(key, str) and role in family.names:
            name = family.names[role].format(l=0, g=0, j=0) + ".bias"
            out[key] = out.get(key, False) or name in shapes
    return out


def _metadata_key(path: Path, source: dict, key: str) -> str:
    """How an error names config key ``key``: the metadata key it came from (``source``:
    config key → metadata key), or (a default of the family) the config key."""
    return f"{path}: the metadata key {source[key]!r}" if key in source else key


def _read(path, stored, by_name, expected, family, cfg, dtype, device) -> dict:
    """The tensors of ``expected`` (checkpoint names), dequantised, un-permuted and in the
    folder's layout; the file's pages they touched then dropped from the resident set
    (:func:`tpde._io.gguf_file.release_pages`: one block read at a time stays one block)."""
    spec, out = family.gguf, {}
    for name, (role, _, part, _) in expected.items():
        where, row = by_name[name] if isinstance(by_name[name], tuple) else (by_name[name], None)
        qtype, _, data = stored[where]
        array = dequantised(path, where, qtype, data)
        if row is not None:  # one head's row of a stacked tensor
            array = np.ascontiguousarray(array[row])
        if role in spec.permuted:
            array = unpermute_rotary_rows(array, getattr(cfg, spec.permuted[role]))
        if spec.qkv_blocks and role == "qkv":
            array = interleave_qkv(array, cfg.heads, cfg.kv_heads)
        if spec.transposed and part == "weight" and role in _CONV1D:
            array = np.ascontiguousarray(array.T)
        if spec.stored_gain_offset and role.endswith(_NORMS):
            array = array - np.float32(spec.stored_gain_offset)
        out[name] = torch.from_numpy(array).to(dtype=dtype, device=device)
    if expected:  # the mapped pages just read leave the resident set (a streamed block's)
        gguf_file.release_pages(data)
    return out


# ---------------------------------------------------------------------- RoPE tensors
#: The per-pair RoPE tensors a GGUF map reads: its flag → the tensor names.
_TENSORS = {"rope_freqs": ("rope_freqs.weight",),
            "rope_factors": ("rope_factors_long.weight", "rope_factors_short.weight")}  # fmt: skip


def rope_tensors(path, stored: dict, metadata: dict, spec) -> tuple:
    """(the values f_m of a ``rope_freqs.weight`` tensor, the LongRoPE factors (long, short))
    of a file whose GGUF map ``spec`` reads them (each removed from ``stored``), checked: one
    positive finite value per rotated pair; None for each the file or the map lacks."""
    out = []
    for flag, names in _TENSORS.items():
        held = [n for n in names if n in stored]
        if not (getattr(spec, flag) and held):
            out.append(None)
            continue
        if len(held) < len(names):
            missing = next(n for n in names if n not in stored)
            raise LoadError(
                f"{path}: the file holds {held[0]!r} but not {missing!r}; LongRoPE needs both "
                "(the long factors past the original context, the short ones within it)."
            )
        values = [_pair_values(path, stored, n, metadata, spec) for n in names]
        out.append(values[0] if len(values) == 1 else tuple(v.tolist() for v in values))
    return tuple(out)


def _pair_values(path, stored, name, metadata, spec) -> np.ndarray:
    """Tensor ``name`` (removed from ``stored``): one positive value per rotated pair."""
    qtype, shape, data = stored.pop(name)
    values = dequantised(path, name, qtype, data).astype(np.float64)
    prefix = f"{spec.architecture}."
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
        raise LoadError(
            f"{path}: the tensor {name!r} has shape {shape}; the metadata implies "
            f"({rotated // 2 if isinstance(rotated, int) else '?'},) (one value per rotated "
            "pair of a head)."
        )
    if not (values > 0).all():
        raise LoadError(
            f"{path}: the tensor {name!r} holds divisors ≤ 0; RoPE frequencies are divided by "
            "positive ones."
        )
    return values


# ---------------------------------------------------------------------- layouts (module table)
def interleave_qkv(weight: np.ndarray, heads: int, kv_heads: int | None = None) -> np.ndarray:
    """A fused QKV weight (or bias) stored as the blocks [W_q; W_k; W_v] (llama.cpp's
    converter) as the checkpoint stores it, group by group: rows [q_{g,1} … q_{g,r}; k_g; v_g]
    for g = 0 … H_kv − 1, r = H/H_kv (GPT-NeoX, H_kv = H: head by head [q_h; k_h; v_h]).

    Parameters
    ----------
    weight : array ((H + 2·H_kv)·k, …)
    heads : int
        H.
    kv_heads : int, optional
        H_kv (default H).

    Returns
    -------
    array ((H + 2·H_kv)·k, …)
        Group g's rows: the file's query rows of heads g·r … g·r + r − 1, then its key and
        value rows of head g.
    """
    kv = heads if kv_heads is None else kv_heads
    rows, rest = weight.shape[0], weight.shape[1:]
    if kv < 1 or heads % kv or rows % (heads + 2 * kv):
        raise LoadError(
            f"a fused QKV weight with {rows} rows cannot be split into q of {heads} heads and k "
            f"and v of {kv} heads each; the file's head counts do not match its tensors."
        )
    k = rows // (heads + 2 * kv)
    q = weight[: heads * k].reshape(kv, heads // kv * k, *rest)
    keys = weight[heads * k : (heads + kv) * k].reshape(kv, k, *rest)
    values = weight[(heads + kv) * k :].reshape(kv, k, *rest)
    return np.ascontiguousarray(np.concatenate([q, keys, values], axis=1).reshape(weight.shape))


def unpermute_rotary_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's rotary row permutation of a query or key weight (module table).

    Parameters
    ----------
    weight : array (heads·k, d)
        ``attn_q`` (heads = H) or ``attn_k`` (heads = H_kv) as stored in the file.
    heads : int

    Returns
    -------
    array (heads·k, d)
        Row j·k/2 + i of head h is the file's row 2i + j of head h.
    """
    rows = weight.shape[0]
    if rows % (2 * heads):
        raise LoadError(
            f"a rotary weight with {rows} rows cannot be split into {heads} heads of even "
            "dimension; the file's head counts do not match its tensors."
        )
    half = rows // heads // 2
    return np.ascontiguousarray(
        weight.reshape(heads, half, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)
    )


def stack_rows(template: str, stored: str, shape: tuple) -> dict[str, tuple[str, int, tuple]]:
    """The checkpoint's per-head tensors of a stacked (H, d_h) file tensor: name (``template``
    with ``{h}`` = 0 … H − 1) → (the file's name ``stored``, row h, shape (d_h,))."""
    return {template.format(h=h): (stored, h, tuple(shape[1:])) for h in range(shape[0])}
