r"""
Clustering on the sphere
========================

The model of Geshkovski, Letrouit, Polyanskiy and Rigollet ("A mathematical perspective on
Transformers", `arXiv:2312.10794 <https://arxiv.org/abs/2312.10794>`_; GLPR below): tokens
:math:`x_1, \dots, x_n` on the unit sphere :math:`\mathbb S^{d-1}`, attention with
:math:`Q = K = V = I` and score :math:`\beta\langle x, y\rangle`, and a LayerNorm after
every layer (post-LN), :math:`x \leftarrow N(x + h\,\Gamma[\mu](x))` with
:math:`N(x) = x/|x|`. As the step :math:`h \to 0` the tokens follow

.. math::

   \dot x_i = P^\perp_{x_i}\Bigl(\frac{\sum_j e^{\beta\langle x_i, x_j\rangle}\, x_j}
                                   {\sum_k e^{\beta\langle x_i, x_k\rangle}}\Bigr),
   \qquad P^\perp_x = I - x x^\top ,

each token moving, along the sphere, towards a softmax-weighted average of the others.
This is a gradient ascent, in a metric weighted by the softmax normaliser, of the
interaction energy

.. math::

   E(\mu) = \tfrac12 \iint e^{\beta\langle x, y\rangle}\, d\mu(x)\, d\mu(y)

(GLPR's :math:`E_\beta` times :math:`\beta`; MATH.md §7), which is largest when every
token sits at one point. GLPR prove that for :math:`d \ge 3` almost every start gathers
into a single cluster; at large :math:`\beta` the way there passes through long
*metastable* states with several clusters. In tpde the model is
:class:`~tpde.fields.Normalized` (scheme ``"post-ln"``, the default) around a
:class:`~tpde.fields.Softmax` field; uniform tokens come from
:func:`~tpde.measures.uniform_on_sphere`; the :class:`~tpde.flows.Clustered` event stops a
run once the tokens have gathered; :mod:`tpde.metrics.clustering` counts clusters.
"""

import os

import matplotlib.pyplot as plt
import numpy as np
import torch

from tpde.fields import Normalized, Softmax
from tpde.flows import Clustered, integrate
from tpde.measures import uniform_on_sphere
from tpde.metrics import cluster_density, clusters_over_time
from tpde.plot import animate

SMALL = os.environ.get("TPDE_EXAMPLE_SIZE") == "small"  # the test suite runs a small size

F64 = torch.float64


def sphere_model(beta, d: int) -> Normalized:
    """GLPR's model: softmax with Q = K = V = I, score β⟨x, y⟩ (A = βI), post-LN.

    ``beta`` may be a tensor (B,): a batch of fields, one β per batch element.
    """
    beta = torch.as_tensor(beta, dtype=F64)
    eye = torch.eye(d, dtype=F64)
    A = beta[..., None, None] * eye  # (…, d, d)
    return Normalized(Softmax.from_interaction(A, eye.expand_as(A)))


# %%
# Tokens on the circle
# --------------------
# On :math:`\mathbb S^1` a token is an angle :math:`\theta_i`, so the whole flow fits in one
# picture: every token's angle against time. Tokens that coincide move together from then
# on (same point, same velocity), and nearby tokens are drawn together. We count *angular*
# clusters as GLPR do: two tokens are linked when :math:`\langle x_i, x_j\rangle > 1 -
# \delta` (here :math:`\delta = 10^{-3}`, about 2.6°), a cluster is a connected group of
# links (:func:`~tpde.metrics.clusters_over_time`).

n_circle = 16 if SMALL else 48
circle0 = uniform_on_sphere(n_circle, 2, generator=torch.Generator().manual_seed(1))
circle = integrate(
    sphere_model(2.0, 2),
    circle0,
    40.0,
    dt=0.2 if SMALL else 0.1,
    method="rk4",
    save=41 if SMALL else 201,
)
angles = np.stack([np.arctan2(*m.points.numpy().T[::-1]) for m in circle.measures])  # (T, n)
counts = clusters_over_time(circle).numpy()
at = np.searchsorted(circle.times.numpy(), [0, 5, 10, 20, 30, 40])
print("clusters on the circle at t = 0, 5, 10, 20, 30, 40:", counts[at].tolist())

