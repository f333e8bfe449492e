"""GGUF files of the architectures in :data:`~tpde.pretrained.architectures.GGUF_ARCHITECTURES`
(Gemma-3), read through the same entry and builder as a Hugging Face folder.

The file's metadata becomes a config.json (``<arch>.<key>`` → the entry's key, the rest
from the entry's documented defaults), its tensor names the checkpoint's; then, exactly as
for a folder, the config is checked key by key, every expected tensor's name and shape is
compared with the file's directory (missing, unexpected, wrong shape: each named), and only
then are the tensors dequantised (``gguf.quants.dequantize``: Q4_K, Q5_0, Q6_K, Q8_0, F32 …,
float32) and the model built. The tokenizer is built from the file's SentencePiece
vocabulary (:mod:`tpde.pretrained._spm`, once per file and process: ~12 s for Gemma's 262144
tokens); a file without one gives a model whose :meth:`~tpde.pretrained.Transformer.embed`
takes token ids.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

from tpde.pretrained import _build
from tpde.pretrained._folder import LoadError
from tpde.pretrained.architectures import GGUF_ARCHITECTURES, architecture_for
from tpde.pretrained.gguf_llama import dequantised
from tpde.pretrained.transformer import Transformer

__all__ = ["gguf_config", "load_gguf_entry"]

_LAYER = re.compile(r"^blk\.(\d+)\.(.+)$")


def gguf_config(metadata: dict, names, architecture: str) -> dict:
    """The config.json that a GGUF file's metadata stands for (module notes); a LoadError
    for a metadata key of the architecture that tpde does not read (named)."""
    spec = GGUF_ARCHITECTURES[architecture]
    raw = {"model_type": spec.model_type}
    prefix = f"{architecture}."
    for key in metadata:
        if not key.startswith(prefix):
            continue
        short = key[len(prefix) :]
        if short in spec.keys:
            raw[spec.keys[short]] = metadata[key]
        elif short not in spec.equal:
            raise LoadError(
                f"the metadata key {key!r} = {metadata[key]!r} changes the computation in a way "
                f"tpde does not implement for {architecture} files (it reads "
                f"{', '.join(prefix + k for k in (*spec.keys, *spec.equal))}); tpde refuses "
                "rather than ignore it."
            )
    if "vocab_size" not in raw and metadata.get("tokenizer.ggml.tokens"):
        raw["vocab_size"] = len(metadata["tokenizer.ggml.tokens"])
    raw["tie_word_embeddings"] = "output.weight" not in names
    for target, source in spec.derived.items():
        if source in raw:
            raw[target] = raw[source]
    for short, target in spec.equal.items():
        value = metadata.get(prefix + short)
        if value is not None and value != raw.get(target):
            raise LoadError(
                f"the metadata key {prefix + short!r} = {value!r} differs from {target} = "
                f"{raw.get(target)!r}; tpde implements only equal ones."
            )
    return raw


def _gguf_names(message: str, layers: int, architecture: str) -> str:
    """A message about checkpoint names, with each one's GGUF name in front of it."""
    for gguf_stem, hf_stem in GGUF_ARCHITECTURES[architecture].tensors.items():
        for l in range(layers) if "{l}" in hf_stem else [None]:
            hf, stored = hf_stem.format(l=l), gguf_stem.format(l=l)
            for part in ("weight", "bias"):
                message = message.replace(f"'{hf}.{part}'", f"'{stored}.{part}' ({hf}.{part})")
    return message


def _renamed(name: str, architecture: str) -> str:
    """The Hugging Face name of a GGUF tensor name (the name itself when unknown)."""
    table = GGUF_ARCHITECTURES[architecture].tensors
    stem, dot, part = name.rpartition(".")
    if not dot:
        return name
    match = _LAYER.match(stem)
    key = f"blk.{{l}}.{match.group(2)}" if match else stem
    if key not in table:
        return name
    return table[key].format(l=match.group(1) if match else "") + f".{part}"


def load_gguf_entry(path: Path, metadata: dict, stored: dict, dtype, device) -> Transformer:
    """The Transformer of a GGUF file whose architecture has a GGUF entry (module notes).

    Raises
    ------
    LoadError
        A config key tpde cannot honour or a missing one (named), a tensor missing,
        unexpected or of the wrong shape (named, with both shapes), a quantisation type the
        ``gguf`` package cannot dequantise (named), NaN or infinite weights.
    """
    architecture = metadata["general.architecture"]
    entry = architecture_for(GGUF_ARCHITECTURES[architecture].model_type)
    try:
        raw = gguf_config(metadata, set(stored), architecture)
        cfg = _build.read_hyper(raw, entry)
    except LoadError as err:
        raise LoadError(f"{path.name} (GGUF metadata read as config.json): {err}") from None
    by_name = {_renamed(name, architecture): name for name in stored}
    found = {name: stored[gguf_name][1] for name, gguf_name in by_name.items()}
    expected = _build.expected_shapes(cfg, entry, raw, "")
    try:
        _build.check_names(expected, found, entry, "", path.name)
    except LoadError as err:
        raise LoadError(_gguf_names(str(err), cfg.layers, architecture)) from None
    offset = GGUF_ARCHITECTURES[architecture].stored_gain_offset
    tensors = {}
    for name, (role, _, _, _) in expected.items():
        qtype, _, raw = stored[by_name[name]]
        array = dequantised(path, by_name[name], qtype, raw, LoadError)
        if offset and role in _build._NORMS:
            array = array - np.float32(offset)
        tensors[name] = torch.from_numpy(array).to(dtype=dtype, device=device)
    return _build.build(cfg, entry, expected, tensors, tokenizer=_tokenizer(path, metadata))


def _tokenizer(path: Path, metadata: dict):
    """The file's tokenizer (None without ``tokenizer.ggml.tokens``), cached per file."""
    if not metadata.get("tokenizer.ggml.tokens"):
        return None
    stat = path.stat()
    return _cached_tokenizer(str(path.resolve()), stat.st_size, stat.st_mtime_ns, metadata)


_TOKENIZERS: dict = {}


def _cached_tokenizer(where: str, size: int, mtime: int, metadata: dict):
    key = (where, size, mtime)
    if key not in _TOKENIZERS:
        from tpde.pretrained._spm import build_gemma_tokenizer

        fields = {k.removeprefix("tokenizer.ggml."): v for k, v in metadata.items()
                  if k.startswith("tokenizer.ggml.")}  # fmt: skip
        try:
            _TOKENIZERS[key] = build_gemma_tokenizer(fields, Path(where).name)
        except ValueError as err:
            raise LoadError(str(err)) from None
    return _TOKENIZERS[key]
