"""Exponential attention without normaliser: the "USA" model of the sphere papers."""

from __future__ import annotations

import torch

from tpde._engines import kernel_sum
from tpde.fields.attention._circle import circle_route, route_exp_sum
from tpde.fields.base import Field
from tpde.fields.forms import KernelForm, key_log_weights
from tpde.fields.params import QKV
from tpde.fields.registry import register
from tpde.measures import Empirical

__all__ = ["Exponential"]


@register("exponential")
class Exponential(Field):
    r"""Unnormalised exponential attention (USA) Γ[μ](x) = ∫ e^{yᵀAx} V y dμ(y).

    Softmax attention's numerator with the mean over the tokens (1/n for n uniform
    particles) in place of the softmax normaliser ∫ e^{yᵀAx} dμ(y).

    Parameters
    ----------
    Q, K : tensor (..., k, d) or callable ``t -> tensor``
        Query and key matrices; A = scale · KᵀQ, so the score of query x on key y is yᵀAx.
    V : tensor (..., d, d) or callable
        Value matrix.
    scale : float, optional
        Default 1/√k.

    Notes
    -----
    Particles: ẋ_i = Σ_j w_j e^{x_jᵀAx_i} V x_j (w_j = 1/n for uniform tokens). The field
    is linear in μ, so a particle of weight 2/n is exactly two particles of weight 1/n.

    With post-LN normalisation (``Normalized(Exponential(...), "post-ln")``), Q = K = I,
    scale = β and V = I on the sphere S^{d−1}, this is the "USA" model of Geshkovski et
    al.: ẋ_i = P⊥_{x_i} (1/n) Σ_j e^{β⟨x_i, x_j⟩} x_j, the spherical gradient ascent of
    E_β(μ) = (1/2β) ∬ e^{β⟨x, y⟩} dμ(x) dμ(y) (MATH.md §7); "SA" is :class:`Softmax`.

    Engines: the unnormalised kernel sums ("dense", "chunked", "tiled", "keops"; "auto":
    dense for small n, then tiled on the CPU, KeOps on CUDA); "sdpa" always normalises and
    raises. On the circle (d = 2, tokens of norm 1) with A = βI, β > 0, and V = vI, the
    "spectral" engine sums the Fourier series of e^{β cos(θ − φ)} exactly to rounding in
    O(n·K) (:mod:`tpde._engines.spectral`), on the sphere S² (d = 3) the "harmonics"
    engine its spherical-harmonic series in O(n·L²) (:mod:`tpde._engines.harmonics`), and
    "auto" takes them for large clouds. Scores
    beyond the dtype's exponent range overflow (e^{710} in float64): the velocity then
    raises OverflowError.

    No Gaussian closure: for μ = N(α, Σ) the tilt lemma gives
    Γ[μ](x) = e^{xᵀAᵀα + ½ xᵀAᵀΣAx} V(α + ΣAx), which is not affine in x, so Gaussians do
    not stay Gaussian; :meth:`gaussian_rhs` raises :class:`GaussianNotPreserved`.

    Reference: Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on
    Transformers", arXiv:2312.10794 (2023), the USA ("unnormalized self-attention") model.
    """

    def __init__(self, Q, K, V, scale=None):
        self.params = QKV(Q, K, V, scale)
        self.dim = self.params.dim

    def particle_velocity(
        self, t, mu: Empirical, x, engine: str, info=None, *, own=None
    ) -> torch.Tensor:
        route = circle_route(self, mu, x, engine, own)
        if route is not None:  # A = βI, V = vI on S¹ or S²: Fourier or harmonic series
            return route_exp_sum(route, x, mu.weights)
        p = self.params.at(t, like=x)
        points, weights = mu.points, mu.weights
        scalar = self.params.isotropic_interaction(x)
        queries = scalar * x if scalar is not None else x @ p.A.transpose(-1, -2)
        values = weights.unsqueeze(-1) * points  # the mean over μ: weights outside the kernel
        if not self.params.value_is_identity:
            values = values @ p.V.transpose(-1, -2)
        return kernel_sum(queries, points, values, kernel="exp", engine=engine)

    def kernel_form(self, t, mu: Empirical, x) -> KernelForm:
        """Γ[μ](x) = Σ_j w_j e^{⟨q(x), k_j⟩} v_j with q(x) = Ax, k_j = y_j, v_j = V y_j, over
        the tokens with mass (what :class:`~tpde.fields.Masked` masks)."""
        p = self.params.at(t, like=x)
        points, log_w = key_log_weights(mu)
        scalar = self.params.isotropic_interaction(x)
        queries = scalar * x if scalar is not None else x @ p.A.transpose(-1, -2)
        values = points if self.params.value_is_identity else points @ p.V.transpose(-1, -2)
        return KernelForm(queries, points, log_w, values)

    def gaussian_refusal(self) -> str:
        return (
            "exponential (USA) attention does not keep Gaussians Gaussian: "
            "Γ[N(α, Σ)](x) = e^{xᵀAᵀα + ½xᵀAᵀΣAx} V(α + ΣAx) is not affine in x, so there "
            "is no moment closure. Integrate particles instead: "
            "integrate(field, Empirical.from_gaussian(gaussian, n), t1)."
        )

    def __repr__(self) -> str:
        return f"Exponential(d={self.dim}, k={self.params.k}, scale={self.params.scale:.4g})"
