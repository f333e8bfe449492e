"""The paper's settings in tpde terms: fields with the code's scalings, grids, stopping rules.

MATH.md §6. The authors' code scales softmax and L2 scores by 1/√d (L2 in its "code"
form: the key norm unscaled), multi-head scores by 1/√k with k = d/H row blocks, and
leaves Sinkhorn unscaled (ε = 1). :func:`paper_field` builds the tpde field with those
conventions; :func:`flow` integrates a batch of covariances with the paper's stopping
rules (‖rhs‖_F < tol_low: converged; tr Σ > tol_high: blow-up; horizon max_iter · h) on
tpde's batched Gaussian ODE.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from tpde.fields.registry import build, variant
from tpde.flows import BlowUp, Converged, integrate
from tpde.measures import Gaussian

#: The paper's panels, in their order: registered variants (tpde.fields.registry checks the
#: names).
PAPER_VARIANTS = tuple(variant(name).name for name in ("softmax", "l2", "multihead", "sinkhorn"))


def paper_field(variant: str, Q, K, V, heads: int = 1):
    """The tpde field of the authors' ``rhs_*`` function for (Q, K, V) (numpy or torch).

    Q, K may carry a leading batch dimension. Multi-head pads Q and K with zero rows up to
    H·(d/H) rows: the code slices row blocks of size d/H and an empty block is a head with
    A_h = 0, which a zero row reproduces.
    """
    Q, K, V = (torch.as_tensor(np.asarray(m), dtype=torch.float64) for m in (Q, K, V))
    d = V.shape[-1]
    if variant == "softmax":
        return build("softmax", Q, K, V, scale=1 / math.sqrt(d))
    if variant == "l2":
        return build("l2", Q, K, V, scale=1 / math.sqrt(d), form="code")
    if variant == "sinkhorn":
        return build("sinkhorn", Q, K, V, scale=1.0, eps=1.0)
    if variant == "multihead":
        rows = heads * (d // heads)
        missing = rows - Q.shape[-2]
        if missing > 0:
            pad = torch.zeros(*Q.shape[:-2], missing, d, dtype=Q.dtype)
            Q, K = torch.cat([Q, pad], -2), torch.cat([K, pad], -2)
        return build("multihead", Q, K, V, heads=heads)
    raise ValueError(f"unknown variant {variant!r}; choose among {', '.join(PAPER_VARIANTS)}.")


def init_grid(n: int, limit: float) -> np.ndarray:
    """Trace-one covariances on an n × n grid of the PSD cone's slice (MATH.md §6).

    Points (u, w) ∈ [−limit, limit]² with u² + w² < 1 (strictly inside the cone at
    a + b = 1) in the code's order; returns (B, 2, 2) with a = (1 + u)/2, b = (1 − u)/2,
    c = w/2. n = 10, limit = 0.5 → 100; n = 20, 30, 40 with limit 1 → 276, 648, 1184.
    """
    axis = np.linspace(-limit, limit, n)
    points = np.array(np.meshgrid(axis, axis, [1.0])).T.reshape(-1, 3)
    keep = points[:, 2] ** 2 - points[:, 0] ** 2 > points[:, 1] ** 2
    u, w, v = points[keep].T
    a, b, c = (u + v) / 2, (v - u) / 2, w / 2
    return np.stack([np.stack([a, c], -1), np.stack([c, b], -1)], -2)


def to_cone(S: np.ndarray) -> np.ndarray:
    """PSD-cone coordinates (a − b, 2c, a + b) of 2 × 2 covariances (..., 2, 2) -> (..., 3)."""
    a, b, c = S[..., 0, 0], S[..., 1, 1], S[..., 0, 1]
    return np.stack([a - b, 2 * c, a + b], -1)


@dataclass(frozen=True)
class FlowResult:
    """A batched paper-rules flow: status (B,), event time (B,), saved times and covs."""

    status: np.ndarray
    event_time: np.ndarray
    times: np.ndarray
    covs: np.ndarray  # (T, B, d, d), frozen after each element's event
    stats: dict

    @property
    def final(self) -> np.ndarray:
        return self.covs[-1]


def flow(
    field,
    S0,
    *,
    horizon: float,
    tol_low: float | None,
    tol_high: float,
    first_step: float,
    rtol: float = 1e-6,
    atol: float = 1e-9,
    save: str | int | None = None,
    max_steps: int = 200_000,
    method: str = "dopri5",
) -> FlowResult:
    """Integrate covariances S0 (B, d, d), centred, with the paper's stopping rules.

    tpde's batched Gaussian ODE with Dormand–Prince steps (``method="rodas4"``: the
    L-stable Rosenbrock method, for stiff flows); ``tol_low`` None disables
    convergence. Means are zero, so the velocity norm of :class:`Converged` is ‖Σ̇‖_F,
    the paper's ‖rhs‖_F.
    """
    S0 = torch.as_tensor(np.asarray(S0), dtype=torch.float64)
    g0 = Gaussian(torch.zeros(S0.shape[:-1], dtype=torch.float64), S0)
    events = [BlowUp(tol_high, size="trace")]
    if tol_low is not None:
        events.append(Converged(tol_low))
    traj = integrate(
        field,
        g0,
        horizon,
        method=method,
        dt=first_step,
        rtol=rtol,
        atol=atol,
        events=tuple(events),
        save=save,
        max_steps=max_steps,
    )
    covs = np.stack([m.cov().detach().numpy() for m in traj.measures])
    status = np.asarray(traj.status).reshape(S0.shape[:-2])
    return FlowResult(
        status=status,
        event_time=traj.event_time.numpy(),
        times=traj.times.numpy(),
        covs=covs,
        stats=dict(traj.stats),
    )


def path_times(first_step: float, horizon: float, count: int) -> list[float]:
    """Save times to draw trajectories: 0 and ``count`` times geometrically spaced from
    ``first_step`` to ``horizon`` (the paper's flows are multi-scale: fast at first, slow
    near their limits). Saving costs no step: tpde interpolates each element's own steps."""
    return [0.0, *np.geomspace(first_step, horizon, count).tolist()]


def subsample(n: int, limit: int) -> np.ndarray:
    """At most ``limit`` indices of range(n), evenly spread, first and last kept."""
    if n <= limit:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, limit).round().astype(int))
