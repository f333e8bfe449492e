r"""Angular clustering of token clouds: labels, counts, GLPR's cluster density, times.

Tokens are compared by the cosine of their angle, c_ij = ⟨x_i, x_j⟩/(|x_i||x_j|) (for
tokens on the unit sphere, the inner product). Two tokens are *linked* when c_ij > 1 − δ;
clusters are the connected components of the link graph (single linkage). The cluster
density of Geshkovski, Letrouit, Polyanskiy and Rigollet ("A mathematical perspective on
Transformers", arXiv:2312.10794; their phase diagrams use δ = 10⁻³) is the share of linked
pairs i ≠ j, here weighted by the particles' masses: Σ_{i≠j} w_i w_j 1[c_ij > 1 − δ] /
Σ_{i≠j} w_i w_j (the share of pairs for uniform weights).

Every function takes one cloud or a batch of clouds (points (..., n, d)) and returns one
value per cloud, vectorised over the batch (chunks of ~64 MB of n × n matrices).
"""

from __future__ import annotations

import math

import torch

from tpde._validation import check_positive
from tpde.measures import Empirical

__all__ = [
    "angular_cluster_count",
    "angular_cluster_labels",
    "cluster_density",
    "clusters_over_time",
    "time_to_single_cluster",
]


def _cloud(mu, fname: str) -> Empirical:
    if not isinstance(mu, Empirical):
        raise TypeError(
            f"{fname} takes token clouds (tpde.measures.Empirical, batched or not); received "
            f"{type(mu).__name__}."
        )
    return mu


def _delta(delta) -> float:
    delta = check_positive(delta, "delta")
    if delta >= 2:
        raise ValueError(
            f"delta must lie in (0, 2) (links need cos > 1 − δ > −1); received {delta}."
        )
    return delta


def _chunks(points: torch.Tensor):
    """The batch flattened to (B, n, d) and split to keep n × n matrices near 64 MB."""
    flat = points.detach().reshape(-1, *points.shape[-2:])
    n = points.shape[-2]
    size = max(1, (64 * 2**20) // (n * n * 8))
    return flat.split(size)


def _links(chunk: torch.Tensor, delta: float) -> torch.Tensor:
    unit = torch.nn.functional.normalize(chunk, dim=-1)
    return unit @ unit.mT > 1 - delta


def angular_cluster_labels(mu, delta: float = 1e-3) -> torch.Tensor:
    """Cluster index of every token, shape (..., n), int64: the smallest index of its cluster.

    Connected components of the links c_ij > 1 − δ (module notes), by label propagation:
    each token takes the smallest label among its linked tokens until nothing changes (at
    most n rounds, vectorised over the batch).
    """
    mu, delta = _cloud(mu, "angular_cluster_labels"), _delta(delta)
    out = []
    for chunk in _chunks(mu.points):
        links = _links(chunk, delta)
        n = chunk.shape[-2]
        labels = torch.arange(n, device=chunk.device).expand(chunk.shape[0], n)
        for _ in range(n):
            spread = torch.where(links, labels.unsqueeze(-2), n).amin(-1)
            if torch.equal(spread, labels):
                break
            labels = spread
        out.append(labels)
    return torch.cat(out).reshape(mu.points.shape[:-1])


def angular_cluster_count(mu, delta: float = 1e-3) -> torch.Tensor:
    """Number of angular clusters of each cloud, shape (...), int64 (module notes)."""
    labels = angular_cluster_labels(mu, delta)
    n = labels.shape[-1]
    own = labels == torch.arange(n, device=labels.device)  # a cluster's smallest index
    return own.sum(-1)


def cluster_density(mu, delta: float = 1e-3) -> torch.Tensor:
    """GLPR's cluster density: the (mass-weighted) share of pairs i ≠ j with c_ij > 1 − δ.

    Shape (...): one value per cloud; GLPR's phase-diagram value is its mean over the
    systems (every system has the same number of pairs). A cloud of one token has no
    pair: NaN.
    """
    mu, delta = _cloud(mu, "cluster_density"), _delta(delta)
    w = mu.weights.detach()
    pair = w[:, None] * w[None, :]
    pair = pair - torch.diag_embed(pair.diagonal())
    total = pair.sum()
    out = [
        (_links(chunk, delta).to(w.dtype) * pair).sum((-2, -1)) / total
        for chunk in _chunks(mu.points)
    ]
    return torch.cat(out).reshape(mu.points.shape[:-2])


def clusters_over_time(trajectory, delta: float = 1e-3) -> torch.Tensor:
    """Angular cluster counts at every saved time of a particle flow, shape (T, ...)."""
    if not hasattr(trajectory, "measures") or not hasattr(trajectory, "times"):
        raise TypeError(
            "clusters_over_time takes the Trajectory of a particle flow (tpde.flows.integrate);"
            f" received {type(trajectory).__name__}. For one cloud use angular_cluster_count."
        )
    return torch.stack([angular_cluster_count(mu, delta) for mu in trajectory.measures])


def time_to_single_cluster(trajectory, delta: float = 1e-3) -> torch.Tensor:
    """First saved time at which each cloud forms one angular cluster, shape (...), float64.

    NaN where it never does within the run. The resolution is that of the saved times
    (use the :class:`~tpde.flows.Clustered` event for a sharp time).
    """
    counts = clusters_over_time(trajectory, delta)
    single = counts == 1
    first = torch.where(single.any(0), single.to(torch.int64).argmax(0), -1)
    times = trajectory.times.to(torch.float64)
    nan = torch.full_like(first, 0, dtype=torch.float64) + math.nan
    return torch.where(first >= 0, times[first.clamp_min(0)], nan)
