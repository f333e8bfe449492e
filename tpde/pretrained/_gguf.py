"""A GGUF file (llama.cpp's format) as a :class:`~tpde.pretrained._checkpoint.Source`: the one
translator from the file's ``general.architecture`` keys and tensor names to the config.json
and the state dict a Hugging Face folder of the same model holds: the file's tensors as the
checkpoint's, its metadata as the config.json.

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
checkpoint's: llama's interleaved rotary rows, a fused QKV written as blocks, per-head norm
gains stacked into one tensor (:mod:`tpde._io.gguf_layouts`, which tabulates them), Gemma's
norm gains stored as 1 + w (``stored_gain_offset``), GPT-2's Conv1D weights written
(out, in) (``transposed``).

**The keys.** The file's family is the one whose GGUF map
(:class:`~tpde.pretrained.families.GGUFMap`, which documents each entry) names its
``general.architecture`` (:func:`gguf_family`). Its ``<arch>.<key>`` metadata become
config.json keys through :data:`STANDARD_KEYS` (llama.cpp's key → the family's
hyper-parameter, whose config key the family's ``keys`` name) and the map's own ``keys``; a
key in neither, nor among the ``equal`` ones checked (:data:`STANDARD_EQUAL` and the map's),
the ``literal``, the ``ignored`` or the RoPE scaling's, is refused naming it (a RoPE scaling
tpde does not read, an expert count: nothing is silently ignored); so is a file without a
key the map lists as ``required`` (Gemma-3's window, which llama.cpp requires). A window
llama.cpp computes without while a Hugging Face config applies it (the map's
``switched_off``: Phi-3's, which it turns off; llama's — Mistral's files —, Qwen2/3's and
StarCoder2's, which it does not read) is read as llama.cpp computes it, with a warning where
the readings differ, or as :func:`~tpde.pretrained.load`'s ``gguf_window`` chooses
(:func:`switched_off`; "file": on every layer, with the map's ``windowed``). An olmo2 file
holding a window w > 0 is OLMo-3 in llama.cpp, and is read as the olmo3 family (the map's
``windowed`` without ``switched_off``: its ``model_type``). An optional key the file lacks
takes llama.cpp's default (the map's ``defaults``: Gemma-2's window and soft-caps, Gemma-3's
RoPE base). What else the file does not carry comes from the family's defaults (its
documented facts), the map's ``computed`` keys (the family's functions: Gemma's query scale,
OLMo-3's layers), its ``flags`` (what llama.cpp decides by the tensors alone: StableLM's
QK-norms, Falcon's second norm) and ``fixed`` values (what its model of every file of the
architecture has); the vocabulary size from the tokens when the file has no ``vocab_size``
(from ``token_embd.weight``'s rows when it has no vocabulary either); the head is tied when
the file has no ``output.weight``.

**RoPE scaling**: the ``<arch>.rope.scaling.*`` keys and the RoPE tensors
(``rope_freqs.weight``, Phi-3's ``rope_factors_*``: their values checked, one positive value
per rotated pair) become the ``rope_scaling`` dict of the config.json, read by
:func:`tpde.fields.rope_scaling_from_config` as a folder's (:mod:`tpde.pretrained._gguf_rope`,
which tabulates the readings).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import torch

from tpde._io import gguf_file
from tpde._io.gguf_layouts import interleave_qkv, stack_rows, unpermute_rotary_rows
from tpde._io.gguf_tokenizer import gguf_tokenizer
from tpde._validation import require_package as require
from tpde.pretrained import _gguf_rope
from tpde.pretrained._build import _CONV1D
from tpde.pretrained._checkpoint import LoadError, Source
from tpde.pretrained.families import gguf_architectures
from tpde.pretrained.families.base import FAMILIES, Family

__all__ = [
    "STANDARD_EQUAL",
    "STANDARD_KEYS",
    "check_equal",
    "dequantised",
    "gguf_config",
    "gguf_family",
    "open_gguf",
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
    known = ", ".join(gguf_architectures())
    raise LoadError(
        f"{where} holds a model of architecture {architecture!r} (general.architecture); "
        f"tpde reads GGUF files of {known}."
    )


def _loading(read, *args):
    """``read(*args)`` (a reader of :mod:`tpde._io` or :mod:`tpde.pretrained._gguf_rope`), its
    ValueError (which names the file) a LoadError."""
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
    ``window``: the reading of a window llama.cpp computes without (:func:`switched_off`);
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
    names = _gguf_rope.rope_tensor_names(
        freqs=family.gguf.rope_freqs, factors=family.gguf.rope_factors
    )
    held = {name: stored.pop(name) for name in names if name in stored}
    read = {
        n: (shape, dequantised(path, n, qtype, data)) for n, (qtype, shape, data) in held.items()
    }
    arch = family.gguf.architecture
    freqs, factors = _loading(_gguf_rope.rope_tensors, path, read, metadata, arch)
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
            array = _loading(unpermute_rotary_rows, array, getattr(cfg, spec.permuted[role]))
        if spec.qkv_blocks and role == "qkv":
            array = _loading(interleave_qkv, array, cfg.heads, cfg.kv_heads)
        if spec.transposed and part == "weight" and role in _CONV1D:
            array = np.ascontiguousarray(array.T)
        if spec.stored_gain_offset and role.endswith(_NORMS):
            array = array - np.float32(spec.stored_gain_offset)
        out[name] = torch.from_numpy(array).to(dtype=dtype, device=device)
    if expected:  # the mapped pages just read leave the resident set (a streamed block's)
        gguf_file.release_pages(data)
    return out


# ---------------------------------------------------------------------- the metadata keys
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
        elif short in _gguf_rope.ROPE_SCALING_KEYS and family.rotary:
            scaling[short] = metadata[key]
        elif short in spec.switched_off:
            how = spec.switched_off[short].format(arch=spec.architecture)
            if switched_off(key, metadata, window, how):
                name = family.keys.get(STANDARD_KEYS[short], ("sliding_window",))[0]
                raw[name], source[name] = metadata[key], key  # llama: Mistral's (windowed)
                raw.update(spec.windowed)
                _check_windowed(spec, shapes)
        elif short not in equal:
            reads = (
                *keys,
                *equal,
                *spec.literal,
                *(_gguf_rope.ROPE_SCALING_KEYS if family.rotary else ()),
            )
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
    try:
        rope = _gguf_rope.rope_scaling(scaling, prefix, rope_freqs, context, rope_factors)
    except ValueError as err:  # the file's RoPE keys (named)
        raise LoadError(str(err)) from None
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
