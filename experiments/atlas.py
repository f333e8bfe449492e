"""Experiment 3: an attention atlas — one Gaussian, every variant, three integrators (d = 2).

One initial Gaussian g₀ = N(α₀, Σ₀) (MATH.md §4 item 8) and one parameter set
(Q = A, K = I, V, scale 1, so the softmax score is yᵀAx with A indefinite: it stretches
along one axis and contracts along the other) drive every attention variant of tpde:
softmax, L2, Sinkhorn (ε = 1), sigmoid (b = 0, the mean-field field), linear, multi-head
(H = 2 row blocks) and masked (causal softmax, positions uniform in [0, 1]). Each is
integrated three ways where it can be: the Gaussian moment ODE (exact where Gaussians stay
Gaussian: not sigmoid, not masked), particles sampled from g₀, and a finite-volume grid
(not masked: a grid carries no positions). Over time: W2 between the routes, the
covariance spectrum, the number of particle clusters at a fixed resolution, and blow-up
times (BlowUp on tr Σ, the same size on every route).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tpde.fields import GaussianNotPreserved
from tpde.fields.registry import VARIANTS as REGISTRY
from tpde.fields.registry import variant_names
from tpde.flows import BlowUp, integrate
from tpde.measures import Empirical, Gaussian, Grid
from tpde.metrics import bures_wasserstein, w2
from tpde.metrics.diagnostics import cluster_count

from . import framework as fw
from .common.variants import make_field

NAME = "atlas"
ORDER = 3  # place in ``tpde run`` and in the report
TITLE = "attention atlas: every variant, Gaussian ODE vs particles vs grid"
A = ((0.6, 0.3), (-0.2, -0.4))  # symmetric part indefinite: one stretching, one contracting axis
V = ((1.0, 0.2), (-0.1, 0.8))
MEAN = (0.5, -0.3)
COV = ((1.0, 0.3), (0.3, 0.5))


@dataclass(frozen=True)
class Config:
    variants: tuple[str, ...] = tuple(variant_names())  # every registered variant
    n: int = 1000  # particles
    cells: int = 64  # grid cells per axis
    sinkhorn_cells: int = 40  # Sinkhorn's grid (a Sinkhorn scaling per step: cost ∝ cells⁴)
    box: float = 8.0  # grid box [−box, box]²
    t1: float = 1.5
    saves: int = 7
    particle_steps: int = 60  # RK4 steps of the particle flows
    blowup_trace: float = 20.0  # BlowUp(size="trace") threshold on every route
    cluster_resolution: float = 0.5  # linkage distance, in units of the initial σ = √(tr Σ₀/2)
    w2_points: int = 600  # particles and nonempty cells subsampled for exact W2 (network simplex)
    seed: int = 0

    def check(self) -> None:
        fw.check_choices("variants", self.variants, tuple(variant_names()))
        if min(self.n, self.cells, self.saves, self.particle_steps, self.w2_points) < 2:
            raise ValueError("n, cells, saves, particle_steps and w2_points must be >= 2.")
        if self.t1 <= 0 or self.box <= 0 or self.blowup_trace <= 0:
            raise ValueError("t1, box and blowup_trace must be > 0.")
        if self.sinkhorn_cells < 2 or self.cluster_resolution <= 0:
            raise ValueError("sinkhorn_cells must be >= 2 and cluster_resolution > 0.")

    def memory_bytes(self) -> int:
        """float64 pairwise matrices: particles n², grid cells⁴ (cells² cells), Sinkhorn's
        grid sinkhorn_cells⁴, exact W2 w2_points²; four at once (stages, gradients)."""
        return 8 * 4 * max(self.n**2, self.cells**4, self.sinkhorn_cells**4, self.w2_points**2)


QUICK = {
    "n": "400",
    "cells": "40",
    "sinkhorn_cells": "32",
    "saves": "6",
    "particle_steps": "30",
    "w2_points": "300",
}


def _moments(traj):
    means = np.stack([m.mean().detach().numpy() for m in traj.measures])
    covs = np.stack([m.cov().detach().numpy() for m in traj.measures])
    return means, covs


def _bures(m1, c1, m2, c2) -> float:
    g1 = Gaussian(torch.as_tensor(m1), torch.as_tensor(0.5 * (c1 + c1.T)))
    g2 = Gaussian(torch.as_tensor(m2), torch.as_tensor(0.5 * (c2 + c2.T)))
    return float(bures_wasserstein(g1, g2))


def _subsample(mu, count: int, generator) -> Empirical:
    """At most ``count`` atoms of an Empirical or a Grid's cell centres (resampled by mass)."""
    emp = mu.to_empirical() if isinstance(mu, Grid) else mu
    if emp.n <= count:
        return Empirical(emp.points.detach(), emp.weights.detach())
    index = torch.multinomial(emp.weights.detach(), count, replacement=True, generator=generator)
    return Empirical(emp.points.detach()[index])


