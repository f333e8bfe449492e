"""Experiment 7, part 2: the real token clouds against three models with the real weights.

The models, all from the embedding output of the sentence (depth 0) through the 6 layers:

- **pde**: the attention-only Transformer PDE (``load_minilm().schedule``, RK4);
- **postln**: attention followed by the model's own attention-output LayerNorm, Euler with
  h = 1 per layer — h ← LN_l(h + Attn_l(h)), BERT's Post-LN attention sublayer exactly, the
  MLP sublayer left out (``MiniLM.post_ln_schedule``);
- **postln2**: the same followed by the MLP sublayer's LayerNorm with the MLP set to zero,
  h ← LN'_l(LN_l(h + Attn_l(h))): the whole BERT layer minus its MLP
  (``MiniLM.post_ln_schedule(output_norm=True)``);
- **sphere**: the post-LN sphere model of Geshkovski et al. with the same weights, tokens
  normalised onto the sphere of radius R_l = |γ|₂ of the LayerNorm whose output layer l
  reads in the real model (the scale at which the real attention acts;
  ``MiniLM.sphere_schedule``) and moved by the tangent flow (RK4);

and, as the reference that any model should beat, **still**: the tokens left where they
are at depth 0.

Measured per depth against the real model's hidden states: W2 between the clouds mapped to
the unit sphere (x ↦ x/|x|, token by token), the pairwise cosine similarities (the
distribution, and its 1-D W1 distance to the real one), effective rank and anisotropy of
the covariance, and the attention's ESS per head; for shape alone, W2 between the
standardised clouds (centred, divided by their RMS radius).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from tpde.flows import integrate
from tpde.measures import Empirical
from tpde.metrics import w2
from tpde.metrics.diagnostics import anisotropy, effective_rank

from .. import framework as fw

LAYERS = 6
MODELS = ("pde", "postln", "postln2", "sphere")
NORMALISED = MODELS[1:]  # the routes whose shapes and ESS are new here
ROUTES = ("real", *MODELS)  # the clouds measured; "still" is the depth-0 cloud of "real"
LABELS = {
    "real": "real model",
    "still": "tokens left at depth 0",
    "pde": "attention-only PDE",
    "postln": "attention + the model's LayerNorm (Euler, h = 1)",
    "postln2": "attention + both LayerNorms, MLP = 0 (Euler, h = 1)",
    "sphere": "sphere post-LN flow (radius |γ| of the input LN)",
    "ode": "Gaussian moment ODE (until blow-up)",
}
COLORS = {"real": "C0", "pde": "C1", "ode": "C2", "postln": "C3", "postln2": "C5",
          "sphere": "C4", "still": "k"}  # fmt: skip
SHORT = {
    "pde": "attention-only PDE",
    "postln": "attention + LayerNorm",
    "postln2": "attention + both LayerNorms",
    "sphere": "sphere",
}


# ---------------------------------------------------------------------- the normalised flows
def normalised_flows(schedules: dict, tokens: Empirical, dt: float) -> tuple[dict, dict]:
    """Clouds at the 7 layer boundaries of the normalised models, and their statuses.

    ``schedules``: route -> schedule for "postln", "postln2" (Euler with h = 1: the discrete
    layer) and "sphere" (RK4 with step ``dt`` from the tokens mapped to the unit sphere: the
    tangent flow, renormalised every step).
    """
    saves, euler = LAYERS + 1, {"dt": 1.0, "method": "euler"}
    flows = {
        route: integrate(schedules[route], tokens, 6.0, save=saves, events=(), **euler)
        for route in ("postln", "postln2")
    }
    flows["sphere"] = integrate(
        schedules["sphere"],
        tokens.normalized(),
        6.0,
        dt=dt,
        method="rk4",
        save=saves,
        events=(),
    )
    clouds = {route: [m.points for m in flow.measures] for route, flow in flows.items()}
    return clouds, {route: flow.status for route, flow in flows.items()}


# ---------------------------------------------------------------------- measurements
def span_coordinates(points: torch.Tensor) -> torch.Tensor:
    """The centred cloud in an orthonormal basis of its span, shape (n, rank)."""
    centred = points - points.mean(0)
    _, s, vh = torch.linalg.svd(centred, full_matrices=False)
    rank = int((s > s[0] * 1e-10).sum()) if s.numel() and s[0] > 0 else 1
    return centred @ vh[:rank].T


def cloud_shape(points: torch.Tensor) -> tuple[float, float]:
    """(effective rank, λ_max / tr Σ) of the cloud's covariance.

    Computed in the cloud's span (rank ≤ n − 1): the covariance there has the same nonzero
    eigenvalues as the d × d one, and both measures depend on those only.
    """
    return covariance_shape(Empirical(span_coordinates(points)).cov())


def covariance_shape(cov: torch.Tensor) -> tuple[float, float]:
    """(effective rank, λ_max / tr Σ) of a covariance (d, d)."""
    return float(effective_rank(cov)), float(anisotropy(cov))


def on_unit_sphere(points: torch.Tensor) -> torch.Tensor:
    """x ↦ x/|x|, token by token."""
    return torch.nn.functional.normalize(points, dim=-1)


def cosines(points: torch.Tensor) -> np.ndarray:
    """The n(n − 1)/2 pairwise cosine similarities ⟨x_i, x_j⟩/(|x_i||x_j|), i < j."""
    unit = on_unit_sphere(points)
    i, j = torch.triu_indices(len(unit), len(unit), 1, device=unit.device)
    return ((unit[i] * unit[j]).sum(-1)).numpy()


def sphere_w2(x: torch.Tensor, y: torch.Tensor) -> float:
    """W2 between the two clouds mapped to the unit sphere (chordal distance, ≤ 2)."""
    return float(w2(Empirical(on_unit_sphere(x)), Empirical(on_unit_sphere(y))))


def standardised(points: torch.Tensor) -> torch.Tensor:
    """The cloud centred and divided by its RMS radius √tr Σ (shape only: no mean, no scale)."""
    centred = points - points.mean(0)
    return centred / centred.pow(2).sum(-1).mean().sqrt()


def standard_w2(x: torch.Tensor, y: torch.Tensor) -> float:
    """W2 between the two standardised clouds (≤ 2: both have unit RMS radius)."""
    return float(w2(Empirical(standardised(x)), Empirical(standardised(y))))


def ess_fraction(field, layer: int, points: torch.Tensor) -> np.ndarray:
    """(heads,): the attended-token ESS 1/Σ_j w_ij² (mean over queries) / n, head by head."""
    mu = Empirical(points)
    out = np.empty(len(field.heads))
    for h, head in enumerate(field.heads):
        form = head.softmax_form(float(layer), mu, points)
        w = torch.softmax(form.queries @ form.keys.transpose(-1, -2) + form.key_bias, dim=-1)
        out[h] = float((1 / (w**2).sum(-1)).mean()) / points.shape[0]
    return out


def compare(clouds: dict, fields: dict) -> dict:
    """Per-sentence measures of every route against the real clouds (keys as saved).

    ``clouds``: route -> 7 tensors (n, d), depth 0 … 6, "real" included; ``fields``: route
    -> the 6 fields whose ESS is taken on the route's own input of each layer.
    """
    real = clouds["real"]
    row = {}
    for key, distance in (("w2", sphere_w2), ("w2std", standard_w2)):
        row[f"{key}_still"] = [distance(real[0], x) for x in real]
        for route in MODELS:
            pairs = zip(real, clouds[route], strict=True)
            row[f"{key}_{route}"] = [distance(a, b) for a, b in pairs]
    for route in ROUTES:
        row[f"cos_{route}"] = [cosines(x) for x in clouds[route]]
        row[f"norm_{route}"] = [float(x.norm(dim=-1).pow(2).mean().sqrt()) for x in clouds[route]]
    for route in NORMALISED:
        shapes = [cloud_shape(x) for x in clouds[route]]
        row[f"erank_{route}"], row[f"aniso_{route}"] = map(list, zip(*shapes, strict=True))
        row[f"ess_{route}"] = np.stack(
            [ess_fraction(fields[route][l], l, clouds[route][l]) for l in range(LAYERS)]
        )
    return row


def stack_rows(rows: list[dict]) -> dict:
    """The rows' arrays: (sentences, …) per key, cosines pooled over sentences (7, pairs)."""
    arrays = {}
    for key in rows[0]:
        if key.startswith("cos_"):
            arrays[key] = np.concatenate([np.stack(row[key]) for row in rows], axis=1)
        else:
            arrays[key] = np.array([row[key] for row in rows], dtype=float)
    return arrays