fig, ax = plt.subplots(figsize=(9, 4.5))
# Angles in (−π, π]: the line breaks where a token crosses ±π (the same point).
jumps = np.abs(np.diff(angles, axis=0)) > np.pi
wrapped = np.where(np.vstack([jumps, np.zeros((1, n_circle), bool)]), np.nan, angles)
ax.plot(circle.times.numpy(), wrapped, color="C0", lw=0.7)
ax.set_xlabel("t")
ax.set_ylabel("angle θᵢ(t)")
ax.set_ylim(-np.pi, np.pi)
ax.set_title(f"{n_circle} tokens on S¹, β = 2: angles (blue) and number of clusters (red)")
twin = ax.twinx()
twin.step(circle.times.numpy(), counts, color="C3", where="post")
twin.set_yscale("log")
twin.set_yticks([1, 2, 5, 10, 20, 40], labels=["1", "2", "5", "10", "20", "40"])
twin.set_ylabel("clusters (δ = 10⁻³)", color="C3")
fig.tight_layout()
plt.show()

# %%
# The same flow as an animation (:func:`tpde.plot.animate`), one frame per saved time:
# the tokens first gather into a few clusters in parallel, then the clusters merge, the
# later mergers, between clusters further apart, much slower (a cluster feels one at angle
# :math:`\theta` with a weight of order :math:`e^{-\beta(1 - \cos\theta)}`). Here two
# nearly opposite clusters wait from t ≈ 7 to t ≈ 30 before they meet.

# Frames every 0.2 in t while the clusters form, every 1 after (t < 8, then up to 40).
wanted = np.r_[np.arange(0, 8, 1 if SMALL else 0.2), np.arange(8, 40.1, 8 if SMALL else 1)]
index = np.unique(np.searchsorted(circle.times.numpy(), wanted - 1e-9))
frames, times = [circle.measures[i] for i in index], circle.times[index]
gif = animate(
    frames,
    "sphere_circle.gif",
    times=times,
    title="post-LN, β = 2, on S¹",
    xlim=(-1.15, 1.15),
    ylim=(-1.15, 1.15),
    size=12,
)
print("wrote", gif)

# %%
# On the sphere :math:`\mathbb S^2`, with the Clustered event
# ------------------------------------------------------------
# A batch of independent starts, integrated at once with adaptive steps
# (Dormand–Prince): each element stops at its own :class:`~tpde.flows.Clustered` event,
# when the diameter :math:`\max_{i,j}|x_i - x_j|` of its tokens falls below
# :math:`10^{-4}`, and records the time (``traj.event_time``) and the status
# ``"clustered"``. tpde renormalises the tokens after every accepted step, and since the
# velocity is tangent to the sphere the method keeps its order (MATH.md §7).

seeds = 3 if SMALL else 16
n_sphere = 16 if SMALL else 64
starts = uniform_on_sphere(n_sphere, 3, batch=(seeds,), generator=torch.Generator().manual_seed(0))
sphere = integrate(
    sphere_model(1.0, 3),
    starts,
    60.0,
    method="dopri5",
    events=(Clustered(1e-4),),
    save=[0.0, 3.0, 6.0, 60.0],
)
print(sphere)  # the status of every element
event_times = sphere.event_time.numpy()
every = bool((sphere.status == "clustered").all())
print(
    f"β = 1, n = {n_sphere}: every start clustered: {every}; "
    f"event times {event_times.min():.1f} to {event_times.max():.1f}"
)
worst = float((sphere.final.points.norm(dim=-1) - 1).abs().max())
print(f"largest deviation of |x| from 1 at the end: {worst:.1e}")

# %%
# One start at three saved times and at its event. The view looks at the point where the
# tokens end up.