def run_variant(variant: str, config: Config, g0: Gaussian, cloud: Empirical):
    """All routes of one variant: moments, statuses, snapshots and metrics over time."""
    field = make_field(variant, A, V)
    times = np.linspace(0, config.t1, config.saves).tolist()
    event = (BlowUp(config.blowup_trace, size="trace"),)
    routes, out = {}, {}
    try:
        field.gaussian_rhs(0.0, g0.mean(), g0.cov())
        routes["gaussian"] = integrate(
            field, g0, config.t1, method="dopri5", rtol=1e-8, atol=1e-10, save=times, events=event
        )
    except GaussianNotPreserved:
        pass
    needs_positions = REGISTRY[variant].positions
    if needs_positions:  # causal attention: tokens at uniform positions in [0, 1]
        positions = torch.linspace(0, 1, cloud.n, dtype=torch.float64)
        cloud = Empirical(cloud.points, positions=positions)
    routes["particles"] = integrate(
        field,
        cloud,
        config.t1,
        dt=config.t1 / config.particle_steps,
        method="rk4",
        save=times,
        events=event,
    )
    if not needs_positions:  # a grid carries no positions
        cells = config.sinkhorn_cells if variant == "sinkhorn" else config.cells
        grid = Grid.from_gaussian(g0, (cells, cells), -config.box, config.box)
        routes["grid"] = integrate(field, grid, config.t1, save=times, events=event)
    sigma0 = float(np.sqrt(np.trace(g0.cov().numpy()) / 2))
    for route, traj in routes.items():
        means, covs = _moments(traj)
        out[f"{route}__times"] = traj.times.numpy()
        out[f"{route}__mean"], out[f"{route}__cov"] = means, covs
        out[f"{route}__status"] = np.array(str(traj.status))
        out[f"{route}__event_time"] = np.array(float(traj.event_time))
        out[f"{route}__seconds"] = np.array(traj.stats["wall_time_s"])
    part = routes["particles"]
    out["particles__points"] = np.stack([m.points.numpy() for m in part.measures]).astype(
        np.float32
    )
    out["particles__clusters"] = np.array(
        [cluster_count(m, config.cluster_resolution * sigma0) for m in part.measures]
    )
    if "grid" in routes:
        out["grid__density"] = np.stack([m.density.numpy() for m in routes["grid"].measures])
        out["grid__outflow"] = np.array(routes["grid"].stats["outflow"])
    out.update(_distances(routes, out, config))
    return out


def common_times(times_a, times_b) -> list[tuple[int, int, float]]:
    """(i, j, t) for every time saved by both routes (i, j: their indices), increasing.

    Routes save at the same requested times (steps land on them exactly), but one that
    stops at its blow-up saves its event time last and nothing after: pairing by index
    would compare a measure at that event time with another route's at a later save time.
    Pairing by time (as real_attention.py does) never does; ``isclose`` at 1e-12 guards
    the float comparison.
    """
    times_a, times_b = np.asarray(times_a, dtype=float), np.asarray(times_b, dtype=float)
    pairs = []
    for i, t in enumerate(times_a):
        match = np.flatnonzero(np.isclose(times_b, t, rtol=0, atol=1e-12))
        if match.size:
            pairs.append((i, int(match[0]), float(t)))
    return pairs


