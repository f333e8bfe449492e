r"""Clusters of tokens on the sphere S², counted as on the circle
(:mod:`~experiments.common.circle_clusters`), and the degree-l profile of a cloud.

**Cells.** A Fibonacci lattice of G points c_a on S² (:func:`fibonacci_cells`, nearly equal
areas 4π/G, spacing h ≈ √(4π/G)); a token belongs to its nearest cell (a k-d tree on the
unit vectors: the nearest in chord is the nearest in angle), so μ gives each cell its mass
m_a. The **cap average** at cell a is the mass of the cells within angle r = ``radius``
of c_a over their share of the cells,

    ρ_r(a) = Σ_{b: ∠(c_a, c_b) ≤ r} m_b / (#{b: ∠(c_a, c_b) ≤ r}/G)   (units of 1/4π),

the S¹ window average with a spherical cap for the window. A **cluster** is a connected
set of cells with ρ_r > ``level`` (cells adjacent when their centres are within
NEIGHBOUR·h) whose cells carry a mass ≥ ``min_share``; the count is the number of
clusters.

- A level L > 1 gives the uniform law none (the cap averages of a measure have mean 1).
- A tight group of tokens narrower than the cap sits in one set, which holds its whole
  mass; it is seen when its mass exceeds L·(cap's share of the sphere) ≈ L(1 − cos r)/2
  (2.0 % at the defaults r = 0.2, L = 2).
- Two groups are separate when the cap average falls below the level between them, about
  2r = 0.4 rad apart at the defaults.
- N uniform tokens put Poisson(λ = N(1 − cos r)/2) tokens in a cap (λ = 40 at N = 4000):
  a cap above the level has probability ≤ exp(−λ(L ln L − L + 1)) = 1.9e-7 there (Chernoff),
  and a set of such caps is a cluster only if it holds ≥ ``min_share`` of the mass.

**Degree-l profile** (:func:`degree_profiles`). The degree-l part of a cloud's density
(1/4π)[1 + Σ_l (2l + 1) f_l] is f_l(x) = Σ_j w_j P_l(⟨x, x_j⟩) (addition theorem), computed
from the cloud's moments in O((N + G)·l²) (:func:`experiments.theory.sphere.harmonic_energy`'s
recurrence). Its **peaks** (:func:`peaks`) are the cells where it is positive and larger
than at every adjacent cell.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.sparse import coo_matrix, csr_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial import cKDTree

from .legendre import legendre_terms

__all__ = [
    "CELLS",
    "LEVEL",
    "MIN_SHARE",
    "NEIGHBOUR",
    "RADIUS",
    "Profile",
    "SphereCells",
    "degree_profiles",
    "fibonacci_cells",
    "peaks",
]

#: Defaults: cells of the lattice, the cap's angular radius, the level in units of the
#: uniform density, a cluster's smallest share of the mass, adjacency in lattice spacings.
CELLS, RADIUS, LEVEL, MIN_SHARE, NEIGHBOUR = 4096, 0.2, 2.0, 0.02, 1.6


def fibonacci_cells(count: int) -> np.ndarray:
    """The Fibonacci lattice: ``count`` unit vectors (count, 3), z_a = 1 − (2a + 1)/count
    (equal-area bands), azimuths stepped by the golden angle π(3 − √5)."""
    if count < 2:
        raise ValueError(f"a lattice needs count >= 2 cells; received {count}.")
    a = np.arange(count, dtype=np.float64)
    z = 1 - (2 * a + 1) / count
    phi = a * math.pi * (3 - math.sqrt(5))
    s = np.sqrt(1 - z * z)
    return np.stack([s * np.cos(phi), s * np.sin(phi), z], -1)


def _pairs_within(tree: cKDTree, angle: float) -> csr_matrix:
    """The symmetric 0/1 matrix of the lattice's pairs within ``angle`` (diagonal included)."""
    chord = 2 * math.sin(min(angle, math.pi) / 2)
    pairs = tree.query_pairs(chord + 1e-12, output_type="ndarray")
    n = tree.n
    rows = np.concatenate([pairs[:, 0], pairs[:, 1], np.arange(n)])
    cols = np.concatenate([pairs[:, 1], pairs[:, 0], np.arange(n)])
    return coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n)).tocsr()


