r"""The circle PDE past the first clusters: adaptive Fourier grids, then (optionally) the
characteristics.

:class:`~tpde.flows.CircleSystem` solves ∂_tρ + ∂_θ(ρu[ρ]) = 0 on one grid of M angles and
stops "unresolved" at its last resolved state when the density sharpens past the grid (the
modes M/6 < |k| ≤ M/3 above ``resolution`` times c_0). :func:`integrate_circle` continues
from there:

1. **Refinement** (Eulerian). At a stop by the resolution check, the last resolved state is
   moved to ``factor``·M angles by zero-padding its spectrum
   (:meth:`~tpde.measures.CircleDensity.refined`): the state holds the modes |k| ≤ M/3 only
   (the 2/3 rule), so the refined density *is* the same trigonometric polynomial, to
   rounding, and its new tail band M/3 < |k| ≤ 2M/3 starts empty. A new system on the finer
   grid goes on with the same checks (resolution, positivity, mass) and the same step
   control (its CFL step shrinks like 1/M: the cost of a time unit grows like M log M per
   step times M steps). Grids grow up to ``max_grid`` (default 2¹⁶).
2. **Past the finest grid.** With ``follow=False`` the run ends there with status
   "unresolved"; ``stats["unresolved"]`` names the check, the time and the grid needed: at
   least ``factor``·max_grid to go on, and, extrapolated from the refinements so far (M
   grows like e^{r t}: a cluster contracts at the rate |u'(centre)|, 1 for SA at a lone
   cluster, u = −sin(θ − θ_c)) at the rate of the last refinement, the grid the horizon
   would need. With ``follow=True`` the
   run switches to the characteristics: every angle θ_j of the finest grid becomes a node
   carrying its cell's mass w_j = ρ_jh (negative rounding values, ≥ −resolution·max ρ by
   the positivity check, are set to 0 and dropped; their total is reported), and the nodes
   move by θ̇_j = u[μ](θ_j) with μ = Σ_j w_jδ_{θ_j}: an :class:`~tpde.measures.Empirical`
   integrated by :func:`~tpde.flows.integrate` (dopri5, spectral engine). This is the PDE in
   Lagrangian coordinates: the push-forward ρ_t = Φ_t#ρ_s of the flow map Φ_t, with
   D(θ) = ∫e^{β cos(θ − Φ_t(φ))}ρ_s(φ)dφ computed by the trapezoidal rule in the
   *reference* angle φ, exact at the switch (the integrand's modes stay below M) and
   accurate while Φ_t stays smooth on the grid. Mass is conserved by construction (the
   weights never change). Its check: at every save the velocity from all nodes against the
   velocity from every other node (weights 2w_{2j}, the trapezoidal rule at step 2h), in
   max norm at the nodes and at 1024 uniform angles, relative to max|u| at the uniform
   angles (the field's size; at the nodes alone it would vanish as they settle at the
   clusters' centres); above ``quadrature`` the run stops "unresolved" naming it.
   While Φ_t is resolved the rule is spectrally accurate and the gap (the coarse rule's
   error) far exceeds the full rule's: 7.8e-8 against 5.4e-12 for 512 nodes, measured
   against a 1024-angle Eulerian run (tests). Between clusters the map expands (at the rate
   u' ≈ 3β/4 − 1/2 at the midpoint of two clusters 2π/3 apart, SA): the nodes there spread
   out and act as particles of mass ρ_s(φ)h, a first-order error that the gap then measures
   fairly; it peaks while the gaps empty into the clusters (the node nearest an unstable
   midpoint leaves after ≈ ln(1/h)/u') and scales with the density left in the gaps at the
   switch, so a later switch on a finer grid lowers it.

References: the system's module notes (:mod:`tpde.flows.systems.circle`); Bruno,
Pasqualotto, Agazzi, arXiv:2410.23228 (the Fourier picture of the circle dynamics).
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np
import torch

from tpde._status import Status, status_array
from tpde._validation import check_positive, check_positive_int
from tpde.flows.integrate import integrate
from tpde.flows.systems.circle import CircleSystem
from tpde.flows.trajectory import Trajectory
from tpde.measures import CircleDensity, Empirical

__all__ = ["MAX_GRID", "integrate_circle"]

#: The finest grid by default, 2¹⁶ angles (issue 35).
MAX_GRID = 2**16

#: Uniform angles where the nodes' check reads the field's size (module notes, 2.).
PROBES = 1024

TWO_PI = 2 * math.pi


def _save_list(save, t0: float, t1: float) -> list[float]:
    """The requested save times in [t0, t1], both ends included, sorted."""
    if save is None:
        return [t0, t1]
    times = [float(s) for s in np.asarray(save, dtype=float).ravel()]
    if any(not math.isfinite(s) or s < t0 or s > t1 for s in times):
        raise ValueError(
            f"save times must be finite and lie in [t0, t1] = [{t0}, {t1}]; received {times}."
        )
    return sorted({t0, t1, *times})


def _needed_grid(refinements: list[tuple[float, int]], stop: float, t1: float, max_grid: int,
                 factor: int) -> str:  # fmt: skip
    """The grid to go on past ``stop``, and the grid t1 would need at the measured rate."""
    text = f"at least M = {factor * max_grid} to go on past t = {stop:.4g}"
    if len(refinements) >= 2:  # the rate of the last doubling
        (ta, ma), (tb, mb) = refinements[-2], refinements[-1]
        if tb > ta:
            rate = math.log(mb / ma) / (tb - ta)
            estimate = max_grid * math.exp(rate * (t1 - stop))
            text += (
                f"; at the rate the grid grew here (×{mb // ma} in the {tb - ta:.3g} time "
                f"units from t = {ta:.4g} to {tb:.4g}) t1 = {t1:.4g} would need M ≈ "
                f"{estimate:.3g}"
            )
    return text


def _mass(density: CircleDensity) -> float:
    return float(density.density.sum()) * density.spacing


def _nodes(density: CircleDensity) -> tuple[Empirical, float]:
    """The grid angles as weighted nodes (module notes, 2.): the measure and the mass of the
    negative values set to zero."""
    weights = density.density * density.spacing
    clipped = float(weights.clamp_max(0).sum().neg())
    keep = weights > 0
    theta = density.angles()[keep]
    points = torch.stack([theta.cos(), theta.sin()], -1)
    kept = weights[keep]
    return Empirical(points, kept / kept.sum()), clipped


def quadrature_gap(field, mu: Empirical, engine: str = "auto", probes: int = PROBES) -> float:
    """max|u_all − u_half| at the nodes of ``mu`` and at ``probes`` uniform angles, over
    max|u_all| at the uniform angles (module notes, 2.): u_all the velocity of all nodes,
    u_half of the even-indexed nodes with doubled weights.

    The scale is the field's on the whole circle: at the nodes alone it would vanish as the
    nodes settle at the clusters' centres (where u = 0), and the ratio would grow without
    any loss of accuracy.

    Parameters
    ----------
    field : the post-LN circle field; mu : Empirical nodes (n, 2), weights (n,), n even or
        odd (the odd last node then has no partner: the coarse rule is renormalised).
    probes : uniform angles where the field's size is read (default 1024).
    """
    points, weights = mu.points, mu.weights
    theta = torch.arange(probes, dtype=points.dtype, device=points.device) * (TWO_PI / probes)
    where = torch.cat([points, torch.stack([theta.cos(), theta.sin()], -1)])
    full = field.particle_velocity(0.0, mu, where, engine)
    coarse = Empirical(points[::2], weights[::2] / weights[::2].sum())
    half = field.particle_velocity(0.0, coarse, where, engine)
    scale = float(full[len(points) :].norm(dim=-1).max())
    return float((full - half).norm(dim=-1).max()) / scale if scale > 0 else 0.0


def integrate_circle(
    field,
    rho: CircleDensity,
    t1: float,
    *,
    save=None,
    max_grid: int = MAX_GRID,
    factor: int = 2,
    follow: bool = False,
    cfl: float = 0.5,
    resolution: float = 1e-8,
    quadrature: float = 1e-6,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    max_steps: int = 1_000_000,
) -> Trajectory:
    """The circle PDE from ρ(0) = ``rho`` to ``t1`` on grids refined as it sharpens.

    Parameters
    ----------
    field : Normalized(Softmax or Exponential with A = βI, V = vI, d = 2, "post-ln").
    rho : CircleDensity, the initial density (resolved on its grid, M ≥ 3K(β)).
    t1 : the horizon (> 0).
    save : times in [0, t1] to keep (default: 0 and t1).
    max_grid : the finest grid allowed (≥ rho.size; default 2¹⁶).
    factor : the refinement factor (≥ 2, default 2).
    follow : past ``max_grid``, follow the characteristics (module notes, 2.) instead of
        stopping "unresolved".
    cfl, resolution : of each :class:`~tpde.flows.CircleSystem` (defaults 0.5 and 1e-8).
    quadrature : the tolerance of the followed nodes' check (default 1e-6): the gap between
        the velocities of all nodes and of every other node is the error of the coarser
        rule, an upper estimate of the full rule's (spectral accuracy: far smaller).
    rtol, atol : of the followed nodes' dopri5 (defaults 1e-10, 1e-12).
    max_steps : per grid, and for the followed nodes.

    Returns
    -------
    Trajectory
        The saved times reached (and the stop time, if it stopped), a CircleDensity at each
        (on the grid of that time) or, after a switch, an Empirical of the weighted nodes;
        status "completed" or "unresolved" (``event_time`` the stop). Its stats hold
        ``grids`` (the grid at each save; nodes after a switch), ``refinements`` [(t, M)]
        (when each grid began), ``seconds`` {M: wall seconds on it; −n: the n nodes},
        ``steps`` (the same keys), ``mass_error`` (max |mass − mass(0)| over every step of
        every grid; the mass clipped at a switch is ``clipped_mass``), ``switch`` (the
        switch time or None), ``quadrature`` (the largest gap of the nodes' check) and
        ``unresolved`` (None or the cause, the time and the grid it would need).

    Raises
    ------
    ValueError
        If max_grid < rho.size, factor < 2, t1 ≤ 0, or a save time is outside [0, t1]; and
        what :class:`~tpde.flows.CircleSystem` raises for its field and density.
    TypeError
        If ``rho`` is not a CircleDensity.
    """
    if not isinstance(rho, CircleDensity):
        raise TypeError(f"integrate_circle steps a CircleDensity; received {type(rho).__name__}.")
    t1 = check_positive(t1, "t1")
    max_grid, factor = (
        check_positive_int(max_grid, "max_grid"),
        check_positive_int(factor, "factor"),
    )
    if factor < 2 or max_grid < rho.size:
        raise ValueError(
            f"factor must be >= 2 and max_grid >= the initial grid M = {rho.size}; received "
            f"factor = {factor}, max_grid = {max_grid}."
        )
    saves = _save_list(save, 0.0, t1)
    run = _Run(saves)
    state, t = rho, 0.0
    mass0 = None
    while True:
        system = CircleSystem(field, state, cfl=cfl, resolution=resolution)
        if mass0 is None:
            mass0 = system.mass0
        traj = run.segment(system, t, t1, max_steps)
        offset = abs(system.mass0 - mass0)  # the refinement's own change (rounding)
        run.mass_error = max(run.mass_error, offset + traj.stats["mass_error"])
        state, t = traj.measures[-1], float(traj.times[-1])
        cause = traj.stats["unresolved"]
        if traj.status == "completed" or cause is None:
            return run.result(traj.status, None, t)
        finer = state.size * factor
        if not cause.startswith("resolution") or finer > max_grid:
            break
        state = state.refined(factor)
        run.refinements.append((t, finer))
    if not follow or not cause.startswith("resolution"):
        needed = _needed_grid(run.refinements, t, t1, max_grid, factor)
        run.append(t, state, state.size)
        return run.result(Status.UNRESOLVED, f"{cause}; stopped at t = {t:.6g}; needs {needed}", t)
    return run.follow(field, state, t, t1, quadrature, rtol, atol, max_steps)


class _Run:
    """The pieces of one :func:`integrate_circle` run, joined into one Trajectory."""

    def __init__(self, saves: list[float]):
        self.saves = saves
        self.times: list[float] = []
        self.measures: list = []
        self.grids: list[int] = []
        self.refinements: list[tuple[float, int]] = []
        self.seconds: dict[int, float] = {}
        self.steps: dict[int, int] = {}
        self.mass_error = 0.0
        self.switch: float | None = None
        self.clipped = 0.0
        self.quadrature = 0.0

    def _keep(self, traj: Trajectory, size: int, last: bool) -> None:
        """The segment's saves that were requested (and its last state when ``last``)."""
        wanted = set(self.saves)
        times = traj.times.tolist()
        for j, (s, m) in enumerate(zip(times, traj.measures, strict=True)):
            final = j == len(times) - 1
            if (self.times and s <= self.times[-1]) or not (s in wanted or (final and last)):
                continue
            self.times.append(s)
            self.measures.append(m)
            self.grids.append(size)

    def segment(self, system: CircleSystem, t: float, t1: float, max_steps: int) -> Trajectory:
        rho = system.measure(system.initial())
        save = [s for s in self.saves if t <= s <= t1]
        tic = time.perf_counter()
        with warnings.catch_warnings():  # the stop is expected: it is read from the status
            warnings.filterwarnings("ignore", ".*status 'unresolved'", RuntimeWarning)
            traj = integrate(
                system, t1=t1, t0=t, save=sorted({t, *save}), events=(), max_steps=max_steps
            )  # no blow-up event: a density on S¹ has covariance ≤ I
        size = rho.size
        self.seconds[size] = self.seconds.get(size, 0.0) + time.perf_counter() - tic
        self.steps[size] = self.steps.get(size, 0) + int(traj.stats["n_steps"])
        if not self.times:
            self.times.append(t)
            self.measures.append(rho)
            self.grids.append(size)
        self._keep(traj, size, last=False)
        return traj

    def follow(self, field, state, t, t1, tolerance, rtol, atol, max_steps) -> Trajectory:
        """The nodes of ``state`` along the characteristics (module notes, 2.)."""
        self.switch = t
        mu, self.clipped = _nodes(state)
        nodes = mu.points.shape[0]
        save = sorted({t, *(s for s in self.saves if s >= t)})
        tic = time.perf_counter()
        traj = integrate(field, mu, t1, t0=t, method="dopri5", save=save, rtol=rtol,
                         atol=atol, events=(), max_steps=max_steps)  # fmt: skip
        for s, measure in zip(traj.times.tolist()[1:], traj.measures[1:], strict=True):
            gap = quadrature_gap(field, measure)
            self.quadrature = max(self.quadrature, gap)
            if gap > tolerance:
                cause = (
                    f"quadrature: the followed nodes' velocity moves by {gap:.3g} of its "
                    f"maximum from every node to every other node (tolerance "
                    f"{tolerance:.3g}) at t = {s:.6g}; the flow map is no longer resolved "
                    f"on the {nodes} nodes"
                )
                self.append(s, measure, nodes, stop=True)
                return self._finish(tic, nodes, traj, Status.UNRESOLVED, cause, s)
            self.append(s, measure, nodes, stop=s == float(traj.times[-1]))
        status = traj.status if traj.status.ndim == 0 else traj.status.item()
        cause = None if status == "completed" else f"the followed nodes stopped: {status}"
        return self._finish(tic, nodes, traj, status, cause, float(traj.times[-1]))

    def append(self, s: float, measure, size: int, stop: bool = True) -> None:
        """Keep the state at ``s`` if it was requested or is where the run stops."""
        if (s in self.saves or stop) and (not self.times or s > self.times[-1]):
            self.times.append(s)
            self.measures.append(measure)
            self.grids.append(size)

    def _finish(self, tic, nodes, traj, status, cause, stop) -> Trajectory:
        self.seconds[-nodes] = time.perf_counter() - tic  # negative key: the nodes' phase
        self.steps[-nodes] = int(traj.stats["n_steps"])
        return self.result(status, cause, stop)

    def result(self, status, cause: str | None, stop: float) -> Trajectory:
        status = Status.parse(str(status))
        event = stop if status != "completed" else math.nan
        stats = {
            "grids": list(self.grids),
            "refinements": list(self.refinements),
            "seconds": dict(self.seconds),
            "steps": dict(self.steps),
            "mass_error": self.mass_error,
            "clipped_mass": self.clipped,
            "switch": self.switch,
            "quadrature": self.quadrature,
            "unresolved": cause,
        }
        device = self.measures[0].device if self.measures else "cpu"
        return Trajectory(
            times=torch.tensor(self.times, dtype=torch.float64, device=device),
            measures=list(self.measures),
            status=status_array((), status),
            event_time=torch.tensor(event, dtype=torch.float64, device=device),
            stats=stats,
        )
