"""``tpde.pretrained.load``: any checkpoint on disk as a :class:`Transformer` of tpde fields.

One road: a checkpoint (a Hugging Face folder, :mod:`tpde.pretrained._folder`, or a GGUF
file, :mod:`tpde.pretrained._gguf`) → one :class:`~tpde.pretrained._checkpoint.Source` →
one config record (:func:`tpde.pretrained._config.read_hyper`) of one family entry
(:mod:`tpde.pretrained.families`) → one :class:`Transformer` (:mod:`tpde.pretrained._build`).
Read with ``safetensors``, ``gguf`` and ``tokenizers`` (extra ``tpde[real]``); never the
hub, never transformers. Everything is checked before anything is built: the config key by
key, then every tensor's name and shape from the files' headers, then the tensors are read.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from tpde._validation import check_float_dtype
from tpde.pretrained import _build
from tpde.pretrained._checkpoint import LoadError, Source
from tpde.pretrained._config import Naming, family_for, read_hyper
from tpde.pretrained.transformer import Transformer

__all__ = ["LoadError", "load", "read_checkpoint"]


def check_device(device) -> torch.device:
    """``device`` as a torch.device that exists on this machine, or a clear error."""
    try:
        device = torch.device(device)
    except (TypeError, RuntimeError):
        raise ValueError(
            f"device must be a torch device such as 'cpu' or 'cuda:0'; received {device!r}."
        ) from None
    if device.type == "meta":
        raise ValueError("device 'meta' holds no values; load the weights on 'cpu' or 'cuda'.")
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = device.index or 0
        if index >= count:
            raise ValueError(
                f"device {str(device)!r} is not available: this machine has {count} CUDA "
                "device(s). Use device='cpu'."
            )
    return device


def check_dtype_device(dtype, device) -> torch.device:
    """The checked device; float16/bfloat16 refused on the CPU (TypeError)."""
    check_float_dtype(dtype)
    device = check_device(device)
    if dtype in (torch.float16, torch.bfloat16) and device.type == "cpu":
        raise TypeError(
            f"dtype {dtype} was requested on the CPU, where half-precision matrix products are "
            "slow or missing; use torch.float32 or torch.float64 on the CPU, or pass "
            "device='cuda' for half precision."
        )
    return device


def load(path, dtype: torch.dtype = torch.float32, device="cpu") -> Transformer:
    """A pretrained Transformer from disk, as tpde fields.

    Parameters
    ----------
    path : str or Path
        A Hugging Face model folder, or a ``.gguf`` file.
    dtype : torch.float32 (default) or torch.float64 (half precision only on CUDA)
    device : str or torch.device (default the CPU)

    Returns
    -------
    Transformer
        Its ``architecture`` names the family (:data:`~tpde.pretrained.ARCHITECTURES`).

    Raises
    ------
    FileNotFoundError
        Nothing at ``path``.
    LoadError (a ValueError)
        No config.json or weights; an unknown ``model_type`` or GGUF architecture (named,
        with the path, the known ones listed); a config or GGUF metadata key tpde cannot
        honour (named); a tensor missing, unexpected or of the wrong shape (named, with
        both shapes); a quantisation type the ``gguf`` package cannot dequantise; a missing
        shard; a truncated or corrupt file.
    TypeError
        ``path`` is not a path; ``dtype`` not floating, or half precision on the CPU.
    """
    device = check_dtype_device(dtype, device)
    source = _open(path)
    cfg, entry, expected, tensors = _read(source, dtype, device)
    return _build.build(cfg, entry, expected, tensors, source.tokenizer())


def read_checkpoint(path, dtype: torch.dtype = torch.float32, device="cpu"):
    """The config record and the state dict that :func:`load` builds its model of.

    Returns
    -------
    (ModelConfig, dict)
        The checked hyper-parameters, and every tensor the model reads by its checkpoint
        name (a Hugging Face folder's; a GGUF file's translated, its rotary rows
        un-permuted and its norm gains as the folder stores them), in ``dtype``.

    Raises
    ------
    As :func:`load`.
    """
    device = check_dtype_device(dtype, device)
    cfg, _, _, tensors = _read(_open(path), dtype, device)
    return cfg, tensors


def _open(path) -> Source:
    """The checkpoint at ``path`` read as far as its headers, by the reader of its kind."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path must be a str or a Path (a model folder or a .gguf file); "
                        f"received {path!r}.")  # fmt: skip
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no model folder or GGUF file at {path}.")
    if path.is_file():
        from tpde.pretrained._gguf import open_gguf as open_source
    else:
        from tpde.pretrained._folder import open_folder as open_source
    return open_source(path)


def _read(source: Source, dtype, device) -> tuple:
    """(config record, family entry, expected names, tensors) of a checkpoint read as far as
    its headers: with its tokenizer, the arguments of :func:`tpde.pretrained._build.build`."""
    raw = source.raw
    entry = family_for(raw.get("model_type"), source.where)
    try:
        entry = entry if entry.variant is None else entry.variant(raw)  # Falcon's layouts
        cfg = read_hyper(raw, entry, Naming(source.key_name, source.said))
    except LoadError as err:
        raise LoadError(f"{source.context}{err}") from None
    # the prefix under which the checkpoint stores the embedding (a task model's base)
    stored = [p for p in entry.prefixes if f"{p}{entry.names['embed']}.weight" in source.shapes]
    prefix = (stored or entry.prefixes)[0]
    expected = _build.expected_shapes(cfg, entry, raw, prefix, source.shapes)
    try:
        _build.check_names(expected, source.shapes, entry, prefix, source.where)
    except LoadError as err:
        if source.rename is None:
            raise
        raise LoadError(source.rename(str(err))) from None
    return cfg, entry, expected, source.read(cfg, expected, dtype, device)
