r"""
The non-convexity probe
=======================

For V = I and A = −I softmax attention descends
:math:`E(\mu) = \tfrac12 \iint e^{-x\cdot y}\, d\mu(x)\, d\mu(y)` (MATH.md §5). The JKO
theory's contraction estimates need E to be λ-convex along W2 geodesics with λ ≥ 0; it is
not. :func:`~tpde.fields.gradient_flow.convexity_probe` takes
:math:`\frac{d^2}{dt^2} E(\gamma(t)) / W_2(\gamma(0), \gamma(1))^2` by double backward
along random geodesics leaving a measure: a negative value is a direction of
non-convexity. The control is the convex potential :math:`\int \tfrac12 |x|^2\, d\mu`
(λ = 1 exactly).
"""

import os

import matplotlib.pyplot as plt
import numpy as np
import torch

from tpde.fields import PotentialEnergy, Softmax, as_energy, convexity_probe
from tpde.measures import Empirical, Gaussian

SMALL = os.environ.get("TPDE_EXAMPLE_SIZE") == "small"  # the test suite runs a small size

F64 = torch.float64
eye = torch.eye(2, dtype=F64)
softmax = Softmax.from_interaction(-eye, eye)
control = PotentialEnergy.quadratic(eye)
generator = torch.Generator().manual_seed(0)
cloud = Empirical(0.5 * torch.randn(16 if SMALL else 128, 2, generator=generator, dtype=F64))
gauss = Gaussian(torch.zeros(2, dtype=F64), 0.3 * eye)

# %%
# Probe both energies on a cloud and on a Gaussian
# ------------------------------------------------

probes = {}
for label, mu in (("particles", cloud), ("Gaussian", gauss)):
    for name, energy in (("softmax E", softmax), ("control ½|x|²", control)):
        probe = convexity_probe(
            energy, mu, n_geodesics=4 if SMALL else 48, radius=0.5, generator=generator
        )
        probes[label, name] = probe
        print(
            f"{name:14s} on {label:9s}: {probe.n_negative} negative of "
            f"{probe.second_derivatives.numel()}, min {probe.min_value:+.3f}"
        )

# %%
# One explicit direction: a translation
# -------------------------------------
# Translating a centred cloud by s·e₁ is a W2 geodesic. E along it is concave near s = 0:
# nearby tokens interact through the kernel e^{−x·y}.

G = as_energy(softmax)
centred = cloud.with_points(cloud.points - cloud.points.mean(0))
shifts = np.linspace(-3, 3, 31 if SMALL else 61)
values = [
    float(G(centred.with_points(centred.points + torch.tensor([s, 0.0], dtype=F64)), "dense"))
    for s in shifts
]

# %%
# The picture
# -----------

fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.2))
bins = np.linspace(-1.5, 1.5, 31)
for i, ((label, name), probe) in enumerate(probes.items()):
    ax0.hist(
        probe.second_derivatives.detach().numpy().ravel(),
        bins=bins,
        alpha=0.5,
        color=f"C{i}",
        label=f"{name}, {label}",
    )
ax0.axvline(0, color="k", lw=0.8)
ax0.set_xlabel("d²E/dt² / W2² along geodesics")
ax0.set_title("negative values: E is not geodesically convex")
ax0.legend(fontsize=8)
ax1.plot(shifts, values)
ax1.set_xlabel("translation s")
ax1.set_ylabel("E(μ + s·e₁)")
ax1.set_title("E along a translation: concave near 0")
fig.tight_layout()
plt.show()
