"""A Hugging Face model folder on disk: config.json, safetensors weights, tokenizer.json.

Read with ``safetensors`` and ``tokenizers`` only (never the hub, never transformers). The
weights are one ``model.safetensors``, or shards listed by ``model.safetensors.index.json``
(its ``weight_map``: tensor name → shard file). :func:`tensor_shapes` reads only the
headers (names and shapes), so that a checkpoint is checked whole before any tensor is
read; :func:`read_tensors` then reads the tensors it is asked for.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tpde._validation import all_finite
from tpde._validation import require_package as _require
from tpde.pretrained._checkpoint import LoadError, Source

__all__ = [
    "LoadError",
    "open_folder",
    "read_config",
    "read_tensors",
    "read_tokenizer",
    "tensor_shapes",
]

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


def open_folder(folder: Path) -> Source:
    """The folder as a :class:`~tpde.pretrained._checkpoint.Source`: its config.json (with a
    ``model_type``) and every tensor's name and shape, read from the headers only."""
    raw = read_config(folder)
    if "model_type" not in raw:
        raise LoadError(f"{folder / 'config.json'} has no model_type: tpde cannot tell the "
                        "architecture.")  # fmt: skip
    shapes, where = tensor_shapes(folder)

    def read(cfg, expected, dtype, device):
        return read_tensors(expected, where, dtype, device)

    return Source(
        where=str(folder),
        raw=raw,
        shapes=shapes,
        read=read,
        tokenizer=lambda: read_tokenizer(folder),
        context=f"{folder}: ",
        bytes=sum(path.stat().st_size for path in set(where.values())),
    )


def read_config(folder: Path) -> dict:
    """config.json of ``folder`` as a dict, or a LoadError saying what is missing or broken."""
    path = folder / "config.json"
    if not path.is_file():
        raise LoadError(
            f"{folder} has no config.json: a Hugging Face model folder holds config.json and "
            "its *.safetensors weights (save them with model.save_pretrained(folder))."
        )
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise LoadError(f"{path} is not valid JSON ({err}).") from None
    if not isinstance(config, dict):
        raise LoadError(f"{path} holds a {type(config).__name__}, not a JSON object.")
    return config


def _shards(folder: Path) -> dict[str, Path]:
    """Tensor name → the file that holds it (from the index), or {"*": single file}."""
    if (folder / SINGLE).is_file():
        return {"*": folder / SINGLE}
    index = folder / INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise LoadError(f"{index} is not a safetensors index (no weight_map: {err}).") from None
        _check_weight_map(weight_map, index)
        files = {name: folder / shard for name, shard in weight_map.items()}
        missing = sorted({p.name for p in files.values() if not p.is_file()})
        if missing:
            raise LoadError(
                f"{folder}: the index lists the shard(s) {', '.join(missing)}, which are not in "
                "the folder; copy every shard of the checkpoint."
            )
        return files
    found = sorted(folder.glob("*.safetensors"))
    if len(found) == 1:
        return {"*": found[0]}
    other = sorted(p.name for p in folder.glob("*.bin")) + sorted(
        p.name for p in folder.glob("*.pt*")
    )
    hint = (
        f" It holds {', '.join(other)}: tpde reads safetensors only (convert with "
        "model.save_pretrained(folder, safe_serialization=True))."
        if other
        else ""
    )
    what = f"{len(found)} *.safetensors files and no {INDEX}" if found else "no *.safetensors"
    raise LoadError(f"{folder} has {what}: no weights to read.{hint}")


def _check_weight_map(weight_map, index: Path) -> None:
    """``weight_map`` is a JSON object of tensor name → shard file name (strings)."""
    if not isinstance(weight_map, dict) or not weight_map:
        raise LoadError(
            f"{index}: weight_map must be a non-empty JSON object mapping each tensor name to "
            f"its shard file; received {type(weight_map).__name__} {str(weight_map)[:60]!r}."
        )
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or not shard.endswith(".safetensors"):
            raise LoadError(
                f"{index}: weight_map[{name!r}] must name a *.safetensors shard file; received "
                f"{shard!r}."
            )


#: The safetensors dtypes of weights tpde reads (cast to the requested dtype); an integer,
#: boolean or float8 tensor is quantised (its scales elsewhere) or not a weight.
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")


def _open(path: Path):
    _require("safetensors")
    from safetensors import safe_open

    try:
        return safe_open(str(path), framework="pt")
    except Exception as err:  # safetensors raises its own SafetensorError
        raise LoadError(
            f"{path} is not a readable safetensors file ({err}); check that it was "
            "written completely (compare its size with the original)."
        ) from None


def tensor_shapes(folder: Path) -> tuple[dict[str, tuple[int, ...]], dict[str, Path]]:
    """(name → shape, name → file) of every tensor in the folder's weights (headers only)."""
    shards = _shards(folder)
    shapes, where = {}, {}
    for path in dict.fromkeys(shards.values()):
        with _open(path) as handle:
            for name in handle.keys():
                if "*" not in shards and shards.get(name) != path:
                    continue  # a shard holding a tensor the index puts elsewhere
                shapes[name] = tuple(handle.get_slice(name).get_shape())
                where[name] = path
    listed = sorted(set(shards) - {"*"} - set(shapes))
    if listed:
        raise LoadError(
            f"{folder}: the index lists {len(listed)} tensor(s) that their shard does not hold, "
            f"first {listed[0]!r}: the shard is truncated or from another checkpoint."
        )
    return shapes, where


def read_tensors(names, where: dict[str, Path], dtype, device) -> dict[str, torch.Tensor]:
    """The tensors ``names`` in ``dtype`` on ``device`` (each shard opened once), after every
    one's stored dtype is checked floating (:data:`FLOAT_DTYPES`; headers only)."""
    by_file: dict[Path, list[str]] = {}
    for name in names:
        by_file.setdefault(where[name], []).append(name)
    for path, wanted in by_file.items():
        with _open(path) as handle:
            for name in wanted:
                stored = handle.get_slice(name).get_dtype()
                if stored not in FLOAT_DTYPES:
                    raise LoadError(
                        f"{path}: the tensor {name!r} is stored as {stored}; tpde reads weights "
                        f"stored as {', '.join(FLOAT_DTYPES)} (an integer, boolean or float8 "
                        "tensor is quantised or not a weight): save the model unquantised."
                    )
    out = {}
    for path, wanted in by_file.items():
        with _open(path) as handle:
            for name in wanted:
                try:
                    tensor = handle.get_tensor(name)
                except Exception as err:
                    message = f"{path}: the tensor {name!r} cannot be read ({err})."
                    raise LoadError(message) from None
                out[name] = tensor.to(dtype=dtype, device=device)
    for name, tensor in out.items():
        if not all_finite(tensor):
            raise LoadError(f"{where[name]}: the tensor {name!r} holds NaN or infinite values.")
    return out


def read_tokenizer(folder: Path):
    """The folder's tokenizer.json as a ``tokenizers.Tokenizer`` (no padding or truncation),
    or None when the folder has none."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        return None
    _require("tokenizers")
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as err:
        raise LoadError(f"{path} is not a readable tokenizer ({err}).") from None
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer
