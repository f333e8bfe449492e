r"""JKO steps of real attention layers and metrics between their clouds (MATH.md §5, §12).

:func:`layer_steps` asks whether a trained attention sublayer is better read as an implicit
(JKO) or an explicit step of its own nearest gradient field Γ_s (:class:`~tpde.fields.
StructuredAttention`). From the tokens a sublayer reads, y = N₁(x) for Pre-norm and x for
Post-norm (as :func:`~tpde.pretrained.depth_energies`), three displacements of the residual
stream x:

- the network's own attention update v of the residual stream, from the per-sublayer split
  (Pre-norm: Attn[N₁#μ](N₁x); Peri-norm: N₂(Attn[N₁#μ](N₁x)), its output norm included, which
  the structure lacks); for Post-norm Attn[μ](x) before the LayerNorm, which rescales every
  token and is not part of the attention's step (as :func:`~tpde.pretrained.depth_energies`);
- the explicit step Δ_E(τ) = τ Γ_s[y](y);
- the JKO step Δ_J(τ) = y_τ − y of :func:`tpde.flows.structured_jko_step` in the field's
  twisted metric with its *semidefinite* mobility (each head in its own metric; a sum of
  heads by additive splitting, exact where the heads are orthogonal), with its status.

Each is compared to the network's next cloud x + v, in W2 (exact OT,
:func:`tpde.metrics.w2`) and in the metric frozen at the input
(:func:`tpde.flows.frozen_metric_distance` of Δ − v: finite on the range of the mobilities,
with the share of Δ − v off that range), over a grid of τ; the best τ minimises the W2.

:func:`layer_metrics` tabulates W2, the Sinkhorn divergence, Bures between the clouds'
Gaussian fits and the twisted distance between consecutive residual-stream clouds
x_l → x_{l+1} (the twisted one with the mobility Σ_h s_h M_h of layer l's nearest structure,
in an orthonormal basis U of its range: twisted_w2(Uᵀx_l, Uᵀx_{l+1}, M = UᵀΣ_h s_hM_hU),
the motion off the range being invisible to it: its share is reported).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from tpde.flows import frozen_metric_distance, structured_jko_step
from tpde.measures import Empirical, Gaussian
from tpde.metrics import bures_wasserstein, sinkhorn_divergence, twisted_w2, w2
from tpde.pretrained.structure import (
    _layer_indices,
    _read_by,
    _sublayer_inputs,
    attention_step,
    nearest,
)
from tpde.pretrained.transformer import Transformer

__all__ = ["LayerMetrics", "LayerSteps", "layer_metrics", "layer_steps"]

#: Relative eigenvalue below which a direction is outside the layer mobility's range.
RANGE_RTOL = 1e-8


@dataclass(frozen=True)
class LayerSteps:
    """Result of :func:`layer_steps`: S attention sublayers, T step sizes.

    Attributes
    ----------
    places : tuple of (layer, block).
    taus : (T,) the step sizes scanned.
    jko_w2, explicit_w2 : (S, T) W2(x + Δ, x + v) of the JKO and explicit steps.
    jko_frozen, explicit_frozen : (S, T) the frozen-metric length of Δ − v.
    network_w2 : (S,) W2(x, x + v), the size of the network's step (the scale).
    network_frozen : (S,) the frozen-metric length of v on the range.
    off_range : (S,) share of ‖v‖² outside the range of the layer's mobilities.
    converged : (S, T) bool, whether every head's JKO solve converged (a False entry's
        distances are NaN: an unconverged step is not read as a result).
    log_scale : (S,) the sublayer's common log-factor c of its metric weights
        (:meth:`~tpde.fields.StructuredAttention.energy_log_scale` at the input: 0 unless
        its energies pass √(the largest float), as a real decoder's unnormalised scores
        make them): the frozen lengths are e^{−c/2} times their values, so they compare
        within a sublayer (each head's JKO step scales its own objective, which leaves the
        step unchanged: :func:`tpde.flows.structured_jko_step`).
    messages : tuple of str, the failures ("layer l, τ: …").
    """

    places: tuple
    taus: np.ndarray
    jko_w2: np.ndarray
    explicit_w2: np.ndarray
    jko_frozen: np.ndarray
    explicit_frozen: np.ndarray
    network_w2: np.ndarray
    network_frozen: np.ndarray
    off_range: np.ndarray
    converged: np.ndarray
    log_scale: np.ndarray
    messages: tuple

    def best(self, scheme: str) -> tuple[np.ndarray, np.ndarray]:
        """(best τ, W2 there) per sublayer for "jko" or "explicit" (NaN where none converged)."""
        if scheme not in ("jko", "explicit"):
            raise ValueError(f"scheme must be 'jko' or 'explicit'; received {scheme!r}.")
        table = self.jko_w2 if scheme == "jko" else self.explicit_w2
        taus = np.full(len(table), np.nan)
        values = np.full(len(table), np.nan)
        for s, row in enumerate(table):
            if np.isfinite(row).any():
                i = int(np.nanargmin(row))
                taus[s], values[s] = self.taus[i], row[i]
        return taus, values


def _check_model(model, name: str) -> None:
    if not isinstance(model, Transformer):
        raise TypeError(
            f"{name} reads a tpde.pretrained.Transformer (tpde.pretrained.load); received "
            f"{type(model).__name__}."
        )


def layer_steps(
    model,
    mu: Empirical,
    taus,
    *,
    layers=None,
    tol: float | None = None,
    max_iter: int = 100,
    engine: str = "auto",
    cache=None,
) -> LayerSteps:
    """JKO, explicit and network steps of each attention sublayer (module notes).

    Parameters
    ----------
    model : :class:`~tpde.pretrained.Transformer`.
    mu : Empirical, a sentence's depth-0 tokens (``model.embed(...)[0]``).
    taus : sequence of step sizes > 0 to scan.
    layers : layer indices (default all; the tokens still run through every layer).
    tol, max_iter : of each head's JKO solve (:func:`tpde.flows.structured_jko_step`).
    engine : pairwise engine of the network's velocities.
    cache : dict of projections by (layer, block), as :func:`~tpde.pretrained.model_structure`'s.

    Returns
    -------
    :class:`LayerSteps` (the steps and distances in float64).
    """
    taus = np.asarray(taus, dtype=float)
    if taus.ndim != 1 or len(taus) == 0 or not (taus > 0).all():
        raise ValueError(f"taus must be a non-empty sequence of steps > 0; received {taus}.")
    _check_model(model, "layer_steps")
    clouds = _sublayer_inputs(model, mu, engine)
    places, rows, messages = [], [], []
    for l in _layer_indices(model, layers):
        for b, block in enumerate(getattr(model.layers[l], "blocks", (model.layers[l],))):
            x = clouds[l][2 * b]
            seen = _read_by(block, x, mu)
            v = attention_step(block, clouds[l], b, seen, engine).detach().double()
            near, _ = nearest(block, (l, b), cache)
            row, failed = _steps_of(near, _double(seen), x.detach().double(), v, taus, tol,
                                    max_iter)  # fmt: skip
            places.append((l, b))
            rows.append(row)
            messages += [f"layer {l}, block {b}, τ = {t:g}: {m}" for t, m in failed]
    stacked = {key: np.array([r[key] for r in rows]) for key in rows[0]}
    return LayerSteps(tuple(places), taus, messages=tuple(messages), **stacked)


def _weights64(mu: Empirical) -> torch.Tensor:
    """μ's weights in float64, renormalised (float32 weights sum to 1 only to ~1e-7)."""
    w = mu.weights.detach().double()
    return w / w.sum()


