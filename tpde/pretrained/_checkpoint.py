"""What every reader hands :func:`tpde.pretrained.load`: a :class:`Source` (one checkpoint,
read as far as its headers), and the one error of loading, :class:`LoadError`.

A Hugging Face folder (:mod:`tpde.pretrained._folder`) and a GGUF file
(:mod:`tpde.pretrained._gguf`) both become a Source: the config.json the checkpoint stands
for, every tensor's checkpoint name and shape, and how to read the tensors and the
tokenizer. Everything after that — the config record, the family entry, the Transformer —
is the same road for both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["LoadError", "Source"]


class LoadError(ValueError):
    """A checkpoint that cannot be read as a tpde model (what is wrong is in the message)."""


@dataclass(frozen=True, eq=False)
class Source:
    """One checkpoint, read as far as its headers.

    Attributes
    ----------
    where : str
        How messages name the checkpoint (the folder's path, the file's name).
    raw : dict
        The config.json it stands for (a GGUF file's metadata translated).
    shapes : dict
        Checkpoint tensor name → shape as stored.
    read : callable
        ``read(cfg, expected, dtype, device)`` → name → tensor of every name of
        ``expected`` (:func:`tpde.pretrained._build.expected_shapes`), checked finite; the
        config record ``cfg`` for the checks a reader makes against it (a GGUF file's keys
        that must equal a hyper-parameter).
    tokenizer : callable
        ``tokenizer()`` → a ``tokenizers.Tokenizer`` or None.
    key_name : callable or None
        A config.json key → how an error names it (in a GGUF file the metadata key it came
        from); None: ``config.json: <key>``.
    said : str
        How an error introduces a bad value ("received", "the file holds").
    rename : callable or None
        A message naming checkpoint tensor names → the message naming the stored ones (None:
        the names are the stored ones).
    context : str
        Put before a config error ("{where}: " for a folder).
    bytes : int
        The size of the checkpoint's weight files on disk.
    """

    where: str
    raw: dict
    shapes: dict
    read: Callable
    tokenizer: Callable
    key_name: Callable[[str], str] | None = None
    said: str = "received"
    rename: Callable[[str], str] | None = None
    context: str = ""
    bytes: int = 0
