r"""Agreement harness: one field, one initial Gaussian, three integrators.

The Transformer PDE started from a Gaussian g₀ can be integrated three ways that must
agree (DESIGN.md, "Three ways to integrate one field"):

- the Gaussian moment ODE (exact where the field keeps Gaussians Gaussian);
- particles: n tokens sampled from g₀, ẋ_i = Γ[μⁿ](x_i) (the mean-field limit says
  μⁿ_t → μ_t as n → ∞, at the Monte-Carlo rate n^{-1/2} for the moments);
- a grid (d ≤ 2): cell averages of g₀ moved by finite volumes (error O(h^p) for a scheme
  of order p).

:func:`compare` runs all of them on common save times and reports, over time, the moment
error of every run against the Gaussian ODE, W2 between every pair of runs, and the
fitted rates of the moment error in n and in h.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from tpde._validation import check_positive
from tpde.flows.integrate import integrate
from tpde.flows.systems import FiniteVolumes
from tpde.flows.trajectory import Trajectory
from tpde.measures import Empirical, Gaussian, Grid
from tpde.metrics import bures_wasserstein, w2

__all__ = ["Comparison", "compare", "fit_rate", "moment_error"]

#: Largest support (points or nonempty cells) of a pair for exact W2 in d ≥ 2 (POT's
#: network simplex: about 1 s at 2·10³ points on 2 cores, O(n³) beyond). d = 1 is exact
#: at any size (quantiles).
W2_MAX_POINTS = 2000


def moment_error(mu, reference: Gaussian) -> torch.Tensor:
    """(|α − α_ref|² + ‖Σ − Σ_ref‖_F²)^{1/2}, a 0-d tensor (the measure's own moments)."""
    mean, cov = mu.mean(), mu.cov()
    return (((mean - reference.mean()) ** 2).sum() + ((cov - reference.cov()) ** 2).sum()).sqrt()


def fit_rate(sizes, errors) -> float:
    """Least-squares slope of log(error) against log(size)."""
    x, y = np.log(np.asarray(sizes, dtype=float)), np.log(np.asarray(errors, dtype=float))
    return float(np.polyfit(x, y, 1)[0])


@dataclass(frozen=True)
class Comparison:
    """Result of :func:`compare`.

    Attributes
    ----------
    times : tensor (T,)
        Common save times.
    runs : dict label -> Trajectory
        Labels: ``"gaussian"``, ``"particles n=… seed=…"``, ``"grid h=…"``.
    params : dict label -> dict
        What each run is: kind ("gaussian", "particles", "grid"), n and seed, or h, shape
        and box.
    moment_error : dict label -> tensor (T',)
        (|Δα|² + ‖ΔΣ‖_F²)^{1/2} against the Gaussian ODE at each saved time the run reached
        (T' < T only for a run that stopped early; see ``status``).
    w2 : dict (label, label) -> tensor (T',)
        W2 between two runs over time; how each was computed is in ``w2_method``.
    w2_method : dict (label, label) -> str
        "exact" (network simplex, or quantiles in d = 1; a grid as its weighted cell
        centres, within (Σ_k h_k²/12)^{1/2} of its piecewise-constant density) or
        "bures-moments" for pairs with the Gaussian ODE: the Bures distance between the
        Gaussians with the two runs' moments, Gelbrich's lower bound of W2 (exact when both
        are Gaussian).
    rate_n, rate_h : float or None
        Slopes of log(moment error at the final time, averaged over seeds) against log n
        and log h; None with fewer than two sizes, or when a run stopped early.
    status : dict label -> str
    notes : tuple of str
        What was skipped or approximated, and why.
    """

    times: torch.Tensor
    runs: dict[str, Trajectory]
    params: dict[str, dict]
    moment_error: dict[str, torch.Tensor]
    w2: dict[tuple[str, str], torch.Tensor]
    w2_method: dict[tuple[str, str], str]
    rate_n: float | None
    rate_h: float | None
    status: dict[str, str]
    notes: tuple[str, ...] = field(default_factory=tuple)

    def rows(self) -> list[dict]:
        """One row per run: label, status, final moment error, wall time, grid outflow."""
        out = []
        for label, traj in self.runs.items():
            row = {"run": label, "status": self.status[label]}
            row["moment_err(t1)"] = float(self.moment_error[label][-1])
            row["wall_s"] = traj.stats.get("wall_time_s", math.nan)
            if self.params[label]["kind"] == "grid":
                row["outflow"] = traj.stats["outflow"]
            out.append(row)
        return out


def compare(
    field,
    g0: Gaussian,
    t1: float,
    *,
    n=(500, 2000, 8000),
    h=(),
    seeds=1,
    save: int = 5,
    scheme: str = "muscl",
    box=None,
    sigmas: float = 6.0,
    particle_steps: int = 8,
    engine: str = "auto",
    w2_max_points: int = W2_MAX_POINTS,
) -> Comparison:
    r"""Integrate ``field`` from ``g0`` as a Gaussian ODE, as particles and on grids.

    Parameters
    ----------
    field : a tpde attention field with a Gaussian closure (``gaussian_rhs``).
    g0 : unbatched Gaussian, the initial measure (its dtype is used throughout; float64
        for accuracy studies).
    t1 : final time.
    n : int or sequence of ints
        Particle counts; each is sampled from g₀ once per seed (seed s:
        ``torch.Generator().manual_seed(s)``). Empty: no particles.
    h : float or sequence of floats
        Grid cell sizes (d ≤ 2), the same on every axis. Empty: no grid.
    seeds : int or sequence of ints
        Seeds of the particle samples (an int k means 0, …, k − 1). Moment errors and
        rate_n average over them; W2 pairs use the first seed only.
    save : number of equally spaced save times in [0, t1] (>= 2).
    scheme : grid scheme ("muscl" or "upwind").
    box : (lower, upper), optional
        Grid box. Default: the smallest box holding α(t) ± ``sigmas``·σ_k(t) on every axis
        at every save time of the Gaussian solution, so the mass outside it is negligible
        (Φ(−6) ≈ 1e-9 per side); the upper corner is then moved so cells are exactly h.
    particle_steps : RK4 steps of the particle runs (time error far below n^{-1/2}).
    engine : pairwise engine for particles and grids.
    w2_max_points : pairs in d ≥ 2 with a larger support skip exact W2 (noted).

    Returns
    -------
    Comparison
    """
    t1 = check_positive(t1, "t1")
    if not isinstance(g0, Gaussian):
        raise TypeError(f"g0 must be a tpde Gaussian; received {type(g0).__name__}.")
    if g0.batch_shape != ():
        raise ValueError(
            f"g0 must be a single Gaussian; received batch shape {tuple(g0.batch_shape)}. "
            "Index it first, e.g. g0[0]."
        )
    sizes = _as_tuple(n, int, "n")
    cells = _as_tuple(h, float, "h")
    seed_list = tuple(range(seeds)) if isinstance(seeds, int) else _as_tuple(seeds, int, "seeds")
    if not seed_list:
        raise ValueError("seeds must name at least one seed.")
    if cells and g0.dim > 2:
        raise ValueError(
            f"grids exist in d = 1 and 2 only; received h = {cells} for d = {g0.dim}. Pass "
            "h=() to compare particles with the Gaussian ODE."
        )
    if isinstance(save, bool) or not isinstance(save, int) or save < 2:
        raise ValueError(f"save must be an int >= 2 (number of save times); received {save!r}.")
    if (
        isinstance(particle_steps, bool)
        or not isinstance(particle_steps, int)
        or particle_steps < 1
    ):
        raise ValueError(f"particle_steps must be an int >= 1; received {particle_steps!r}.")
    sigmas = check_positive(sigmas, "sigmas")
    times = np.linspace(0.0, t1, save).tolist()
    notes: list[str] = []
    runs: dict[str, Trajectory] = {}
    params: dict[str, dict] = {}

    reference = integrate(field, g0, t1, method="dopri5", rtol=1e-10, atol=1e-12, save=times)
    runs["gaussian"] = reference
    params["gaussian"] = {"kind": "gaussian"}
    for size in sizes:
        for seed in seed_list:
            cloud = Empirical.from_gaussian(g0, size, generator=torch.Generator().manual_seed(seed))
            label = f"particles n={size} seed={seed}"
            runs[label] = integrate(
                field, cloud, t1, dt=t1 / particle_steps, method="rk4", save=times, engine=engine
            )
            params[label] = {"kind": "particles", "n": size, "seed": seed}
    if cells:
        lower, upper = _box(reference, sigmas) if box is None else box
        lower, upper = (
            torch.as_tensor(c, dtype=g0.dtype, device=g0.device).expand(g0.dim)
            for c in (lower, upper)
        )
        for step in cells:
            shape = tuple(max(1, math.ceil(float(w) / step)) for w in upper - lower)
            top = lower + step * torch.tensor(shape, dtype=g0.dtype, device=g0.device)
            grid = Grid.from_gaussian(g0, shape, lower, top)
            label = f"grid h={step:g}"
            runs[label] = integrate(
                field, FiniteVolumes(grid, scheme=scheme), t1, save=times, engine=engine
            )
            params[label] = {"kind": "grid", "h": step, "shape": shape, "box": (lower, top)}
            if runs[label].stats["outflow"] > 1e-6:
                notes.append(
                    f"{label}: a mass of {runs[label].stats['outflow']:.3g} left the box; "
                    "moments are those of the mass inside."
                )

    status = {label: str(traj.status) for label, traj in runs.items()}
    for label, s in status.items():
        if s != "completed":
            notes.append(f"{label} stopped early: status {s!r}.")
    gaussians = reference.measures
    errors = {
        label: torch.stack(
            [moment_error(mu, g) for mu, g in zip(traj.measures, gaussians, strict=False)]
        )
        for label, traj in runs.items()
    }
    w2, methods = _pairwise_w2(runs, params, seed_list[0], w2_max_points, notes)
    complete = all(s == "completed" for s in status.values())
    rate_n = _rate(errors, params, "particles", "n", sizes) if complete else None
    rate_h = _rate(errors, params, "grid", "h", cells) if complete else None
    return Comparison(
        times=torch.tensor(times, dtype=torch.float64, device=g0.device),
        runs=runs,
        params=params,
        moment_error=errors,
        w2=w2,
        w2_method=methods,
        rate_n=rate_n,
        rate_h=rate_h,
        status=status,
        notes=tuple(notes),
    )


def _as_tuple(value, kind, name: str) -> tuple:
    values = (value,) if isinstance(value, int | float) else tuple(value)
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or (kind is int and v != int(v)):
            raise TypeError(f"{name} must hold {kind.__name__}s; received {value!r}.")
        if name != "seeds" and v <= 0:
            raise ValueError(f"{name} must hold positive values; received {value!r}.")
        out.append(kind(v))
    return tuple(out)


def _box(reference: Trajectory, sigmas: float):
    """Smallest box holding α(t) ± sigmas·σ_k(t) over the saved Gaussian states."""
    means = torch.stack([g.mean() for g in reference.measures])
    stds = torch.stack([g.cov().diagonal().clamp_min(0).sqrt() for g in reference.measures])
    return (means - sigmas * stds).amin(0), (means + sigmas * stds).amax(0)


def _support(mu) -> int:
    return mu.n if isinstance(mu, Empirical) else int((mu.density > 0).sum())


def _pairwise_w2(runs, params, first_seed, limit, notes):
    """W2 over time for every pair of representative runs (first seed of each n)."""
    labels = [
        label for label, p in params.items() if p["kind"] != "particles" or p["seed"] == first_seed
    ]
    out, methods = {}, {}
    for i, a in enumerate(labels):
        for b in labels[i + 1 :]:
            pair_a, pair_b = runs[a].measures, runs[b].measures
            if "gaussian" in (params[a]["kind"], params[b]["kind"]):
                values = [
                    bures_wasserstein(Gaussian(x.mean(), x.cov()), Gaussian(y.mean(), y.cov()))
                    for x, y in zip(pair_a, pair_b, strict=False)
                ]
                methods[(a, b)] = "bures-moments"
            else:
                big = max(_support(mu) for mu in (*pair_a, *pair_b))
                if pair_a[0].dim > 1 and big > limit:
                    notes.append(
                        f"W2({a}, {b}) skipped: a support of {big} points exceeds "
                        f"w2_max_points = {limit} (exact W2 is O(n³) in d ≥ 2)."
                    )
                    continue
                values = [w2(x, y) for x, y in zip(pair_a, pair_b, strict=False)]
                methods[(a, b)] = "exact"
            out[(a, b)] = torch.stack([v.detach() for v in values])
    return out, methods


def _rate(errors, params, kind: str, key: str, sizes) -> float | None:
    if len(sizes) < 2:
        return None
    finals = [
        float(
            torch.stack(
                [
                    errors[label][-1]
                    for label, p in params.items()
                    if p["kind"] == kind and p[key] == size
                ]
            ).mean()
        )
        for size in sizes
    ]
    return fit_rate(sizes, finals)
