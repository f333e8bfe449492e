"""The interface every attention field implements.

A field Γ maps a measure μ to a velocity field Γ[μ]: R^d → R^d. The Transformer PDE is
∂t μ + div(μ Γ[μ]) = 0. One field object drives particles (via :meth:`Field.velocity`),
Gaussian moment ODEs (via :meth:`Field.gaussian_rhs`, where Gaussians stay Gaussian)
and grid densities.
"""

from __future__ import annotations

import torch

from tpde._engines import check_engine
from tpde._validation import as_tensor, check_finite
from tpde.measures import Empirical, Gaussian, Grid, Measure


class GaussianNotPreserved(NotImplementedError):
    """The field does not map Gaussians to Gaussians; there is no moment closure."""


class NotAGradientFlow(ValueError):
    """The field is not a (twisted) gradient flow in tpde (MATH.md §5), or not for these
    parameters (A not symmetric, M = V A⁻¹ not symmetric definite)."""


class Field:
    """Base class of attention fields.

    Subclasses implement

    - ``_particle_velocity(t, mu, x, engine)``: Γ[μ](x) for an :class:`Empirical` μ;
    - ``gaussian_affine(t, mean, cov) -> (c, B)`` where Γ[N(α, Σ)](x) = c + B x is affine
      (then Gaussians stay Gaussian and :meth:`gaussian_rhs` follows).
    """

    #: Ambient dimension d of the tokens the field acts on.
    dim: int

    # ------------------------------------------------------------------ particles
    def velocity(self, mu: Measure, x=None, *, t: float = 0.0, engine: str = "auto"):
        """Velocity Γ[μ](x) of the Transformer PDE.

        Parameters
        ----------
        mu : Empirical, Gaussian or Grid
            The measure the tokens attend to. For a Gaussian, the closed-form affine
            field of :meth:`gaussian_affine` is used and ``x`` is required. A Grid is
            seen through its cell masses at the cell centres (midpoint quadrature, as the
            Eulerian integrator does).
        x : tensor, shape (m, d), optional
            Where to evaluate; default: the particles of ``mu`` themselves (for a Grid,
            all its cell centres, in the order of :meth:`Grid.centres`).
        t : float
            Depth-time, for time-dependent parameters.
        engine : {"auto", "dense", "chunked", "sdpa", "keops", "tiled"}
            How the pairwise sum is computed (see :mod:`tpde._engines`; "tiled": sigmoid
            and linear attention only).

        Returns
        -------
        tensor, shape (..., m, d) (leading dimensions from batched parameters).
        """
        engine = check_engine(engine)
        self._check_measure(mu)
        if x is not None:
            x = self._check_points(x, mu)
        if isinstance(mu, Gaussian):
            if x is None:
                raise ValueError(
                    "velocity on a Gaussian needs evaluation points x of shape (m, d); a "
                    "Gaussian has no particles of its own."
                )
            c, B = self.gaussian_affine(t, mu.mean(), mu.cov())
            return c.unsqueeze(-2) + x @ B.transpose(-1, -2)
        if isinstance(mu, Grid):
            x = mu.centres() if x is None else x
            mu = mu.to_empirical()
        return self._particle_velocity(t, mu, mu.points if x is None else x, engine)

    def _particle_velocity(self, t, mu: Empirical, x, engine: str) -> torch.Tensor:
        raise NotImplementedError

    # ------------------------------------------------------------------ Gaussians
    def gaussian_affine(self, t, mean, cov) -> tuple[torch.Tensor, torch.Tensor]:
        """Γ[N(α, Σ)](x) = c + B x: returns c (..., d) and B (..., d, d)."""
        raise GaussianNotPreserved(
            f"{type(self).__name__} attention does not keep Gaussians Gaussian, so it has no "
            "moment closure; integrate particles instead (Empirical.from_gaussian)."
        )

    def gaussian_rhs(self, t, mean, cov) -> tuple[torch.Tensor, torch.Tensor]:
        """Moment ODE of the PDE started from a Gaussian.

        For an affine field c + Bx: α̇ = c + Bα,  Σ̇ = BΣ + ΣBᵀ (MATH.md §3).

        Parameters
        ----------
        mean : (..., d);  cov : (..., d, d), batch dimensions broadcast with the parameters'.

        Returns
        -------
        (dmean, dcov) with the broadcast batch shape.
        """
        c, B = self.gaussian_affine(t, mean, cov)
        BS = B @ cov
        return c + (B @ mean.unsqueeze(-1)).squeeze(-1), BS + BS.transpose(-1, -2)

    # ------------------------------------------------------------------ energies
    def energy(self, mu: Measure, *, t: float = 0.0, engine: str = "auto") -> torch.Tensor:
        """Energy whose (twisted) gradient flow the field is, where one exists."""
        raise NotImplementedError(
            f"{type(self).__name__} attention has no energy in tpde: it is not known to be "
            "a gradient flow (MATH.md §5)."
        )

    def gradient_structure(self, t: float = 0.0):
        """Sign, mobility and metric in which the field is a gradient flow (MATH.md §5).

        Returns a :class:`tpde.attention.energies.GradientStructure` for the variants that
        have one (Softmax, Sinkhorn); raises :class:`NotAGradientFlow` otherwise.
        """
        raise NotAGradientFlow(
            f"{type(self).__name__} attention is not a gradient flow in tpde: only softmax "
            "(A symmetric, V A⁻¹ symmetric definite) and Sinkhorn (A symmetric, V = MA, M "
            "symmetric definite) attention are (MATH.md §5)."
        )

    # ------------------------------------------------------------------ checks
    def _check_measure(self, mu) -> None:
        if not isinstance(mu, Empirical | Gaussian | Grid):
            raise TypeError(
                f"mu must be a tpde measure (Empirical, Gaussian or Grid); received "
                f"{type(mu).__name__}. Wrap points with tpde.measures.Empirical(points)."
            )
        if mu.dim != self.dim:
            raise ValueError(
                f"dimension mismatch: the measure lives in d = {mu.dim} but the field's "
                f"parameters act on d = {self.dim} (Q, K: (k, d), V: (d, d))."
            )

    def _check_points(self, x, mu) -> torch.Tensor:
        """x as a (m, d) tensor in μ's dtype (after :meth:`_check_measure`: μ.dim = d)."""
        x = as_tensor(x, "x", dtype=mu.dtype, device=mu.device)
        if x.ndim != 2 or x.shape[1] != mu.dim:
            raise ValueError(f"x must have shape (m, {mu.dim}); received shape {tuple(x.shape)}.")
        check_finite(x, "x")
        return x
