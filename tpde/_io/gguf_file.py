"""The GGUF container (llama.cpp's file format) read as far as its header: the metadata and,
per tensor, its ggml type, shape and bytes — every part checked before any tensor is
dequantised, so that a truncated or corrupt file is refused whole, nothing half-built —, and
its tensors dequantised by the ``gguf`` package. A file-format reader, as ``safetensors`` is
for a folder: it knows nothing of Transformers (:mod:`tpde.pretrained._gguf` translates).

**The layout** (little-endian, version 2 or 3): the magic ``GGUF``, the version (uint32), the
tensor and key–value counts (uint64), the key–value pairs (key: uint64 length + UTF-8 bytes;
value type: uint32; value), the tensor infos (name; n_dims: uint32, at most 4; the dims,
innermost first: uint64 each; ggml type: uint32; offset: uint64, a multiple of the
alignment), then the tensor data from the next multiple of ``general.alignment`` (default
32) on. Specification: ggml's docs/gguf.md.

**Checks** (each a ValueError saying what is wrong, the caller adding the file's path): the
magic and the version; every string and array inside the file; no key and no tensor name
twice (llama.cpp refuses both); a known ggml type; at most 4 dimensions, each ≥ 1, the
innermost a whole number of the type's blocks; the offset aligned; the data inside the file.
Sizes are computed with Python integers, so no corrupt dimension overflows them.

The ``gguf`` package's ``GGUFReader`` builds a numpy view per part of every field, ~1 s per
10⁵ strings (a vocabulary's tokens and merges take 3–8 s); this reader decodes the same
header with :mod:`struct` in a few hundredths of a second and hands each tensor's bytes as a
read-only numpy view of the memory-mapped file.

**Dequantisation**: every type the ``gguf`` package dequantises (F32, F16, BF16, Q4_0 … Q8_0,
the K-quants, the IQ types; float32), :func:`check_types` refusing a file that holds any
other before a tensor is read, :func:`dequantise` any value that is not finite.
"""

from __future__ import annotations

import math
import mmap
import struct
from pathlib import Path

import numpy as np

__all__ = [
    "MAGIC",
    "Unread",
    "check_types",
    "dequantisable",
    "dequantise",
    "read_container",
    "release_pages",
]

MAGIC = b"GGUF"
MAX_DIMS = 4  # GGML_MAX_DIMS
# GGUFValueType: 0 uint8, 1 int8, 2 uint16, 3 int16, 4 uint32, 5 int32, 6 float32, 7 bool,
# 8 string, 9 array, 10 uint64, 11 int64, 12 float64.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}  # fmt: skip
_STRING, _ARRAY = 8, 9
_LENGTH = struct.Struct("<Q")


class Unread:
    """An array walked (its strings' lengths checked against the file) but not decoded:
    what :func:`read_container` puts in the metadata for the vocabulary's arrays with
    ``vocabulary=False``. ``len`` is the array's length (a vocabulary's size), and nothing
    else is read of it."""

    __slots__ = ("count",)

    def __init__(self, count: int):
        self.count = count

    def __len__(self) -> int:
        return self.count