class SphereCells:
    """A lattice with its caps and adjacency, built once and used at every save.

    Parameters
    ----------
    cells : G, the lattice's size (≥ 2).
    radius : the caps' angular radius r in (0, π).
    level : threshold of the cap average, in units of the uniform density (> 1).
    min_share : a cluster's smallest mass, in [0, 1].
    """

    def __init__(self, cells: int = CELLS, radius: float = RADIUS, level: float = LEVEL,
                 min_share: float = MIN_SHARE) -> None:  # fmt: skip
        if not 0 < radius < math.pi or level <= 1 or not 0 <= min_share <= 1:
            raise ValueError(
                f"need radius in (0, π), level > 1 (times the uniform density) and min_share "
                f"in [0, 1]; received radius = {radius}, level = {level}, min_share = "
                f"{min_share}."
            )
        self.centres = fibonacci_cells(cells)
        self.radius, self.level, self.min_share = float(radius), float(level), float(min_share)
        self.tree = cKDTree(self.centres)
        self.caps = _pairs_within(self.tree, radius)
        self.share = np.asarray(self.caps.sum(1)).ravel() / cells  # cells in each cap / G
        self.spacing = math.sqrt(4 * math.pi / cells)
        self.adjacent = _pairs_within(self.tree, NEIGHBOUR * self.spacing)

    @property
    def size(self) -> int:
        return len(self.centres)

    def masses(self, points, weights=None) -> np.ndarray:
        """Cell masses (G,) of tokens (N, 3) (uniform weights by default), total 1."""
        x = torch.as_tensor(points).detach().to(torch.float64).cpu().numpy()
        x = x / np.linalg.norm(x, axis=-1, keepdims=True)
        _, index = self.tree.query(x)
        w = np.ones(len(x)) if weights is None else torch.as_tensor(weights).double().numpy()
        m = np.bincount(index, w, minlength=self.size)
        return m / m.sum()

    def cap_average(self, masses: np.ndarray) -> np.ndarray:
        """ρ_r (G,) of cell masses, in units of the uniform density (module notes)."""
        return (self.caps @ np.asarray(masses, dtype=np.float64)) / self.share

    def clusters(self, masses: np.ndarray) -> list[tuple[float, np.ndarray]]:
        """The clusters (module notes) of cell masses as (mass, centre (3,)), heaviest first;
        the centre is the normalised mass-weighted mean of the cluster's cell centres."""
        m = np.asarray(masses, dtype=np.float64)
        m = m / m.sum()
        above = np.flatnonzero(self.cap_average(m) > self.level)
        if len(above) == 0:
            return []
        count, label = connected_components(self.adjacent[above][:, above], directed=False)
        out = []
        for c in range(count):
            cells = above[label == c]
            mass = float(m[cells].sum())
            if mass >= self.min_share and mass > 0:
                centre = (m[cells, None] * self.centres[cells]).sum(0)
                out.append((mass, centre / np.linalg.norm(centre)))
        return sorted(out, key=lambda p: -p[0])

    def count(self, points, weights=None) -> int:
        """The number of clusters of tokens (N, 3)."""
        return len(self.clusters(self.masses(points, weights)))


def peaks(values: np.ndarray, adjacent: csr_matrix) -> np.ndarray:
    """The cells (indices) where ``values`` (G,) is positive and at least its value at
    every adjacent cell (``adjacent``: the symmetric 0/1 adjacency, diagonal included):
    the candidates of :meth:`Profile.maxima`."""
    v = np.asarray(values, dtype=np.float64)
    a = adjacent.tocoo()
    off = a.row != a.col
    larger = np.full(len(v), -np.inf)
    np.maximum.at(larger, a.row[off], v[a.col[off]])
    return np.flatnonzero((v > 0) & (v >= larger))


