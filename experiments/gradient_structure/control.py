"""The ``gradient-structure`` study's family control: every family the loader reads, as a tiny
random model (:func:`tpde.pretrained.random_model`, no transformers), through the same
structure scores as the trained models.

Each registered family (:data:`tpde.pretrained.ARCHITECTURES`): its random checkpoint at width
``control_width``, 4 heads, ``control_layers`` layers (the family's options on: grouped-query
attention, biases, QK-norms, parallel blocks, windows, …), every parameter drawn (weights
N(0, 1/fan-in)), seeded ``seed + i`` for the i-th family (so families of equal shapes do not
share their draws), in float64. Weights only: per head the symmetry of W_Qᵀ W_K and the
definite residual ‖V − M_sA_s‖/‖V‖ (the distance to the nearest gradient flow), per layer
the directionality. Dynamically: the dynamic gap of each head on a random cloud — the
embedding of ``tokens`` uniformly random token ids (the model's own random embedding table:
N(0, 1) coordinates), run through the network to each sublayer.
"""

from __future__ import annotations

import numpy as np
import torch

from .. import framework as fw

#: The random models' vocabulary (token ids drawn uniformly from it).
VOCAB = 64
#: Per-head tables saved as (F, S, H) with NaN padding (F families, S sublayers).
HEAD_TABLES = ("symmetry", "definite_residual", "dynamic_gap")
#: Per-sublayer scores saved as (F, S).
LAYER_SCORES = ("symmetry", "directionality")


def family_scores(name: str, index: int, config) -> dict:
    """The scores of family ``name``'s random model (module notes): head tables (S, H) and
    layer scores (S,)."""
    from tpde.pretrained import model_structure, random_model

    seed = config.seed + index
    sizes = {"hidden": config.control_width, "layers": config.control_layers, "vocab": VOCAB}
    model = random_model(name, seed=seed, dtype=torch.float64, sizes=sizes)
    ids = torch.randint(0, VOCAB, (config.tokens,), generator=fw.torch_generator(seed))
    structure = model_structure(model, model.embed(ids)[0], cache={})
    out = {key: structure.table(key).numpy() for key in HEAD_TABLES}
    out.update({f"layer_{k}": structure.layer_scores(k).numpy() for k in LAYER_SCORES})
    return out


def _padded(tables: list[np.ndarray]) -> np.ndarray:
    """The tables stacked along a new first axis, NaN where one is shorter (fewer sublayers:
    ALBERT counts each block of its group)."""
    shape = tuple(max(t.shape[i] for t in tables) for i in range(tables[0].ndim))
    out = np.full((len(tables), *shape), np.nan)
    for i, t in enumerate(tables):
        out[(i, *(slice(0, s) for s in t.shape))] = t
    return out


def family_arrays(config) -> tuple[dict, list[str]]:
    """Every family's scores, stacked: arrays ``family_<score>`` of shape (F, S, H) or (F, S),
    and the family names in order."""
    from tpde.pretrained.families import FAMILIES

    names = list(FAMILIES)
    rows = [family_scores(name, i, config) for i, name in enumerate(names)]
    return {f"family_{key}": _padded([row[key] for row in rows]) for key in rows[0]}, names


def family_medians(arrays: dict, names: list[str]) -> dict:
    """Family → its medians over sublayers and heads: ``symmetry``, ``directionality`` (over
    sublayers), ``definite_residual``, ``dynamic_gap``."""
    out = {}
    for i, name in enumerate(names):
        out[name] = {
            "symmetry": float(np.nanmedian(arrays["family_symmetry"][i])),
            "directionality": float(np.nanmedian(arrays["family_layer_directionality"][i])),
            "definite_residual": float(np.nanmedian(arrays["family_definite_residual"][i])),
            "dynamic_gap": float(np.nanmedian(arrays["family_dynamic_gap"][i])),
        }
    return out


def family_table(medians: dict) -> str:
    """One row per family: its medians over heads (and layers)."""
    rows = [
        [name, f"{v['symmetry']:.3f}", f"{v['directionality']:+.3f}",
         f"{v['definite_residual']:.3f}", f"{v['dynamic_gap']:.3f}"]
        for name, v in medians.items()
    ]  # fmt: skip
    header = ["random family", "symmetry", "directionality", "‖V − M_sA_s‖/‖V‖", "dynamic gap"]
    return fw.markdown_table(header, rows)