def _distances(routes, out, config) -> dict:
    """W2 between routes at each saved time both reached (Bures of moments with the ODE).

    Keys ``w2__A__B`` (the distances) and ``w2__A__B__times`` (the time of each).
    """
    gen = torch.Generator().manual_seed(config.seed + 1)
    result = {}
    names = list(routes)
    for k, a in enumerate(names):
        for b in names[k + 1 :]:
            pairs = common_times(out[f"{a}__times"], out[f"{b}__times"])
            values = []
            for i, j, _ in pairs:
                if "gaussian" in (a, b):
                    values.append(
                        _bures(out[f"{a}__mean"][i], out[f"{a}__cov"][i],
                               out[f"{b}__mean"][j], out[f"{b}__cov"][j])
                    )  # fmt: skip
                else:
                    mu = _subsample(routes[a].measures[i], config.w2_points, gen)
                    nu = _subsample(routes[b].measures[j], config.w2_points, gen)
                    values.append(float(w2(mu, nu)))
            result[f"w2__{a}__{b}"] = np.array(values)
            result[f"w2__{a}__{b}__times"] = np.array([t for _, _, t in pairs])
    return result


def run(config: Config, out: Path) -> None:
    started = time.perf_counter()
    g0 = Gaussian(torch.tensor(MEAN, dtype=torch.float64), torch.tensor(COV, dtype=torch.float64))
    cloud = Empirical.from_gaussian(g0, config.n, generator=fw.torch_generator(config.seed))
    arrays, results = {}, {}
    for variant in fw.progress(config.variants, "atlas"):
        data = run_variant(variant, config, g0, cloud)
        for key, value in data.items():
            arrays[f"{variant}__{key}"] = value
        results[variant] = _summary(data)
    fw.save(out, config, arrays, results, started)


def _summary(data: dict) -> dict:
    out = {}
    for route in ("gaussian", "particles", "grid"):
        if f"{route}__status" in data:
            out[route] = {
                "status": str(data[f"{route}__status"]),
                "event_time": float(data[f"{route}__event_time"]),
                "final_spectrum": np.linalg.eigvalsh(data[f"{route}__cov"][-1]).tolist(),
                "seconds": float(data[f"{route}__seconds"]),
            }
    pairs = [k for k in data if k.startswith("w2__") and not k.endswith("__times")]
    # The last time both routes reached (a route stopped at its blow-up ends earlier).
    out["w2_final"] = {k[4:]: float(data[k][-1]) for k in pairs if len(data[k])}
    out["w2_final_time"] = {k[4:]: float(data[f"{k}__times"][-1]) for k in pairs if len(data[k])}
    out["clusters"] = data["particles__clusters"].tolist()
    if "grid__outflow" in data:
        out["grid_outflow"] = float(data["grid__outflow"])
    return out


# ---------------------------------------------------------------------- figures and report
ROUTES = ("gaussian", "particles", "grid")


def _ellipse(mean, cov, k=2.0):
    evals, evecs = np.linalg.eigh(0.5 * (cov + cov.T))
    angle = np.linspace(0, 2 * np.pi, 100)
    circle = np.stack([np.cos(angle), np.sin(angle)], 1)
    return mean + k * circle @ (evecs * np.sqrt(np.clip(evals, 0, None))).T


