r"""
Differentiating through a flow
==============================

Everything in tpde is a torch computation, so a flow is differentiable in its parameters
and its initial measure. Here we *fit* the value matrix V of softmax attention so that
the flow carries one Gaussian onto another: minimise

.. math::

   L(V) = W_2\bigl(\mu_{t_1}(V),\, \nu\bigr)^2,

the squared Bures–Wasserstein distance between the Gaussian moment ODE's solution at
:math:`t_1` and a target ν, with gradients through :func:`~tpde.flows.integrate` (every
RK4 step) and :func:`~tpde.metrics.bures_wasserstein`.
"""

import os

import matplotlib.pyplot as plt
import torch

from tpde.fields import Softmax
from tpde.flows import integrate
from tpde.measures import Gaussian
from tpde.metrics import bures_wasserstein
from tpde.plot import draw

SMALL = os.environ.get("TPDE_EXAMPLE_SIZE") == "small"  # the test suite runs a small size

F64 = torch.float64
A = torch.tensor([[-0.5, 0.3], [-0.2, -0.4]], dtype=F64)
g0 = Gaussian(torch.tensor([0.5, -0.3], dtype=F64), torch.tensor([[1.0, 0.3], [0.3, 0.5]]))

# %%
# The target: where a hidden V sends g₀
# -------------------------------------

V_true = torch.tensor([[0.6, -0.8], [0.7, 0.4]], dtype=F64)
target = integrate(Softmax.from_interaction(A, V_true), g0, 1.0, dt=0.05, method="rk4").final

# %%
# Fit V by gradient descent through the flow
# ------------------------------------------

V = torch.eye(2, dtype=F64).requires_grad_(True)
optimizer = torch.optim.Adam([V], lr=0.05)
losses, paths = [], []
for step in range(40 if SMALL else 200):
    flow = integrate(Softmax.from_interaction(A, V), g0, 1.0, dt=0.05, method="rk4", save=11)
    loss = bures_wasserstein(flow.final, target) ** 2
    optimizer.zero_grad()
    loss.backward()  # through 20 RK4 steps and the Bures distance
    optimizer.step()
    losses.append(loss.item())
    if step in (0, 10) or step == (39 if SMALL else 199):
        paths.append((step, [m.to(dtype=F64) for m in flow.measures]))
print(f"loss {losses[0]:.3e} → {losses[-1]:.3e}")
print("fitted V =", V.detach().numpy().round(3).tolist(), " hidden V =", V_true.numpy().tolist())

# %%
# The picture
# -----------
# Left: the loss. Right: the flow of g₀ (2σ ellipses at t = 0, 0.1, …, 1) for the initial
# guess, an intermediate and the fitted V, against the target.

fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.4))
ax0.semilogy(losses)
ax0.set_xlabel("Adam step")
ax0.set_ylabel("Bures–Wasserstein² to the target")
for i, (step, measures) in enumerate(paths):
    for k, m in enumerate(measures):
        g = Gaussian(m.mean().detach(), m.cov().detach())
        draw(g, ax1, color=f"C{i}", label=f"step {step}" if k == len(measures) - 1 else None)
draw(target, ax1, color="k", label="target ν")
ax1.set_aspect("equal")
ax1.set_title("flows of g₀ while V is fitted")
ax1.legend(fontsize=8)
fig.tight_layout()
plt.show()
