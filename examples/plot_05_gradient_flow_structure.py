r"""
Softmax and Sinkhorn attention as gradient flows
================================================

Two attention variants are gradient flows of an energy (MATH.md §5):

- **softmax**, with A symmetric and :math:`M = VA^{-1}` symmetric definite, is
  :math:`\Gamma = s\,\mathrm{grad}_g E` for the interaction energy
  :math:`E(\mu) = \tfrac12 \iint e^{y^\top A x}\, d\mu(x)\, d\mu(y)`, in the metric
  weighted by the partition function :math:`Z_\mu` and twisted by M
  (:math:`s = \pm 1` with :math:`sM \succ 0`);
- **Sinkhorn**, with A symmetric and :math:`V = MA`, is the gradient flow of
  :math:`F(\mu) = \tfrac12 \mathrm{OT}_\varepsilon(\mu, \mu)` in the metric with mobility M.

Along a flow the energy then changes at the rate :math:`dE/dt = -c\,\|\Gamma\|_g^2`.
:func:`~tpde.fields.energy_dissipation` checks this identity on a saved trajectory;
:func:`~tpde.fields.gradient_flow_gap` compares the field with the gradient of the
energy computed independently, by autograd.
"""

import os

import matplotlib.pyplot as plt
import torch

from tpde.fields import (
    L2,
    NotAGradientFlow,
    Sinkhorn,
    Softmax,
    energy_dissipation,
    gradient_flow_gap,
)
from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian

SMALL = os.environ.get("TPDE_EXAMPLE_SIZE") == "small"  # the test suite runs a small size

F64 = torch.float64
eye = torch.eye(2, dtype=F64)

# %%
# Two gradient flows
# ------------------
# Softmax with V = I and A ≺ 0 symmetric (then M = A⁻¹ ≺ 0, s = −1: the flow *descends*
# E); Sinkhorn with A symmetric indefinite and V = MA for an SPD mobility M.

A_soft = torch.tensor([[-0.5, -0.15], [-0.15, -0.4]], dtype=F64)
softmax = Softmax.from_interaction(A_soft, eye)
A_sink = torch.tensor([[0.6, 0.2], [0.2, -0.4]], dtype=F64)
M = torch.tensor([[1.0, 0.3], [0.3, 0.5]], dtype=F64)
sinkhorn = Sinkhorn(A_sink, eye, M @ A_sink, scale=1.0, tol=1e-11)

structure = softmax.gradient_structure()
print("softmax: sign s =", structure.sign, "; Lyapunov sign c =", structure.lyapunov_sign)

n = 24 if SMALL else 96
g0 = Gaussian(torch.tensor([0.5, -0.3], dtype=F64), torch.tensor([[1.0, 0.3], [0.3, 0.5]]))
cloud = Empirical.from_gaussian(g0, n, generator=torch.Generator().manual_seed(0))

# %%
# The field is the gradient of the energy
# ---------------------------------------
# On particles, Γ_i is compared with the metric gradient of E built from ∂E/∂x_i
# (autograd); on a Gaussian, with the closed-form energy's gradient.

for name, field in (("softmax", softmax), ("Sinkhorn", sinkhorn)):
    for label, mu in (("particles", cloud), ("Gaussian", g0)):
        gap = gradient_flow_gap(field, mu)
        print(f"{name:8s} on {label:9s}: relative gap {float(gap.relative_gap):.1e}")

try:
    L2(A_soft, eye, eye, scale=1.0).gradient_structure()
except NotAGradientFlow as err:
    print("L2:", err)

# %%
# Energy dissipation along the flow
# ---------------------------------
# Save every step of a fixed-step run (``save="steps"``) so the rate can be integrated
# by Simpson's rule; the energy follows E(t₀) + ∫ rate dt to the integrator's accuracy.

runs = {}
for name, field in (("softmax", softmax), ("Sinkhorn", sinkhorn)):
    for label, mu in (("particles", cloud), ("Gaussian", g0)):
        traj = integrate(field, mu, 1.0 if SMALL else 2.0, dt=0.1, method="rk4", save="steps")
        runs[name, label] = energy_dissipation(field, traj)
        print(
            f"{name:8s} {label:9s}: max |E − predicted| / |ΔE| = "
            f"{float(runs[name, label].relative_error):.1e}"
        )

# %%
# The picture
# -----------
# Solid: the energy along the flow; dots: the prediction from the dissipation rate.

fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
for ax, name in zip(axes, ("softmax", "Sinkhorn"), strict=True):
    for i, label in enumerate(("particles", "Gaussian")):
        d = runs[name, label]
        ax.plot(d.times, d.energy, color=f"C{i}", label=f"E on {label}")
        ax.plot(
            d.times[::2],
            d.predicted[::2],
            "o",
            color=f"C{i}",
            ms=4,
            mfc="none",
            label=f"E(0) + ∫ rate ({label})",
        )
    ax.set_xlabel("t")
    ax.set_title(f"{name}: energy along the flow")
    ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
