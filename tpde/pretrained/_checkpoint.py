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
from dataclasses import dataclass, field

__all__ = ["EXTRA_HINT", "LoadError", "Source", "require"]

EXTRA_HINT = "install the optional extra with `pip install 'tpde[real]'`"


class LoadError(ValueError):
    """A checkpoint that cannot be read as a tpde model (what is wrong is in the message)."""


def require(module: str):
    """Import ``module`` (an optional dependency), or an ImportError naming the extra."""
    try:
        return __import__(module)
    except ImportError as err:
        raise ImportError(
            f"tpde.pretrained needs the package {module!r} ({err}); {EXTRA_HINT}."
        ) from None


def _same(message: str) -> str:
    return message


def _config_json(key: str) -> str:
    return f"config.json: {key}"


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
        ``read(expected, dtype, device)`` → name → tensor of every name of ``expected``
        (:func:`tpde.pretrained._build.expected_shapes`), checked finite.
    tokenizer : callable
        ``tokenizer()`` → a ``tokenizers.Tokenizer`` or None.
    key_name : callable
        A config.json key → how an error names it (``config.json: hidden_size``; in a GGUF
        file the metadata key it came from).
    said : str
        How an error introduces a bad value ("received", "the file holds").
    rename : callable
        A message naming checkpoint tensor names → the message naming the stored ones.
    context : str
        Put before a config error ("{where}" for a folder).
    """

    where: str
    raw: dict
    shapes: dict
    read: Callable
    tokenizer: Callable
    key_name: Callable[[str], str] = _config_json
    said: str = "received"
    rename: Callable[[str], str] = _same
    context: str = ""
    extra: dict = field(default_factory=dict)
