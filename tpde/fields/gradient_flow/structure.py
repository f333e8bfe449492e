r"""Gradient-flow structure of a field, from its declared "gradient_flow" capability.

MATH.md §5. Two attention variants are (twisted) Wasserstein gradient flows: softmax
(E = ½∬e^{yᵀAx}dμdμ, metric weighted by Z_μ) and Sinkhorn (F = ½OT_ε(μ, μ), no weight). A
field declares the capability by implementing

- ``interaction(t) -> (A, V, dtype)``: its interaction and value matrices (float64) and the
  dtype whose epsilon sets the tolerances;
- ``energy(mu, t, engine)``, ``first_variation(mu, x, t, engine)`` (δE/δμ at x, (m,)) and
  ``first_variation_grad(mu, x, t, engine)`` (its gradient in x, (m, d));
- ``log_metric_weight(mu, x, t, engine)``: log ω_μ(x), the metric's weight (log Z_μ for
  softmax, 0 for Sinkhorn);
- the class attributes ``metric_weighted`` (whether ω ≠ 1) and ``ascends_energy`` (True
  when the PDE is the gradient *ascent* of E for a positive definite mobility: softmax;
  False when it is the descent: Sinkhorn).

One convention covers every such field (:class:`GradientStructure`): with the *Lyapunov
functional* G = c·E (c = −s if ``ascends_energy`` else s), the *mobility* sM ≻ 0 (M = V A⁻¹,
:func:`tpde.metrics.mobility.mobility`) and the metric weight ω_μ,

    Γ[μ](x) = −(sM) ∇(δG/δμ)(x) / ω_μ(x),     dG/dt = −‖Γ‖²_g,   ‖v‖²_g = ∫ ω_μ vᵀ(sM)⁻¹v dμ.

G is what a JKO step minimises (:mod:`tpde.flows.jko`).
"""

from __future__ import annotations

import torch

from tpde import _lu as lu
from tpde.fields.gradient_flow.energies import Energy
from tpde.metrics.mobility import NotAGradientFlow, mobility

__all__ = ["GradientStructure", "LyapunovEnergy", "gradient_structure"]


class LyapunovEnergy(Energy):
    """G = c · E of a gradient structure, with its first variations."""

    def __init__(self, structure: GradientStructure):
        self.structure = structure

    def __call__(self, mu, engine: str = "auto"):
        return self.structure.lyapunov_sign * self.structure.energy(mu, engine)

    def first_variation(self, mu, x, engine: str = "auto"):
        s = self.structure
        return s.lyapunov_sign * s.field.first_variation(mu, x, t=s.t, engine=engine)

    def first_variation_grad(self, mu, x, engine: str = "auto"):
        s = self.structure
        return s.lyapunov_sign * s.field.first_variation_grad(mu, x, t=s.t, engine=engine)

    def domain_hint(self, mu) -> str:
        """The field's :meth:`~tpde.fields.Field.domain_hint` (softmax: ρ < 1 for Gaussians)."""
        return self.structure.field.domain_hint(mu)

    def __repr__(self) -> str:
        return f"Lyapunov({self.structure!r})"


class GradientStructure:
    r"""How a field is a gradient flow: Γ[μ] = −(sM) ∇(δG/δμ) / ω_μ (module notes).

    Attributes
    ----------
    field : the field (with the "gradient_flow" capability).
    sign : s = ±1 with sM ≻ 0.
    M : (d, d) the raw mobility V A⁻¹ (symmetric, definite).
    mobility : (d, d) sM, symmetric positive definite: the metric is ⟨(sM)⁻¹v, w⟩.
    A : (d, d) the symmetric interaction matrix.
    lyapunov_sign : c with G = c·E the functional the PDE descends.
    weighted : whether the metric carries the weight ω_μ (softmax: Z_μ).
    lyapunov : :class:`Energy` G = c·E, the functional a JKO step minimises.
    t : time at which time-dependent parameters were resolved.
    """

    def __init__(self, field, sign: int, M, A, t: float):
        self.field, self.sign, self.t = field, sign, t
        self.M, self.A = M, A
        self.mobility = sign * M
        self.weighted = bool(field.metric_weighted)
        self.lyapunov_sign = -sign if field.ascends_energy else sign
        self.lyapunov = LyapunovEnergy(self)

    @property
    def dim(self) -> int:
        return self.A.shape[-1]

    def energy(self, mu, engine: str = "auto") -> torch.Tensor:
        """The field's energy E(μ) (softmax E or Sinkhorn F)."""
        return self.field.energy(mu, t=self.t, engine=engine)

    def log_weight(self, mu, x, engine: str = "auto") -> torch.Tensor:
        """log ω_μ(x), shape (m,) (0 for an unweighted metric)."""
        if not self.weighted:
            return x.new_zeros(x.shape[:-1])
        return self.field.log_metric_weight(mu, x, t=self.t, engine=engine)

    def velocity(self, mu, x, engine: str = "auto") -> torch.Tensor:
        """−(sM)∇(δG/δμ)(x)/ω_μ(x), (m, d): equals Γ[μ](x) where the structure holds."""
        grad = self.lyapunov.first_variation_grad(mu, x, engine)
        weight = self.log_weight(mu, x, engine).exp().unsqueeze(-1)
        return -(grad @ self.mobility.to(grad).mT) / weight

    def metric_norm2(self, mu, v: torch.Tensor, engine: str = "auto"):
        """‖v‖²_g = Σ_i w_i ω_μ(x_i) v_iᵀ(sM)⁻¹v_i for a velocity (n, d) on particles."""
        weight = self.log_weight(mu, mu.points, engine).exp()
        solved = lu.solve(self.mobility.to(v), v.mT).mT
        return (mu.weights * weight * (v * solved).sum(-1)).sum()

    def __repr__(self) -> str:
        return (
            f"GradientStructure({type(self.field).__name__}, s={self.sign:+d}, "
            f"G={self.lyapunov_sign:+d}·E, weighted={self.weighted})"
        )


def gradient_structure(field, t: float = 0.0) -> GradientStructure:
    """The gradient structure of a field at time t (MATH.md §5; module notes).

    Needs the "gradient_flow" capability, unbatched bias-free parameters, A symmetric and
    invertible and M = V A⁻¹ symmetric definite, with the tolerances of
    :func:`tpde.metrics.mobility.mobility`; raises :class:`NotAGradientFlow` naming the
    condition that fails.
    """
    name = type(field).__name__
    if not field.supports("gradient_flow"):
        raise NotAGradientFlow(
            f"{name} attention is not a gradient flow in tpde: only softmax (A symmetric, "
            "V A⁻¹ symmetric definite) and Sinkhorn (A symmetric, V = MA, M symmetric "
            "definite) attention are (MATH.md §5)."
        )
    A, V, dtype = field.interaction(t)
    try:
        sM, sign = mobility(A, V, dtype=dtype, a_name="A = scale·KᵀQ")
    except NotAGradientFlow as err:
        raise NotAGradientFlow(
            f"{name} attention is not a gradient flow in tpde for these parameters: {err} "
            "(MATH.md §5). For how far it is, and its nearest gradient field: "
            "tpde.fields.nearest_gradient_field(field) (MATH.md §12)."
        ) from None
    A = 0.5 * (A + A.mT)
    return GradientStructure(field, sign, sign * sM, A, float(t))
