"""Densities on a box in d = 1 or 2: cell masses of a finite-volume grid."""

from __future__ import annotations

import math
import warnings

import torch

from tpde._validation import (
    as_tensor,
    check_choice,
    check_finite,
    check_float_dtype,
    check_positive_int,
)
from tpde.measures._base import Measure, check_sample_size
from tpde.measures.empirical import Empirical, weight_tolerance
from tpde.measures.gaussian import Gaussian

__all__ = ["Grid"]

#: Mass of the source measure that may fall outside the box in a conversion before a
#: warning is raised (the cell masses are renormalised to 1 either way).
OUTSIDE_WARN = 1e-3

_SQRT2 = math.sqrt(2.0)


def _too_many_dims(d: int) -> ValueError:
    return ValueError(
        f"Grid supports d = 1 or 2 only (the number of cells grows like n^d); received "
        f"d = {d}. In higher dimension integrate particles instead: "
        "tpde.measures.Empirical.from_gaussian(g, n) or Empirical(points)."
    )


def _normal_interval(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """P(a ≤ Z ≤ b) for Z ~ N(0, 1), accurate in both tails (erfc on the far side)."""
    upper = 0.5 * (torch.erfc(a / _SQRT2) - torch.erfc(b / _SQRT2))  # right tail: a >= 0
    lower = 0.5 * (torch.erfc(-b / _SQRT2) - torch.erfc(-a / _SQRT2))  # left tail
    return torch.where(a >= 0, upper, lower).clamp_min(0.0)


class Grid(Measure):
    r"""A probability density on a box, stored as the masses of uniform cells (d = 1, 2).

    The measure is the piecewise-constant density ρ_h = m_c / |cell| on each cell c of the
    box ∏_k [lower_k, upper_k] cut into ``density.shape`` equal cells: the state of a
    finite-volume (Eulerian) flow (:func:`tpde.flows.integrate` on a Grid).

    Parameters
    ----------
    density : tensor or array, shape (n1,) or (n1, n2)
        Cell masses m_c (not densities per unit volume), nonnegative, summing to 1 within
        √eps of the dtype (then renormalised exactly). Axis k of the array is coordinate k.
    lower, upper : float or tensor or array, shape (d,)
        Corners of the box, lower_k < upper_k. A number is used for every axis.

    Notes
    -----
    Moments are those of the piecewise-constant density:
    mean = Σ_c m_c x_c and cov = Σ_c m_c (x_c − mean)(x_c − mean)ᵀ + diag(h_k²/12), with
    x_c the cell centres and h_k the cell sizes. :meth:`to_empirical` gives the atoms
    Σ_c m_c δ_{x_c} instead, at W2 distance exactly (Σ_k h_k²/12)^{1/2} from the density
    (the grid cells are the Voronoi cells of the centres, so mapping each cell to its
    centre is the optimal transport).

    A grid produced by a flow may carry less than unit mass (:attr:`mass`) when mass has
    left the box through its boundary (reported in the trajectory's ``stats["outflow"]``).
    Its moments, samples and :meth:`to_empirical` are those of the normalised density
    inside the box.

    A grid built by :meth:`from_empirical` or :meth:`from_gaussian` records in
    :attr:`outside_mass` the mass of the source that fell outside the box; the cell masses
    are renormalised to 1 and a warning is raised when that mass exceeds 1e-3.
    """

    def __init__(self, density, lower, upper):
        density = as_tensor(density, "density")
        if density.ndim not in (1, 2):
            if density.ndim > 2:
                raise _too_many_dims(density.ndim)
            raise ValueError(
                "density must have shape (n1,) or (n1, n2) (cell masses); received a 0-d "
                "tensor. Pass one mass per cell."
            )
        if min(density.shape) == 0:
            raise ValueError(
                f"density must hold at least one cell per axis; received shape "
                f"{tuple(density.shape)}."
            )
        check_finite(density, "density")
        if (density < 0).any():
            raise ValueError(
                f"density (cell masses) must be nonnegative; received minimum "
                f"{float(density.min()):.3g}. Clip rounding errors with density.clamp_min(0)."
            )
        total = float(density.detach().sum())
        if abs(total - 1.0) > weight_tolerance(density.dtype):
            raise ValueError(
                f"density must hold cell masses summing to 1; received a total of "
                f"{total:.10g}. Pass masses (density × cell volume) normalised with "
                "density / density.sum()."
            )
        lower, upper = _check_box(lower, upper, density)
        self._density = density / density.sum()
        self._lower, self._upper = lower, upper
        self.outside_mass = 0.0

    @classmethod
    def _trusted(cls, density, lower, upper, outside_mass: float = 0.0) -> Grid:
        """Build without checks (flows: the mass may be below 1 after outflow)."""
        new = object.__new__(cls)
        new._density, new._lower, new._upper = density, lower, upper
        new.outside_mass = outside_mass
        return new

    # ------------------------------------------------------------------ geometry
    def values(self) -> dict[str, torch.Tensor]:
        return {"density": self.density}

    @property
    def density(self) -> torch.Tensor:
        """Cell masses, shape (n1,) or (n1, n2)."""
        return self._density

    @property
    def shape(self) -> tuple[int, ...]:
        """Number of cells per axis."""
        return tuple(self._density.shape)

    @property
    def lower(self) -> torch.Tensor:
        """Lower corner of the box, shape (d,)."""
        return self._lower

    @property
    def upper(self) -> torch.Tensor:
        """Upper corner of the box, shape (d,)."""
        return self._upper

    @property
    def cell_size(self) -> torch.Tensor:
        """Cell sizes h_k = (upper_k − lower_k) / n_k, shape (d,)."""
        n = torch.tensor(self.shape, dtype=self.dtype, device=self.device)
        return (self._upper - self._lower) / n

    @property
    def mass(self) -> torch.Tensor:
        """Total mass in the box, 0-d (1 unless mass left through the boundary in a flow)."""
        return self._density.sum()

    def axes(self) -> tuple[torch.Tensor, ...]:
        """Cell-centre coordinates along each axis, tensors of shape (n_k,)."""
        h = self.cell_size
        return tuple(
            self._lower[k] + (torch.arange(n, dtype=self.dtype, device=self.device) + 0.5) * h[k]
            for k, n in enumerate(self.shape)
        )

    def edges(self) -> tuple[torch.Tensor, ...]:
        """Cell-edge coordinates along each axis, tensors of shape (n_k + 1,)."""
        return tuple(
            torch.linspace(
                float(self._lower[k]),
                float(self._upper[k]),
                n + 1,
                dtype=self.dtype,
                device=self.device,
            )
            for k, n in enumerate(self.shape)
        )

    def centres(self) -> torch.Tensor:
        """All cell centres, shape (N, d), in the row-major order of ``density.reshape(-1)``."""
        mesh = torch.meshgrid(*self.axes(), indexing="ij")
        return torch.stack([m.reshape(-1) for m in mesh], dim=-1)

    # ------------------------------------------------------------------ Measure interface
    @property
    def dim(self) -> int:
        return self._density.ndim

    @property
    def dtype(self) -> torch.dtype:
        return self._density.dtype

    @property
    def device(self) -> torch.device:
        return self._density.device

    def _weights(self) -> torch.Tensor:
        flat = self._density.reshape(-1)
        return flat / flat.sum()

    def mean(self) -> torch.Tensor:
        """Mean Σ_c m_c x_c of the (normalised) density, shape (d,)."""
        return self._weights() @ self.centres()

    def cov(self) -> torch.Tensor:
        """Covariance of the piecewise-constant density, shape (d, d).

        Σ_c m_c (x_c − m)(x_c − m)ᵀ + diag(h_k²/12): the atoms' covariance plus the
        variance of the uniform distribution inside one cell.
        """
        weights, centres = self._weights(), self.centres()
        centred = centres - weights @ centres
        atoms = (centred * weights[:, None]).T @ centred
        return atoms + torch.diag(self.cell_size**2 / 12)

    def sample(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Draw ``n`` points of the piecewise-constant density, shape (n, d).

        A cell is drawn with probability m_c, then a uniform point inside it.
        """
        n = check_sample_size(n)
        index = torch.multinomial(
            self._weights().detach().to(torch.float64), n, replacement=True, generator=generator
        ).to(self.device)
        offset = torch.rand(
            (n, self.dim), generator=generator, dtype=self.dtype, device=self.device
        )
        return self.centres()[index] + (offset - 0.5) * self.cell_size

    def to(self, device=None, dtype=None) -> Grid:
        if dtype is not None:
            check_float_dtype(dtype)

        def move(t):
            return t.to(device=device or t.device, dtype=dtype or t.dtype)

        return Grid._trusted(
            move(self._density), move(self._lower), move(self._upper), self.outside_mass
        )

    # ------------------------------------------------------------------ conversions
    def to_empirical(self, drop_empty: bool = True) -> Empirical:
        """Cell centres as weighted points: Σ_c m_c δ_{x_c} (normalised to mass 1).

        Parameters
        ----------
        drop_empty : bool
            Drop the cells of zero mass (default: they carry no information, and attention
            against them is wasted work). With False, all N cells are kept, in the order
            of :meth:`centres`.
        """
        points, weights = self.centres(), self._weights()
        if drop_empty:
            keep = weights > 0
            if not bool(keep.all()):
                points, weights = points[keep], weights[keep]
        return Empirical(points, weights)

    @classmethod
    def from_empirical(cls, mu: Empirical, shape, lower, upper, *, assignment: str = "cic") -> Grid:
        """Deposit the particles of ``mu`` on a grid.

        Parameters
        ----------
        mu : Empirical in d = 1 or 2.
        shape : int or tuple of d ints, number of cells per axis.
        lower, upper : box corners (see :class:`Grid`).
        assignment : {"cic", "ngp"}
            "cic" (cloud in cell, default): each particle's mass is split linearly between
            the 2^d nearest cell centres, which keeps the mean exact away from the boundary
            and makes the masses continuous in the positions (differentiable); a share that
            would land beyond the boundary cells stays in the boundary cell. "ngp": the
            histogram (all mass to the cell containing the particle).

        Notes
        -----
        Particles outside the box (boundary included in the box) are not deposited: their
        mass is reported in :attr:`outside_mass` and the inside mass is renormalised.
        """
        if not isinstance(mu, Empirical):
            raise TypeError(f"mu must be an Empirical; received {type(mu).__name__}.")
        if mu.dim > 2:
            raise _too_many_dims(mu.dim)
        if mu.batch_shape != ():
            raise ValueError(
                f"from_empirical deposits one cloud; received a batch of shape "
                f"{tuple(mu.batch_shape)}. Deposit each element, mu[i], on its own grid."
            )
        check_choice(assignment, "assignment", ("cic", "ngp"))
        shape = _check_shape(shape, mu.dim)
        lower, upper = _check_box(lower, upper, mu.points, dim=mu.dim)
        n = torch.tensor(shape, dtype=mu.dtype, device=mu.device)
        unit = (mu.points - lower) / (upper - lower) * n  # position in cell units
        inside = ((unit >= 0) & (unit <= n)).all(dim=-1)
        weights = torch.where(inside, mu.weights, torch.zeros_like(mu.weights))
        masses = torch.zeros(math.prod(shape), dtype=mu.dtype, device=mu.device)
        for index, share in _deposit(unit, shape, assignment):
            flat = index[:, 0] if mu.dim == 1 else index[:, 0] * shape[1] + index[:, 1]
            masses = masses.index_add(0, flat, weights * share)
        return cls._from_masses(masses.reshape(shape), lower, upper)

    @classmethod
    def from_gaussian(cls, g: Gaussian, shape, lower, upper, *, quadrature: int = 8) -> Grid:
        r"""Cell averages of a Gaussian density: m_c = P_{N(α, Σ)}(cell c).

        Parameters
        ----------
        g : unbatched Gaussian in d = 1 or 2.
        shape, lower, upper : the grid (see :meth:`from_empirical`).
        quadrature : int
            Gauss–Legendre points per cell for correlated 2-D Gaussians (default 8).

        Notes
        -----
        d = 1 and diagonal Σ in d = 2: exact, by differences of the normal CDF (erfc on the
        tail side, so tail cells keep their relative accuracy). Correlated d = 2: along the
        axis where the Gaussian is widest in cell units the conditional law of the other
        coordinate is Gaussian, so
        m_c = ∫_{cell_x} φ(x) P(y ∈ cell_y | x) dx with P exact (CDF) and the outer integral
        by ``quadrature``-point Gauss–Legendre per cell: accurate when the Gaussian spans a
        few cells along that axis. The mass outside the box goes to :attr:`outside_mass`
        (a warning above 1e-3) and the inside masses are renormalised to 1.
        Differentiable in the mean and covariance.
        """
        if not isinstance(g, Gaussian):
            raise TypeError(f"g must be a Gaussian; received {type(g).__name__}.")
        if g.batch_shape != ():
            raise ValueError(
                f"from_gaussian needs a single Gaussian; received batch shape "
                f"{tuple(g.batch_shape)}. Index it first, e.g. g[0]."
            )
        if g.dim > 2:
            raise _too_many_dims(g.dim)
        check_positive_int(quadrature, "quadrature")
        shape = _check_shape(shape, g.dim)
        lower, upper = _check_box(lower, upper, g.mean(), dim=g.dim)
        edges = [
            torch.linspace(0, 1, n + 1, dtype=g.dtype, device=g.device) * (upper[k] - lower[k])
            + lower[k]
            for k, n in enumerate(shape)
        ]
        mean, cov = g.mean(), g.cov()
        if g.dim == 1 or bool(cov[0, 1] == 0):
            masses = _interval_masses(edges[0], mean[0], cov[0, 0])
            if g.dim == 2:
                masses = masses[:, None] * _interval_masses(edges[1], mean[1], cov[1, 1])[None]
        else:
            masses = _correlated_masses(edges, mean, cov, quadrature)
        return cls._from_masses(masses, lower, upper)

    @classmethod
    def _from_masses(cls, masses: torch.Tensor, lower, upper) -> Grid:
        inside = masses.sum()
        outside = max(0.0, 1.0 - float(inside.detach()))
        if float(inside.detach()) <= 0:
            raise ValueError(
                "no mass falls inside the box; enlarge it (lower, upper) to cover the measure."
            )
        if outside > OUTSIDE_WARN:
            warnings.warn(
                f"a mass of {outside:.3g} falls outside the box [{lower.tolist()}, "
                f"{upper.tolist()}]; the inside mass is renormalised to 1. Enlarge the box "
                "to keep it.",
                UserWarning,
                stacklevel=3,
            )
        return cls._trusted(masses / inside, lower, upper, outside)

    def __repr__(self) -> str:
        box = ", ".join(
            f"[{float(a):.3g}, {float(b):.3g}]"
            for a, b in zip(self._lower, self._upper, strict=True)
        )
        return f"Grid(shape={self.shape}, box={box}, dtype={self.dtype})"


def _check_shape(shape, dim: int) -> tuple[int, ...]:
    shape = (shape,) * dim if isinstance(shape, int) and not isinstance(shape, bool) else shape
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError(
            f"shape must be an int or a tuple of {dim} ints; received {shape!r}."
        ) from None
    if len(shape) != dim or any(
        isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in shape
    ):
        raise ValueError(f"shape must be {dim} positive int(s), one per axis; received {shape!r}.")
    return shape


def _check_box(lower, upper, like: torch.Tensor, dim: int | None = None):
    """Box corners as (d,) tensors on ``like``'s dtype and device, with lower < upper."""
    dim = like.ndim if dim is None else dim
    corners = []
    for value, name in ((lower, "lower"), (upper, "upper")):
        t = as_tensor(value, name, device=like.device)
        if t.ndim == 0:
            t = t.expand(dim)
        if t.shape != (dim,):
            raise ValueError(
                f"{name} must be a number or have shape ({dim},) for a grid in d = {dim}; "
                f"received shape {tuple(t.shape)}."
            )
        check_finite(t, name)
        converted = t.detach().to(like.dtype).clone()
        if not bool(torch.isfinite(converted).all()):
            raise OverflowError(
                f"{name} = {t.tolist()} does not fit in {like.dtype}, the dtype of the "
                "masses; use a smaller box or float64 masses."
            )
        corners.append(converted)
    lower, upper = corners
    if not bool((lower < upper).all()):
        raise ValueError(
            f"the box needs lower < upper on every axis; received lower = {lower.tolist()}, "
            f"upper = {upper.tolist()}."
        )
    if not bool(torch.isfinite((upper - lower) ** 2).all()):
        raise OverflowError(
            f"the box [{lower.tolist()}, {upper.tolist()}] is too wide for {like.dtype}: its "
            "squared cell sizes (the covariance of a cell) overflow. Use a smaller box, or "
            "float64 cell masses."
        )
    return lower, upper


def _deposit(unit: torch.Tensor, shape: tuple[int, ...], assignment: str):
    """(cell index (n, d), share (n,)) pairs of a particle-to-grid assignment."""
    n = torch.tensor(shape, device=unit.device)
    if assignment == "ngp":
        index = unit.floor().long().clamp(torch.zeros_like(n), n - 1)
        yield index, torch.ones_like(unit[:, 0])
        return
    centre_units = unit - 0.5  # centres sit at integer positions
    base = centre_units.floor()
    frac = centre_units - base
    base = base.long()
    for corner in range(2 ** unit.shape[1]):
        bits = torch.tensor([(corner >> k) & 1 for k in range(unit.shape[1])], device=unit.device)
        share = torch.where(bits.bool(), frac, 1 - frac).prod(dim=-1)
        index = (base + bits).clamp(torch.zeros_like(n), n - 1)
        yield index, share


def _interval_masses(edges, mean, var) -> torch.Tensor:
    """P(edges[i] ≤ X ≤ edges[i+1]) for X ~ N(mean, var), shape (n,)."""
    std = var.clamp_min(torch.finfo(var.dtype).tiny).sqrt()
    z = (edges - mean) / std
    return _normal_interval(z[:-1], z[1:])


def _correlated_masses(edges, mean, cov, quadrature: int) -> torch.Tensor:
    """Cell masses of a correlated 2-D Gaussian: exact along one axis, Gauss–Legendre along
    the other (the one where the Gaussian spans the most cells)."""
    widths = torch.stack([(e[1] - e[0]) for e in edges])
    spans = cov.diagonal().sqrt() / widths
    outer = int(torch.argmax(spans))  # integrate numerically along this axis
    inner = 1 - outer
    nodes, gl_weights = _gauss_legendre(quadrature, cov.dtype, cov.device)
    e_out = edges[outer]
    h_out = e_out[1:] - e_out[:-1]
    x = (e_out[:-1, None] + h_out[:, None] * (nodes + 1) / 2).reshape(-1)  # (n_out·q,)
    var_out = cov[outer, outer]
    phi = torch.exp(-((x - mean[outer]) ** 2) / (2 * var_out)) / torch.sqrt(2 * math.pi * var_out)
    # Conditional law of the inner coordinate given the outer one.
    slope = cov[inner, outer] / var_out
    cond_mean = mean[inner] + slope * (x - mean[outer])
    cond_var = cov[inner, inner] - slope * cov[inner, outer]
    cond_std = cond_var.clamp_min(torch.finfo(cov.dtype).tiny).sqrt()
    z = (edges[inner][None, :] - cond_mean[:, None]) / cond_std
    inner_masses = _normal_interval(z[:, :-1], z[:, 1:])  # (n_out·q, n_in)
    weighted = phi * (h_out / 2).repeat_interleave(quadrature) * gl_weights.repeat(len(h_out))
    masses = (weighted[:, None] * inner_masses).reshape(len(h_out), quadrature, -1).sum(1)
    return masses if outer == 0 else masses.T


def _gauss_legendre(q: int, dtype, device):
    """Gauss–Legendre nodes and weights on [-1, 1] (Golub–Welsch, in torch)."""
    k = torch.arange(1, q, dtype=torch.float64, device=device)
    beta = k / torch.sqrt(4 * k**2 - 1)
    jacobi = torch.diag(beta, 1) + torch.diag(beta, -1)
    nodes, vectors = torch.linalg.eigh(jacobi)
    weights = 2 * vectors[0] ** 2
    return nodes.to(dtype=dtype, device=device), weights.to(dtype=dtype, device=device)
