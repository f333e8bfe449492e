"""Experiment 7: real attention — how Gaussian are real token clouds, and does the picture hold?

The token clouds of all-MiniLM-L6-v2 (one empirical measure per sentence of the bundled
corpus, d = 384) are followed through the 6 real layers three ways:

- **real**: the model's own hidden states (attention, residuals, LayerNorm, MLP);
- **pde**: the attention-only Transformer PDE with the real time-dependent parameters
  (``load_minilm().schedule``: layer l on depth-time [l, l + 1)) moving the sentence's
  tokens, from the embedding output;
- **ode**: its Gaussian moment ODE (MATH.md §3, with biases) from the moment-matched Gaussian
  N(m, Σ) of the same tokens, integrated by Dormand–Prince with blow-up detection.

Measured per depth (and per layer × head where a head is involved):

- Gaussianity: W2 between a cloud and its moment-matched Gaussian
  (:func:`tpde.metrics.diagnostics.distance_to_gaussian`), divided by the same statistic on
  n points drawn from a Gaussian with the same moments (median over ``floor_draws``). A
  ratio ≈ 1 is "as Gaussian as an n-point Gaussian sample can look"; it is computed in the
  cloud's own span (rank ≤ n − 1, where both measures live; W2 is isometry-invariant) and,
  per head, in the head's key space {K_h y} (the softmax tilt e^{qᵀK_h y} acts on the key
  distribution: that is what the Gaussian closure needs to be Gaussian).
- Attention temperature: the effective number of attended tokens of head h, ESS =
  1/Σ_j w_ij² averaged over queries i, as a fraction of n. The Gaussian closure averages the
  tilt e^{qᵀK y} over a whole Gaussian; a finite cloud's softmax is the self-normalised
  importance-sampling estimate of that average, accurate only while the ESS is large.
- Effective rank and anisotropy λ_max / tr Σ of the covariance (real, pde, ode).
- Closure error: ‖Σ_ode − Σ_pde‖_F / ‖Σ_pde‖_F and |m_ode − m_pde| / √tr Σ_pde along
  depth, until the ODE's blow-up.

Part 2 (``tpde.experiments.common.real_normalised``): the real clouds against the attention-only
PDE, attention with the model's own attention-output LayerNorm (BERT's Post-LN sublayer, no
MLP), attention with both of a layer's LayerNorms (BERT with its MLPs set to zero) and the
post-LN sphere model with the same weights — W2 between the clouds mapped to the unit
sphere, cosine similarities, effective rank and anisotropy by depth: which model tracks the
real clouds, and by how much.
"""

from __future__ import annotations

from .config import NAME, ORDER, QUICK, TITLE, Config
from .plot import plot
from .report import report
from .run import run

__all__ = ["NAME", "ORDER", "QUICK", "TITLE", "Config", "plot", "report", "run"]