def _double(mu: Empirical) -> Empirical:
    return Empirical(mu.points.detach().double(), _weights64(mu), positions=mu.positions)


def _steps_of(near, seen: Empirical, x: torch.Tensor, v: torch.Tensor, taus, tol, max_iter):
    """One sublayer's row of :class:`LayerSteps` and its unconverged (τ, message) pairs."""
    target = Empirical(x + v, seen.weights)
    velocity = near.velocity(seen).detach()
    scale = near.energy_log_scale(seen)
    frozen = _frozen(near, seen, scale)
    row = {k: np.full(len(taus), np.nan) for k in ("jko_w2", "explicit_w2", "jko_frozen",
                                                  "explicit_frozen")}  # fmt: skip
    row["converged"] = np.zeros(len(taus), dtype=bool)
    failed = []
    for i, tau in enumerate(taus):
        explicit = float(tau) * velocity
        row["explicit_w2"][i] = float(w2(Empirical(x + explicit, seen.weights), target))
        row["explicit_frozen"][i] = frozen(explicit - v)[0]
        try:
            step = structured_jko_step(near, seen, float(tau), tol=tol, max_iter=max_iter)
        except ValueError as err:  # the energy is not finite at the input (inf scores)
            if "finite energy" not in str(err):
                raise
            failed.append((float(tau), str(err).split(":")[0]))
            continue
        row["converged"][i] = step.converged
        if not step.converged:
            failed.append((float(tau), step.message))
            continue
        jko = step.measure.points - seen.points
        row["jko_w2"][i] = float(w2(Empirical(x + jko, seen.weights), target))
        row["jko_frozen"][i] = frozen(jko - v)[0]
    row["network_w2"] = float(w2(Empirical(x, seen.weights), target))
    row["network_frozen"], row["off_range"] = frozen(v)
    row["log_scale"] = scale
    return row, failed


def _frozen(near, seen: Empirical, log_scale: float):
    """Δ ↦ (e^{−log_scale/2} × frozen-metric length, off-range share)."""

    def length(delta: torch.Tensor) -> tuple[float, float]:
        out = frozen_metric_distance(near, seen, delta, log_scale=log_scale)
        return float(out.distance), float(out.off_range)

    return length