# ---------------------------------------------------------------------- summary
def nanmedian(x, axis=0):
    """numpy's nanmedian without its all-NaN warning (such columns stay NaN)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(x, axis=axis)


def cosine_w1(a: np.ndarray, b: np.ndarray) -> float:
    """W1 between two 1-D samples of the same size: the mean gap of their sorted values."""
    return float(np.abs(np.sort(a) - np.sort(b)).mean())


def summarise(arrays: dict) -> dict:
    """Medians over sentences; "track" is a sentence's mean W2 over depths 1 … 6."""
    track = {r: arrays[f"w2_{r}"][:, 1:].mean(1) for r in ("still", *MODELS)}
    shape = {r: arrays[f"w2std_{r}"][:, 1:].mean(1) for r in ("still", *MODELS)}
    ordered = sorted(MODELS, key=lambda r: float(np.median(track[r])))
    best, second = ordered[0], ordered[1]
    lowest = np.argmin(np.stack([track[r] for r in MODELS]), axis=0)
    out = {
        "best_model": best,
        "best_margin": float(np.median(track[second]) / np.median(track[best])),
        "best_share": float((lowest == MODELS.index(best)).mean()),
        "best_vs_still": float(np.median(track[best]) / np.median(track["still"])),
        **{f"track_{r}": float(np.median(v)) for r, v in track.items()},
        **{f"track_std_{r}": float(np.median(v)) for r, v in shape.items()},
        "best_model_std": min(MODELS, key=lambda r: float(np.median(shape[r]))),
        **{f"w2_{r}": nanmedian(arrays[f"w2_{r}"]).tolist() for r in ("still", *MODELS)},
        **{f"cos_median_{r}": np.median(arrays[f"cos_{r}"], axis=1).tolist() for r in ROUTES},
        **{
            f"cos_w1_{r}": [
                cosine_w1(arrays["cos_real"][k], arrays[f"cos_{r}"][k]) for k in range(LAYERS + 1)
            ]
            for r in MODELS
        },
        **{f"norm_{r}": nanmedian(arrays[f"norm_{r}"]).tolist() for r in ROUTES},
        "sphere_radii": arrays["sphere_radii"].tolist(),
    }
    for route in NORMALISED:
        out[f"erank_{route}"] = nanmedian(arrays[f"erank_{route}"]).tolist()
        out[f"aniso_{route}"] = nanmedian(arrays[f"aniso_{route}"]).tolist()
        ess = arrays[f"ess_{route}"]  # (sentences, layers, heads): median over both
        out[f"ess_{route}"] = nanmedian(ess.transpose(0, 2, 1).reshape(-1, LAYERS)).tolist()
    return out


