r"""
Normalisation schemes side by side
==================================

Where a Transformer puts its LayerNorm changes the dynamics of its tokens. Karagodin, Ge,
Polyanskiy and Rigollet ("Normalization in Attention Dynamics",
`arXiv:2510.22026 <https://arxiv.org/abs/2510.22026>`_) read the usual schemes as
*speed regulators* of the same attention flow; tpde implements them as
:class:`~tpde.fields.Normalized` around any field :math:`\Gamma` (MATH.md §7; the
continuous forms of pre-LN, peri-LN and nGPT are tpde's reading of the layer updates,
marked [ours] there). With :math:`N(x) = x/|x|`, :math:`P^\perp_x = I - xx^\top/|x|^2` and
a residual layer of step :math:`h \to 0`:

.. math::

   \begin{aligned}
   \text{post-LN:}\quad & x \leftarrow N(x + h\Gamma[\mu](x))
       && \dot x = P^\perp_x\, \Gamma[\mu](x) \quad\text{on } \mathbb S^{d-1}\\
   \text{pre-LN:}\quad & x \leftarrow x + h\Gamma[N_\#\mu](N(x))
       && \dot x = \Gamma[N_\#\mu](N(x))\\
   \text{peri-LN:}\quad & x \leftarrow x + h\,N\bigl(\Gamma[N_\#\mu](N(x))\bigr)
       && \dot x = N\bigl(\Gamma[N_\#\mu](N(x))\bigr)\\
   \text{nGPT:}\quad & x \leftarrow N\bigl(x + h\alpha(N(\Gamma[\mu](x)) - x)\bigr)
       && \dot x = \alpha\, P^\perp_x N(\Gamma[\mu](x)) \quad\text{on } \mathbb S^{d-1}
   \end{aligned}

and mix-LN is post-LN for the first layers and pre-LN after. Write a token as
:math:`x = r\theta` with :math:`|\theta| = 1`. Every scheme moves the direction
:math:`\theta_i` along the *same* vector, the post-LN velocity
:math:`P^\perp_{\theta_i}\Gamma_i` with :math:`\Gamma_i = \Gamma[N_\#\mu](\theta_i)`, only
at its own speed:

.. math::

   \dot\theta_i = \lambda_i\, P^\perp_{\theta_i}\Gamma_i, \qquad
   \lambda_i = \underbrace{1}_{\text{post-LN}},\quad
   \underbrace{\frac{1}{r_i}}_{\text{pre-LN}},\quad
   \underbrace{\frac{1}{r_i|\Gamma_i|}}_{\text{peri-LN}},\quad
   \underbrace{\frac{\alpha}{|\Gamma_i|}}_{\text{nGPT}},

while the radius of the schemes that leave the sphere grows, :math:`\dot r_i =
\langle\theta_i, \Gamma_i\rangle` (pre-LN) or :math:`\langle\theta_i, \Gamma_i\rangle /
|\Gamma_i|` (peri-LN). So the pre-LN angles slow down like :math:`1/r \sim 1/t`, peri-LN
moves every token at unit speed, nGPT at speed :math:`\alpha` along the sphere.

We take GLPR's model (Geshkovski, Letrouit, Polyanskiy, Rigollet,
`arXiv:2312.10794 <https://arxiv.org/abs/2312.10794>`_): softmax attention with
:math:`Q = K = V = I` and score :math:`\beta\langle x, y\rangle`, whose post-LN flow is a
gradient ascent of :math:`E(\mu) = \frac12\iint e^{\beta\langle x, y\rangle}d\mu\,d\mu`
(see :doc:`plot_13_clustering_on_the_sphere`). For tokens of weights :math:`w_i`,
:math:`\partial E(N_\#\mu)/\partial\theta_i = \beta w_i Z_i \Gamma_i` with
:math:`Z_i = \sum_j w_j e^{\beta\langle\theta_i, \theta_j\rangle}`, so along any of the
schemes

.. math::

   \frac{d}{dt} E(N_\#\mu_t) = \sum_i \beta\, w_i Z_i\, \lambda_i\,
   \bigl|P^\perp_{\theta_i}\Gamma_i\bigr|^2 \;\ge\; 0 .

The energy of the directions rises along all of them: a remark of this example, for
:math:`Q = K = V = I`, which the run below measures. tpde declares the gradient structure
for post-LN only (:meth:`~tpde.fields.Normalized.gradient_structure`), where
:math:`\lambda_i = 1`; the other schemes change each token's clock.
"""

import os

import matplotlib.pyplot as plt
import numpy as np
import torch

from tpde.fields import Normalized, NotAGradientFlow, Softmax
from tpde.flows import integrate
from tpde.measures import uniform_on_sphere
from tpde.metrics import clusters_over_time

SMALL = os.environ.get("TPDE_EXAMPLE_SIZE") == "small"  # the test suite runs a small size
# sphinx_gallery_thumbnail_number = 2

F64 = torch.float64

# %%
# One field, five schemes, one start
# ----------------------------------
# d = 3, β = 1, tokens drawn uniformly on the sphere. Mix-LN hands over from post-LN to
# pre-LN at depth-time 3 of a stack of depth T = 30. nGPT takes α = 1.

d, beta, T = 3, 1.0, 30.0
n = 16 if SMALL else 64
eye = torch.eye(d, dtype=F64)
attention = Softmax.from_interaction(beta * eye, eye)  # Q = K = V = I, score β⟨x, y⟩
schemes = {
    "post-ln": Normalized(attention),
    "pre-ln": Normalized(attention, "pre-ln"),
    "peri-ln": Normalized(attention, "peri-ln"),
    "mix-ln": Normalized(attention, "mix-ln", switch=3.0, depth=T),
    "ngpt": Normalized(attention, "ngpt", alpha=1.0),
}
start = uniform_on_sphere(n, d, generator=torch.Generator().manual_seed(0))
save = np.unique(np.r_[0.0, 5.0, np.geomspace(0.05, T, 20 if SMALL else 100)])
runs = {
    name: integrate(field, start, T, dt=0.5 if SMALL else 0.1, method="rk4", save=save, events=())
    for name, field in schemes.items()
}

