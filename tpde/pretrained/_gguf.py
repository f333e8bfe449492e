"""A GGUF file (llama.cpp's format) as a :class:`~tpde.pretrained._checkpoint.Source`: one
generic translator from the file's ``general.architecture`` keys and tensor names to the
config.json and the state dict a Hugging Face folder of the same model holds.

**The container.** GGUF (little-endian, version 2 or 3): the magic ``GGUF``, the version
(uint32), the tensor and key–value counts (uint64), the key–value pairs (key: uint64 length +
UTF-8 bytes; value type: uint32; value), the tensor infos (name; n_dims: uint32; the dims,
innermost first: uint64 each; ggml type: uint32; offset: uint64), then the tensor data from
the next multiple of ``general.alignment`` (default 32) on. Specification: ggml's
docs/gguf.md. The ``gguf`` package's ``GGUFReader`` builds a numpy view per part of every
field, ~1 s per 10⁵ strings (a vocabulary's tokens and merges take 3–8 s); this reader
decodes the same header with :mod:`struct` in a few hundredths of a second and hands each
tensor's bytes, as a read-only numpy view of the memory-mapped file, to
``gguf.quants.dequantize`` (every type the package dequantises: F32, F16, BF16, Q4_0 … Q8_0,
the K-quants, the IQ types; float32).

**The translation.** The file's family is the one whose GGUF map names its
``general.architecture`` (:func:`gguf_family`). Its
``<arch>.<key>`` metadata become config.json keys through :data:`STANDARD_KEYS` (llama.cpp's
key → the family's hyper-parameter, whose config key the family's ``keys`` name) and the
family's own ``keys``; a key in neither, nor among the ``equal`` ones the family checks, is
refused naming it (a RoPE scaling, an expert count: nothing is silently ignored). What the
file does not carry comes from the family's defaults (its documented facts) and its
``derived`` keys; the vocabulary size from the tokens when the file has no ``vocab_size``;
the head is tied when the file has no ``output.weight``. Tensor names: gguf-py's
``TensorNameMap`` of the architecture (llama.cpp's own table) maps each of the family's
checkpoint names to the file's, so every check of the folder path (missing, unexpected,
wrong shape) applies, its messages naming the file's names.

Two conventions of llama.cpp's converter are undone so that the weights are the
checkpoint's: shapes are listed innermost first (the dequantised arrays come out row-major,
(out, in)); the rows of ``attn_q`` and ``attn_k`` of llama files are permuted — inside each
head of dimension k the converter interleaves the two halves of the rotary pairs, row
r = 2i + j (i < k/2, j ∈ {0, 1}) taking the original row j·k/2 + i, so that llama.cpp
rotates adjacent pairs; :func:`unpermute_rotary_rows` inverts it (as transformers' GGUF
loader does, ``_reverse_permute_weights``). Gemma's norm gains are stored as 1 + w (the
family's ``stored_gain_offset``, subtracted).

The tokenizer is built from the file's ``tokenizer.ggml.*`` vocabulary: GPT-2 byte-level BPE
(:mod:`tpde.pretrained._bpe`) or Gemma's SentencePiece BPE (:mod:`tpde.pretrained._spm`),
as the family's GGUF map says, once per file and process (~12 s for Gemma's 262144 tokens);
a file without one gives a model whose :meth:`~tpde.pretrained.Transformer.embed` takes
token ids.
"""

from __future__ import annotations

import mmap
import re
import struct
from pathlib import Path

import numpy as np
import torch

from tpde._validation import require_package as require
from tpde.pretrained._checkpoint import LoadError, Source
from tpde.pretrained.families.base import FAMILIES, Family

__all__ = [
    "STANDARD_EQUAL",
    "STANDARD_KEYS",
    "gguf_config",
    "gguf_family",
    "open_gguf",
    "read_container",
    "unpermute_rotary_rows",
]

MAGIC = b"GGUF"
# GGUFValueType: 0 uint8, 1 int8, 2 uint16, 3 int16, 4 uint32, 5 int32, 6 float32, 7 bool,
# 8 string, 9 array, 10 uint64, 11 int64, 12 float64.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}  # fmt: skip
_STRING, _ARRAY = 8, 9