# ---------------------------------------------------------------------- figures
def band(ax, x, values, label, color, style="-"):
    """Median over sentences with the interquartile band."""
    if len(x) == 0:  # nothing saved (the ODE blew up before its first save)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, mid, hi = np.nanpercentile(values, [25, 50, 75], axis=0)
    ax.plot(x, mid, style, color=color, label=label, marker="o", ms=3)
    ax.fill_between(x, lo, hi, color=color, alpha=0.2, lw=0)


def shape_panels(axes, depth, arrays, routes, labels, colors, fontsize=8) -> None:
    """Effective rank and anisotropy by depth in axes[1] and axes[2] (one band per route);
    every panel labelled by depth, with a legend."""
    for ax, q, title in ((axes[1], "erank", "effective rank"), (axes[2], "aniso", "λ_max / tr Σ")):
        for route in routes:
            band(ax, depth, arrays[f"{q}_{route}"], labels[route], colors[route])
        ax.set_title(title)
    axes[2].set_yscale("log")
    for ax in axes:
        ax.set_xlabel("depth (layer boundary)")
        ax.legend(fontsize=fontsize)


def plot(plt, arrays: dict, out) -> list:
    """Two figures: W2, effective rank, anisotropy by depth; the cosine distributions."""
    depth = np.arange(LAYERS + 1)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4))
    band(axes[0], depth, arrays["w2_still"], LABELS["still"], COLORS["still"], "--")
    for route in MODELS:
        band(axes[0], depth, arrays[f"w2_{route}"], LABELS[route], COLORS[route])
    axes[0].set_ylabel("W2 to the real cloud (tokens mapped to the unit sphere)")
    axes[0].set_title("distance to the real token cloud")
    shape_panels(axes, depth, arrays, ROUTES, LABELS, COLORS, fontsize=7)
    fig.tight_layout()
    paths = [fw.savefig(fig, out / "real_attention_normalised.png")]

    fig, axes = plt.subplots(2, 3, figsize=(15, 7), sharex=True)
    bins = np.linspace(-1, 1, 61)
    for k, ax in zip(range(1, LAYERS + 1), axes.flat, strict=True):
        for route in ROUTES:
            values = arrays[f"cos_{route}"][k]
            ax.hist(values, bins=bins, density=True, histtype="step", color=COLORS[route],
                    label=LABELS[route], lw=1.8 if route == "real" else 1.2)  # fmt: skip
            ax.axvline(np.median(values), color=COLORS[route], lw=0.8, ls=":")
        ax.set_title(f"depth {k} (after layer {k - 1})", fontsize=10)
        ax.set_xlabel("pairwise cosine similarity")
    axes[1, 2].legend(fontsize=7, loc="upper left")  # the real cloud is low there
    fig.suptitle("pairwise cosine similarities, pooled over sentences (dotted: medians)")
    fig.tight_layout()
    paths.append(fw.savefig(fig, out / "real_attention_cosines.png"))
    return paths


