r"""
Comparing attention types with five metrics
===========================================

How far apart do two attention variants carry the same tokens? The answer depends on the
metric, and each of tpde's metrics sees a different aspect:

- :func:`~tpde.metrics.w2` — exact Wasserstein-2 between particle clouds (network simplex);
- :func:`~tpde.metrics.bures_wasserstein` — W2 between Gaussians in closed form, for the
  moment ODEs;
- :func:`~tpde.metrics.sinkhorn_divergence` — the debiased entropic divergence
  :math:`S_\varepsilon`, in closed form between Gaussians;
- :func:`~tpde.metrics.twisted_w2` — W2 in the geometry :math:`|x - y|^2_{(sM)^{-1}}` of a
  mobility M (the metric in which softmax attention is a gradient flow, MATH.md §5);
- :func:`~tpde.metrics.conditional_w2` — for tokens with positions (masked attention):
  :math:`\bigl(\int W_2(\mu_s, \nu_s)^2\, d\eta(s)\bigr)^{1/2}`, tokens compared only with
  tokens at the same position.

Softmax, L2 and Sinkhorn attention (one parameter set, MATH.md §4 item 8) move one
Gaussian and one cloud; causal (masked) softmax moves the same cloud with positions.
"""

import os

import matplotlib.pyplot as plt
import numpy as np
import torch

from tpde.fields import L2, Masked, Sinkhorn, Softmax
from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian
from tpde.metrics import bures_wasserstein, conditional_w2, sinkhorn_divergence, twisted_w2, w2

SMALL = os.environ.get("TPDE_EXAMPLE_SIZE") == "small"  # the test suite runs a small size

F64 = torch.float64
A = torch.tensor([[-0.5, 0.3], [-0.2, -0.4]], dtype=F64)
V = torch.tensor([[1.0, 0.2], [-0.1, 0.8]], dtype=F64)
eye = torch.eye(2, dtype=F64)
fields = {
    "softmax": Softmax(A, eye, V, scale=1.0),
    "L2": L2(A, eye, V, scale=1.0),
    "Sinkhorn": Sinkhorn(A, eye, V, scale=1.0, eps=1.0),
}
g0 = Gaussian(torch.tensor([0.5, -0.3], dtype=F64), torch.tensor([[1.0, 0.3], [0.3, 0.5]]))
n = 64 if SMALL else 480
positions = torch.arange(n, dtype=F64) % 8 / 7  # 8 positions, n/8 tokens at each
cloud = Empirical(g0.sample(n, generator=torch.Generator().manual_seed(0)), positions=positions)
t1 = 1.0 if SMALL else 1.5
save = np.linspace(0, t1, 5 if SMALL else 7).tolist()

# %%
# Flows: Gaussian ODEs and particles
# ----------------------------------

odes = {name: integrate(f, g0, t1, method="dopri5", save=save) for name, f in fields.items()}
clouds = {
    name: integrate(f, cloud, t1, dt=0.1, method="rk4", save=save) for name, f in fields.items()
}
masked = integrate(Masked(fields["softmax"]), cloud, t1, dt=0.1, method="rk4", save=save)

# %%
# Distances to softmax over time
# ------------------------------
# Bures and Sinkhorn between the Gaussian solutions, W2 between the clouds. The twisted
# distance uses a mobility M (symmetric positive definite): it weighs displacements along
# M's small eigenvectors more, so the ranking of variants can change with the geometry.

M = torch.tensor([[1.0, 0.6], [0.6, 0.5]], dtype=F64)
rows = {}
for name in ("L2", "Sinkhorn"):
    rows[f"Bures, softmax–{name}"] = [
        float(bures_wasserstein(a, b))
        for a, b in zip(odes["softmax"].measures, odes[name].measures, strict=True)
    ]
    rows[f"√Sinkhorn, softmax–{name}"] = [
        float(sinkhorn_divergence(a, b, blur=0.3)) ** 0.5
        for a, b in zip(odes["softmax"].measures, odes[name].measures, strict=True)
    ]
    rows[f"W2 particles, softmax–{name}"] = [
        float(w2(a, b))
        for a, b in zip(clouds["softmax"].measures, clouds[name].measures, strict=True)
    ]
    rows[f"twisted (M), softmax–{name}"] = [
        float(twisted_w2(a, b, M=M))
        for a, b in zip(clouds["softmax"].measures, clouds[name].measures, strict=True)
    ]
for key, values in rows.items():
    print(f"{key:32s} at t = {t1}: {values[-1]:.4f}")

# %%
# Masked against unmasked softmax
# -------------------------------
# Causal attention lets a token at position s see only positions ≤ s. Plain W2 may pair a
# token with one at another position; the conditional distance compares each position's
# tokens with the same position's tokens, so it is never smaller.

cond = [
    float(conditional_w2(a, b))
    for a, b in zip(clouds["softmax"].measures, masked.measures, strict=True)
]
plain = [float(w2(a, b)) for a, b in zip(clouds["softmax"].measures, masked.measures, strict=True)]
print(f"masked vs softmax at t = {t1}: conditional W2 {cond[-1]:.4f} ≥ W2 {plain[-1]:.4f}")

# %%
# The picture
# -----------

fig, (ax0, ax1, ax2) = plt.subplots(1, 3, figsize=(15, 4.3))
for i, name in enumerate(("L2", "Sinkhorn")):
    for key, style in (
        ("Bures", "-"),
        ("√Sinkhorn", "--"),
        ("W2 particles", ":"),
        ("twisted (M)", "-."),
    ):
        ax0.plot(save, rows[f"{key}, softmax–{name}"], style, color=f"C{i}", label=f"{key}: {name}")
ax0.set_xlabel("t")
ax0.set_title("distance to softmax attention")
ax0.legend(fontsize=7, ncol=2)

ax1.plot(save, cond, "o-", label="conditional W2")
ax1.plot(save, plain, "s--", label="W2 (positions ignored)")
ax1.set_xlabel("t")
ax1.set_title("masked vs unmasked softmax")
ax1.legend(fontsize=8)

final_soft, final_mask = clouds["softmax"].final, masked.final
scatter = ax2.scatter(*final_mask.points.T, c=positions, cmap="viridis", s=8, label="masked")
ax2.scatter(*final_soft.points.T, s=8, facecolors="none", edgecolors="C3", lw=0.5, label="softmax")
fig.colorbar(scatter, ax=ax2, label="position s")
ax2.set_title(f"t = {t1}: masked tokens coloured by position")
ax2.legend(fontsize=8)
fig.tight_layout()
plt.show()