centre = sphere.final.points[0].mean(0).numpy()
elev, azim = np.degrees(np.arcsin(centre[2])), np.degrees(np.arctan2(centre[1], centre[0]))
u, v = np.meshgrid(np.linspace(0, 2 * np.pi, 25), np.linspace(0, np.pi, 13))
fig = plt.figure(figsize=(12, 3.6))
for k, (t, mu) in enumerate(zip(sphere.times.numpy(), sphere.measures, strict=True)):
    ax = fig.add_subplot(1, len(sphere.times), k + 1, projection="3d")
    ax.plot_wireframe(np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v), color="0.85", lw=0.4)
    ax.scatter(*mu.points[0].numpy().T, s=10, color="C0")
    ax.view_init(elev=elev, azim=azim)
    ax.set_box_aspect((1, 1, 1), zoom=1.4)
    ax.set_axis_off()
    last = k == len(sphere.times) - 1
    ax.set_title(f"t = {float(sphere.event_time[0]):.1f}: Clustered" if last else f"t = {t:g}")
fig.suptitle(f"{n_sphere} tokens on S², β = 1 (the first of {seeds} starts)")
fig.subplots_adjust(left=0, right=1, bottom=0, top=0.85, wspace=0)
plt.show()

# %%
# Metastable clusters at large β
# ------------------------------
# A small version of GLPR's phase diagram: d = 2, 32 tokens, a grid of β and several
# starts per β, all in one batch (a tensor of β broadcasts against a batch of clouds),
# integrated with GLPR's own loop, the discrete post-LN layer
# :math:`x \leftarrow N(x + h\,\Gamma[\mu](x))` with :math:`h = 0.1` (``tangent=False``
# with the Euler method: the layer exactly). We record the *cluster density*, the share of
# pairs :math:`i \ne j` with :math:`\langle x_i, x_j\rangle > 1 - 10^{-3}`
# (:func:`~tpde.metrics.cluster_density`; 1 means one cluster), and the number of clusters.
# At small β the interaction is global and the tokens meet quickly; at large β a token
# only feels the tokens within an angle of about :math:`1/\sqrt\beta`, clusters form
# locally and then wait for a long time before they merge.

betas = np.linspace(0.5, 9.0, 6 if SMALL else 24)
per_beta = 3 if SMALL else 16
beta_batch = torch.as_tensor(np.repeat(betas, per_beta), dtype=F64)
clouds = uniform_on_sphere(
    32, 2, batch=(len(beta_batch),), generator=torch.Generator().manual_seed(1)
)
glpr = Normalized(sphere_model(beta_batch, 2).field, tangent=False)
sweep = integrate(glpr, clouds, 30.0, dt=0.1, method="euler", save=16 if SMALL else 61, events=())
density = torch.stack([cluster_density(m) for m in sweep.measures])  # (T, batch)
density = density.reshape(len(sweep.times), len(betas), per_beta).mean(-1).numpy()
count = clusters_over_time(sweep).reshape(len(sweep.times), len(betas), per_beta)
count = count.to(F64).mean(-1).numpy()
for k in (0, len(betas) // 2, len(betas) - 1):
    print(
        f"β = {betas[k]:.1f}: mean cluster count at t = 30: {count[-1, k]:.2f}, "
        f"density {density[-1, k]:.2f}"
    )

# %%
# Left: the phase diagram, cluster density over β and t (as in GLPR's figure). Right: the
# mean number of clusters over time for a few β: at large β it stays above one for the
# whole run.

fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(13, 4.8))
image = ax0.pcolormesh(betas, sweep.times.numpy(), density, shading="nearest", vmin=0, vmax=1)
fig.colorbar(image, ax=ax0, label="cluster density")
ax0.set_xlabel("β")
ax0.set_ylabel("t")
ax0.set_title(f"phase diagram: d = 2, n = 32, {per_beta} starts per β")
for k in np.linspace(0, len(betas) - 1, 4).round().astype(int):
    ax1.plot(sweep.times.numpy(), count[:, k], label=f"β = {betas[k]:.1f}")
ax1.set_yscale("log")
ax1.set_yticks([1, 2, 5, 10, 20], labels=["1", "2", "5", "10", "20"])
ax1.set_xlabel("t")
ax1.set_ylabel(f"clusters (mean over {per_beta} starts)")
ax1.set_title("large β: metastable multi-cluster states")
ax1.legend()
fig.tight_layout()
plt.show()
