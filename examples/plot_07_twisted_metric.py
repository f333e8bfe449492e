r"""
The twisted Wasserstein metric
==============================

Softmax attention is :math:`\Gamma = V A^{-\top} \nabla \log Z_\mu` with the partition
function :math:`Z_\mu(x) = \int e^{y^\top A x}\, d\mu(y)`. With A symmetric and
:math:`M = VA^{-1}` symmetric definite (:math:`sM \succ 0`) it is a gradient flow in the
metric

.. math::

   g_\mu(v, w) = \int Z_\mu(x)\, \bigl\langle (sM)^{-1} v(x), w(x) \bigr\rangle\, d\mu(x),

Wasserstein, weighted by the partition function and twisted by M (MATH.md §5).
:func:`~tpde.metrics.twisted_w2` computes the distance with the metric frozen at a
reference ρ: :math:`d_\rho(\mu, \nu)^2 = \min_\pi \int Z_\rho(x)\,
(x - y)^\top (sM)^{-1} (x - y)\, d\pi`. Without a reference it is W2 after
:math:`x \mapsto (sM)^{-1/2} x` (Bures on Gaussians); with one, it is not symmetric.

This example measures how far one translation of a cloud is in each geometry, in every
direction: the unit "circle" of W2 is a circle, M stretches it into an ellipse, and
:math:`Z_\rho` rescales it by how much of ρ's attention the cloud's tokens draw.
"""

import os

import matplotlib.pyplot as plt
import numpy as np
import torch

from tpde.fields import Softmax
from tpde.measures import Empirical, Gaussian
from tpde.metrics import bures_wasserstein, twisted_w2, w2

SMALL = os.environ.get("TPDE_EXAMPLE_SIZE") == "small"  # the test suite runs a small size

F64 = torch.float64

# %%
# A softmax field and its mobility
# --------------------------------
# A symmetric and V = MA with M SPD, so M = VA⁻¹ and s = +1.

A = torch.tensor([[0.4, 0.1], [0.1, 0.2]], dtype=F64)
M = torch.tensor([[1.0, 0.45], [0.45, 0.4]], dtype=F64)
field = Softmax.from_interaction(A, M @ A)
print(field.gradient_structure())

n = 32 if SMALL else 200
cloud = Empirical(0.5 * torch.randn(n, 2, generator=torch.Generator().manual_seed(0), dtype=F64))
reference = Empirical(
    torch.randn(n, 2, generator=torch.Generator().manual_seed(1), dtype=F64) + 1.0
)

# %%
# Distances of a translation in every direction
# ---------------------------------------------
# ν = μ shifted by r·(cos θ, sin θ). Each distance divided by r is the length of that unit
# step in the geometry; 1/length draws the geometry's unit ball of translations.

angles = np.linspace(0, 2 * np.pi, 16 if SMALL else 72, endpoint=False)
r = 0.1
curves = {"W2": [], "M": [], "M and Z_ρ": []}
for theta in angles:
    step = r * torch.tensor([np.cos(theta), np.sin(theta)], dtype=F64)
    moved = cloud.with_points(cloud.points + step)
    curves["W2"].append(float(w2(cloud, moved)) / r)
    curves["M"].append(float(twisted_w2(cloud, moved, A=A, V=M @ A)) / r)
    curves["M and Z_ρ"].append(
        float(twisted_w2(cloud, moved, A=A, V=M @ A, reference=reference, coupling="identity")) / r
    )

# %%
# Checks: M = I is W2, Gaussians are Bures, a reference breaks symmetry
# ---------------------------------------------------------------------

other = Empirical(torch.randn(n, 2, generator=torch.Generator().manual_seed(2), dtype=F64))
print(
    "M = I:",
    float(twisted_w2(cloud, other, M=torch.eye(2, dtype=F64))),
    "= W2:",
    float(w2(cloud, other)),
)
g0 = Gaussian(torch.zeros(2, dtype=F64), torch.eye(2, dtype=F64))
g1 = Gaussian(torch.tensor([1.0, 0.0], dtype=F64), torch.diag(torch.tensor([2.0, 0.5], dtype=F64)))
root = torch.linalg.cholesky(torch.linalg.inv(M))  # whitening by (sM)^{-1/2}, up to a rotation
white = [Gaussian(g.mean() @ root, root.mT @ g.cov() @ root) for g in (g0, g1)]
print(
    "Gaussians:",
    float(twisted_w2(g0, g1, M=M)),
    "= Bures after whitening:",
    float(bures_wasserstein(*white)),
)
forward = float(twisted_w2(cloud, other, A=A, V=M @ A, reference=reference))
backward = float(twisted_w2(other, cloud, A=A, V=M @ A, reference=reference))
print(f"with a reference: d(μ, ν) = {forward:.4f}, d(ν, μ) = {backward:.4f}")

# %%
# The picture
# -----------

fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.6))
for i, (name, lengths) in enumerate(curves.items()):
    radius = np.append(1 / np.asarray(lengths), 1 / lengths[0])
    closed = np.append(angles, angles[0])
    ax0.plot(np.cos(closed) * radius, np.sin(closed) * radius, color=f"C{i}", label=name)
ax0.set_aspect("equal")
ax0.set_title("translations of unit length in each geometry")
ax0.legend(fontsize=8)
ax1.scatter(*cloud.points.T, s=8, label="μ (the cloud)")
ax1.scatter(*reference.points.T, s=8, label="ρ (the reference)")
ax1.set_aspect("equal")
ax1.set_title("the cloud and the reference ρ of Z_ρ")
ax1.legend(fontsize=8)
fig.tight_layout()
plt.show()
