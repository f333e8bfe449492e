r"""
Measures and fields
===================

A sequence of tokens is a probability measure μ, and an attention layer is a velocity
field :math:`\Gamma[\mu]` that moves every token :math:`x` with the velocity of its
attention against all of μ. For softmax attention with interaction matrix
:math:`A = \mathrm{scale}\cdot K^\top Q` and value matrix :math:`V`,

.. math::

   \Gamma[\mu](x) = V\, \frac{\int e^{y^\top A x}\, y \, d\mu(y)}
                              {\int e^{y^\top A x}\, d\mu(y)} .

This example builds one Gaussian, samples its particle cloud (the tokens), and draws the
field on both: on particles Γ is a softmax average over the cloud; on a Gaussian
:math:`N(\alpha, \Sigma)` it is exactly affine, :math:`\Gamma(x) = V(\alpha + \Sigma A x)`
(MATH.md §3), which is why Gaussians stay Gaussian under the flow.
"""

import os

import matplotlib.pyplot as plt
import torch

from tpde.fields import Softmax
from tpde.measures import Empirical, Gaussian
from tpde.plot import draw

SMALL = os.environ.get("TPDE_EXAMPLE_SIZE") == "small"  # the test suite runs a small size

# %%
# One field, one Gaussian, one cloud
# ----------------------------------
# A field is built from its parameters: here directly from the 2×2 interaction matrix
# ``A`` (the score of a query x on a key y is yᵀAx) and the value matrix ``V``. A Gaussian
# takes its mean α and covariance Σ; :meth:`~tpde.measures.Empirical.from_gaussian` samples
# n tokens from it, each of mass 1/n.

A = torch.tensor([[-0.5, 0.3], [-0.2, -0.4]], dtype=torch.float64)
V = torch.tensor([[1.0, 0.2], [-0.1, 0.8]], dtype=torch.float64)
field = Softmax.from_interaction(A, V)

g0 = Gaussian(
    mean=torch.tensor([0.5, -0.3], dtype=torch.float64),
    cov=torch.tensor([[1.0, 0.3], [0.3, 0.5]], dtype=torch.float64),
)
n = 400 if SMALL else 4000
cloud = Empirical.from_gaussian(g0, n, generator=torch.Generator().manual_seed(0))
print(g0)
print(cloud)

# %%
# The velocity of every token
# ---------------------------
# ``field.velocity(mu)`` is Γ[μ] at μ's own particles, shape (n, d); with points ``x`` it
# is Γ[μ](x) anywhere. On the Gaussian, the same call uses the closed form.

v_particles = field.velocity(cloud)  # (n, 2): each token attends to the whole cloud
side = torch.linspace(-3, 3, 15, dtype=torch.float64)
grid = torch.cartesian_prod(side, side)  # (225, 2) evaluation points
v_gauss = field.velocity(g0, grid)  # exact: V(α + ΣAx)
v_cloud = field.velocity(cloud, grid)  # the same field seen through n samples

gap = (v_cloud - v_gauss).norm(dim=1).max() / v_gauss.norm(dim=1).max()
print(f"max |Γ[cloud] − Γ[Gaussian]| / max |Γ| on the grid: {gap:.3f} (n = {n})")

# %%
# The moment ODE
# --------------
# Because Γ is affine on a Gaussian, the PDE reduces to an ODE on (α, Σ):
# :math:`\dot\alpha = V(I + \Sigma A)\alpha` and
# :math:`\dot\Sigma = V\Sigma A\Sigma + \Sigma A^\top \Sigma V^\top`.
# :meth:`~tpde.fields.Field.gaussian_rhs` returns both.

dmean, dcov = field.gaussian_rhs(0.0, g0.mean(), g0.cov())
print("dα/dt =", dmean.numpy().round(4))
print("dΣ/dt =", dcov.numpy().round(4).tolist())

# %%
# The picture
# -----------
# Left: the tokens, the Gaussian's 2σ ellipse, and the velocity of a few tokens. Right: the
# field of the Gaussian on a grid (streamlines) against the field of the cloud at the same
# points (arrows): the particle picture converges to the Gaussian one as n grows.

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.6), sharex=True, sharey=True)
draw(cloud, left, color="C0", label=f"{n} tokens")
draw(g0, left, color="C3", label="N(α, Σ), 2σ")
shown = slice(0, n, max(1, n // 60))
p, v = cloud.points[shown], v_particles[shown]
left.quiver(p[:, 0], p[:, 1], v[:, 0], v[:, 1], color="k", width=0.004, label="Γ[μ](xᵢ)")
left.set_title("tokens and their velocities")
left.legend(loc="lower right", fontsize=8)

X, Y = side.numpy(), side.numpy()
U = v_gauss[:, 0].reshape(15, 15).T.numpy()
W = v_gauss[:, 1].reshape(15, 15).T.numpy()
right.streamplot(X, Y, U, W, color="C3", density=0.9, linewidth=0.8)
right.quiver(grid[:, 0], grid[:, 1], v_cloud[:, 0], v_cloud[:, 1], color="C0", width=0.003)
draw(g0, right, color="C3")
right.set_title("Γ[Gaussian] (streamlines) and Γ[cloud] (arrows)")
for ax in (left, right):
    ax.set_aspect("equal")
    ax.set_xlim(-3, 3)
    ax.set_ylim(-3, 3)
fig.tight_layout()
plt.show()
