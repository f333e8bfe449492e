r"""Experiment 8: normalised tokens — GLPR's phase diagram, the LayerNorm schemes, blow-up
against clustering (MATH.md §7).

(a) **Phase diagram** (Geshkovski, Letrouit, Polyanskiy, Rigollet, arXiv:2312.10794): for
each of ``betas`` values of β in [beta_min, beta_max], ``systems`` clouds of ``tokens``
tokens uniform on S^{d−1} flow by the sphere model ẋ_i = P⊥_{x_i} Γ[μ](x_i), Γ softmax with
Q = K = V = I and score β⟨x, y⟩; the cluster density (share of pairs with ⟨x_i, x_j⟩ > 0.999,
mean over the systems) at ``checkpoints`` times in [0, t1], for d = 2 (their default) and
d = 3. Every β and system is one batch, advanced by one ``integrate`` call per checkpoint
interval (:mod:`tpde.experiments.common.sphere_diagram`), RK4 with the tangent velocity,
``steps_per_checkpoint`` steps per interval (benchmarks/glpr.py measures its error against
a dt → 0 reference and
compares GLPR's own Euler loop). Then, d = 3, β = ``cluster_beta``: ``cluster_seeds``
independent clouds, each stopped by the Clustered event (diameter < 1e-4) — one cluster for
every seed (GLPR's theorem for d ≥ 3).

(a') **Many tokens**: the d = 3 diagram at ``large_tokens`` tokens per cloud (harmonics
engine), every ``large_every``-th β, ``large_systems`` systems, the density from
``large_pairs`` sampled pairs per cloud. (a'') **The density against N** (sizes.py): at
``size_betas``, clouds of each of ``size_tokens`` tokens. The diagram is a finite-N diagram:
from N uniform tokens the instability of the uniform measure (MATH.md §9) needs a time
≈ t₀ + ln N/(2λ_k*) to lift the O(N^{-1/2}) modes to O(1), so every size clusters later by
ln 2/(2λ_k*) ≈ 0.5 per doubling; (a') is the 32-token diagram delayed by ln(N/32)/(2λ_k*),
and at fixed (β, t) the density falls toward its initial value as N grows.

(b) **Schemes**: the same initial tokens (``scheme_tokens`` uniform on S^{d−1}) under every
normalisation of :class:`~tpde.fields.Normalized` (post-ln, pre-ln, peri-ln, mix-ln with
the switch at half the horizon, ngpt with α = ``ngpt_alpha``, layernorm with γ = 1, b = 0)
of the same softmax field: angular clusters over time, the speed of the angular part θ = x/|x|
(mean over tokens of the angle swept between saves, per unit time), the effective rank of the
tokens' angular second moment Σ_i w_i θ_iθ_iᵀ (1: one cluster or an antipodal pair; d:
isotropic), and the mean radius |x|.

(c) **R^d against the sphere**: tokens drawn from N(0, I_d) under the same field in R^d (no
normalisation): the Gaussian moment ODE blows up at t* = 1/(2β λ_max(Σ₀)) (MATH.md §4), the
particles grow until tr Σ > 10³; the post-LN flow of the normalised tokens clusters instead.

(d) **Metastability on S²** (metastable.py, issue 35): the escape from uniform against
ln N at ``escape_sizes`` (10³ … 10⁶; slope 1/(2λ_l*)), the first plateau's count against the
peaks of the initial cloud's degree-l* part over ``meta_betas``, with each draw's seeding
(seeding.py: the degree leading the escape, measured and predicted from the draw's own
amplitudes), the lifetimes and merges against β. Every run (each escape draw, each sweep
draw) is a task on ``workers`` processes (draws.py, :class:`~experiments.common.pool.Workers`:
2 at full size, 1 at the quick size; the same arrays and results on one or several, tested),
the longest first; the CPU seconds of every run and of each part are recorded and reported.

A GIF shows one d = 2 post-LN cloud at β = ``movie_beta``.
"""

from __future__ import annotations

from .config import NAME, ORDER, QUICK, TITLE, Config
from .plot import plot
from .report import report
from .run import run

__all__ = ["NAME", "ORDER", "QUICK", "TITLE", "Config", "plot", "report", "run"]
