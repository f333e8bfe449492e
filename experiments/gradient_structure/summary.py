"""Numbers the ``gradient-structure`` report quotes, from the saved arrays only."""

from __future__ import annotations

import numpy as np

from .run import METRICS


def model_arrays(arrays: dict, name: str) -> dict:
    """The arrays of one model, without the ``{name}_`` prefix."""
    return {k[len(name) + 1 :]: v for k, v in arrays.items() if k.startswith(name + "_")}


def relative_best(a: dict, scheme: str) -> np.ndarray:
    """min over τ of W2(x + Δ, x + v)/W2(x, x + v), per (sentence, sublayer); NaN where no
    step of that scheme converged."""
    table = a[f"{scheme}_w2"] / a["network_w2"][..., None]
    out = np.full(table.shape[:-1], np.nan)
    defined = np.isfinite(table).any(-1)
    out[defined] = np.nanmin(table[defined], axis=-1)
    return out


def _median(values) -> float:
    values = np.asarray(values, dtype=float)
    return float(np.nanmedian(values)) if np.isfinite(values).any() else float("nan")


def medians(a: dict) -> dict:
    """One model's medians (over sentences, sublayers and heads where they apply)."""
    jko, explicit = relative_best(a, "jko"), relative_best(a, "explicit")
    both = np.isfinite(jko) & np.isfinite(explicit)
    agrees = a["energy_agrees"][np.isfinite(a["energy_agrees"])]
    best = np.fmin(jko, explicit)
    return {
        "layer_symmetry": _median(a["layer_symmetry"]),
        "layer_directionality": _median(a["layer_directionality"]),
        "symmetry": _median(a["symmetry"]),
        "definite_residual": _median(a["definite_residual"]),
        "dynamic_gap": _median(a["dynamic_gap"]),
        "control_symmetry": _median(a["control_symmetry"]),
        "control_definite_residual": _median(a["control_definite_residual"]),
        "control_dynamic_gap": _median(a["control_dynamic_gap"]),
        "energy_defined": int(agrees.size),
        "energy_total": int(a["energy_agrees"].size),
        "energy_scaled": int((a["energy_log_scale"] > 0).sum()),
        "energy_agree_share": float(agrees.mean()) if agrees.size else float("nan"),
        "jko_converged_share": float(a["jko_converged"].mean()),
        "jko_relative": _median(jko),
        "explicit_relative": _median(explicit),
        "best_relative": _median(best),
        "jko_closer": int((jko[both] < explicit[both]).sum()),
        "compared": int(both.sum()),
        "best_tau_jko": _median(a["best_tau_jko"]),
        "best_tau_explicit": _median(a["best_tau_explicit"]),
        **{f"metric_{c}": _median(a["metrics"][..., i]) for i, c in enumerate(METRICS)},
    }
