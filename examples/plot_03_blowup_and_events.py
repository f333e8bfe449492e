r"""
Blow-up, convergence and events
===============================

With :math:`V = I`, softmax attention moves a Gaussian's covariance by
:math:`\dot\Sigma = \Sigma(A + A^\top)\Sigma`, solved in closed form (MATH.md §4 item 2):

.. math::

   \Sigma(t) = \bigl(\Sigma_0^{-1} - t(A + A^\top)\bigr)^{-1}.

If :math:`A + A^\top` has a positive eigenvalue the covariance blows up in finite time,
at :math:`t^* = 1/\lambda_{\max}\bigl(\Sigma_0^{1/2}(A + A^\top)\Sigma_0^{1/2}\bigr)`; if
:math:`A + A^\top \prec 0` the tokens collapse to a point (clustering). tpde reports both
as *events*: a run stops an element when its size passes a threshold
(:class:`~tpde.flows.BlowUp`) or its velocity falls below a tolerance
(:class:`~tpde.flows.Converged`), and records the status and the time — never a NaN.

One batched Gaussian integrates a whole phase diagram at once; each element takes its own
adaptive steps, stops at its own event and is frozen there, so elements that blow up early
cost no steps to the others.
"""

import os

import matplotlib.pyplot as plt
import numpy as np
import torch

from tpde.fields import Softmax
from tpde.flows import BlowUp, Converged, integrate
from tpde.measures import Empirical, Gaussian

SMALL = os.environ.get("TPDE_EXAMPLE_SIZE") == "small"  # the test suite runs a small size

F64 = torch.float64

# %%
# A batch of interaction matrices
# -------------------------------
# A = diag(a₁, a₂) on a grid of (a₁, a₂) ∈ [−1, 1]², V = I, one initial Gaussian
# (centred, so the mean stays at 0). The parameters carry the batch dimension; the
# Gaussian is expanded to the same batch.

side = np.linspace(-1, 1, 11 if SMALL else 41)
a1, a2 = np.meshgrid(side, side, indexing="ij")
A = torch.zeros(a1.size, 2, 2, dtype=F64)
A[:, 0, 0], A[:, 1, 1] = torch.as_tensor(a1.ravel()), torch.as_tensor(a2.ravel())
field = Softmax.from_interaction(A, torch.eye(2, dtype=F64))

cov0 = torch.tensor([[1.0, 0.3], [0.3, 0.5]], dtype=F64)
batch = Gaussian(torch.zeros(len(A), 2, dtype=F64), cov0.expand(len(A), 2, 2))

events = (BlowUp(1e3, size="trace"), Converged(tol=3e-2))
run = integrate(field, batch, t1=5.0, method="dopri5", events=events)
status = run.status.reshape(a1.shape)
for name in ("blow_up", "converged", "completed"):
    print(f"{name:10s}: {(status == name).sum()} of {status.size}")

# %%
# Event times against the closed form
# -----------------------------------
# The blow-up event fires at the end of the step in which tr Σ passes 10³, a little
# before t*: each element's Dormand–Prince steps shrink near its own singularity, so its
# event time is sharp (``run.stats["steps"]`` holds every element's step count).

root = torch.linalg.cholesky(cov0)
sym = A + A.mT
lam = torch.linalg.eigvalsh(root.mT @ sym @ root)[:, -1]  # λ_max(Σ₀^{1/2}(A+Aᵀ)Σ₀^{1/2})
t_star = torch.where(lam > 0, 1 / lam, torch.tensor(float("inf"), dtype=F64)).numpy()
blown = run.status == "blow_up"
gap = np.abs(run.event_time.numpy()[blown] - t_star[blown]) / t_star[blown]
print(f"blow-up event vs closed-form t*: max relative gap {gap.max():.3f}")
print(f"steps per element: {run.stats['steps'].min()} to {run.stats['steps'].max()}")

# %%
# Particles do not blow up
# ------------------------
# A finite cloud under a normalised kernel has no finite-time singularity: every velocity
# is V times a point of the cloud's convex hull, so the cloud grows at most exponentially.
# Its trace passes the Gaussian's blow-up threshold later, and closer to t* as n grows.

k = int(np.argmin(np.abs(side - 0.5))) * len(side) + int(np.argmin(np.abs(side + 0.5)))
one = Softmax.from_interaction(A[k], torch.eye(2, dtype=F64))
g = Gaussian(torch.zeros(2, dtype=F64), cov0)
ode = integrate(one, g, t1=float(t_star[k]) * 0.999, method="dopri5", save=60, events=())
clouds = {}
for n in (100, 400) if SMALL else (200, 1000, 4000):
    cloud = Empirical.from_gaussian(g, n, generator=torch.Generator().manual_seed(n))
    cloud = cloud.to(dtype=torch.float32)  # float32 clouds take the fused SDPA kernel
    clouds[n] = integrate(
        one, cloud, t1=1.5 * float(t_star[k]), dt=0.05, method="rk4", save=40, events=()
    )

# %%
# The picture
# -----------
# Left: the status of every parameter set (blow-up, convergence). Middle: blow-up event
# times on the closed form's t*. Right: tr Σ(t) of the Gaussian against particle clouds,
# for A = diag(0.5, −0.5).

fig, (ax0, ax1, ax2) = plt.subplots(1, 3, figsize=(15, 4.4))
code = np.select([status == "blow_up", status == "converged"], [2, 0], 1)
ax0.pcolormesh(side, side, code.T, cmap="coolwarm", shading="nearest", vmin=0, vmax=2)
event = np.where(status == "blow_up", run.event_time.numpy().reshape(a1.shape), np.nan)
lines = ax0.contour(side, side, event.T, levels=[0.5, 1, 2, 4], colors="k", linewidths=0.8)
ax0.clabel(lines, fmt="t* = %g", fontsize=7)
ax0.set_xlabel("a₁")
ax0.set_ylabel("a₂")
ax0.set_title("red: blow-up (with its time), blue: converged")

ax1.loglog(t_star[blown], run.event_time.numpy()[blown], ".", ms=3)
ax1.loglog([0.3, 10], [0.3, 10], "k:", lw=1)
ax1.set_xlabel("closed-form t*")
ax1.set_ylabel("event time (BlowUp, tr Σ > 10³)")
ax1.set_title("finite-time blow-up, batched Gaussian ODE")

trace = [float(m.cov().trace()) for m in ode.measures]
ax2.semilogy(ode.times.numpy(), trace, "k", lw=2, label="Gaussian ODE")
for n, traj in clouds.items():
    trace_n = [float(m.cov().trace()) for m in traj.measures]
    ax2.semilogy(traj.times.numpy(), trace_n, label=f"n = {n}")
ax2.axvline(t_star[k], color="k", ls=":", lw=1)
ax2.set_xlabel("t")
ax2.set_title("tr Σ(t): the ODE blows up at t*, clouds do not")
ax2.legend(fontsize=8)
fig.tight_layout()
plt.show()
