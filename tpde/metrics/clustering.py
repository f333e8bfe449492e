r"""Angular clustering of token clouds: labels, counts, diameters, GLPR's density, times.

Tokens are compared by the cosine of their angle, c_ij = ⟨u_i, u_j⟩ with u = x/|x| computed
scale-safely (:mod:`tpde._scale_safe`: right from the smallest to the largest float of the
dtype). Two tokens are *linked* when c_ij > 1 − δ, and every token is linked to itself
(a zero token, which has no direction, is linked to itself only: its own cluster). A cloud
is one link graph L_ij = 1[c_ij > 1 − δ], and "how many clusters" has two definitions:

- ``definition="components"`` (default): the connected components of L (single linkage).
  Clusters only merge along a flow, and a chain of tokens each within δ of the next is one
  cluster however wide it is (a chain 0.35 rad long with neighbours 0.01 rad apart);
- ``definition="rank"``: the rank of L, the count of Geshkovski, Letrouit, Polyanskiy and
  Rigollet ("A mathematical perspective on Transformers", arXiv:2312.10794, §6's
  numerics). On well separated clusters L is block diagonal with blocks of ones and both
  counts agree; on chained states the rank is larger.

"One cluster" has a third reading, the *diameter* criterion: every pair is linked
(complete linkage, the largest angle below arccos(1 − δ)); :func:`cluster_diameter` gives
that largest angle. The experiments (``tpde run sphere``, the clustering sweep) count
components and read "one cluster" by components: counts that only decrease along the
flow, and single-linkage clusters agree with GLPR's picture of tight clusters far apart
(their densities use δ = 10⁻³, where a component wider than a few δ is a transient). Use
``criterion="diameter"`` to demand a tight cluster, ``definition="rank"`` for GLPR's count.

The cluster density of GLPR (their phase diagrams) is the share of linked pairs i ≠ j,
weighted by the particles' masses: Σ_{i≠j} w_i w_j L_ij / Σ_{i≠j} w_i w_j (the share of
pairs for uniform weights); it is 1 when all the mass sits on one token (no pair of
distinct massive tokens: everything is one cluster).

δ must be resolvable in the dtype: the cosines carry a rounding error of about d·eps, so
δ < 4·d·eps is refused (δ = 1e-8 in float32, 1e-300 in float64). Non-finite tokens are
refused. Every function takes one cloud or a batch of clouds (points (..., n, d)) and
returns one value per cloud, vectorised over the batch (chunks of ~64 MB of n × n
matrices).
"""

from __future__ import annotations

import math

import torch

from tpde._scale_safe import unit
from tpde._validation import check_choice, check_positive
from tpde.measures import Empirical

__all__ = [
    "DEFINITIONS",
    "angular_cluster_count",
    "angular_cluster_labels",
    "cluster_density",
    "cluster_diameter",
    "clusters_over_time",
    "time_to_single_cluster",
]

#: The cluster counts (module notes).
DEFINITIONS = ("components", "rank")
#: The readings of "one cluster" in :func:`time_to_single_cluster`.
CRITERIA = ("components", "rank", "diameter")


def _cloud(mu, fname: str) -> Empirical:
    if not isinstance(mu, Empirical):
        raise TypeError(
            f"{fname} takes token clouds (tpde.measures.Empirical, batched or not); received "
            f"{type(mu).__name__}."
        )
    points = mu.points.detach()
    if not bool(torch.isfinite(points).all()):
        count = int((~torch.isfinite(points)).any(-1).sum())
        raise ValueError(
            f"{fname}: {count} token(s) have non-finite coordinates (NaN or Inf): a token "
            "with no direction cannot be counted. Take the state before the blow-up "
            "(traj.status tells which clouds blew up)."
        )
    return mu


