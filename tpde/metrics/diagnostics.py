"""Shape diagnostics of measures: spectrum, ranks, anisotropy, clusters, Gaussianity.

The spectral diagnostics take a measure (its covariance) or a covariance tensor (..., d, d)
and are batched; they answer the paper's questions (MATH.md §4, §6): does Σ collapse to a
low-rank matrix, to which rank, how anisotropic is Σ / tr Σ near a blow-up. The cluster
count and the distance to the best Gaussian are for particle clouds.
"""

from __future__ import annotations

import numpy as np
import torch

from tpde._linalg import symmetrize
from tpde._validation import (
    as_tensor,
    check_finite,
    check_linalg_dtype,
    check_positive,
    check_positive_int,
    check_psd,
    check_symmetric,
)
from tpde.measures import Empirical, Gaussian, Measure
from tpde.metrics._common import as_empirical, kind
from tpde.metrics.wasserstein import w2

__all__ = [
    "anisotropy",
    "cluster_count",
    "cluster_labels",
    "distance_to_gaussian",
    "effective_rank",
    "numerical_rank",
    "spectrum",
]


def _covariance(x, fname: str) -> torch.Tensor:
    if isinstance(x, Measure) or (
        not isinstance(x, torch.Tensor | np.ndarray) and callable(getattr(x, "cov", None))
    ):
        cov = x.cov()
    else:
        cov = as_tensor(x, "cov")
        if cov.ndim < 2:
            raise ValueError(
                f"{fname} takes a measure or a covariance (..., d, d); received a tensor of "
                f"shape {tuple(cov.shape)}."
            )
        check_linalg_dtype(cov.dtype, f"{fname}: the covariance")
        check_finite(cov, "cov")
        check_symmetric(cov, "cov")
        check_psd(cov, "cov")
    check_linalg_dtype(cov.dtype, f"{fname}: the covariance")
    check_finite(cov, "cov")
    return cov


def _spectrum(x, fname: str) -> torch.Tensor:
    cov = _covariance(x, fname)
    return torch.linalg.eigvalsh(symmetrize(cov)).flip(-1)


def spectrum(x) -> torch.Tensor:
    """Eigenvalues of the covariance, descending, shape (..., d).

    ``x``: a measure (its ``cov()``) or a symmetric positive semidefinite covariance tensor
    (..., d, d). Differentiable (torch's ``eigvalsh``).
    """
    return _spectrum(x, "spectrum")


def numerical_rank(x, *, rtol: float | None = None, atol: float = 0.0) -> torch.Tensor:
    """Number of covariance eigenvalues above max(atol, rtol · λ_max), shape (...), int64.

    Default ``rtol = d · eps(dtype)`` (numpy's ``matrix_rank`` rule: what rounding cannot
    tell from zero). The paper's rank histograms count eigenvalues > 0.1 of a converged Σ
    (MATH.md §6): ``numerical_rank(cov, rtol=0, atol=0.1)``.
    """
    evals = _spectrum(x, "numerical_rank")
    if rtol is None:
        rtol = evals.shape[-1] * torch.finfo(evals.dtype).eps
    rtol = check_positive(rtol, "rtol", strict=False)
    atol = check_positive(atol, "atol", strict=False)
    top = evals[..., :1].clamp_min(0)
    threshold = torch.clamp(rtol * top, min=atol)
    return (evals > threshold).sum(-1)


def effective_rank(x) -> torch.Tensor:
    """exp of the Shannon entropy of the normalised spectrum p = λ / Σλ, shape (...).

    Between 1 (rank one) and d (isotropic); Roy & Vetterli (2007). Negative rounding
    eigenvalues are clamped to 0, and 0 · log 0 = 0. A zero covariance (a collapsed point)
    has no spectrum to normalise: its effective rank is reported as 0.
    """
    evals = _spectrum(x, "effective_rank").clamp_min(0)
    total = evals.sum(-1, keepdim=True)
    p = evals / torch.where(total > 0, total, 1)
    entropy = -(torch.where(p > 0, p * torch.log(torch.where(p > 0, p, 1)), 0)).sum(-1)
    return torch.where(total.squeeze(-1) > 0, torch.exp(entropy), 0)


