r"""Energies on measures: the functionals of JKO steps, gradient flows and convexity probes.

:class:`Energy` is the protocol (a value, and where known the first variation and its
gradient); :class:`PotentialEnergy` and :class:`InteractionEnergy` are the classical
examples; :func:`as_energy` turns a field (its Lyapunov functional, from its gradient
structure: :mod:`tpde.fields.gradient_flow.structure`), an Energy or any callable into one. The
energies of the attention fields themselves live with their fields
(:mod:`tpde.fields.gradient_flow.softmax_energy`, :mod:`tpde.fields.gradient_flow.sinkhorn_energy`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from tpde._linalg import symmetrize, trace
from tpde._validation import as_tensor, check_finite
from tpde.measures import Gaussian, Grid

__all__ = ["Energy", "InteractionEnergy", "PotentialEnergy", "as_energy"]


def _particles(mu):
    """Empirical view of particles and grids (a grid: its cell centres with their masses)."""
    return mu.to_empirical() if isinstance(mu, Grid) else mu


class Energy:
    """A functional on measures for JKO steps, gradient flows and convexity probes.

    Subclasses implement ``__call__(mu, engine)`` (a 0-d tensor, differentiable in the
    measure's tensors) and, where known, ``first_variation(mu, x, engine)`` (δE/δμ at
    points x, shape (m,)) and ``first_variation_grad(mu, x, engine)`` (its gradient in x,
    (m, d)); the latter defaults to autograd of the former.
    """

    def __call__(self, mu, engine: str = "auto") -> torch.Tensor:
        raise NotImplementedError

    def first_variation(self, mu, x, engine: str = "auto") -> torch.Tensor:
        raise NotImplementedError(
            f"{type(self).__name__} does not provide its first variation δE/δμ at arbitrary "
            "points; only the particle gradient (autograd in the points) is available."
        )

    def first_variation_grad(self, mu, x, engine: str = "auto") -> torch.Tensor:
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            value = self.first_variation(mu, x, engine).sum()
            return torch.autograd.grad(value, x)[0]

    def domain_hint(self, mu) -> str:
        """Why the energy may be infinite at ``mu`` (a sentence for a JKO step's message), or
        "" (default: nothing known)."""
        return ""


class _CallableEnergy(Energy):
    """Any callable measure -> scalar tensor; derivatives by autograd only."""

    def __init__(self, fn: Callable):
        self.fn = fn

    def __call__(self, mu, engine: str = "auto") -> torch.Tensor:
        value = self.fn(mu)
        if not isinstance(value, torch.Tensor) or value.ndim != 0:
            shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise ValueError(
                f"the energy {self!r} must return a 0-d tensor computed from the measure's "
                f"tensors (autograd differentiates it); it returned {shape}. Reduce it, e.g. "
                "with .sum() or .mean(), and keep it in torch."
            )
        return value

    def __repr__(self) -> str:
        return f"Energy({getattr(self.fn, '__name__', repr(self.fn))})"


class PotentialEnergy(Energy):
    r"""Potential energy E(μ) = ∫ U dμ of a potential U: R^d → R.

    Parameters
    ----------
    potential : callable, points (m, d) -> values (m,), differentiable in torch.

    Notes
    -----
    ``PotentialEnergy.quadratic(P, b)`` is U(x) = ½xᵀPx + bᵀx, with the Gaussian closed
    form ½ tr(PΣ) + U(α). A convex U gives a geodesically convex energy (the control case
    of :mod:`tpde.fields.gradient_flow.convexity`); its W2 gradient flow moves particles by
    ẋ = −∇U(x).
    """

    def __init__(self, potential: Callable, *, _quadratic=None):
        if not callable(potential):
            raise TypeError(f"potential must be callable; received {type(potential).__name__}.")
        self.potential = potential
        self._quadratic = _quadratic

    @classmethod
    def quadratic(cls, P, b=None) -> PotentialEnergy:
        """U(x) = ½ xᵀPx + bᵀx (P symmetric (d, d), b (d,) or None)."""
        P = as_tensor(P, "P")
        if P.ndim != 2 or P.shape[0] != P.shape[1]:
            raise ValueError(f"P must be a square (d, d) matrix; received shape {tuple(P.shape)}.")
        check_finite(P, "P")
        P = symmetrize(P)
        b = P.new_zeros(P.shape[-1]) if b is None else as_tensor(b, "b", device=P.device)
        if b.shape != (P.shape[0],):
            raise ValueError(
                f"b must have shape ({P.shape[0]},) to match P {tuple(P.shape)}; received "
                f"{tuple(b.shape)}."
            )
        check_finite(b, "b")

        def potential(x):
            Pl, bl = P.to(x), b.to(x)
            return 0.5 * ((x @ Pl) * x).sum(-1) + x @ bl

        return cls(potential, _quadratic=(P, b))

    def _check_dim(self, mu) -> None:
        d = None if self._quadratic is None else self._quadratic[0].shape[0]
        if d is not None and getattr(mu, "dim", d) != d:
            raise ValueError(
                f"dimension mismatch: the quadratic potential acts on d = {d} (P is {d} × {d}) "
                f"but the measure lives in d = {mu.dim}."
            )

    def _values(self, points: torch.Tensor) -> torch.Tensor:
        values = self.potential(points)
        if not isinstance(values, torch.Tensor) or values.shape != points.shape[:-1]:
            shape = tuple(values.shape) if isinstance(values, torch.Tensor) else type(values)
            raise ValueError(
                f"the potential must map points {tuple(points.shape)} to one value per point, "
                f"shape {tuple(points.shape[:-1])}; it returned {shape}. Reduce over the last "
                "axis, e.g. (x ** 2).sum(-1)."
            )
        return values

    def __call__(self, mu, engine: str = "auto") -> torch.Tensor:
        self._check_dim(mu)
        if isinstance(mu, Gaussian):
            if self._quadratic is None:
                raise NotImplementedError(
                    "a potential energy on a Gaussian has a closed form only for quadratic "
                    "potentials (PotentialEnergy.quadratic); sample the Gaussian instead."
                )
            P = self._quadratic[0].to(mu.mean())
            return 0.5 * trace(P @ mu.cov()) + self.potential(mu.mean().unsqueeze(-2))[..., 0]
        mu = _particles(mu)
        return (mu.weights * self._values(mu.points)).sum(-1)

    def first_variation(self, mu, x, engine: str = "auto") -> torch.Tensor:
        self._check_dim(mu)
        return self._values(x)

    def __repr__(self) -> str:
        return "PotentialEnergy(quadratic)" if self._quadratic else "PotentialEnergy()"


class InteractionEnergy(Energy):
    r"""Interaction energy E(μ) = ½ ∬ W(x − y) dμ(x) dμ(y) of an even kernel W.

    Parameters
    ----------
    kernel : callable, differences (..., d) -> values (...), even (W(z) = W(−z)).

    Particles and grids only (dense n × n differences: for a few thousand particles).
    δE/δμ(x) = ∫ W(x − y) dμ(y). A convex W gives a geodesically convex energy. A batch of
    clouds (points (..., n, d)) gives one value per cloud, each cloud paired with itself
    only.
    """

    def __init__(self, kernel: Callable):
        if not callable(kernel):
            raise TypeError(f"kernel must be callable; received {type(kernel).__name__}.")
        self.kernel = kernel

    def __call__(self, mu, engine: str = "auto") -> torch.Tensor:
        if isinstance(mu, Gaussian):
            raise NotImplementedError("InteractionEnergy is evaluated on particles and grids.")
        mu = _particles(mu)
        points = mu.points
        values = self.kernel(points.unsqueeze(-2) - points.unsqueeze(-3))  # (..., n, n)
        return 0.5 * ((values @ mu.weights) @ mu.weights)

    def first_variation(self, mu, x, engine: str = "auto") -> torch.Tensor:
        """∫ W(x − y) dμ(y) at points x (..., m, d), one cloud of μ per batch element."""
        mu = _particles(mu)
        return self.kernel(x.unsqueeze(-2) - mu.points.unsqueeze(-3)) @ mu.weights


def as_energy(energy) -> Energy:
    """The :class:`Energy` a JKO step or a gradient flow minimises.

    A field: its Lyapunov functional G = c·E (:func:`gradient_structure`; raises
    :class:`NotAGradientFlow` where the field has none; pass ``field.energy`` itself to
    minimise E). An :class:`Energy`: itself. Any other callable measure -> 0-d tensor:
    wrapped, derivatives by autograd.
    """
    if callable(getattr(energy, "gradient_structure", None)):  # a field
        return energy.gradient_structure().lyapunov
    if isinstance(energy, Energy):
        return energy
    if callable(energy):
        return _CallableEnergy(energy)
    raise TypeError(
        f"energy must be a field (Softmax, Sinkhorn), a tpde Energy or a callable measure -> "
        f"scalar tensor; received {type(energy).__name__}."
    )
