r"""Experiment 12: three real models, one per norm placement, on the same corpus.

MiniLM (all-MiniLM-L6-v2: 6 Post-LN encoder layers), SmolLM2-135M (30 Pre-RMSNorm decoder
layers) and Gemma-3-270M (18 Peri-LN decoder layers: a norm before and after each
sublayer), all read by :func:`tpde.pretrained.load` as layer schedules of tpde fields whose
Lie–Trotter step at h = 1 is the network. Norm placement is what the theory says changes
the dynamics (MATH.md §7, §9; Karagodin et al., arXiv:2510.22026). Per model and layer,
median over sentences:

1. **The per-sublayer split**: the share of each layer's update x_{l+1} − x_l made by the
   attention sublayer, ‖v_attn‖/(‖v_attn‖ + ‖v_mlp‖) (token-mean norms; the split is exact,
   :meth:`~tpde.pretrained.Transformer.split`).
2. **Token norms and their growth** (mean |x_l| / mean |x_0|) and the relative update size
   ‖x_{l+1} − x_l‖/‖x_l‖: Post-LN keeps norms fixed by its LayerNorm, Pre-LN lets them
   grow, Peri-LN bounds each update by its output norm (the "speed regulation" reading).
3. **Mean pairwise cosine and the effective number of directions**
   n²/Σ_{ij} cos²(x_i, x_j) (the participation ratio of the tokens' cosine Gram matrix: k
   equal groups of one direction each, mutually orthogonal, give k; one direction gives 1;
   n orthogonal tokens give n). Single linkage at a fixed angle counted one cluster per
   token in these widths (d = 384–640) and was dropped.
4. **The attention sink**: the mean share of attention on the first token (queries i ≥ 1).
5. **The network against its continuous-depth flow**: relative distance of the hidden
   states by depth to the flow, computed as Lie–Trotter at ``flow_step`` = 1/k (Euler
   sub-steps, the norms' projections after each: order 1, converging to the flow as k grows;
   a Post-LN flow has its LayerNorm after every sub-step).
6. **Looping one real layer** (an autonomous flow with real weights, ALBERT-style): the
   middle layer applied ``loop_passes`` times (Lie–Trotter, h = 1); the consensus gap
   1 − mean_j |cos(x_0, x_j)| and the mean cosine after the passes.
7. **Each model against its idealised sphere model** (:mod:`.ideal`): GLPR's softmax
   (Q = K = V = I, score β⟨x, y⟩) under the model's own norm placement, from the same
   embedded tokens, over t ∈ [0, L] (layer l ↔ t = l), β calibrated on the real weights
   (the first layer's median normalised attention entropy). MATH.md §7's predictions,
   measured alike on both (:mod:`.placement`): (a) r_L/r_0 and linear against exponential
   growth of r(l); (b) the slope of log(angle swept per layer) against log(mean norm),
   −1 for Pre-LN and Peri-LN; (c) the spread of ‖x_{l+1} − x_l‖/√d across layers (Peri-LN:
   constant); (d) the mean cosine, rising. A table per model, prediction | idealised |
   real | verdict, and the split figure (``real_models_split.png``: |v_attn|, |v_mlp| over
   |x_l| and their cosine by layer, and (a)–(d) against the idealised model).

Sizes: ``--quick`` (2 sentences, h = 1/2 for the flow, 20 loop passes, the idealised
model at step 1/4) ~25 s of one thread, most of it loading the three models and drawing;
the full size (24 sentences, 8 through the flow at h = 1/16, 500 passes, the idealised
model at step 1/16) some minutes. Float32 throughout. Needs the
``real`` and ``gemma`` extras.
"""

from __future__ import annotations

from .config import NAME, ORDER, QUICK, TITLE, Config
from .plot import plot
from .report import report
from .run import run

__all__ = ["NAME", "ORDER", "QUICK", "TITLE", "Config", "plot", "report", "run"]