class _Cursor:
    """Little-endian reads from a buffer, with the position kept; ``decode`` False: arrays
    walked, not decoded (:class:`Unread`)."""

    def __init__(self, buffer):
        self.buffer, self.pos, self.decode = buffer, 0, True

    def scalar(self, fmt: str):
        (value,) = struct.unpack_from(fmt, self.buffer, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def _room(self, size: int, what: str) -> None:
        if self.pos + size > len(self.buffer):
            raise struct.error(f"{what} of {size} bytes runs past the end of the file")

    def string(self) -> str:
        size = self.scalar("<Q")
        self._room(size, "a string")
        raw = bytes(self.buffer[self.pos : self.pos + size])
        self.pos += size
        return raw.decode("utf-8", errors="replace")

    def strings(self, count: int) -> list[str] | Unread:
        """``count`` strings in a row, as :meth:`string` reads each, in one loop without
        its calls (a vocabulary's 2.6·10⁵ tokens: 0.2 s, against 0.9 s)."""
        buffer, pos, end, out = self.buffer, self.pos, len(self.buffer), []
        unpack, decode = _LENGTH.unpack_from, self.decode
        for _ in range(count):
            (size,) = unpack(buffer, pos)
            pos += 8
            if pos + size > end:
                raise struct.error(f"a string of {size} bytes runs past the end of the file")
            if decode:
                out.append(buffer[pos : pos + size].decode("utf-8", errors="replace"))
            pos += size
        self.pos = pos
        return out if decode else Unread(count)

    def value(self, kind: int):
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, count = self.scalar("<I"), self.scalar("<Q")
            if item in _SCALARS:  # one unpack for the whole array
                self._room(count * struct.calcsize(_SCALARS[item]), f"an array of {count}")
                if not self.decode:
                    self.pos += count * struct.calcsize(_SCALARS[item])
                    return Unread(count)
                fmt = f"<{count}{_SCALARS[item][1]}"
                values = struct.unpack_from(fmt, self.buffer, self.pos)
                self.pos += struct.calcsize(fmt)
                return list(values)
            if item not in (_STRING, _ARRAY):
                raise struct.error(f"unknown metadata value type {item}")
            self._room(count * 8, f"an array of {count} strings")  # ≥ 8 bytes each
            if item == _STRING:
                return self.strings(count)
            return [self.value(item) for _ in range(count)]
        if kind not in _SCALARS:
            raise struct.error(f"unknown metadata value type {kind}")
        return self.scalar(_SCALARS[kind])


def _header(cursor: _Cursor, vocabulary: bool = True) -> tuple[dict, list]:
    """(metadata, tensor infos (name, dims innermost first, type, offset)) after the magic;
    ``vocabulary`` False: the ``tokenizer.ggml.*`` arrays :class:`Unread`."""
    version = cursor.scalar("<I")
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version} (this reader knows 2 and 3, little-endian)")
    n_tensors, n_values = cursor.scalar("<Q"), cursor.scalar("<Q")
    metadata = {}
    for _ in range(n_values):
        key = cursor.string()
        if key in metadata:
            raise ValueError(f"the metadata key {key!r} appears twice")
        cursor.decode = vocabulary or not key.startswith("tokenizer.ggml.")
        metadata[key] = cursor.value(cursor.scalar("<I"))
    infos, names = [], set()
    for _ in range(n_tensors):
        name, n_dims = cursor.string(), cursor.scalar("<I")
        if name in names:
            raise ValueError(f"the tensor {name!r} appears twice")
        if not 1 <= n_dims <= MAX_DIMS:
            raise ValueError(f"the tensor {name!r} has {n_dims} dimensions (GGUF: 1 to 4)")
        dims = [cursor.scalar("<Q") for _ in range(n_dims)]
        infos.append((name, dims, cursor.scalar("<I"), cursor.scalar("<Q")))
        names.add(name)
    return metadata, infos


def _tensor(data: np.ndarray, start: int, alignment: int, info) -> tuple:
    """(ggml type, shape row-major, raw bytes (rows, row bytes)) of one tensor info."""
    import gguf

    name, dims, kind, offset = info
    try:
        qtype = gguf.GGMLQuantizationType(kind)
    except ValueError:
        raise ValueError(f"the tensor {name!r} has unknown ggml type {kind}") from None
    block, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    shape = tuple(int(d) for d in reversed(dims))  # row-major: outermost first
    if min(shape) < 1:
        raise ValueError(f"the tensor {name!r} has shape {shape}, a dimension 0")
    if shape[-1] % block:
        raise ValueError(
            f"the tensor {name!r} of shape {shape} ({qtype.name}) does not fill whole "
            f"blocks of {block}"
        )
    if offset % alignment:
        raise ValueError(
            f"the tensor {name!r} starts at offset {offset}, not a multiple of the "
            f"alignment {alignment}"
        )
    row_bytes = shape[-1] // block * block_bytes
    first = start + offset
    last = first + math.prod(shape[:-1]) * row_bytes
    if last > len(data):
        raise ValueError(
            f"the tensor {name!r} runs past the end of the file (byte {last} of "
            f"{len(data)}): the file is truncated"
        )
    return qtype, shape, data[first:last].reshape(*shape[:-1], row_bytes)


