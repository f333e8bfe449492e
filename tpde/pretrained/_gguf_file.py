"""The GGUF container: metadata and tensor directory, read in one pass over the header.

GGUF (little-endian, version 2 or 3): the magic ``GGUF``, the version (uint32), the tensor
and key–value counts (uint64), the key–value pairs (key: uint64 length + UTF-8 bytes; value
type: uint32; value), the tensor infos (name; n_dims: uint32; the dims, innermost first:
uint64 each; ggml type: uint32; offset: uint64), then the tensor data from the next multiple
of ``general.alignment`` (default 32) on. Specification: ggml's docs/gguf.md.

The ``gguf`` package's ``GGUFReader`` builds a numpy view per part of every field, ~1 s per
10⁵ strings (a vocabulary's tokens and merges take 3–8 s); this reader decodes the same
header with :mod:`struct` in a few hundredths of a second and hands each tensor's bytes, as
a read-only numpy view of the memory-mapped file, to ``gguf.quants.dequantize``.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

import numpy as np

__all__ = ["read_container"]

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
