r"""
A whole Transformer layer
=========================

A Transformer layer is attention *plus* a feed-forward block, each behind its own
normalisation. In a Pre-norm network (GPT-2 onwards, Llama) the layer reads

.. math::

   x \leftarrow x + \mathrm{Attn}[N_{1\#}\mu](N_1(x)), \qquad
   x \leftarrow x + F(N_2(x)),

with :math:`N_1, N_2` the layer's two norms (RMSNorm in Llama) and :math:`F` the MLP
(SwiGLU in Llama). Lu et al. (`arXiv:1906.02762 <https://arxiv.org/abs/1906.02762>`_) read
this as one **Lie–Trotter** step, with Euler sub-steps at :math:`h = 1`, of the flow

.. math::

   \dot x = \mathrm{Attn}[N_{1\#}\mu](N_1(x)) + F(N_2(x)),

and tpde writes the layer as exactly that sum of fields (MATH.md §8):
``Normalized(attention, RMSNorm(g1)) + Normalized(mlp, RMSNorm(g2))``. A Post-norm layer
(BERT: :math:`x \leftarrow LN_1(x + \mathrm{Attn}\,x);\ x \leftarrow LN_2(x + F x)`) is the
sum of two fields behind ``LayerNorm`` schemes, whose projections the splitting applies
after each part's sub-step.

Here: a random 4-layer Pre-RMSNorm network on 24 tokens in :math:`\mathbb R^2` (so the
clouds can be drawn). We check that ``integrate(..., dt=1, method="lie-trotter")`` *is* the
network, then refine the step towards the continuous-depth flow: Lie–Trotter converges at
order 1, Strang (the "Macaron" layer: half attention, MLP, half attention) at order 2.
"""

import matplotlib.pyplot as plt
import torch

from tpde.fields import LayerSchedule, MultiHead, Normalized, RMSNorm, SwiGLU
from tpde.flows import Splitting, integrate
from tpde.measures import Empirical

torch.manual_seed(0)
F64 = torch.float64
d, layers, n = 2, 4, 24


def layer():
    """One Pre-RMSNorm layer: two-head softmax attention + a SwiGLU MLP of width 8."""
    Q, K, V = (torch.randn(d, d, dtype=F64) for _ in range(3))
    attention = MultiHead.split(Q, K, 0.3 * V, heads=2)
    mlp = SwiGLU(*(0.4 * torch.randn(s, dtype=F64) for s in ((8, d), (8, d), (d, 8))))
    g1, g2 = (0.5 + torch.rand(d, dtype=F64) for _ in range(2))
    return Normalized(attention, RMSNorm(g1, eps=1e-6)) + Normalized(mlp, RMSNorm(g2, eps=1e-6))


network = LayerSchedule([layer() for _ in range(layers)])
mu0 = Empirical(torch.randn(n, d, dtype=F64))

# %%
# The network, by hand and as a flow
# ----------------------------------
# Lie–Trotter with Euler sub-steps at h = 1 over the schedule is the forward pass: for each
# layer, the attention sublayer, then the MLP sublayer.

x = mu0.points
for block in network.layers:
    for part in block.parts:
        x = x + part.velocity(Empirical(x))
flow = integrate(network, mu0, float(layers), dt=1.0, method="lie-trotter", save=layers + 1)
print("network by hand vs Lie–Trotter, h = 1:", float((flow.final.points - x).abs().max()))

# %%
# Towards continuous depth
# ------------------------
# The same schedule with finer steps h = 1/2, 1/4, …; the continuous-depth limit is the
# unsplit flow, here dopri5 at rtol 1e-9.

limit = integrate(network, mu0, float(layers), method="dopri5", rtol=1e-9, atol=1e-12)
steps = [1.0, 0.5, 0.25, 0.125]
errors = {}
for kind in ("lie-trotter", "strang"):
    method = Splitting(kind, inner="rk4")  # the split parts exactly, the splitting's error only
    errors[kind] = [
        float(
            (integrate(network, mu0, float(layers), dt=h, method=method).final.points
             - limit.final.points).norm() / limit.final.points.norm()
        )
        for h in steps
    ]  # fmt: skip
    print(kind, "relative error:", ", ".join(f"{e:.2e}" for e in errors[kind]))

# %%
# The figure: the token cloud layer by layer (network, h = 1) and the error of the splittings
# against the continuous-depth flow, with slopes 1 and 2 for reference.

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
colours = plt.cm.viridis(torch.linspace(0, 1, layers + 1).numpy())
for index, measure in enumerate(flow.measures):
    points = measure.points.numpy()
    left.scatter(points[:, 0], points[:, 1], s=12, color=colours[index], label=f"layer {index}")
final = limit.final.points.numpy()
left.scatter(final[:, 0], final[:, 1], s=40, facecolors="none", edgecolors="k",
             label="continuous depth")  # fmt: skip
left.set_title("tokens by depth (network, h = 1)")
left.legend(fontsize=7, loc="best")
for kind, marker in (("lie-trotter", "o"), ("strang", "s")):
    right.loglog(steps, errors[kind], marker=marker, label=kind)
reference = torch.tensor(steps, dtype=F64)
right.loglog(steps, (errors["lie-trotter"][-1] * reference / steps[-1]).numpy(), "k:", lw=1,
             label="slope 1")  # fmt: skip
right.loglog(steps, (errors["strang"][-1] * (reference / steps[-1]) ** 2).numpy(), "k--", lw=1,
             label="slope 2")  # fmt: skip
right.set_xlabel("step h (layers per step)")
right.set_ylabel("relative error vs continuous depth")
right.set_title("the network is the h = 1 splitting of its flow")
right.legend(fontsize=8)
fig.tight_layout()
plt.show()
