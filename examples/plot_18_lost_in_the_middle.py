r"""
Causal attention and the lost-in-the-middle model
=================================================

Duerinckx, Geshkovski and Rossi ("Kinetic theory for Transformers and the
lost-in-the-middle phenomenon", `arXiv:2605.09213 <https://arxiv.org/abs/2605.09213>`_,
2026) study a toy decoder: n tokens on the circle, token i attending to the *strictly
earlier* tokens j < i with position-only ALiBi weights normalised over those
predecessors and an unnormalised exponential kernel,

.. math::

   \dot x_i = P^\perp_{x_i} \sum_{j < i} a_{ij}\, e^{\beta\langle x_i, x_j\rangle} x_j,
   \qquad a_{ij} = \frac{e^{-\lambda (i - j)}}{\sum_{k < i} e^{-\lambda (i - k)}},

so the first token has no predecessor and never moves. In tpde this is three wrappers
around the USA kernel (:class:`~tpde.fields.Exponential`):
:class:`~tpde.fields.Masked` with ``strict=True`` (earlier keys only) and
``position_bias=ALiBi(slopes=(λ,))`` (the weights :math:`a_{ij}`, normalised over the keys
each query sees), then :class:`~tpde.fields.Normalized` with post-LN (the tangent
projection; tokens stay on the circle). The tokens carry their positions
(``Empirical(points, positions=...)``); RK4 integrates them. The test suite checks these
trajectories against a plain loop over i and j
(tests/adversarial/test_round4_models.py).

A causal GroupedQueryAttention with ALiBi is a different model: its softmax includes
the token itself and normalises the scores, not the position weights alone.
"""

import os

import matplotlib.pyplot as plt
import numpy as np
import torch

from tpde.fields import ALiBi, Exponential, Masked, Normalized
from tpde.flows import integrate
from tpde.measures import Empirical

SMALL = os.environ.get("TPDE_EXAMPLE_SIZE") == "small"  # the test suite runs a small size
F64 = torch.float64

# %%
# The model
# ---------
# β = 1, λ = 0.5, n tokens drawn uniformly on the circle, positions 0 … n − 1.
n, beta, slope, T = (12, 1.0, 0.5, 4.0) if SMALL else (32, 1.0, 0.5, 10.0)
eye = torch.eye(2, dtype=F64)
kernel = Exponential(eye, eye, eye, scale=beta)  # e^{β⟨x, y⟩} y, no normaliser
causal = Masked(kernel, strict=True, position_bias=ALiBi(slopes=(slope,)))
field = Normalized(causal, "post-ln")
positions = torch.arange(float(n), dtype=F64)


def start(seed: int) -> Empirical:
    angles = 2 * np.pi * torch.rand(n, generator=torch.Generator().manual_seed(seed), dtype=F64)
    return Empirical(torch.stack([angles.cos(), angles.sin()], -1), positions=positions)


save = np.linspace(0.0, T, 21 if SMALL else 101)
run = integrate(field, start(0), T, dt=0.05, method="rk4", save=save, events=())
points = torch.stack([m.points for m in run.measures]).numpy()  # (times, n, 2)
angles = np.unwrap(np.arctan2(points[..., 1], points[..., 0]), axis=0)

# %%
# Trajectories and what the last token reads
# ------------------------------------------
# Left: the angle of every token over depth-time, coloured by its position (the first
# token, dark, stays put; later tokens are drawn towards their predecessors). Right: the
# attention weights of the last token on each source position j at depth-time T,
# a_{n−1,j} e^{β⟨x_{n−1}, x_j⟩} normalised over j, averaged over random starts.


def last_token_profile(measure: Empirical) -> np.ndarray:
    x = measure.points
    scores = torch.exp(beta * x[:-1] @ x[-1]) * torch.exp(-slope * (n - 1 - positions[:-1]))
    return (scores / scores.sum()).numpy()


seeds = range(4 if SMALL else 12)
finals = [integrate(field, start(s), T, dt=0.1, method="rk4", events=()).final for s in seeds]
profile = np.mean([last_token_profile(m) for m in finals], axis=0)

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
colours = plt.cm.viridis(np.linspace(0, 1, n))
for i in range(n):
    left.plot(run.times.numpy(), angles[:, i], color=colours[i], lw=1)
left.set_xlabel("depth-time t")
left.set_ylabel("angle of token i (unwrapped)")
left.set_title("tokens on the circle, coloured by position")
right.plot(np.arange(n - 1), profile, "o-")
right.set_xlabel("source position j")
right.set_ylabel("weight of the last token on j")
right.set_title(f"last token's attention at t = {T:g} (mean of {len(seeds)} starts)")
fig.tight_layout()
plt.show()