def _delta(delta, mu: Empirical) -> float:
    delta = check_positive(delta, "delta")
    if delta >= 2:
        raise ValueError(
            f"delta must lie in (0, 2) (links need cos > 1 − δ > −1); received {delta}."
        )
    dtype, d = mu.points.dtype, mu.points.shape[-1]
    resolution = 4 * d * torch.finfo(dtype).eps
    if delta < resolution:
        raise ValueError(
            f"{dtype} cannot resolve delta = {delta:g}: cosines of tokens in d = {d} carry "
            f"rounding errors of ~d·eps, so delta must be >= 4·d·eps = {resolution:.3g}. "
            "Use a larger delta, or float64 tokens (mu.to(dtype=torch.float64))."
        )
    return delta


def _chunks(points: torch.Tensor):
    """The batch flattened to (B, n, d) and split to keep n × n matrices near 64 MB."""
    flat = points.detach().reshape(-1, *points.shape[-2:])
    n = points.shape[-2]
    size = max(1, (64 * 2**20) // (n * n * 8))
    return flat.split(size)


def _cosines(chunk: torch.Tensor) -> torch.Tensor:
    u = unit(chunk)
    return u @ u.mT


def _links(chunk: torch.Tensor, delta: float) -> torch.Tensor:
    """L_ij = 1[c_ij > 1 − δ], every token linked to itself, (B, n, n) bool."""
    links = _cosines(chunk) > 1 - delta
    links.diagonal(dim1=-2, dim2=-1).fill_(True)
    return links


def _components(links: torch.Tensor) -> torch.Tensor:
    """Each token's smallest linked-by-a-path index (label propagation, ≤ n rounds)."""
    n = links.shape[-1]
    labels = torch.arange(n, device=links.device).expand(links.shape[0], n)
    for _ in range(n):
        spread = torch.where(links, labels.unsqueeze(-2), n).amin(-1)
        if torch.equal(spread, labels):
            break
        labels = spread
    return labels


def angular_cluster_labels(mu, delta: float = 1e-3) -> torch.Tensor:
    """Cluster index of every token, shape (..., n), int64: the smallest index of its
    connected component of the link graph (single linkage, module notes).

    Label propagation: each token takes the smallest label among its linked tokens until
    nothing changes (at most n rounds, vectorised over the batch). Every token gets a
    label (a zero token: its own index).
    """
    mu = _cloud(mu, "angular_cluster_labels")
    delta = _delta(delta, mu)
    out = [_components(_links(chunk, delta)) for chunk in _chunks(mu.points)]
    return torch.cat(out).reshape(mu.points.shape[:-1])


def _count(chunk: torch.Tensor, delta: float, definition: str) -> torch.Tensor:
    links = _links(chunk, delta)
    if definition == "rank":
        return torch.linalg.matrix_rank(links.to(torch.float64))
    labels = _components(links)
    return (labels == torch.arange(labels.shape[-1], device=labels.device)).sum(-1)


def angular_cluster_count(mu, delta: float = 1e-3, *, definition: str = "components"):
    """Number of angular clusters of each cloud, shape (...), int64.

    ``definition``: "components" (connected components of the link graph, single
    linkage; what the experiments use) or "rank" (GLPR's rank of the thresholded Gram
    matrix); the module notes compare them.
    """
    mu = _cloud(mu, "angular_cluster_count")
    delta = _delta(delta, mu)
    check_choice(definition, "definition", DEFINITIONS)
    out = [_count(chunk, delta, definition) for chunk in _chunks(mu.points)]
    return torch.cat(out).reshape(mu.points.shape[:-2])


def cluster_diameter(mu) -> torch.Tensor:
    """Largest angle between two tokens of each cloud, shape (...), in [0, π].

    Angles are 2·atan2(|u_i − u_j|, |u_i + u_j|) (accurate for small and near-π angles
    alike); a zero token has no direction and counts as π from every other token. One
    token: 0. "One cluster" by diameter at δ means a diameter ≤ arccos(1 − δ).
    """
    mu = _cloud(mu, "cluster_diameter")
    out = []
    for chunk in _chunks(mu.points):
        u = unit(chunk)
        diff = (u.unsqueeze(-2) - u.unsqueeze(-3)).square().sum(-1).sqrt()
        add = (u.unsqueeze(-2) + u.unsqueeze(-3)).square().sum(-1).sqrt()
        angle = 2 * torch.atan2(diff, add)
        zero = (chunk == 0).all(-1)
        either = zero.unsqueeze(-1) | zero.unsqueeze(-2)
        either.diagonal(dim1=-2, dim2=-1).fill_(False)
        angle = torch.where(either, torch.full_like(angle, math.pi), angle)
        out.append(angle.amax((-2, -1)))
    return torch.cat(out).reshape(mu.points.shape[:-2])


def cluster_density(mu, delta: float = 1e-3) -> torch.Tensor:
    """GLPR's cluster density: the (mass-weighted) share of pairs i ≠ j with c_ij > 1 − δ.

    Shape (...): one value per cloud; GLPR's phase-diagram value is its mean over the
    systems (every system has the same number of pairs). A cloud whose mass sits on one
    token (or a cloud of one token) has no pair of massive tokens: density 1.
    """
    mu = _cloud(mu, "cluster_density")
    delta = _delta(delta, mu)
    w = mu.weights.detach()
    pair = w[:, None] * w[None, :]
    pair = pair - torch.diag_embed(pair.diagonal())
    total = pair.sum()
    if not bool(total > 0):
        return torch.ones(mu.points.shape[:-2], dtype=w.dtype, device=w.device)
    out = [
        (_links(chunk, delta).to(w.dtype) * pair).sum((-2, -1)) / total
        for chunk in _chunks(mu.points)
    ]
    return torch.cat(out).reshape(mu.points.shape[:-2])


def _check_trajectory(trajectory, fname: str):
    if not hasattr(trajectory, "measures") or not hasattr(trajectory, "times"):
        raise TypeError(
            f"{fname} takes the Trajectory of a particle flow (tpde.flows.integrate); "
            f"received {type(trajectory).__name__}. For one cloud use angular_cluster_count."
        )
    if len(trajectory.measures) == 0:
        raise ValueError(
            f"{fname}: the trajectory has no saved measure (an empty Trajectory); pass the "
            "result of tpde.flows.integrate, which saves at least t0 and t1."
        )
    return trajectory


def clusters_over_time(trajectory, delta: float = 1e-3, *, definition: str = "components"):
    """Angular cluster counts at every saved time of a particle flow, shape (T, ...)."""
    trajectory = _check_trajectory(trajectory, "clusters_over_time")
    return torch.stack(
        [angular_cluster_count(mu, delta, definition=definition) for mu in trajectory.measures]
    )


def time_to_single_cluster(
    trajectory, delta: float = 1e-3, *, criterion: str = "components"
) -> torch.Tensor:
    """First saved time at which each cloud forms one angular cluster, shape (...), float64.

    ``criterion``: "components" (one connected component; the experiments' reading),
    "rank" (GLPR's rank is 1) or "diameter" (every pair linked: the largest angle below
    arccos(1 − δ); a chain does not qualify). NaN where it never happens within the run.
    The resolution is that of the saved times (use the :class:`~tpde.flows.Clustered`
    event for a sharp time).
    """
    trajectory = _check_trajectory(trajectory, "time_to_single_cluster")
    check_choice(criterion, "criterion", CRITERIA)
    if criterion == "diameter":
        delta = _delta(delta, _cloud(trajectory.measures[0], "time_to_single_cluster"))
        limit = math.acos(1 - delta)
        single = torch.stack([cluster_diameter(mu) <= limit for mu in trajectory.measures])
    else:
        single = clusters_over_time(trajectory, delta, definition=criterion) == 1
    first = torch.where(single.any(0), single.to(torch.int64).argmax(0), -1)
    times = trajectory.times.to(torch.float64)
    nan = torch.full_like(first, 0, dtype=torch.float64) + math.nan
    return torch.where(first >= 0, times[first.clamp_min(0)], nan)