def read_container(path: Path, *, vocabulary: bool = True) -> tuple[dict, dict]:
    """(metadata, tensors) of a GGUF file (module notes).

    ``tensors`` maps each name to (ggml type, shape in row-major order, raw bytes as a uint8
    numpy view of the memory-mapped file, (rows, bytes per row)). ``vocabulary`` False: the
    arrays of the ``tokenizer.ggml.*`` keys are checked and left :class:`Unread` (their
    lengths only: Gemma-3's 262k tokens, scores and types held 48 MiB as Python objects, 24
    MiB the rest). Raises ValueError with what is wrong (module notes) — the caller adds the
    file's path.
    """
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
        metadata, infos = _header(cursor, vocabulary)
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
    return metadata, {info[0]: _tensor(data, start, alignment, info) for info in infos}


def release_pages(data: np.ndarray) -> None:
    """Drop the pages of the memory-mapped file that ``data`` (a tensor's bytes from
    :func:`read_container`) views from this process's resident set: ``madvise(MADV_DONTNEED)``
    on the whole read-only mapping, whose next access reads the same bytes again from the
    page cache, so only the resident set changes. A reader of one block at a time calls it
    once the block's tensors are copied out, so that the pages it touched do not accumulate
    with depth. Nothing where the platform has no ``madvise``."""
    base = data
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    if isinstance(base, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        base.madvise(mmap.MADV_DONTNEED)


def dequantisable(qtype) -> bool:
    """Whether the ``gguf`` package dequantises ggml type ``qtype`` (tried on one block)."""
    import gguf

    try:
        gguf.quants.dequantize(np.zeros((1, gguf.GGML_QUANT_SIZES[qtype][1]), np.uint8), qtype)
    except NotImplementedError:
        return False
    return True


def _undequantisable(path, name: str, qtype) -> ValueError:
    import gguf

    readable = [t.name for t in gguf.GGMLQuantizationType if dequantisable(t)]
    return ValueError(
        f"{path}: the tensor {name!r} is stored as {qtype.name}, a quantisation type the gguf "
        f"package cannot dequantise (it reads {', '.join(readable)}); re-quantise the file to "
        "one of those (llama.cpp's llama-quantize, e.g. to Q8_0) or convert it from the "
        "original checkpoint."
    )


def check_types(path, tensors: dict) -> None:
    """A ValueError naming the first tensor of ``tensors`` (name → (ggml type, …), as
    :func:`read_container` gives them) whose type the ``gguf`` package cannot dequantise
    (Q8_1, Q8_K, the integer types, F64 in gguf 0.19), before any tensor is read."""
    kinds = {}
    for name, (qtype, *_) in tensors.items():
        kinds.setdefault(qtype, name)
    for qtype, name in kinds.items():
        if not dequantisable(qtype):
            raise _undequantisable(path, name, qtype)


def dequantise(path, name: str, qtype, raw) -> np.ndarray:
    """Tensor ``name`` of the GGUF file ``path`` (its ggml type and raw bytes, as
    :func:`read_container` gives them) as a writeable float32 array (``gguf``'s own
    dequantisation); a ValueError where the type is unknown or a value not finite."""
    import gguf

    try:
        array = gguf.quants.dequantize(raw, qtype)
    except NotImplementedError:
        raise _undequantisable(path, name, qtype) from None
    if not array.flags.writeable:  # F32 tensors are views of the read-only file
        array = array.copy()
    if not np.isfinite(array).all():
        raise ValueError(f"{path}: the tensor {name!r} holds NaN or infinite values.")
    return np.asarray(array, dtype=np.float32)