# %%
# Angular speed, radius, clusters, energy
# ---------------------------------------
# The angular speed of a token is :math:`|P^\perp_x \dot x| / |x|`, from the scheme's own
# velocity at each saved time (``field.velocity(mu, t=t)``). Clusters are angular:
# :func:`~tpde.metrics.clusters_over_time` links tokens with
# :math:`\cos\angle(x_i, x_j) > 1 - 10^{-3}`, whatever their radii. The energy is that of
# the directions, :math:`E(N_\#\mu_t)`, evaluated by the post-LN field (the one that
# declares it).


def angular_speed(field, mu, t: float) -> float:
    """Mean over the tokens of |P⊥_x ẋ| / |x|."""
    x, v = mu.points, field.velocity(mu, t=t)
    r2 = (x * x).sum(-1, keepdim=True)
    tangential = v - x * (x * v).sum(-1, keepdim=True) / r2
    return float((tangential.norm(dim=-1) / r2.squeeze(-1).sqrt()).mean())


post_ln = schemes["post-ln"]
measured = {}
for name, run in runs.items():
    field, times = schemes[name], run.times.numpy()
    measured[name] = {
        "speed": [
            angular_speed(field, mu, float(t)) for mu, t in zip(run.measures, times, strict=True)
        ],
        "radius": [float(mu.points.norm(dim=-1).mean()) for mu in run.measures],
        "clusters": clusters_over_time(run).numpy(),
        "energy": np.array([float(post_ln.energy(mu.normalized())) for mu in run.measures]),
    }
    energy, last = measured[name]["energy"], {k: v[-1] for k, v in measured[name].items()}
    print(
        f"{name:8s} E: {energy[0]:.4f} -> {energy[-1]:.4f}, smallest step "
        f"{np.diff(energy).min():+.1e}; clusters at t = {T:g}: {last['clusters']}; "
        f"mean radius {last['radius']:.1f}"
    )

try:
    schemes["pre-ln"].gradient_structure()
except NotAGradientFlow as refusal:
    print(f"{type(refusal).__name__}: {refusal}")

# %%
# The directions at one depth
# ---------------------------
# The same start after depth-time 5 under each scheme (directions :math:`N(x)`): post-LN,
# mix-LN (post-LN until 3) and nGPT have nearly gathered, pre-LN and peri-LN lag behind.

u, v = np.meshgrid(np.linspace(0, 2 * np.pi, 25), np.linspace(0, np.pi, 13))
centre = runs["post-ln"].final.points.mean(0).numpy()
view = {"elev": np.degrees(np.arcsin(centre[2])), "azim": np.degrees(np.arctan2(*centre[1::-1]))}
k5 = int(np.searchsorted(save, 5.0))
fig = plt.figure(figsize=(14, 3.4))
for i, (name, run) in enumerate(runs.items()):
    ax = fig.add_subplot(1, len(runs), i + 1, projection="3d")
    ax.plot_wireframe(np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v), color="0.85", lw=0.4)
    ax.scatter(*run.measures[k5].normalized().points.numpy().T, s=8, color=f"C{i}")
    ax.view_init(**view)
    ax.set_box_aspect((1, 1, 1), zoom=1.4)
    ax.set_axis_off()
    ax.set_title(name)
fig.suptitle(f"directions N(x) at t = {save[k5]:.1f}, {n} tokens, β = {beta:g}")
fig.subplots_adjust(left=0, right=1, bottom=0, top=0.84, wspace=0)
plt.show()

# %%
# The picture
# -----------
# Top left: the angular speed. Post-LN and nGPT gather their tokens at an exponential
# rate once a cluster has formed; pre-LN and peri-LN carry the factor :math:`1/r`, and their
# radii grow like :math:`t` (top right), so they run post-LN on a clock
# :math:`\tau \approx \log t` and gather only algebraically; mix-LN follows post-LN until
# the switch at :math:`t = 3`, then slows down. Bottom left: the number of clusters.
# Bottom right: the energy of the directions, rising to its one-cluster value
# :math:`e^\beta/2` along every scheme.

fig, axes = plt.subplots(2, 2, figsize=(12, 8.5), sharex=True)
for i, (name, run) in enumerate(runs.items()):
    t = run.times.numpy()[1:]  # t = 0 has no place on a log axis
    data = {key: np.asarray(value)[1:] for key, value in measured[name].items()}
    axes[0, 0].loglog(t, data["speed"], color=f"C{i}", label=name)
    axes[0, 1].loglog(t, data["radius"], color=f"C{i}", label=name)
    axes[1, 0].semilogx(t, data["clusters"], color=f"C{i}", label=name)
    axes[1, 1].semilogx(t, data["energy"], color=f"C{i}", label=name)
axes[0, 0].set_ylim(1e-6, 2)
axes[1, 0].set_yscale("log")
axes[1, 1].axhline(np.exp(beta) / 2, color="k", ls=":", lw=1, label="one cluster: e^β/2")
titles = (
    "mean angular speed |P⊥ẋ|/|x|",
    "mean radius |x|",
    "angular clusters (δ = 10⁻³)",
    "energy of the directions E(N#μₜ)",
)
for ax, title in zip(axes.flat, titles, strict=True):
    ax.set_title(title)
    ax.legend(fontsize=8)
for ax in axes[1]:
    ax.set_xlabel("depth-time t")
fig.tight_layout()
plt.show()
