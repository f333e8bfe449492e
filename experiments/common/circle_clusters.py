r"""Clusters of a measure on the circle, counted one way for particles and densities, and
the plateaus of a count over time.

**Clusters.** The circle is cut into ``cells`` equal arcs [2πc/G, 2π(c + 1)/G) (G =
``cells``) and μ gives each its mass m_c (tokens: the share of the weights whose angle lies
in it; a density on M ≥ G angles: ρ_i·2π/M summed over the angles θ_i in it, the
rectangle rule). The window average of μ at cell c is its mass over the w = ``window``
cells centred on c (w odd) per unit length,

    ρ_w(c) = (Σ_{|c' − c| ≤ (w−1)/2} m_{c'}) / (2πw/G)      (indices mod G),

and a **cluster** is a maximal circular run of cells where ρ_w > ``level``/2π (``level``
times the uniform density) whose cells carry a mass ≥ ``min_share``. The count is the
number of clusters.

- A level L > 1 gives the uniform law none (the window averages of a measure of mass 1
  have mean 1/2π, so not every cell exceeds the level either).
- A tight group of tokens, narrower than the window, sits inside one run, which holds its
  whole mass; it is seen when that mass exceeds L·w/G (6.6% with the defaults G = 512,
  w = 17, L = 2: smaller groups are not clusters here).
- Two groups are separate clusters when the density between them falls below the level
  over at least one cell: when they are more than about a window (0.21 rad) apart.
- N uniform tokens put a Poisson number of mean λ = Nw/G in a window, above the level with
  probability ≤ exp(−λ(L ln L − L + 1)) (Chernoff): 2.7e-6 per window at N = 10³ with the
  defaults (λ = 33), 2e-56 at N = 10⁴. Per run that is not negligible at N = 10³: the
  union bound over the G = 512 windows of a save gives ≤ 1.4e-3 per save, and over the
  109 saves of the default run ≤ 0.15 (a bound, loose: the windows overlap and successive
  saves of a near-uniform cloud are nearly the same draw; only the saves before the modes
  grow matter, and a false window is a cluster only if its run holds ≥ ``min_share``).
  Measured: none of 20 000 draws of 10³ uniform tokens has a window above the level
  (< 1.5e-4 per save at 95%). From N = 10⁴ on the bound is negligible (≤ 1e-51 per run).
- A density on M ≥ G angles is counted the same way, as far as its grid resolves it.

**Plateaus.** Of a count sampled at increasing times t_0 < … < t_n: the maximal runs of one
value lasting ≥ ``shortest`` (last time of the run minus its first). The first plateau is
the first such run with a count ≥ 1 that a larger count does not follow (a run followed by
a larger count is a stage of the formation): the first metastable state (Bruno,
Pasqualotto, Agazzi, arXiv:2410.23228). Its duration ends where the count changes (a merge
when it drops) and is a lower bound ("censored") when the run reaches t_n.

**Lifetimes and merges** (:func:`lifetimes`, :func:`merges`). A count flickers where a
cluster sits near the level (one save below, the next above): runs shorter than
``shortest`` between two plateaus of one count are taken as that count, so the plateaus
joined across them give each metastable state's lifetime (first to last time of its
count; censored when it reaches t_n). A merge is a drop of the count from one such
plateau to the next; its time is known to lie between the last save of the earlier and the
first save of the later plateau: the midpoint, ± half that gap.

**Settled states** (:func:`settled`). Of the joined states of one series, a state that a
larger count follows is a stage of the formation (a further bump still growing to the
level, as in the first plateau's rule), not a metastable state: the settled states are the
others, so each count's first settled state is its first metastable one. The S¹ and S²
sweeps read the lifetimes of a count from them (Bruno, Pasqualotto, Agazzi; MATH.md §9).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch

__all__ = [
    "CELLS",
    "LEVEL",
    "MIN_SHARE",
    "WINDOW",
    "Merge",
    "Plateau",
    "cell_masses",
    "cluster_masses",
    "clusters",
    "density_masses",
    "first_plateau",
    "lifetimes",
    "merges",
    "plateaus",
    "points_masses",
    "settled",
]

TWO_PI = 2 * math.pi

#: The counter's settings the ``circle-pde`` study uses by default (its Config) and the
#: benchmark times: cells on the circle, the moving average's width in cells (odd), the
#: level in units of the uniform density, a cluster's smallest share of the mass.
CELLS, WINDOW, LEVEL, MIN_SHARE = 512, 17, 2.0, 0.05


def cell_masses(angles, weights, cells: int) -> np.ndarray:
    """Masses (cells,) of the arcs [2πc/cells, 2π(c + 1)/cells) of the weighted angles.

    Parameters
    ----------
    angles : (n,) tensor or array of angles (any real values: taken mod 2π).
    weights : (n,) nonnegative weights (token weights, or ρ_i·2π/M for a density).
    cells : number of arcs G ≥ 1.

    Returns
    -------
    (cells,) float64 array of the masses, normalised to total 1.
    """
    angles = torch.as_tensor(angles, dtype=torch.float64)
    weights = torch.as_tensor(weights, dtype=torch.float64)
    index = torch.floor(torch.remainder(angles, TWO_PI) * (cells / TWO_PI)).long()
    masses = torch.bincount(index.clamp(0, cells - 1), weights, minlength=cells).numpy()
    return masses / masses.sum()


def points_masses(points: torch.Tensor, cells: int, weights=None) -> np.ndarray:
    """:func:`cell_masses` of tokens (n, 2) on the circle (uniform weights by default)."""
    angles = torch.atan2(points[:, 1], points[:, 0])
    if weights is None:
        weights = torch.ones(len(points), dtype=torch.float64)
    return cell_masses(angles, weights, cells)


def density_masses(density, cells: int) -> np.ndarray:
    """:func:`cell_masses` of a :class:`~tpde.measures.CircleDensity` (M ≥ cells angles).

    Raises ValueError when the density's grid is coarser than the cells.
    """
    if density.size < cells:
        raise ValueError(
            f"counting clusters on {cells} cells needs a density on at least as many angles; "
            f"received M = {density.size}. Pass cells <= {density.size}."
        )
    theta = density.offset + torch.arange(density.size, dtype=torch.float64) * (
        TWO_PI / density.size
    )
    return cell_masses(theta, density.density.double().clamp_min(0), cells)


def cluster_masses(masses: np.ndarray, window: int, level: float, min_share: float) -> list[float]:
    """The masses of the clusters of cell masses (module notes).

    Parameters
    ----------
    masses : (G,) nonnegative cell masses (normalised here to total 1).
    window : odd number of cells w of the moving average, 1 ≤ w ≤ G.
    level : threshold of the window average in units of the uniform density 1/2π (> 1).
    min_share : smallest mass of a cluster, in [0, 1].

    Returns
    -------
    list of the clusters' masses (its length is the count), in the order of their first
    cell counted from angle 0.
    """
    return [mass for mass, _ in clusters(masses, window, level, min_share)]


def clusters(
    masses: np.ndarray, window: int, level: float, min_share: float
) -> list[tuple[float, float]]:
    """The clusters of cell masses (module notes) as (mass, centre): the centre is the
    angle in [0, 2π) of Σ_c m_c e^{iθ_c} over the cluster's cells, θ_c the cells' centres
    (the circular mean at the cells' resolution 2π/G).

    Parameters and order as :func:`cluster_masses`.
    """
    m = np.asarray(masses, dtype=np.float64)
    m = m / m.sum()
    G, half = len(m), window // 2
    padded = np.concatenate([m[G - half :], m, m[:half]]) if half else m
    sums = np.convolve(padded, np.ones(window), mode="valid")  # (G,): window masses
    above = sums > level * window / G
    if not above.any() or above.all():
        return []
    first_below = int(np.argmin(above))  # a run never wraps past a cell below the level
    above, m = np.roll(above, -first_below), np.roll(m, -first_below)
    centres = np.roll((np.arange(G) + 0.5) * (TWO_PI / G), -first_below)
    edges = np.diff(above.astype(np.int8), prepend=0, append=0)
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    runs = []
    for s, e in zip(starts, ends, strict=True):
        mean = np.sum(m[s:e] * np.exp(1j * centres[s:e]))
        centre = float(np.angle(mean)) % TWO_PI
        runs.append(((s + first_below) % G, float(m[s:e].sum()), centre))
    return [(mass, centre) for _, mass, centre in sorted(runs) if mass >= min_share]


@dataclass(frozen=True)
class Plateau:
    """A run of one cluster count: its count, first time, duration, whether the run reaches
    the last time (the duration is then a lower bound), and the count after it (None if
    censored)."""

    count: int
    start: float
    duration: float
    censored: bool
    after: int | None


def plateaus(times, counts, shortest: float) -> list[Plateau]:
    """The runs of one count lasting ≥ ``shortest`` (module notes), in time order.

    Parameters
    ----------
    times : (n,) increasing times; counts : (n,) integer counts at them.
    shortest : the shortest duration kept (≥ 0).
    """
    times, counts = np.asarray(times, dtype=float), np.asarray(counts)
    if len(times) != len(counts):
        raise ValueError(
            f"times and counts must have one entry per sample; received {len(times)} times "
            f"and {len(counts)} counts."
        )
    out, start, n = [], 0, len(counts)
    for i in range(1, n + 1):
        if i < n and counts[i] == counts[start]:
            continue
        duration = float(times[i - 1] - times[start])
        if duration >= shortest:
            after = int(counts[i]) if i < n else None
            out.append(Plateau(int(counts[start]), float(times[start]), duration, i == n, after))
        start = i
    return out


def first_plateau(times, counts, shortest: float) -> Plateau | None:
    """The first plateau with a count ≥ 1 not followed by a larger count (None if there is
    none): a run that a larger count follows is a stage of the formation (a further bump
    still growing to the level), not a metastable state."""
    found = plateaus(times, counts, shortest)
    return next((p for p in found if p.count >= 1 and (p.after is None or p.after < p.count)), None)


def lifetimes(times, counts, shortest: float) -> list[Plateau]:
    """The plateaus of :func:`plateaus` with consecutive runs of one count joined across the
    shorter runs between them (module notes): each metastable state once, in time order.

    Parameters
    ----------
    times : (n,) increasing times; counts : (n,) integer counts at them.
    shortest : the shortest run kept (≥ 0), as in :func:`plateaus`.

    Returns
    -------
    list of Plateau
        Count, first time, lifetime (the last time its count is seen before the next
        plateau starts, minus its first), censored (it reaches the last time), the count of
        the next plateau (or the count after it, when no plateau follows).
    """
    times, counts = np.asarray(times, dtype=float), np.asarray(counts)
    joined: list[Plateau] = []
    for p in plateaus(times, counts, shortest):
        if joined and joined[-1].count == p.count:  # across shorter runs: one state
            p = Plateau(p.count, joined.pop().start, 0.0, p.censored, None)
        joined.append(p)
    out = []
    for j, p in enumerate(joined):
        until = joined[j + 1].start if j + 1 < len(joined) else math.inf
        seen = times[(counts == p.count) & (times >= p.start) & (times < until)]
        censored = bool(seen[-1] == times[-1])
        after = joined[j + 1].count if j + 1 < len(joined) else None
        if after is None and not censored:
            after = int(counts[np.searchsorted(times, seen[-1], side="right")])
        out.append(Plateau(p.count, p.start, float(seen[-1] - p.start), censored, after))
    return out


@dataclass(frozen=True)
class Merge:
    """A drop of the cluster count between two plateaus: the counts before and after, the
    last time of the earlier plateau and the first of the later one; ``time`` their
    midpoint and ``error`` half their gap (the merge lies within time ± error)."""

    before: int
    after: int
    last: float
    first: float

    @property
    def time(self) -> float:
        return (self.last + self.first) / 2

    @property
    def error(self) -> float:
        return (self.first - self.last) / 2


def merges(times, counts, shortest: float) -> list[Merge]:
    """The merges of a count series: every drop from one :func:`lifetimes` plateau to the
    next (a rise is a formation stage, not a merge), in time order.

    Parameters
    ----------
    times : (n,) increasing times; counts : (n,) integer counts at them.
    shortest : the shortest run kept (≥ 0).
    """
    found = lifetimes(times, counts, shortest)
    return [
        Merge(p.count, q.count, p.start + p.duration, q.start)
        for p, q in itertools.pairwise(found)
        if q.count < p.count
    ]


def settled(states: list) -> list:
    """The settled states of one series (module notes): those that a larger count does not
    follow.

    Parameters
    ----------
    states : the joined states of one count series in time order, as :class:`Plateau`
        (:func:`lifetimes`) or as rows whose first entry is the count (the sweeps' saved
        ``[count, start, duration, censored]``).

    Returns
    -------
    list
        The states, same type and order, without those whose next state has a larger
        count. The last state is kept (no state follows it).

    Examples
    --------
    Counts 0, 2, 3, 2, 1 (each a state): 0 and the first 2 are stages of the formation,
    3, 2, 1 are settled.
    """

    def count(state) -> int:
        return state.count if isinstance(state, Plateau) else int(state[0])

    following = [count(s) for s in states[1:]] + [None] * bool(states)
    return [s for s, after in zip(states, following, strict=True)
            if after is None or after <= count(s)]  # fmt: skip