def plot(out: Path) -> list[Path]:
    plt = fw.pyplot()
    config, arrays, _ = fw.load(out)
    variants = config["variants"]
    saves = len(arrays[f"{variants[0]}__particles__times"])
    fig, axes = plt.subplots(len(variants), saves, figsize=(2.2 * saves, 2.2 * len(variants)))
    axes = np.atleast_2d(axes)
    box = config["box"]
    for r, v in enumerate(variants):
        for c in range(saves):
            ax = axes[r, c]
            if f"{v}__grid__density" in arrays and c < len(arrays[f"{v}__grid__density"]):
                dens = arrays[f"{v}__grid__density"][c]
                ax.imshow(dens.T, origin="lower", extent=(-box, box, -box, box), cmap="Greys")
            pts = arrays[f"{v}__particles__points"]
            if c < len(pts):
                ax.scatter(*pts[c].T, s=0.5, alpha=0.5, color="C0")
            if f"{v}__gaussian__mean" in arrays and c < len(arrays[f"{v}__gaussian__mean"]):
                e = _ellipse(arrays[f"{v}__gaussian__mean"][c], arrays[f"{v}__gaussian__cov"][c])
                ax.plot(*e.T, color="C3", lw=1)
            ax.set_xlim(-box, box)
            ax.set_ylim(-box, box)
            ax.set_xticks([])
            ax.set_yticks([])
            if c < len(pts):
                t = arrays[f"{v}__particles__times"][c]
                ax.text(0.03, 0.9, f"t = {t:.2f}", transform=ax.transAxes, fontsize=7)
            if c == 0:
                ax.set_ylabel(v)
    fig.suptitle(
        "grid density (grey), particles (blue), Gaussian ODE 2σ ellipse (red); a route "
        "stopped at its blow-up leaves later panels empty"
    )
    fig.tight_layout()
    files = [fw.savefig(fig, out / "atlas_snapshots.png")]
    files.append(_plot_metrics(plt, out, config, arrays))
    files.append(_animate_particles(out, config, arrays))
    return files


def _animate_particles(out, config, arrays) -> Path:
    """atlas_particles.gif: the first variant's particle cloud, one frame per saved time."""
    from tpde.plot import animate

    variant = config["variants"][0]
    points, times = arrays[f"{variant}__particles__points"], arrays[f"{variant}__particles__times"]
    clouds = [Empirical(torch.as_tensor(p, dtype=torch.float64)) for p in points[: len(times)]]
    box = (-config["box"], config["box"])
    return animate(clouds, out / "atlas_particles.gif", times=times, title=variant, xlim=box,
                   ylim=box, fps=3)  # fmt: skip


