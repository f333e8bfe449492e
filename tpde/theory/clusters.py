"""Causal clustering and hardmax: Rényi centres and the Voronoi rule (MATH.md §9; the
package notes of :mod:`tpde.theory`)."""

from __future__ import annotations

import torch

from tpde._validation import (
    as_tensor,
    check_finite,
    check_real,
)


# ---------------------------------------------------------------------- causal clustering
def renyi_centres(points, delta: float, *, strong: bool = False) -> torch.Tensor:
    r"""Indices of the Rényi centres of a causal token sequence (Karagodin et al. §5).

    Tokens x_1, …, x_n in causal order on the unit sphere. Token 1 is a centre; token i is a
    centre when it is at distance > δ from every earlier centre (Rényi's sequential
    parking; ``strong=True``: from every earlier *token*, Karagodin et al.'s "strong" Rényi
    centres, which stay nearly fixed for a long time at large β). Karagodin, Polyanskiy,
    Rigollet (arXiv:2411.04990, their Fig. 2: n = 200, d = 2, β = 64, δ = 4β^{−1/2}) read
    the meta-stable clusters of causal attention off these centres: strong centres are
    stationary but do not explain all clusters; Rényi centres capture more.

    Parameters
    ----------
    points : tensor (n, d)
    delta : float > 0, the parking distance (Euclidean).

    Returns
    -------
    tensor of int64 indices, increasing.
    """
    x = as_tensor(points, "points")
    if x.ndim != 2 or x.shape[0] < 1:
        raise ValueError(f"points must have shape (n, d) with n >= 1; received {tuple(x.shape)}.")
    check_finite(x, "points")
    if not isinstance(strong, bool):
        raise TypeError(f"strong must be True or False; received {strong!r}.")
    delta = check_real(delta, "delta")
    if delta <= 0:
        raise ValueError(f"the parking distance delta must be > 0; received {delta}.")
    # Distances at unit scale (scale-free: tokens of norm 1e-200 or 1e200, float32 at 1e25),
    # each as the norm of a difference (no |x|² + |y|² − 2⟨x, y⟩ cancellation).
    scale = x.abs().amax().clamp_min(torch.finfo(x.dtype).tiny) if x.is_floating_point() else 1.0
    unit = x / scale
    distances = torch.cdist(unit, unit, compute_mode="donot_use_mm_for_euclid_dist")
    delta = delta / float(scale)
    centres = [0]
    for i in range(1, x.shape[0]):
        earlier = (
            torch.arange(i, device=x.device)
            if strong
            else torch.as_tensor(centres, device=x.device)
        )
        if bool((distances[i, earlier] > delta).all()):
            centres.append(i)
    return torch.as_tensor(centres, dtype=torch.int64, device=x.device)


# ---------------------------------------------------------------------- zero temperature
def hardmax_vertices(points, A) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The Voronoi rule of zero-temperature attention: each token's target and its validity.

    For tokens x_1, …, x_n and an interaction A (score of query x on key y: yᵀAx), token i
    heads for v(i) = argmax_j x_jᵀAx_i (a vertex of the convex hull of the tokens: a linear
    function is maximised there). Alcalde, Geshkovski, Ruiz-Balet (arXiv:2508.09628) show,
    for A positive semidefinite and the hardmax rule x_i ← x_i + h(x_{v(i)} − x_i) (a
    Frank-Wolfe step, ẋ_i = x_{v(i)} − x_i as h → 0), that vertices with v(v) = v are
    stationary, interior tokens keep their Voronoi cell {x : argmax_j x_jᵀAx = v} and
    move in a straight line to its vertex. The rule's prediction for token i is v(i),
    valid when v(i) is such a stationary vertex: for PSD A, along the segment from x_i to
    x_v the score of v stays maximal iff it is maximal at both ends.

    Parameters
    ----------
    points : tensor (n, d)
    A : tensor (d, d)

    Returns
    -------
    targets : int64 tensor (n,)
        v(i) (the first index among exact ties).
    valid : bool tensor (n,)
        True where v(v(i)) = v(i): the target is a stationary vertex.
    """
    x = as_tensor(points, "points")
    if x.ndim != 2 or x.shape[0] < 1:
        raise ValueError(f"points must have shape (n, d) with n >= 1; received "
                         f"{tuple(x.shape)}.")  # fmt: skip
    if not x.is_floating_point():
        x = x.double()
    A = as_tensor(A, "A", dtype=x.dtype)
    if A.shape != (x.shape[1], x.shape[1]):
        raise ValueError(f"A must have shape ({x.shape[1]}, {x.shape[1]}); received "
                         f"{tuple(A.shape)}.")  # fmt: skip
    check_finite(x, "points")
    check_finite(A, "A")
    # The argmax is invariant under positive scalings of x and A: score the tokens and A at
    # unit scale, so that x_jᵀAx_i cannot overflow (tokens of 1e200, float32 tokens of 1e20).
    x = x / x.abs().amax().clamp_min(torch.finfo(x.dtype).tiny)
    A = A / A.abs().amax().clamp_min(torch.finfo(A.dtype).tiny)
    scores = (x @ A.T) @ x.T  # [i, j] = x_jᵀ A x_i
    targets = scores.argmax(-1)
    return targets, targets[targets] == targets