# ---------------------------------------------------------------------- report
def fmt(values, digits: int = 2) -> str:
    """Values joined by commas at ``digits`` decimals, None as a dash."""
    return ", ".join("—" if v is None else f"{v:.{digits}f}" for v in values)


def _less_collapsed(r: dict, route: str) -> list[bool]:
    """Is ``route``'s cloud at depth 6 less collapsed than the attention-only PDE's: higher
    effective rank, lower median cosine?"""
    return [
        r[f"erank_{route}"][-1] > r["erank_pde"][-1],
        r[f"cos_median_{route}"][-1] < r["cos_median_pde"][-1],
    ]


def claims(r: dict, n: int) -> list:
    """The two claims of the comparison, with their numbers."""
    best = r["best_model"]
    tracks = ", ".join(f"{SHORT[m]} {r[f'track_{m}']:.3f}" for m in MODELS)
    shapes = ", ".join(f"{SHORT[m]} {r[f'track_std_{m}']:.3f}" for m in MODELS)
    ratio = r["best_vs_still"]
    erank = ", ".join(f"{SHORT[m]} {r[f'erank_{m}'][-1]:.1f}" for m in MODELS)
    cosine = ", ".join(f"{SHORT[m]} {r[f'cos_median_{m}'][-1]:.2f}" for m in MODELS)
    # Both LayerNorm routes must be less collapsed on both measures for "agrees".
    both, one = _less_collapsed(r, "postln2"), _less_collapsed(r, "postln")
    cos_w1 = ", ".join(f"{SHORT[m]} {r[f'cos_w1_{m}'][-1]:.2f}" for m in MODELS)
    return [
        fw.Claim(
            "LayerNorm counteracts the collapse that attention alone shows (BERT is Post-LN, "
            "MATH.md §7)",
            f"at depth 6, effective rank real {r['erank_real'][-1]:.1f}, {erank}; median "
            f"pairwise cosine real {r['cos_median_real'][-1]:.2f}, {cosine} (depth 0: "
            f"{r['cos_median_real'][0]:.2f}); W1 between the model's and the real cosine "
            f"distributions: {cos_w1}",
            "agrees" if all(both + one) else "partly" if any(both + one) else "differs",
        ),
        fw.Claim(
            "A Transformer's token clouds follow its attention dynamics, depth as time (the "
            "paper's premise) — which model, with the real weights, tracks the real clouds",
            f"W2 to the real cloud (tokens on the unit sphere), mean over depths 1–6, median "
            f"over {n} sentences: {tracks}; tokens left at depth 0 {r['track_still']:.3f}. "
            f"Best: {SHORT[best]}, {r['best_margin']:.2f}× below the next model, lowest in "
            f"{r['best_share']:.0%} of sentences, {ratio:.2f}× the still tokens' distance. At "
            f"depth 6: {fmt([r[f'w2_{m}'][-1] for m in MODELS], 3)} ({', '.join(MODELS)}) "
            f"vs {r['w2_still'][-1]:.3f} still. Standardised clouds (centred, unit RMS "
            f"radius), same mean: {shapes}, still {r['track_std_still']:.3f}",
            "agrees" if ratio < 0.5 else "partly" if ratio < 1 else "differs",
        ),
    ]


