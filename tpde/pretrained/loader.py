"""``tpde.pretrained.load``: any checkpoint on disk as a :class:`Transformer` of tpde fields.

A Hugging Face folder (config.json, ``*.safetensors`` single or sharded with
``model.safetensors.index.json``, tokenizer.json where present) or a GGUF file, read with
``safetensors``, ``gguf`` and ``tokenizers`` (extra ``tpde[real]``); never the hub, never
transformers. Everything is checked before anything is built: the config key by key
(:mod:`tpde.pretrained._build`), then every tensor's name and shape from the files' headers,
then the tensors are read.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from tpde._validation import check_float_dtype
from tpde.pretrained import _build, _folder
from tpde.pretrained._folder import LoadError
from tpde.pretrained.architectures import architecture_for
from tpde.pretrained.transformer import Transformer

__all__ = ["LoadError", "load"]


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
        Its ``architecture`` names the family
        (:data:`~tpde.pretrained.architectures.ARCHITECTURES`).

    Raises
    ------
    FileNotFoundError
        Nothing at ``path``.
    LoadError (a ValueError)
        No config.json or weights; an unknown ``model_type`` (the known ones listed); a
        config key tpde cannot honour (named); a tensor missing, unexpected or of the wrong
        shape (named, with both shapes); a missing shard; a truncated or corrupt file.
    GGUFError (a ValueError)
        A GGUF file that cannot be read as a model (:mod:`tpde.pretrained.gguf_llama`).
    TypeError
        ``path`` is not a path; ``dtype`` not floating, or half precision on the CPU.
    """
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path must be a str or a Path (a model folder or a .gguf file); "
                        f"received {path!r}.")  # fmt: skip
    device = check_dtype_device(dtype, device)
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no model folder or GGUF file at {path}.")
    if path.is_file():
        from tpde.pretrained.gguf_model import load_gguf

        return load_gguf(path, dtype, device)
    return _load_folder(path, dtype, device)


def _load_folder(folder: Path, dtype, device) -> Transformer:
    raw = _folder.read_config(folder)
    if "model_type" not in raw:
        raise LoadError(f"{folder / 'config.json'} has no model_type: tpde cannot tell the "
                        "architecture.")  # fmt: skip
    entry = architecture_for(raw["model_type"])
    try:
        cfg = _build.read_hyper(raw, entry)
    except LoadError as err:
        raise LoadError(f"{folder}: {err}") from None
    found, where = _folder.tensor_shapes(folder)
    prefix = _prefix(found, entry)
    expected = _build.expected_shapes(cfg, entry, raw, prefix, found)
    _build.check_names(expected, found, entry, prefix, folder)
    tensors = _folder.read_tensors(expected, where, dtype, device)
    tokenizer = _folder.read_tokenizer(folder)
    return _build.build(cfg, entry, expected, tensors, tokenizer)


def _prefix(found: dict, entry) -> str:
    """The prefix under which the checkpoint stores the embedding (a task model's base)."""
    for prefix in entry.prefixes:
        if f"{prefix}{entry.names['embed']}.weight" in found:
            return prefix
    return entry.prefixes[0]
