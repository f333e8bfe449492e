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

import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from tpde._validation import check_float_dtype
from tpde.pretrained import _build
from tpde.pretrained._checkpoint import LoadError, Source
from tpde.pretrained._config import Naming, family_for, read_hyper
from tpde.pretrained.transformer import Transformer

__all__ = ["CheckpointSize", "LoadError", "checkpoint_size", "load", "read_checkpoint"]


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


def load(
    path,
    dtype: torch.dtype = torch.float32,
    device="cpu",
    *,
    max_memory="auto",
    gguf_window=None,
) -> Transformer:
    """A pretrained Transformer from disk, as tpde fields.

    Parameters
    ----------
    path : str or Path
        A Hugging Face model folder, or a ``.gguf`` file.
    dtype : torch.float32 (default) or torch.float64 (half precision only on CUDA)
    device : str or torch.device (default the CPU)
    max_memory : "auto" (default), a number of bytes, or None
        The most bytes the model's tensors may take in ``dtype``
        (:func:`checkpoint_size`'s ``total``), checked from the headers before any tensor
        is read: "auto" is this machine's physical memory (no check where the platform
        does not say), None no check. A larger model is refused naming what it needs; its
        weights-only scores stream it (:func:`~tpde.pretrained.weight_scores`).
    gguf_window : None (default), "llama.cpp" or "file"
        How to read a GGUF file's sliding window that llama.cpp computes without while a
        Hugging Face config applies it: ``attention.sliding_window`` of phi3 files, which
        llama.cpp turns off (Phi-3-mini-4k's 2047 of 4096 positions; llama.cpp PR 13676),
        and of llama (Mistral's), qwen2, qwen3 and starcoder2 files, which it does not read
        (Mistral-7B-v0.1's 4096 of 32768): "llama.cpp", without it, as llama.cpp and
        transformers' GGUF loader compute; "file", applied on every layer as such a
        checkpoint's config.json does (p_i − p_j < w; a llama file read as Mistral, a Qwen
        one with ``use_sliding_window`` and ``max_window_layers`` 0). None reads it as
        "llama.cpp" and warns (UserWarning) where the two differ within the file's context.
        Other files have one reading and a folder's config.json says: for them it must be
        None (a ValueError).

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
    MemoryError
        The model's tensors need more than ``max_memory`` bytes (the bytes named).
    TypeError
        ``path`` is not a path; ``dtype`` not floating, or half precision on the CPU.
    ValueError
        ``gguf_window`` not one of its values, or given for a folder.
    """
    device = check_dtype_device(dtype, device)
    source = _open(path, gguf_window)
    cfg, entry, expected, tensors = _read(source, dtype, device, max_memory)
    return _build.build(cfg, entry, expected, tensors, source.tokenizer())


def read_checkpoint(
    path, dtype: torch.dtype = torch.float32, device="cpu", *, max_memory="auto", gguf_window=None
):
    """The config record and the state dict that :func:`load` builds its model of
    (``max_memory`` and ``gguf_window`` as :func:`load`'s).

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
    cfg, _, _, tensors = _read(_open(path, gguf_window), dtype, device, max_memory)
    return cfg, tensors


@dataclass(frozen=True)
class CheckpointSize:
    """Result of :func:`checkpoint_size`: bytes, from the headers alone.

    Attributes
    ----------
    dtype : the dtype the sizes are counted in.
    total : every tensor :func:`load` reads, in ``dtype`` (what the loaded model holds).
    blocks : (B,) each stored block's tensors (a layer's; ALBERT: each shared block once).
    attention : (B,) each stored block's attention tensors (Q, K, V, O and QK-norms): what
        :func:`~tpde.pretrained.weight_scores` holds at once.
    file : the checkpoint's files on disk (quantised GGUF blocks stay small there).
    """

    dtype: torch.dtype
    total: int
    blocks: tuple[int, ...]
    attention: tuple[int, ...]
    file: int

    @property
    def largest_block(self) -> int:
        """The largest stored block's bytes: one layer's size."""
        return max(self.blocks)


def checkpoint_size(path, dtype: torch.dtype = torch.float64) -> CheckpointSize:
    """The memory a checkpoint's tensors take in ``dtype``, read from its headers (no tensor
    is read): the whole model, each layer, each layer's attention, the files.

    Parameters
    ----------
    path : a Hugging Face model folder or a ``.gguf`` file (as :func:`load`).
    dtype : the floating dtype to count in (default float64, the structure scores' dtype).

    Returns
    -------
    :class:`CheckpointSize`.
    """
    check_float_dtype(dtype)
    source = _open(path, window_matters=False)
    cfg, _, expected = plan(source)
    return _size(source, cfg, expected, dtype)


def _size(source: Source, cfg, expected: dict, dtype) -> CheckpointSize:
    item = dtype.itemsize
    blocks, attention = [0] * cfg.blocks, [0] * cfg.blocks
    total = 0
    for role, block, _, shape in expected.values():
        size = math.prod(shape) * item
        total += size
        if block is not None:
            blocks[block] += size
            if role in _build.ATTENTION_ROLES:
                attention[block] += size
    return CheckpointSize(dtype, total, tuple(blocks), tuple(attention), source.bytes)


def physical_memory() -> int | None:
    """This machine's physical memory in bytes (POSIX ``sysconf``; psutil where present
    instead), or None where neither says."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        pass
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.virtual_memory().total)