class Profile:
    """The degree-l parts of a cloud, f_l(y) = Σ_j w_j P_l(⟨y, x_j⟩), for l ≤ ``top``.

    By the addition theorem f_l(y) = 4π/(2l + 1) [Λ̄_l^0(y) c_l0 + 2 Re Σ_{m≥1}
    Λ̄_l^m(z_y)(y₁ + iy₂)^m c̄_lm], c_lm = Σ_j w_j Λ̄_l^m(z_j)(x₁ + ix₂)_j^m, Λ̄_l^m = Λ_l^m/
    sin^m θ from the fully normalised recurrence (no division by sin θ). The moments c_lm
    are summed once (O(N·top²)); each evaluation costs O(G·top²).

    Parameters
    ----------
    points : (N, 3) unit vectors (tensor or array).
    top : the largest degree.
    weights : (N,) or None (1/N).
    """

    def __init__(self, points, top: int, weights=None) -> None:
        x = torch.as_tensor(points, dtype=torch.float64)
        n = x.shape[0]
        w = torch.full((n,), 1.0 / n, dtype=torch.float64) if weights is None else \
            torch.as_tensor(weights, dtype=torch.float64)  # fmt: skip
        self.top = int(top)
        self.moments = [((lx * w) * px).sum(-1) for lx, px in _normalised_legendre(x, self.top)]

    def __call__(self, at, coefficients=None) -> np.ndarray:
        """(top + 1, G) the profiles f_0 … f_top at ``at`` (G, 3); with ``coefficients``
        a (top + 1,), the sum Σ_l a_l f_l (G,) instead."""
        y = torch.as_tensor(at, dtype=torch.float64)
        out = torch.zeros(self.top + 1, y.shape[0], dtype=torch.float64)
        for m, (ly, py) in enumerate(_normalised_legendre(y, self.top)):
            term = (ly * py).mul(self.moments[m].conj()[:, None]).real
            out[m:] += (1 if m == 0 else 2) * term
        scale = 4 * math.pi / (2 * torch.arange(self.top + 1, dtype=torch.float64) + 1)
        out = (out * scale[:, None]).numpy()
        return out if coefficients is None else np.asarray(coefficients, float) @ out

    def maxima(self, coefficients, cells: SphereCells, tolerance: float = 1e-4) -> np.ndarray:
        """The local maxima (k, 3) of g = Σ_l a_l f_l where g > 0: from every lattice
        candidate (:func:`peaks`) a hill climb on the sphere (the best of 8 tangent moves
        of size s, s halved when none is better, down to ``tolerance``), the ends within
        10·tolerance rad of one another counted once. The lattice alone is not enough: on a
        slowly varying ridge a cell can beat its neighbours without being a maximum."""
        start = cells.centres[peaks(self(cells.centres, coefficients), cells.adjacent)]
        ends = [_climb(lambda y: self(y, coefficients), x, 0.5 * cells.spacing, tolerance)
                for x in start]  # fmt: skip
        kept: list[np.ndarray] = []
        for e in ends:
            if all(np.arccos(np.clip(e @ k, -1, 1)) > 10 * tolerance for k in kept):
                kept.append(e)
        return np.array(kept).reshape(-1, 3)


def _climb(g, x: np.ndarray, step: float, tolerance: float) -> np.ndarray:
    """A derivative-free ascent of g on S² from x (module :meth:`Profile.maxima`)."""
    angles = np.arange(8) * (math.pi / 4)
    value = float(g(x[None])[0])
    while step > tolerance:
        u = np.cross(x, [1.0, 0, 0] if abs(x[0]) < 0.9 else [0, 1.0, 0])
        u /= np.linalg.norm(u)
        v = np.cross(x, u)
        moves = np.cos(step) * x + np.sin(step) * (np.outer(np.cos(angles), u)
                                                   + np.outer(np.sin(angles), v))  # fmt: skip
        values = g(moves)
        best = int(np.argmax(values))
        if values[best] > value:
            x, value = moves[best] / np.linalg.norm(moves[best]), float(values[best])
        else:
            step /= 2
    return x


def degree_profiles(points, degrees, at, weights=None) -> np.ndarray:
    """(len(degrees), G): f_l(y) = Σ_j w_j P_l(⟨y, x_j⟩) at ``at`` (G, 3) for each l in
    ``degrees`` (:class:`Profile`)."""
    degrees = [int(d) for d in degrees]
    return Profile(points, max(degrees), weights)(at)[degrees]


def _normalised_legendre(points: torch.Tensor, top: int) -> list:
    """Per order m ≤ top: (Λ̄_l^m(z) for l = m … top as (top + 1 − m, N), (x₁ + ix₂)^m (N,))."""
    xy = torch.complex(points[..., 0], points[..., 1])
    rows: list[list] = [[] for _ in range(top + 1)]
    powers: list = [None] * (top + 1)
    for _, m, current, power in legendre_terms(points[..., 2], xy, top):
        rows[m].append(current)
        powers[m] = power
    return [(torch.stack(r), p) for r, p in zip(rows, powers, strict=True)]