def notes(r: dict) -> list[str]:
    return [
        "Normalised clouds: W2 is taken between the clouds mapped token by token onto the "
        "unit sphere (x ↦ x/|x|, chordal distance, ≤ 2), the map under which the cosine "
        "similarities are read. It ignores the norms, which the attention-only PDE lets grow "
        "and the LayerNorms fix, and keeps the common direction of the tokens, whose growth "
        "is the collapse (standardising each cloud would centre it away; the claim also "
        "quotes W2 between standardised clouds — centred, unit RMS radius — which compares "
        "shapes only). Every model starts at distance 0 (the embedding output).",
        f"Sphere radius: the sphere model moves layer l's tokens on the sphere of radius R_l "
        f"= |γ|₂ = √d·rms(γ) of the LayerNorm whose output layer l's attention reads in the "
        f"real model (embedding LN, then the previous layer's MLP-output LN): "
        f"{fmt(r['sphere_radii'], 1)}, the norm of γ ⊙ z + b for |z| = √d spread evenly "
        f"over the coordinates. Softmax attention is not scale-invariant (scores grow as R²), "
        f"so R_l must be the scale at which the real attention acts: the real clouds' RMS "
        f"token norms at depths 0 … 5 are {fmt(r['norm_real'][:-1], 1)} (medians over "
        f"sentences). On the unit sphere the same weights would attend almost uniformly. "
        f"Attended-token ESS/n per layer (median over heads and sentences): sphere "
        f"{fmt(r['ess_sphere'])}, + LayerNorm {fmt(r['ess_postln'])}, + both LayerNorms "
        f"{fmt(r['ess_postln2'])}. RMS token norms at depths 1 … 6: + LayerNorm "
        f"{fmt(r['norm_postln'][1:], 1)} (the attention-output LN with no LN after it), + "
        f"both LayerNorms {fmt(r['norm_postln2'][1:], 1)}, real {fmt(r['norm_real'][1:], 1)}.",
        f"One LayerNorm is not the whole story: with the attention-output LayerNorm alone "
        f"the tokens sit at RMS norm {fmt(r['norm_postln'][1:], 1)} (depths 1 … 6) where the "
        f"real next layer reads them at {fmt(r['norm_real'][1:], 1)} (its MLP-output "
        f"LayerNorm rescales them); scores grow as the norm squared, the heads sharpen "
        f"(ESS/n above) and the effective rank at depth 6 is {r['erank_postln'][-1]:.1f}, "
        f"against {r['erank_pde'][-1]:.1f} for attention alone and {r['erank_postln2'][-1]:.1f} "
        f"with both LayerNorms, while the median cosine ({r['cos_median_postln'][-1]:.2f}) "
        f"stays below attention alone's ({r['cos_median_pde'][-1]:.2f}).",
        "The two LayerNorm routes are discrete layers (Euler, h = 1): LN is not idempotent "
        "for general γ, b, so they have no small-step limit. They equal the real model with "
        "its MLP sublayers removed (h ← LN(h + Attn h)) and with its MLPs set to zero "
        "(h ← LN'(LN(h + Attn h))) — tests/pretrained, to 1e-12 in float64.",
    ]