class _Cursor:
    """Little-endian reads from a buffer, with the position kept."""

    def __init__(self, buffer):
        self.buffer, self.pos = buffer, 0

    def scalar(self, fmt: str):
        (value,) = struct.unpack_from(fmt, self.buffer, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        size = self.scalar("<Q")
        if self.pos + size > len(self.buffer):
            raise struct.error(f"a string of {size} bytes runs past the end of the file")
        raw = bytes(self.buffer[self.pos : self.pos + size])
        self.pos += size
        return raw.decode("utf-8", errors="replace")

    def value(self, kind: int):
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, count = self.scalar("<I"), self.scalar("<Q")
            if item in _SCALARS:  # one unpack for the whole array
                fmt = f"<{count}{_SCALARS[item][1]}"
                values = struct.unpack_from(fmt, self.buffer, self.pos)
                self.pos += struct.calcsize(fmt)
                return list(values)
            return [self.value(item) for _ in range(count)]
        if kind not in _SCALARS:
            raise struct.error(f"unknown metadata value type {kind}")
        return self.scalar(_SCALARS[kind])


def read_container(path: Path) -> tuple[dict, dict]:
    """(metadata, tensors) of a GGUF file.

    ``tensors`` maps each name to (ggml type, shape in row-major order, raw bytes as a uint8
    numpy view of the memory-mapped file). Raises ValueError with what is wrong (not a GGUF
    file, unsupported version, truncated) — the caller adds the file's name.
    """
    import gguf

    with open(path, "rb") as handle:
        size = Path(path).stat().st_size
        if size < 24:
            raise ValueError(f"the file has {size} bytes, fewer than a GGUF header")
        buffer = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    if buffer[:4] != MAGIC:
        raise ValueError(f"it starts with {bytes(buffer[:4])!r}, not the GGUF magic b'GGUF'")
    cursor = _Cursor(buffer)
    cursor.pos = 4
    try:
        version = cursor.scalar("<I")
        if version not in (2, 3):
            raise ValueError(f"GGUF version {version} (this reader knows 2 and 3, little-endian)")
        n_tensors, n_values = cursor.scalar("<Q"), cursor.scalar("<Q")
        metadata = {}
        for _ in range(n_values):
            key = cursor.string()
            metadata[key] = cursor.value(cursor.scalar("<I"))
        infos = []
        for _ in range(n_tensors):
            name, n_dims = cursor.string(), cursor.scalar("<I")
            dims = [cursor.scalar("<Q") for _ in range(n_dims)]
            infos.append((name, dims, cursor.scalar("<I"), cursor.scalar("<Q")))
    except struct.error as err:
        raise ValueError(f"its header ends early or is malformed ({err})") from None
    alignment = metadata.get("general.alignment", 32)
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment < 1:
        raise ValueError(
            f"the metadata key 'general.alignment' must be an integer >= 1; the file holds "
            f"{alignment!r}"
        )
    start = -(-cursor.pos // alignment) * alignment
    data = np.frombuffer(buffer, dtype=np.uint8)
    tensors = {}
    for name, dims, kind, offset in infos:
        try:
            qtype = gguf.GGMLQuantizationType(kind)
        except ValueError:
            raise ValueError(f"the tensor {name!r} has unknown ggml type {kind}") from None
        block, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
        shape = tuple(int(d) for d in reversed(dims))  # row-major: outermost first
        if not shape or shape[-1] % block:
            raise ValueError(f"the tensor {name!r} of shape {shape} does not fill whole blocks")
        row_bytes = shape[-1] // block * block_bytes
        rows = int(np.prod(shape[:-1], dtype=np.int64))
        first, last = start + offset, start + offset + rows * row_bytes
        if last > len(data):
            raise ValueError(
                f"the tensor {name!r} runs past the end of the file (byte {last} of "
                f"{len(data)}): the file is truncated"
            )
        tensors[name] = (qtype, shape, data[first:last].reshape(*shape[:-1], row_bytes))
    return metadata, tensors


# ---------------------------------------------------------------------- translation
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
}

#: llama.cpp's standard metadata keys that must equal a hyper-parameter tpde derives (no
#: family of tpde has values of another width, or a partially rotated head, in GGUF):
#: checked, and a file where they differ is refused naming the key.
STANDARD_EQUAL = {
    "attention.value_length": "head_dim",
    "rope.dimension_count": "head_dim",
}

_NORMS = ("norm",)  # a role whose name ends so is a norm (its gain possibly stored 1 + w)


def _key_map(family: Family) -> dict[str, str]:
    """The family's GGUF metadata key (no prefix) → config.json key."""
    out = {short: family.keys[name][0] for short, name in STANDARD_KEYS.items()
           if name in family.keys}  # fmt: skip
    return {**out, **family.gguf.keys}


def gguf_config(metadata: dict, names, family: Family) -> tuple[dict, dict]:
    """(the config.json a GGUF file's metadata stands for, config key → the metadata key it
    came from) (module notes); a LoadError for a metadata key of the architecture that tpde
    does not read (named)."""
    spec, keys, equal = family.gguf, _key_map(family), _equal(family)
    prefix = f"{spec.architecture}."
    raw, source = {"model_type": spec.model_type}, {}
    for key in metadata:
        if not key.startswith(prefix):
            continue
        short = key[len(prefix) :]
        if short in keys:
            raw[keys[short]], source[keys[short]] = metadata[key], key
        elif short not in equal:
            raise LoadError(
                f"the metadata key {key!r} = {metadata[key]!r} changes the computation in a way "
                f"tpde does not implement for {spec.architecture} files (it reads "
                f"{', '.join(prefix + k for k in (*keys, *equal))}); tpde refuses "
                "rather than ignore it."
            )
    if "vocab_size" not in raw and metadata.get("tokenizer.ggml.tokens"):
        raw["vocab_size"] = len(metadata["tokenizer.ggml.tokens"])
    raw["tie_word_embeddings"] = "output.weight" not in names
    for target, origin in spec.derived.items():
        if origin in raw:
            raw[target] = raw[origin]
    return raw, source


def _equal(family: Family) -> dict[str, str]:
    """The metadata keys checked equal to a hyper-parameter: the standard ones and the
    family's."""
    return {**STANDARD_EQUAL, **family.gguf.equal}


def _check_equal(metadata: dict, family: Family, cfg, where: str) -> None:
    """The ``equal`` metadata keys, each equal to the hyper-parameter of the config record
    ``cfg`` it names."""
    prefix = f"{family.gguf.architecture}."
    for short, target in _equal(family).items():
        value, expected = metadata.get(prefix + short), getattr(cfg, target)
        if value is not None and value != expected:
            raise LoadError(
                f"{where}: the metadata key {prefix + short!r} = {value!r} differs from "
                f"{target} = {expected!r}; tpde implements only equal ones."
            )


_LAYER = re.compile(r"^blk\.(\d+)\.")


def _blocks(metadata: dict, stored: dict, architecture: str) -> int:
    """How many blocks to name: the file's block count, or its highest ``blk.N`` + 1."""
    count = metadata.get(f"{architecture}.block_count")
    count = count if isinstance(count, int) and not isinstance(count, bool) else 0
    found = [int(m.group(1)) + 1 for name in stored if (m := _LAYER.match(name))]
    return max([count, *found])


def _tensor_names(family: Family, blocks: int) -> dict[str, str]:
    """The file's tensor stem → the checkpoint's (gguf-py's ``TensorNameMap``)."""
    gguf = require("gguf")
    arch = {name: arch for arch, name in gguf.MODEL_ARCH_NAMES.items()}
    table = gguf.get_tensor_name_map(arch[family.gguf.architecture], blocks)
    out = {}
    for template in family.names.values():
        per_layer = "{l}" in template
        for l in range(blocks) if per_layer else [None]:
            stem = template.format(l=l) if per_layer else template
            stored = table.get_name(stem)
            if stored is not None:
                out[stored] = stem
    return out


def unpermute_rotary_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's rotary row permutation of a query or key weight (module notes).

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


def dequantised(path: Path, name: str, qtype, raw) -> np.ndarray:
    """Tensor ``name`` of a GGUF file as a writeable float32 array (``gguf``'s own
    dequantisation), refused where the type is unknown or a value not finite."""
    gguf = require("gguf")
    try:
        array = gguf.quants.dequantize(raw, qtype)
    except NotImplementedError:
        raise LoadError(
            f"{path.name}: the tensor {name!r} is stored as {qtype.name}, a quantisation type "
            "the gguf package cannot dequantise."
        ) from None
    if not array.flags.writeable:  # F32 tensors are views of the read-only file
        array = array.copy()
    if not np.isfinite(array).all():
        raise LoadError(f"{path.name}: the tensor {name!r} holds NaN or infinite values.")
    return np.asarray(array, dtype=np.float32)


def _renamer(to_checkpoint: dict[str, str]):
    """A message naming checkpoint tensors → naming the file's (each with its checkpoint
    name after it)."""
    pairs = [(hf, stored) for stored, hf in to_checkpoint.items()]
    pairs.sort(key=lambda pair: -len(pair[0]))  # "…layers.1" after "…layers.10"

    def rename(message: str) -> str:
        for hf, stored in pairs:
            for part in ("weight", "bias"):
                message = message.replace(f"'{hf}.{part}'", f"'{stored}.{part}' ({hf}.{part})")
        return message

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


def _open_container(path: Path) -> tuple[dict, dict]:
    require("gguf")
    try:
        return read_container(path)
    except ValueError as err:
        raise LoadError(
            f"{path.name} is not a readable GGUF file ({err}); check that it was written "
            "completely (e.g. compare its size with the original)."
        ) from None


def open_gguf(path: Path) -> Source:
    """The GGUF file as a :class:`~tpde.pretrained._checkpoint.Source` (module notes)."""
    metadata, stored = _open_container(path)
    family = gguf_family(metadata.get("general.architecture"), path.name)
    try:
        raw, source = gguf_config(metadata, set(stored), family)
    except LoadError as err:
        raise LoadError(f"{path.name} (GGUF metadata read as config.json): {err}") from None
    to_checkpoint = _tensor_names(family, _blocks(metadata, stored, family.gguf.architecture))
    by_name = {}
    for name in stored:
        stem, _, part = name.rpartition(".")
        by_name[f"{to_checkpoint[stem]}.{part}" if stem in to_checkpoint else name] = name
    shapes = {name: stored[gguf_name][1] for name, gguf_name in by_name.items()}
    raw.update(_bias_keys(family, shapes))

    def read(cfg, expected, dtype, device):
        _check_equal(metadata, family, cfg, path.name)
        return _read(path, stored, by_name, expected, family, cfg, dtype, device)

    return Source(
        where=path.name,
        raw=raw,
        shapes=shapes,
        read=read,
        tokenizer=lambda: _tokenizer(path, metadata, family),
        key_name=lambda key: _metadata_key(path, source, key),
        said="the file holds",
        rename=_renamer(to_checkpoint),
        context=f"{path.name} (GGUF metadata read as config.json): ",
        bytes=path.stat().st_size,
    )


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
    return f"{path.name}: the metadata key {source[key]!r}" if key in source else key


def _read(path, stored, by_name, expected, family, cfg, dtype, device) -> dict:
    """The tensors of ``expected`` (checkpoint names), dequantised and un-permuted."""
    spec, out = family.gguf, {}
    for name, (role, _, _, _) in expected.items():
        qtype, _, data = stored[by_name[name]]
        array = dequantised(path, by_name[name], qtype, data)
        if role in spec.permuted:
            array = unpermute_rotary_rows(array, getattr(cfg, spec.permuted[role]))
        if spec.stored_gain_offset and role.endswith(_NORMS):
            array = array - np.float32(spec.stored_gain_offset)
        out[name] = torch.from_numpy(array).to(dtype=dtype, device=device)
    return out


# ---------------------------------------------------------------------- tokenizer
_TOKENIZERS: dict = {}


def _tokenizer(path: Path, metadata: dict, family: Family):
    """The file's tokenizer (None without ``tokenizer.ggml.tokens``), built once per file
    (path, size, modification time) and process: Gemma's 262144 tokens take ~12 s."""
    if not metadata.get("tokenizer.ggml.tokens"):
        return None
    fields = {k.removeprefix("tokenizer.ggml."): v for k, v in metadata.items()
              if k.startswith("tokenizer.ggml.")}  # fmt: skip
    if family.gguf.tokenizer == "bpe":
        from tpde.pretrained._bpe import build_tokenizer as build
    else:
        from tpde.pretrained._spm import build_gemma_tokenizer as build
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, family.gguf.tokenizer)
    if key not in _TOKENIZERS:
        try:
            _TOKENIZERS[key] = build(fields, path.name)
        except ValueError as err:
            raise LoadError(str(err)) from None
    return _TOKENIZERS[key]
