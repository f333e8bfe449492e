r"""
JKO steps in five geometries against the explicit flow
======================================================

Where attention is a gradient flow, the JKO (minimising-movement) scheme

.. math::

   \mu_{k+1} \in \operatorname{argmin}_\nu\; G(\nu) + \frac{d(\nu, \mu_k)^2}{2\tau}

converges to the flow at order one in τ and never increases G
(Jordan–Kinderlehrer–Otto). :func:`~tpde.flows.jko_flow` steps it in five geometries:

- ``"w2"`` (particles) — the limit is the W2 gradient flow of G
  (:class:`~tpde.fields.GradientFlowField`);
- ``"twisted"`` (particles) — the field's own metric; the limit is the softmax PDE itself;
- ``"bures"`` and ``"twisted-bures"`` (Gaussians) — the limit is the Sinkhorn moment ODE
  (mobility M = I, or M ≠ I);
- ``"entropic"`` (grids) — Peyré's entropic JKO on a density.
"""

import os

import matplotlib.pyplot as plt
import numpy as np
import torch

from tpde.fields import GradientFlowField, Sinkhorn, Softmax
from tpde.flows import integrate, jko_flow
from tpde.measures import Empirical, Gaussian, Grid
from tpde.metrics import bures_wasserstein, w2

SMALL = os.environ.get("TPDE_EXAMPLE_SIZE") == "small"  # the test suite runs a small size

F64 = torch.float64
eye = torch.eye(2, dtype=F64)
taus = (0.2, 0.1) if SMALL else (0.2, 0.1, 0.05, 0.025)
t1 = 0.4 if SMALL else 1.0

# %%
# The cases
# ---------
# Softmax with V = I and A ≺ 0 symmetric descends its energy; Sinkhorn with A symmetric
# and V = MA is the M-twisted gradient flow of ½OT_ε(μ, μ). The entropic case steps the
# softmax energy (V = I, A = −I) of a density on a 1-D grid.

softmax = Softmax.from_interaction(torch.tensor([[-0.5, -0.15], [-0.15, -0.4]], dtype=F64), eye)
A_sink = torch.tensor([[0.6, 0.2], [0.2, -0.4]], dtype=F64)
M = torch.tensor([[1.0, 0.3], [0.3, 0.5]], dtype=F64)
cloud = Empirical(
    torch.randn(8 if SMALL else 48, 2, generator=torch.Generator().manual_seed(0), dtype=F64)
)
g0 = Gaussian(torch.tensor([0.5, -0.3], dtype=F64), torch.tensor([[1.0, 0.3], [0.3, 0.5]]))
softmax_1d = Softmax.from_interaction(-torch.eye(1, dtype=F64), torch.eye(1, dtype=F64))
g1d = Gaussian(torch.tensor([0.3], dtype=F64), torch.tensor([[0.5]], dtype=F64))
grid = Grid.from_gaussian(g1d, 120 if SMALL else 480, -3.0, 3.0)

cases = {
    # geometry: (energy, initial measure, field of the explicit limit, distance)
    "w2": (softmax, cloud, GradientFlowField(softmax), None),
    "twisted": (softmax, cloud, softmax, None),
    "bures": (Sinkhorn(A_sink, eye, A_sink, scale=1.0, tol=1e-11), g0, None, bures_wasserstein),
    "twisted-bures": (
        Sinkhorn(A_sink, eye, M @ A_sink, scale=1.0, tol=1e-11),
        g0,
        None,
        bures_wasserstein,
    ),
    "entropic": (softmax_1d, grid, GradientFlowField(softmax_1d), w2),
}


def particle_error(a, b):
    return float(((a.points - b.points) ** 2).sum(-1).mean().sqrt())


# %%
# Run JKO and the explicit flow
# -----------------------------
# The explicit reference is an RK4 run with a small step (for the grid: the W2 gradient
# flow of 500 particles at the grid's quantiles, compared by exact 1-D W2).

errors, energies = {}, {}
for geometry, (energy, mu0, limit, distance) in cases.items():
    limit = energy if limit is None else limit
    if geometry == "entropic":
        levels = (torch.arange(500, dtype=F64) + 0.5) / 500
        start = Empirical(
            g1d.mean() + g1d.cov()[0].sqrt() * 2**0.5 * torch.erfinv(2 * levels - 1)[:, None]
        )
        reference = integrate(limit, start, t1, dt=0.02, method="rk4").final
    else:
        reference = integrate(limit, mu0, t1, dt=0.01, method="rk4").final
    measure = distance or particle_error
    errors[geometry] = []
    for tau in taus:
        traj = jko_flow(mu0, energy, tau, t1, geometry)
        errors[geometry].append(measure(traj.final, reference))
        energies[geometry] = (traj.times.numpy(), traj.stats["energy"].numpy())
    slope = np.polyfit(np.log(taus), np.log(errors[geometry]), 1)[0]
    print(f"{geometry:14s} errors {np.round(errors[geometry], 5)}  slope in τ: {slope:.2f}")

# %%
# The picture
# -----------
# Left: the error at t₁ against τ, with the order-one line. Right: the functional G along
# the JKO sequence of the smallest τ (non-increasing in every geometry).

fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.2))
for i, (geometry, err) in enumerate(errors.items()):
    ax0.loglog(taus, err, "o-", color=f"C{i}", label=geometry)
ref = np.array(taus)
ax0.loglog(ref, ref * errors["w2"][0] / ref[0], "k:", lw=1, label="order 1")
ax0.set_xlabel("τ")
ax0.set_ylabel("error at t₁ vs the explicit flow")
ax0.legend(fontsize=8)
for i, (geometry, (times, values)) in enumerate(energies.items()):
    ax1.plot(times, values - values[0], "o-", ms=3, color=f"C{i}", label=geometry)
ax1.set_xlabel("t")
ax1.set_title(f"G(μ_k) − G(μ_0), τ = {taus[-1]}")
ax1.legend(fontsize=8)
fig.tight_layout()
plt.show()