def anisotropy(x) -> torch.Tensor:
    """λ_max / tr Σ ∈ [1/d, 1], shape (...): 1 is rank one, 1/d isotropic.

    The quantity whose limit 1 marks the rank-one collapse of Σ/tr Σ at a blow-up (MATH.md
    §4 item 2). A zero covariance has no direction: reported as 0 (outside [1/d, 1]).
    """
    evals = _spectrum(x, "anisotropy").clamp_min(0)
    total = evals.sum(-1)
    return torch.where(total > 0, evals[..., 0] / torch.where(total > 0, total, 1), 0)


def _points(mu, fname: str) -> torch.Tensor:
    if isinstance(mu, Gaussian):
        raise TypeError(
            f"{fname} is for particle clouds; received a Gaussian. Use spectrum / "
            "numerical_rank for the shape of a Gaussian."
        )
    emp = as_empirical(mu, "mu", fname)
    return emp.points


def cluster_labels(mu, threshold: float) -> torch.Tensor:
    """Cluster index of every particle, shape (n,), int64, labels 0 … k−1.

    Clusters are the connected components of the graph joining particles at Euclidean
    distance ≤ ``threshold`` (single linkage), the count used in the clustering literature
    on attention dynamics (Geshkovski, Letrouit, Polyanskiy, Rigollet, "The emergence of
    clusters in self-attention dynamics", 2023). k-d tree + sparse graph (scipy): O(n log n)
    for well-separated clusters. Particles of zero weight are counted like the others.
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial import cKDTree

    threshold = check_positive(threshold, "threshold")
    points = _points(mu, "cluster_labels").detach().cpu().to(torch.float64).numpy()
    n = points.shape[0]
    pairs = cKDTree(points).query_pairs(threshold, output_type="ndarray")
    graph = coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    return torch.as_tensor(labels, dtype=torch.int64, device=_points(mu, "cluster_labels").device)


def cluster_count(mu, threshold: float) -> int:
    """Number of clusters: connected components at distance ≤ ``threshold`` (see
    :func:`cluster_labels`). The threshold is the user's resolution: pick it well below the
    separation of the clusters and well above their spread."""
    return int(cluster_labels(mu, threshold).max()) + 1


def distance_to_gaussian(mu, *, n_samples: int | None = None, seed: int = 0) -> torch.Tensor:
    """W2 between a particle cloud and the Gaussian with the same mean and covariance.

    The Gaussian N(m, Σ) (m, Σ the cloud's weighted moments) is sampled with ``n_samples``
    points (default: as many as the cloud) from a generator seeded with ``seed``, and the
    exact W2 (:func:`w2`) is computed between the cloud and the sample. By construction the
    Bures distance between the moments is 0, so only the non-Gaussian shape is measured; the
    value carries the sampling error of W2 between two n-point samples (≈ n^{-1/d} for large
    d), which a Gaussian cloud itself shows: compare with the same call on a sample of a
    Gaussian. Cost: one exact OT problem, O(n³) (n = 10³: 0.3 s).
    """
    if isinstance(mu, Gaussian) or not isinstance(mu, Empirical | Measure):
        raise TypeError(
            f"distance_to_gaussian takes an Empirical particle cloud; received {kind(mu)}."
        )
    emp = as_empirical(mu, "mu", "distance_to_gaussian")
    n = emp.n if n_samples is None else n_samples
    check_positive_int(n, "n_samples")  # n = n_samples whenever it can fail
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise TypeError(f"seed must be an int (a generator seed); received {seed!r}.")
    if seed < 0:
        raise ValueError(f"seed must be >= 0; received {seed}.")
    generator = torch.Generator(device=emp.device).manual_seed(int(seed))
    gaussian = Gaussian(emp.mean().detach(), emp.cov().detach())
    sample = Empirical(gaussian.sample(n, generator=generator))
    return w2(emp, sample)