@dataclass(frozen=True)
class LayerMetrics:
    """Result of :func:`layer_metrics`: one row per layer l, the distances x_l → x_{l+1}.

    Attributes
    ----------
    layers : (L,) int, the layer l of each row.
    w2, sinkhorn, bures, twisted : (L,) float64, the four distances (module notes).
    twisted_rank : (L,) int, the rank r of the layer's mobility (the twisted distance's
        dimension).
    off_range : (L,) share of Σ_i|x_{l+1,i} − x_{l,i}|² outside that range.
    """

    layers: np.ndarray
    w2: np.ndarray
    sinkhorn: np.ndarray
    bures: np.ndarray
    twisted: np.ndarray
    twisted_rank: np.ndarray
    off_range: np.ndarray

    COLUMNS = ("w2", "sinkhorn", "bures", "twisted", "twisted_rank", "off_range")

    def rows(self) -> list[dict]:
        """The table as a list of {column: value} rows, one per layer."""
        return [
            {"layer": int(l), **{c: float(getattr(self, c)[i]) for c in self.COLUMNS}}
            for i, l in enumerate(self.layers)
        ]

    def __str__(self) -> str:
        head = "layer " + " ".join(f"{c:>12}" for c in self.COLUMNS)
        lines = [head] + [
            f"{r['layer']:5d} " + " ".join(f"{r[c]:12.4g}" for c in self.COLUMNS)
            for r in self.rows()
        ]
        return "\n".join(lines)


def layer_metrics(model, mu: Empirical, *, layers=None, blur: float = 0.05,
                  engine: str = "auto", cache=None) -> LayerMetrics:  # fmt: skip
    """W2, Sinkhorn, Bures and twisted distances between consecutive layers' clouds.

    Parameters
    ----------
    model : :class:`~tpde.pretrained.Transformer`.
    mu : Empirical, a sentence's depth-0 tokens.
    layers : layer indices l (row l compares layer l's input and output clouds; default all).
    blur : the Sinkhorn divergence's blur (ε = blur²,
        :func:`tpde.metrics.sinkhorn_divergence`), in the tokens' units.
    engine : pairwise engine of the forward pass.
    cache : dict of projections by (layer, block), as :func:`~tpde.pretrained.model_structure`'s.

    Returns
    -------
    :class:`LayerMetrics` (float64; module notes).
    """
    _check_model(model, "layer_metrics")
    indices = _layer_indices(model, layers)
    states = model.hidden_states(mu, engine=engine).detach().double()
    w = _weights64(mu)
    cols = {c: [] for c in LayerMetrics.COLUMNS}
    for l in indices:
        a, b = Empirical(states[l], w), Empirical(states[l + 1], w)
        cols["w2"].append(float(w2(a, b)))
        cols["sinkhorn"].append(float(sinkhorn_divergence(a, b, blur, engine="dense")))
        cols["bures"].append(float(bures_wasserstein(_fit(a), _fit(b))))
        twisted, rank, off = _twisted(model.layers[l], l, states[l], states[l + 1], w, cache)
        cols["twisted"].append(twisted)
        cols["twisted_rank"].append(rank)
        cols["off_range"].append(off)
    arrays = {c: np.array(v, dtype=float) for c, v in cols.items()}
    arrays["twisted_rank"] = arrays["twisted_rank"].astype(int)
    return LayerMetrics(np.array(indices), **arrays)


def _fit(mu: Empirical) -> Gaussian:
    """The Gaussian with μ's mean and covariance (semidefinite when n ≤ d)."""
    w, x = mu.weights, mu.points
    mean = w @ x
    centred = x - mean
    cov = (centred * w[:, None]).mT @ centred
    return Gaussian(mean, 0.5 * (cov + cov.mT))


def _twisted(layer, l: int, x0: torch.Tensor, x1: torch.Tensor, w: torch.Tensor, cache):
    """(twisted W2 on the range, its rank r, the share of the motion off the range)."""
    blocks = getattr(layer, "blocks", (layer,))
    total = 0
    for b, block in enumerate(blocks):
        near, _ = nearest(block, (l, b), cache)
        total = total + sum(h.sign * h.M.to(x0) for h in near.heads)
    evals, vecs = torch.linalg.eigh(total)
    U = vecs[:, evals > RANGE_RTOL * evals.abs().max()]
    reduced = U.mT @ total @ U
    dist = twisted_w2(Empirical(x0 @ U, w), Empirical(x1 @ U, w), M=0.5 * (reduced + reduced.mT))
    delta = x1 - x0
    off = (w * (delta - delta @ U @ U.mT).square().sum(-1)).sum()
    share = off / (w * delta.square().sum(-1)).sum().clamp_min(1e-300)
    return float(dist), U.shape[1], float(share)