def _plot_metrics(plt, out, config, arrays):
    variants = config["variants"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for i, v in enumerate(variants):
        color = f"C{i}"
        for key, style in (("gaussian__particles", "-"), ("particles__grid", "--")):
            if f"{v}__w2__{key}" in arrays:
                w = arrays[f"{v}__w2__{key}"]
                t = arrays[f"{v}__particles__times"][: len(w)]
                axes[0].plot(t, w, style, color=color, label=f"{v}: {key.replace('__', '–')}")
        for route, style in (("gaussian", "-"), ("particles", ":"), ("grid", "--")):
            if f"{v}__{route}__cov" in arrays:
                ev = np.linalg.eigvalsh(arrays[f"{v}__{route}__cov"])
                t = arrays[f"{v}__{route}__times"]
                axes[1].semilogy(t, ev[:, -1], style, color=color)
                axes[1].semilogy(t, ev[:, 0], style, color=color, alpha=0.5)
        axes[2].plot(arrays[f"{v}__particles__times"], arrays[f"{v}__particles__clusters"],
                     color=color, label=v)  # fmt: skip
    axes[0].set_yscale("log")
    axes[0].set_title("W2 between routes (Bures of moments with the ODE)")
    axes[0].legend(fontsize=6, ncol=2)
    axes[1].set_title("covariance eigenvalues: ODE (—), particles (··), grid (--)")
    axes[2].set_title(f"particle clusters at {config['cluster_resolution']}·σ₀")
    axes[2].legend(fontsize=7)
    for ax in axes:
        ax.set_xlabel("t")
    fig.tight_layout()
    return fw.savefig(fig, out / "atlas_metrics.png")


def _w2_cell(r: dict) -> str:
    """ "A–B 0.12 (t = 0.75), …": each distance with the time it is taken at."""
    times = r.get("w2_final_time", {})  # absent in runs saved before pairing by time
    cells = []
    for key, value in r["w2_final"].items():
        when = f" (t = {times[key]:.3g})" if key in times else " (time not recorded)"
        cells.append(f"{key.replace('__', '–')} {value:.2g}{when}")
    return ", ".join(cells) or "—"


def report(out: Path) -> fw.Report:
    config, _, results = fw.load(out)
    rows, claims = [], []
    for v in config["variants"]:
        r = results[v]
        cells = [v]
        for route in ROUTES:
            if route in r:
                t = r[route]["event_time"]
                event = "—" if t is None or not np.isfinite(t) else f"{t:.3f}"
                cells.append(f"{r[route]['status']} ({event})")
            else:
                cells.append("no closure" if route == "gaussian" else "no positions")
        cells.append(_w2_cell(r))
        cells.append(f"{r['clusters'][0]} → {r['clusters'][-1]}")
        rows.append(cells)
    header = ["variant", "Gaussian ODE", "particles", "grid", "W2 at the last common time",
              "clusters"]  # fmt: skip
    table = (
        "Status (event time of tr Σ > "
        f"{config['blowup_trace']:g}) per route; W2 between two routes at the last saved time "
        "both reached (a route stopped at its blow-up ends earlier: distances pair measures "
        "by time, never by index), with that time; particle clusters first → last:\n\n"
        + fw.markdown_table(header, rows)
    )
    for v in config["variants"]:
        r = results[v]
        if "gaussian" in r and "grid" in r and r["gaussian"]["status"] == "completed":
            gap = r["w2_final"].get("gaussian__grid")
            when = r.get("w2_final_time", {}).get("gaussian__grid")
            at = f"t = {when:g}" if when is not None else "the last saved time"
            claims.append(
                fw.Claim(
                    f"{v}: the grid (Eulerian) solution follows the Gaussian ODE (DESIGN.md, "
                    "three routes agree)",
                    f"W2 (Bures of moments) at {at}: {gap:.3g}",
                    "agrees" if gap < 0.25 else "differs",
                )
            )
    blow = [
        v for v in config["variants"] if results[v].get("gaussian", {}).get("status") == "blow_up"
    ]
    if blow:
        claims.append(
            fw.Claim(
                "Softmax-type and linear attention blow up in finite time for an indefinite A "
                "(MATH.md §4); L2 and Sinkhorn do not",
                f"Gaussian ODE blows up for {', '.join(blow)}; finite clouds reach the same "
                "trace later (no finite-time singularity for n particles)",
                "agrees" if set(blow) <= {"softmax", "multihead", "linear"} else "differs",
            )
        )
    summary = (
        f"{len(config['variants'])} variants × up to 3 routes from one Gaussian; blow-up in the "
        f"ODE for {', '.join(blow) or 'none'}."
    )
    figures = [
        ("atlas_snapshots.png", "Snapshots: every variant, three routes."),
        ("atlas_metrics.png", "W2 between routes, covariance spectra, particle clusters."),
        (
            "atlas_particles.gif",
            f"The {config['variants'][0]} particle flow as an animation (tpde.plot.animate).",
        ),
    ]
    notes = [
        "Clusters are connected components at a fixed resolution (in units of the initial "
        "σ): the count rises when a cloud stretches and thins, and the snapshots show where "
        "it splits into groups (softmax, multi-head, masked: two groups along the stretching "
        "axis before the blow-up).",
        "Sigmoid keeps no Gaussian closure and masked attention needs positions, which "
        "neither a Gaussian nor a grid carries: those routes are absent by design.",
        "A finite cloud under a normalised kernel (softmax, multi-head, masked) has no "
        "finite-time blow-up (every velocity is V times a point of the cloud's convex hull, "
        "so it grows at most exponentially); its blow-up time "
        "(tr Σ over the threshold) comes later than the mean-field one and approaches it as n "
        "grows.",
    ]
    return fw.Report(summary, claims, figures, [table], notes)