def check_memory(source: Source, expected: dict, dtype, max_memory) -> None:
    """MemoryError where the tensors ``expected`` need more than ``max_memory`` bytes in
    ``dtype`` ("auto": :func:`physical_memory`; None: no check)."""
    if max_memory is None:
        return
    what = "max_memory"
    if isinstance(max_memory, str) and max_memory == "auto":
        max_memory, what = physical_memory(), "this machine's physical memory"
        if max_memory is None:
            return
    elif (
        isinstance(max_memory, bool)
        or not isinstance(max_memory, int | float)
        or not (max_memory > 0)
    ):
        raise ValueError(
            f"max_memory must be 'auto', None or a number of bytes > 0; received {max_memory!r}."
        )
    item = dtype.itemsize
    need = sum(math.prod(shape) for _, _, _, shape in expected.values()) * item
    if need > max_memory:
        raise MemoryError(
            f"{source.where}: its tensors need {need / 2**30:.3g} GiB in {dtype} "
            f"({need} bytes), more than {what} ({max_memory / 2**30:.3g} GiB): the model is not "
            "loaded. Its weights-only structure scores stream it one layer at a time "
            "(tpde.pretrained.weight_scores(path)); the dynamic scores (model_structure with "
            "tokens, depth_energies, layer_steps) need it loaded: use a machine with that "
            "memory, or pass max_memory=None to try anyway."
        )


def _open(path, gguf_window=None, *, window_matters=True) -> Source:
    """The checkpoint at ``path`` read as far as its headers, by the reader of its kind
    (``gguf_window`` as :func:`load`'s). ``window_matters`` False: for a caller whose result
    no sliding window changes and that builds no tokenizer (sizes, weights-only scores), a
    GGUF file's window llama.cpp turns off is read as llama.cpp's, without a warning, and
    its vocabulary is left unread (its size only)."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path must be a str or a Path (a model folder or a .gguf file); "
                        f"received {path!r}.")  # fmt: skip
    if not (gguf_window is None or (isinstance(gguf_window, str) and gguf_window in _WINDOWS)):
        raise ValueError(
            f"gguf_window must be None, 'llama.cpp' or 'file'; received {gguf_window!r}."
        )
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no model folder or GGUF file at {path}.")
    if path.is_file():
        from tpde.pretrained._gguf import open_gguf

        window = gguf_window if window_matters else "llama.cpp"
        return open_gguf(path, window, chosen=gguf_window is not None, vocabulary=window_matters)
    if gguf_window is not None:
        raise ValueError(
            f"gguf_window={gguf_window!r} reads a GGUF file's window, but {path} is a folder, "
            "whose config.json says how its window is read; leave gguf_window None."
        )
    from tpde.pretrained._folder import open_folder

    return open_folder(path)


_WINDOWS = ("llama.cpp", "file")


def _read(source: Source, dtype, device, max_memory=None) -> tuple:
    """(config record, family entry, expected names, tensors) of a checkpoint read as far as
    its headers: with its tokenizer, the arguments of :func:`tpde.pretrained._build.build`.
    Refused (MemoryError) before any tensor is read where they need more than ``max_memory``
    bytes (:func:`check_memory`)."""
    cfg, entry, expected = plan(source)
    check_memory(source, expected, dtype, max_memory)
    return cfg, entry, expected, source.read(cfg, expected, dtype, device)


def plan(source: Source) -> tuple:
    """(config record, family entry, expected names) of a checkpoint read as far as its
    headers: the config checked key by key, every tensor's name and shape against the files'
    (:func:`tpde.pretrained._build.check_names`); no tensor is read."""
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
    return cfg, entry, expected
