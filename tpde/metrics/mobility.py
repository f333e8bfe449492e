r"""The mobility M = V A⁻¹ and the log-partition log Z_μ: one definition, one tolerance policy.

MATH.md §5. Softmax attention with A symmetric and M := V A⁻¹ symmetric and definite is
a twisted Wasserstein gradient flow with mobility sM (s = ±1, sM ≻ 0), in the metric
weighted by Z_μ(x) = ∫ e^{yᵀAx} dμ(y); Sinkhorn attention with V = MA is one without the
weight. These two objects serve every place that needs them: the fields' gradient
structure (:mod:`tpde.fields.gradient_flow.structure`), the energies,
:func:`tpde.metrics.twisted_w2`, the JKO steps and :class:`tpde.fields.GradientFlowField`.

Tolerance policy (relative, in the dtype the parameters were given in):

- A symmetric: max|A − Aᵀ| ≤ 1e3·eps·max|A|;
- A invertible: σ_min(A) > 1e3·d·eps·σ_max(A);
- M = V A⁻¹ symmetric: max|M − Mᵀ| ≤ √eps·max|M| (the rounding of the solve);
- M definite: every eigenvalue of M beyond 1e3·d·eps·max|λ| in absolute value, one sign.
"""

from __future__ import annotations

import torch

from tpde import _lu as lu
from tpde._engines import logsumexp
from tpde._linalg import symmetrize
from tpde._validation import as_tensor, check_finite, symmetry_tolerance
from tpde.measures import Gaussian

__all__ = ["NotAGradientFlow", "log_partition", "mobility", "spd_mobility"]

#: Multiple of d·eps below which a singular value or an eigenvalue counts as zero.
DEGENERATE = 1e3


class NotAGradientFlow(ValueError):
    """The field is not a (twisted) gradient flow in tpde (MATH.md §5), or not for these
    parameters (A not symmetric or singular, M = V A⁻¹ not symmetric definite)."""


def _relative_gap(matrix: torch.Tensor) -> float:
    """max|S − Sᵀ| / max|S| (0 for the zero matrix)."""
    matrix = matrix.detach()
    scale = float(matrix.abs().max().clamp_min(1e-300))
    return float((matrix - matrix.mT).abs().max()) / scale


def _definite(M: torch.Tensor, dtype: torch.dtype, what: str) -> tuple[torch.Tensor, int]:
    """(sM, s) for a symmetric definite M; NotAGradientFlow otherwise."""
    evals = torch.linalg.eigvalsh(M.detach())
    floor = DEGENERATE * M.shape[-1] * torch.finfo(dtype).eps * float(evals.abs().max())
    if bool((evals > floor).all()):
        return M, 1
    if bool((evals < -floor).all()):
        return -M, -1
    raise NotAGradientFlow(
        f"the mobility {what} must be definite (sM ≻ 0 for s = +1 or −1); received "
        f"eigenvalues from {float(evals[0]):.3g} to {float(evals[-1]):.3g}"
    )


def mobility(A=None, V=None, *, M=None, dtype=None, a_name: str = "A") -> tuple[torch.Tensor, int]:
    """The positive definite mobility sM and the sign s, from M = V A⁻¹ or from M itself.

    Parameters
    ----------
    A, V : tensors (d, d): A symmetric and invertible, V = M A with M symmetric definite.
    M : tensor (d, d), instead of (A, V): a symmetric definite mobility.
    dtype : the dtype whose epsilon sets the tolerances (module notes); default the
        tensors' own.
    a_name : how A is called in messages ("A = scale·KᵀQ" for a field).

    Returns
    -------
    (sM, s): sM symmetric positive definite (symmetrised), s = ±1.

    Raises
    ------
    NotAGradientFlow (a ValueError) naming the condition that fails.
    """
    if M is not None:
        dtype = dtype or M.dtype
        if _relative_gap(M) > symmetry_tolerance(dtype):
            raise NotAGradientFlow(
                f"M must be symmetric; received relative asymmetry {_relative_gap(M):.3g}"
            )
        return _definite(symmetrize(M), dtype, "M")
    dtype = dtype or A.dtype
    asym = _relative_gap(A)
    if asym > symmetry_tolerance(dtype):
        raise NotAGradientFlow(
            f"{a_name} must be symmetric; received relative asymmetry {asym:.3g} (take K = Q, "
            "or K = −Q, or Q = A, K = I for a symmetric A)"
        )
    A = symmetrize(A)
    svals = torch.linalg.svdvals(A.detach())
    if float(svals[-1]) <= DEGENERATE * A.shape[-1] * torch.finfo(dtype).eps * float(svals[0]):
        raise NotAGradientFlow(
            f"A is singular (smallest singular value {float(svals[-1]):.3g}), so the mobility "
            "M = V A⁻¹ does not exist"
        )
    raw = lu.solve(A, V.mT).mT  # V A⁻¹ with A symmetric
    gap = _relative_gap(raw)
    if gap > torch.finfo(dtype).eps ** 0.5:
        raise NotAGradientFlow(
            f"the mobility M = V A⁻¹ must be symmetric (V = M A with M symmetric, MATH.md §5); "
            f"received relative asymmetry {gap:.3g}"
        )
    return _definite(symmetrize(raw), dtype, "M = V A⁻¹")


def spd_mobility(value, d: int, like: torch.Tensor, name: str = "mobility") -> torch.Tensor:
    """A user's mobility (d, d), checked symmetric positive definite, in ``like``'s dtype."""
    matrix = as_tensor(value, name, dtype=like.dtype, device=like.device)
    if matrix.shape != (d, d):
        raise ValueError(f"{name} must have shape ({d}, {d}); received {tuple(matrix.shape)}.")
    check_finite(matrix, name)
    try:
        sM, sign = mobility(M=matrix)
    except NotAGradientFlow as err:
        raise ValueError(f"{name} must be symmetric positive definite: {err}.") from None
    if sign < 0:
        raise ValueError(
            f"{name} must be symmetric positive definite; received a negative definite matrix."
        )
    return sM


def log_partition(mu, A: torch.Tensor, x: torch.Tensor, engine: str = "auto") -> torch.Tensor:
    """log Z_μ(x) = log ∫ e^{yᵀAx} dμ(y) at points x (m, d); shape (m,).

    Gaussian μ = N(α, Σ): αᵀAx + ½ xᵀAᵀΣAx (the tilt lemma, MATH.md §3). Particles (and
    grids, as weighted cell centres): one log-sum-exp reduction over the particles of
    positive mass on ``engine``, log Σ_k exp(y_kᵀAx + log w_k).
    """
    query = x @ A.mT  # rows A x
    if isinstance(mu, Gaussian):
        mean, cov = mu.mean().to(x.dtype), mu.cov().to(x.dtype)
        return query @ mean + 0.5 * ((query @ cov) * query).sum(-1)
    mu = mu.to_empirical() if callable(getattr(mu, "to_empirical", None)) else mu
    weights, points = mu.weights.to(x.dtype), mu.points.to(x.dtype)
    positive = weights > 0
    if not bool(positive.all()):
        weights, points = weights[positive], points[positive]
    return logsumexp(query, points, weights.log(), engine=engine)
