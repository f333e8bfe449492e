r"""JKO steps of a structured attention field (a sum of twisted gradient flows, MATH.md §12).

Head h of a :class:`~tpde.fields.StructuredAttention` is exactly the gradient ascent of
s_h E_h, E_h(μ) = ½∬K^h dμdμ, in the metric frozen at μ_k

    d_h(ν, μ_k)² = Σ_i w_i K^h_{μ_k}(x_i) (y_i − x_i)ᵀ(s_h M_h)⁺(y_i − x_i),  y_i − x_i ∈ ran M_h,

a twisted W2 whose mobility s_h M_h is only *semidefinite* (rank ≤ k ≪ d in a real head):
the metric is infinite off range(M_h), so the step moves in range(M_h) only. The twisted
geometry of :func:`tpde.flows.jko_step` takes a definite mobility (``spd_mobility``); its
particle problem (:class:`~tpde.flows.jko_prox.ParticleProx`, y = x + √τ c_i R ζ_i with
R = (sM)^{1/2}) is already the degenerate one when R is the semidefinite root, since ζ then
moves y in range(M) with d² = τ|ζ|² on it. This module uses that problem directly.

A head with s = +1 ascends E_h = ½∬e^{score}: −E_h decreases exponentially along
range(M_h) against the quadratic distance, so the JKO problem has no global minimiser; the
step is the local minimiser reached from the explicit warm start, which exists for τ small
(the solve reports "not_converged" where it does not).

One head (w = 0): :func:`structured_jko_step` is the JKO step μ_{k+1} ∈ argmin_ν
−s E(ν) + d(ν, μ_k)²/(2τ), converging at order 1 in τ to the flow ẋ = Γ_s[μ](x)
(Jordan, Kinderlehrer, Otto 1998; Ambrosio, Gigli, Savaré 2008). Several heads: their sum
is one gradient flow only in the cases of MATH.md §12 (shared interaction, orthogonal
subspaces); in general it is not, so there is no JKO step of the layer as one energy in one
metric. The step here is the *additive splitting* y = x + Σ_h (y_h − x) + τ w, each y_h the
JKO step of head h alone from μ_k in its own metric and w the constant drift taken
explicitly: consistent at order 1 with ẋ = Σ_h Γ_h + w, and the exact JKO step of the layer
when the heads act on mutually orthogonal subspaces (the energy then splits, head by head).

:func:`frozen_metric_distance` measures a displacement in the layer's metric frozen at μ_k,
the infimal convolution of the heads' metrics: ‖Δ_i‖²_{G_i⁺} with the cometric
G_i = Σ_h s_h M_h / K^h_{μ_k}(x_i) (the layer's velocity is Σ_h G_i^h ∇(s_h E_h)/w_i),
on range(Σ_h s_h M_h), and the share of ‖Δ‖² off that range (infinite distance there).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tpde import _lu as lu
from tpde._validation import check_positive
from tpde.fields.gradient_flow.energies import Energy
from tpde.fields.gradient_flow.structured import StructuredAttention
from tpde.flows.jko_prox import ParticleProx, solve_prox
from tpde.flows.status import Status
from tpde.measures import Empirical

__all__ = ["FrozenDistance", "StructuredJKOStep", "frozen_metric_distance", "structured_jko_step"]


class _HeadLyapunov(Energy):
    """The functional one head's JKO step minimises, −s_h E_h (E_h of the one-head field
    ``one``), times e^{−log_scale}."""

    def __init__(self, one: StructuredAttention, log_scale: float = 0.0):
        self.one, self.log_scale = one, log_scale

    def __call__(self, nu, engine: str = "auto") -> torch.Tensor:
        return -self.one.energy(nu, log_scale=self.log_scale)

    def domain_hint(self, mu) -> str:
        return (
            " The head's structured energy ½∬e^{score} is not finite at these tokens, even "
            "with its common factor e^{−log_scale}: its scores themselves are not finite "
            "there, so no step of this head is defined (MATH.md §12)."
        )


#: Relative eigenvalue below which a direction counts as outside the range of a mobility.
RANGE_RTOL = 1e-10


@dataclass(frozen=True)
class StructuredJKOStep:
    """Result of :func:`structured_jko_step`.

    Attributes
    ----------
    measure : Empirical, μ_{k+1} (the best iterates, also when a head did not converge).
    status : "completed" when every head's inner solve met its tolerance, else
        "not_converged" (the measure is then not a JKO step: do not read it as one).
    head_steps : tuple of :class:`~tpde.flows.JKOStep`, one per head (each measure is that
        head's step alone from μ_k; its energies and distance are e^{−c_h} and e^{−c_h/2}
        times their values, c_h = ``log_scales[h]``).
    tau : the step.
    log_scales : tuple of float, per head the common log-factor c_h of its energy and
        metric weight (:meth:`~tpde.fields.StructuredAttention.energy_log_scale` at μ_k: 0
        unless E_h passes √(the largest float), as a real decoder's scores make it). Both
        terms of the step's objective carry e^{−c_h}, so the minimiser is unchanged.
    """

    measure: Empirical
    status: Status
    head_steps: tuple
    tau: float
    log_scales: tuple = ()

    @property
    def converged(self) -> bool:
        """Whether every head's step converged."""
        return self.status == Status.COMPLETED

    @property
    def message(self) -> str:
        """The heads' stop reasons, "head h: …" for those that did not converge."""
        bad = [f"head {h}: {s.message}" for h, s in enumerate(self.head_steps) if not s.converged]
        return "; ".join(bad) or "converged"


class _HeadWeight:
    """The metric weight of one head, log ω = log K^h_{μ_k} − log_scale (what ParticleProx
    freezes)."""

    def __init__(self, field: StructuredAttention, log_scale: float = 0.0):
        self.field, self.log_scale = field, log_scale

    def log_weight(self, mu, x, engine: str = "auto") -> torch.Tensor:
        return _log_weight(self.field, self.field.heads[0], mu, x) - self.log_scale


def structured_jko_step(
    field: StructuredAttention,
    mu: Empirical,
    tau: float,
    *,
    tol: float | None = None,
    max_iter: int = 100,
    engine: str = "auto",
) -> StructuredJKOStep:
    r"""One JKO step of a structured attention field, head by head (module notes).

    For each head, y_h = argmin_y −s_h E_h(ν_y) + d_h(ν_y, μ)²/(2τ) in the head's twisted
    metric frozen at μ (semidefinite mobility s_h M_h, weight K^h_μ); then
    y = x + Σ_h (y_h − x) + τ w. Exact JKO step for one head with w = 0 and for heads on
    orthogonal subspaces; otherwise an additive splitting, consistent at order 1.

    Parameters
    ----------
    field : :class:`~tpde.fields.StructuredAttention` (from
        :func:`tpde.fields.nearest_gradient_field`).
    mu : Empirical (n, d), unbatched, positive weights (with positions for RoPE heads).
    tau : step > 0.
    tol : relative tolerance of each inner solve (default 1e-6 in float64, 1e-3 in float32).
    max_iter : L-BFGS iteration cap per head.
    engine : pairwise engine (the energies are dense sums).

    Returns
    -------
    :class:`StructuredJKOStep` (status "not_converged" when a head's solve missed its
    tolerance).
    """
    if not isinstance(field, StructuredAttention):
        raise TypeError(
            "structured_jko_step steps a StructuredAttention (tpde.fields."
            f"nearest_gradient_field(field)[0]); received {type(field).__name__}. For a "
            "Softmax or Sinkhorn field that is a gradient flow use tpde.flows.jko_step."
        )
    if not isinstance(mu, Empirical) or mu.batch_shape != ():
        raise TypeError(
            "structured_jko_step moves one particle cloud: pass an unbatched Empirical."
        )
    field.check_measure(mu)
    tau = check_positive(tau, "tau")
    if tol is None:
        tol = 1e-6 if mu.dtype == torch.float64 else 1e-3
    x = mu.points.detach()
    moved, steps, scales = x + tau * field.drift.to(x), [], []
    for h, head in enumerate(field.heads):
        one = StructuredAttention([head], torch.zeros_like(field.drift))
        mobility = head.sign * head.M.to(x)
        scale = one.energy_log_scale(mu)
        prox = ParticleProx(mu, tau, mobility, _HeadWeight(one, scale), engine)
        _check_weights_span(prox, one, mu, h)
        step = solve_prox(prox, _HeadLyapunov(one, scale), tau, tol=tol, max_iter=max_iter,
                          engine=engine)  # fmt: skip
        steps.append(step)
        scales.append(scale)
        moved = moved + (step.measure.points - x)
    ok = all(s.converged for s in steps)
    status = Status.COMPLETED if ok else Status.NOT_CONVERGED
    return StructuredJKOStep(mu.with_points(moved), status, tuple(steps), tau, tuple(scales))


def _check_weights_span(prox: ParticleProx, one: StructuredAttention, mu: Empirical, h: int):
    """A ValueError when the step's coordinates √(τ/(w_iK̃_i)) pass the dtype's range: the
    weights K^h_μ(x_i) then span more than the dtype holds, whatever the common factor."""
    if bool(torch.isfinite(prox.coef).all()):
        return
    log_k = _log_weight(one, one.heads[0], mu, mu.points.detach())
    spread = float(log_k.max() - log_k.min())
    raise ValueError(
        f"the metric weights K^h_μ(x_i) of head {h} span e^{spread:.0f} over the tokens, "
        f"beyond {mu.dtype}'s range with any common factor: a JKO step needs a finite "
        "energy and finite weights at every token (MATH.md §12)."
    )


@dataclass(frozen=True)
class FrozenDistance:
    """Result of :func:`frozen_metric_distance`.

    Attributes
    ----------
    distance : 0-d tensor, (Σ_i w_i Δ_iᵀ G_i⁺ Δ_i)^{1/2} on the range (module notes).
    off_range : 0-d tensor, Σ_i w_i|(I − P)Δ_i|² / Σ_i w_i|Δ_i|², the share of the
        displacement outside range(Σ_h s_h M_h) (P its orthogonal projector), where the
        metric is infinite; 0 for a displacement of the structured flow itself.
    """

    distance: torch.Tensor
    off_range: torch.Tensor


def frozen_metric_distance(
    field: StructuredAttention, mu: Empirical, displacement: torch.Tensor, *, log_scale=0.0
) -> FrozenDistance:
    r"""A displacement's length in a structured field's metric frozen at μ (module notes).

    ‖Δ‖² = Σ_i w_i Δ_iᵀ G_i⁺ Δ_i, G_i = Σ_h s_h M_h / K^h_μ(x_i), computed in an
    orthonormal basis U of range(Σ_h s_h M_h) (eigenvalues above ``RANGE_RTOL`` times the
    largest); for one head this is the twisted W2 of the JKO step with the identity
    coupling (d² = τ|ζ|² of :class:`~tpde.flows.jko_prox.ParticleProx`).

    Parameters
    ----------
    field : :class:`~tpde.fields.StructuredAttention`.
    mu : Empirical (n, d), the cloud at which the metric is frozen.
    displacement : (n, d) tensor Δ (e.g. y − x for two clouds with the same labels).
    log_scale : float c: the weights K^h_μ are taken as e^{−c}K^h_μ, so the distance is
        e^{−c/2} times its value (finite where K^h_μ passes the dtype's range; c from
        :meth:`~tpde.fields.StructuredAttention.energy_log_scale`, which bounds every
        e^{−c}K^h_μ(x_i) by 2/w_i). The off-range share does not depend on it.

    Returns
    -------
    :class:`FrozenDistance`.
    """
    x = mu.points.detach()
    if displacement.shape != x.shape:
        raise ValueError(
            f"displacement must have the cloud's shape {tuple(x.shape)}; received "
            f"{tuple(displacement.shape)}."
        )
    delta = displacement.to(x)
    total = sum(h.sign * h.M.to(x) for h in field.heads)
    evals, vecs = torch.linalg.eigh(total)
    U = vecs[:, evals > RANGE_RTOL * evals.abs().max()]  # (d, r)
    log_k = torch.stack([_log_weight(field, h, mu, x) - log_scale for h in field.heads])
    if not bool(torch.isfinite(log_k).all()):
        raise OverflowError(
            f"the metric weight K^h_μ of a head is not finite in {x.dtype} on this cloud (its "
            "scores are not finite): the frozen metric is not computable."
        )
    least = log_k.min(0).values  # (n,) G_i = e^{−least_i} Σ_h s_hM_h e^{least_i − log K̃^h_i}
    cometric = x.new_zeros(x.shape[0], U.shape[1], U.shape[1])
    for head, log_weight in zip(field.heads, log_k, strict=True):
        reduced = U.mT @ (head.sign * head.M.to(x)) @ U
        cometric = cometric + reduced * (least - log_weight).exp()[:, None, None]
    inside = delta @ U  # (n, r)
    solved = lu.solve(cometric, inside.unsqueeze(-1)).squeeze(-1)
    w = mu.weights.to(x) * least.exp()
    dist2 = (w * (inside * solved).sum(-1)).sum()
    if not bool(torch.isfinite(dist2)):
        raise OverflowError(
            f"the frozen-metric length overflowed {x.dtype}: its metric weights K^h_μ pass "
            "the dtype's range on this cloud; pass log_scale = field.energy_log_scale(mu) "
            "(the distance is then e^{−log_scale/2} times its value)."
        )
    w0 = mu.weights.to(x)
    outside = (w0 * (delta - inside @ U.mT).square().sum(-1)).sum()
    norm2 = (w0 * delta.square().sum(-1)).sum().clamp_min(torch.finfo(x.dtype).tiny)
    return FrozenDistance(dist2.clamp_min(0).sqrt(), outside / norm2)


def _log_weight(field: StructuredAttention, head, mu: Empirical, x) -> torch.Tensor:
    """log K^h_μ at the cloud's own tokens, (n,)."""
    positions = mu.positions if head.rope is not None else None
    return field.log_partition(head, mu, x, positions)
