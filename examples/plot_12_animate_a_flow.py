r"""
Animating a flow
================

:func:`tpde.plot.animate` writes a trajectory as a GIF, one frame per saved measure:
particles as a scatter, Gaussians as ellipses, grids as images (matplotlib's Pillow
writer; no ffmpeg needed). Here softmax attention with an indefinite interaction matrix
stretches the tokens along one axis and gathers them into two clusters, while the grid
density follows the same flow.
"""

import os

import matplotlib.pyplot as plt
import torch

from tpde.fields import Softmax
from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian, Grid
from tpde.plot import animate, draw

SMALL = os.environ.get("TPDE_EXAMPLE_SIZE") == "small"  # the test suite runs a small size

F64 = torch.float64
A = torch.tensor([[0.6, 0.3], [-0.2, -0.4]], dtype=F64)  # symmetric part indefinite
V = torch.tensor([[1.0, 0.2], [-0.1, 0.8]], dtype=F64)
field = Softmax.from_interaction(A, V)
g0 = Gaussian(torch.tensor([0.5, -0.3], dtype=F64), torch.tensor([[1.0, 0.3], [0.3, 0.5]]))
cloud = Empirical.from_gaussian(
    g0, 300 if SMALL else 1500, generator=torch.Generator().manual_seed(0)
)
grid = Grid.from_gaussian(g0, (32, 32) if SMALL else (48, 48), -8.0, 8.0)

# %%
# Integrate, then animate
# -----------------------
# The GIFs are written to the current folder (the gallery shows them below).

frames = 9 if SMALL else 25
particles = integrate(field, cloud, 1.2, dt=0.05, method="rk4", save=frames)
density = integrate(field, grid, 1.2, save=frames)
gifs = [
    animate(particles, "softmax_particles.gif", title="particles", xlim=(-8, 8), ylim=(-8, 8)),
    animate(density, "softmax_grid.gif", title="grid density"),
]
print("wrote", *gifs)

# %%
# The last frame, drawn with :func:`tpde.plot.draw`
# -------------------------------------------------

fig, ax = plt.subplots(figsize=(5, 5))
draw(density.final, ax)
draw(particles.final, ax, color="C0", size=3)
ax.set_xlim(-8, 8)
ax.set_ylim(-8, 8)
ax.set_title("t = 1.2: grid (grey) and particles (blue)")
plt.show()
