r"""Experiment 10: a real decoder — SmolLM2-135M's token clouds against its own flow.

SmolLM2-135M-Instruct (30 Pre-RMSNorm layers, causal GQA with RoPE, SwiGLU; its 4-bit
weights dequantised) read as a layer schedule of tpde fields (``tpde.pretrained.SmolLM2``):
layer l on depth-time [l, l + 1) is Γ_l = Attn_l[N₁#μ](N₁x) + F_l(N₂x), and the network is
its Lie–Trotter splitting with Euler sub-steps at h = 1. Sentences of the bundled corpus,
tokens at their integer positions. Four questions:

1. **How far is the trained network from its own flow?** (Sander, Ablin, Peyré, "Do Residual
   Neural Networks discretize Neural Ordinary Differential Equations?", arXiv:2205.14612,
   ask it of ResNets.) The network (h = 1) against the continuous-depth flow (dopri5,
   ``flow_rtol``, float64) and the splittings at h = 1/2, 1/4, …: relative distance of the
   hidden states by depth, W2 of the final clouds (on the unit sphere, and relative to the
   cloud's RMS radius), next-token top-1 agreement with the network and cross-entropy of the
   sentence's own next tokens.
2. **Which parts make the clouds?** (SmolLM2, and MiniLM with its MLP as a field.) The
   network against the same weights with parts
   removed, each run as the network is (Lie–Trotter, Euler, h = 1): attention behind its
   RMSNorm with the MLP set to zero ("attn+norm"); attention alone with no norm, x ←
   x + Attn(x) ("attn"); attention and MLP with no norms ("attn+mlp"); and the post-LN
   sphere model x ← N(x + Attn^R(x)) on the unit sphere, Attn^R the attention of tokens of
   norm R_l = |γ₁|₂ (Geshkovski et al.). W2 between the clouds on the unit sphere, mean
   pairwise cosine, effective rank, anisotropy and angular cluster counts by depth.
3. **Attention sink and causal clustering.** The share of attention on the first token per
   layer and head (mean over queries i ≥ 1), and the tokens' mean cosine with the first
   token by depth: causal attention with V = I drives every token to the first one
   (Karagodin, Polyanskiy, Rigollet, arXiv:2411.04990; MATH.md §9) — does the real model?
4. **Consensus when the stack is looped** (Rodríguez Abella, Silvestre, Tabuada,
   arXiv:2412.02682): the diagnostic 1 − mean_j |cos(x_0, x_j)| after each of
   ``loop_passes`` passes through the 30 layers, with and without the MLP.

Sizes: ``--quick`` (4 sentences, 1 through the flow, h = 1/2 and 1/4, 10 loop passes) takes
about 25 s of one CPU thread; the full size (the defaults: 48 sentences, 8 through the flow,
h = 1/2 … 1/16, 2 sentences × 1000 loop passes) about 20 minutes. Each dopri5 flow through
the 30 layers takes ~150 steps at rtol 1e-6 (~17 s in float64 for 12 tokens).
"""

from __future__ import annotations

from .config import NAME, ORDER, QUICK, TITLE, Config
from .plot import plot
from .report import report
from .run import run

__all__ = ["NAME", "ORDER", "QUICK", "TITLE", "Config", "plot", "report", "run"]
