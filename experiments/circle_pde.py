"""Particles against the mean-field PDE on the circle: distance, rate in N, metastable plateaus.

From one initial density ρ₀ on S¹ (a small perturbation of the uniform law, modes 1 and
k*), the Transformer PDE is solved as a density (:class:`tpde.flows.CircleSystem`,
pseudo-spectral, SA, β) until the clusters it forms sharpen past its grid (status
"unresolved"), and N tokens drawn from ρ₀ (N = 10³ … 10⁶) follow the particle flow on the
spectral engine (RK4, fixed dt, to a longer horizon). At every saved time: W1 on the circle
between the particles and the density (:func:`tpde.metrics.w1_circle`, exact), its rate in
N (fitted slope of log W1 against log N at the saved times before the PDE's density
reaches twice its initial maximum: the linear regime, where the Monte-Carlo error
N^{-1/2} is carried by the linearised flow), and the particles' clusters: groups of tokens
separated by gaps wider than ``gap`` holding at least ``min_share`` of the mass, no wider
than 0.5 rad. Plateaus
are runs of one cluster count lasting at least ``min_plateau`` time units (Bruno,
Pasqualotto, Agazzi, arXiv:2410.23228: metastable clustering, k* clusters first).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tpde.fields import Normalized, Softmax
from tpde.flows import integrate
from tpde.measures import CircleDensity, Empirical
from tpde.metrics import w1_circle
from tpde.theory import dominant_mode

from . import framework as fw

NAME = "circle-pde"
ORDER = 11  # place in ``tpde run`` and in the report
TITLE = "the circle PDE against particles: distance, rate in N, metastable plateaus"


@dataclass(frozen=True)
class Config:
    beta: float = 5.0
    grid: int = 1024  # angles of the PDE's density
    amplitude: float = 0.02  # of the modes 1 and k* in ρ₀ = (1 + a cos θ + a cos k*θ)/2π
    sizes: tuple[int, ...] = (1_000, 10_000, 100_000, 1_000_000)
    seeds: int = 4  # draws per N (N ≤ 10⁵; one at 10⁶)
    t1: float = 30.0  # the particles' horizon
    dt: float = 0.05
    saves: int = 121
    bins: int = 256  # of the particles' histogram
    gap: float = 0.05  # radians between clusters
    min_share: float = 0.01
    min_plateau: float = 2.0
    seed: int = 0

    def check(self) -> None:
        if self.beta <= 0 or self.dt <= 0 or self.t1 <= 0 or self.amplitude < 0:
            raise ValueError("beta, dt and t1 must be > 0, amplitude >= 0.")
        small = not self.sizes or min(self.sizes) < 2 or self.seeds < 1
        if small or self.saves < 2 or self.grid < 8:
            raise ValueError("sizes >= 2, seeds >= 1, saves >= 2 and grid >= 8.")
        if len(set(self.sizes)) < 2:
            raise ValueError(
                f"sizes must hold two different N at least: the rate is the slope of log W1 "
                f"against log N; received {self.sizes}."
            )
        if self.amplitude > 0.5 or self.beta > 1e12 or self.bins < 1:
            raise ValueError(
                f"amplitude must be <= 1/2 (ρ₀ = (1 + a cos θ + a cos k*θ)/2π stays >= 0), "
                f"beta <= 1e12 (the range of tpde.theory.dominant_mode) and bins >= 1; "
                f"received amplitude = {self.amplitude}, beta = {self.beta}, bins = {self.bins}."
            )

    def memory_bytes(self) -> int:
        return 8 * (max(self.sizes) * 2 * (self.saves + 12) + self.grid * self.saves)


QUICK = {"sizes": "1000,10000", "seeds": "2", "t1": "8.0", "saves": "33", "grid": "512"}


def initial_density(config: Config) -> CircleDensity:
    k = dominant_mode(config.beta)
    theta = torch.arange(config.grid, dtype=torch.float64) * 2 * math.pi / config.grid
    a = config.amplitude
    return CircleDensity(1 + a * torch.cos(theta) + a * torch.cos(k * theta))


def clusters(points: torch.Tensor, gap: float, min_share: float, width: float = 0.5) -> int:
    """Clusters: groups of angles separated by gaps > ``gap`` (circularly) holding ≥
    ``min_share`` of the tokens and no wider than ``width`` radians (a spread cloud, one
    group without gaps, has 0 clusters)."""
    angles = torch.sort(torch.atan2(points[:, 1], points[:, 0])).values
    gaps = torch.diff(angles, append=angles[:1] + 2 * math.pi)
    cuts = torch.nonzero(gaps > gap).flatten()  # group g: cuts[g - 1] + 1 … cuts[g]
    if len(cuts) == 0:
        return 0
    first = torch.cat([cuts[-1:] + 1 - len(angles), cuts[:-1] + 1])
    sizes = cuts - first + 1
    spans = angles[cuts] - torch.where(first < 0, angles[first] - 2 * math.pi, angles[first])
    return int(((sizes >= min_share * len(angles)) & (spans <= width)).sum())


def plateaus(times: np.ndarray, counts: np.ndarray, shortest: float) -> list[tuple]:
    """(count, start, duration) of the runs of one count lasting ≥ ``shortest``."""
    out, start = [], 0
    for i in range(1, len(counts) + 1):
        if i == len(counts) or counts[i] != counts[start]:
            if times[i - 1] - times[start] >= shortest:
                out.append(
                    (int(counts[start]), float(times[start]), float(times[i - 1] - times[start]))
                )
            start = i
    return out


def run(config: Config, out: Path) -> None:
    started = time.time()
    eye = torch.eye(2, dtype=torch.float64)
    field = Normalized(Softmax(eye, eye, eye, scale=config.beta), "post-ln")
    rho0 = initial_density(config)
    times = np.linspace(0.0, config.t1, config.saves)
    pde = integrate(field, rho0, config.t1, save=times.tolist(), dt=None)
    pde_times = pde.times.numpy()
    densities = np.stack([m.density.numpy() for m in pde.measures])
    g = fw.torch_generator(config.seed)
    distance = np.full((len(config.sizes), config.seeds, len(times)), np.nan)
    counts = np.zeros((len(config.sizes), config.seeds, len(times)), dtype=np.int64)
    histogram = np.zeros((len(times), config.bins))
    for i, n in enumerate(fw.progress(config.sizes, "sizes")):
        for s in range(config.seeds if n < 1_000_000 else 1):
            cloud = Empirical(rho0.sample(n, generator=g))
            traj = integrate(
                field,
                cloud,
                config.t1,
                method="rk4",
                dt=config.dt,
                save=times.tolist(),
                engine="auto",
            )
            for j, mu in enumerate(traj.measures):
                if j < len(pde_times) and pde_times[j] == times[j]:
                    distance[i, s, j] = float(w1_circle(mu, pde.measures[j]))
                counts[i, s, j] = clusters(mu.points, config.gap, config.min_share)
                if i == len(config.sizes) - 1 and s == 0:
                    angles = torch.remainder(
                        torch.atan2(mu.points[:, 1], mu.points[:, 0]), 2 * math.pi
                    )
                    histogram[j] = np.histogram(
                        angles.numpy(), config.bins, (0, 2 * math.pi), density=True
                    )[0]
    peak = densities.max(axis=1)
    linear = pde_times[peak <= 2 * peak[0]]
    early = [j for j, t in enumerate(times) if 0 < t <= linear[-1] and j < len(pde_times)]
    mean = np.nanmean(distance[..., early], axis=1)  # (sizes, early times)
    slopes = [
        float(np.polyfit(np.log(config.sizes), np.log(mean[:, j]), 1)[0]) for j in range(len(early))
    ]
    results = {
        "pde_status": str(pde.status),
        "pde_end": float(pde_times[-1]),
        "unresolved": pde.stats["unresolved"],
        "mass_error": pde.stats["mass_error"],
        "linear_until": float(linear[-1]),
        "rate": float(np.median(slopes)) if slopes else math.nan,
        "dominant_mode": dominant_mode(config.beta),
        "plateaus": {
            str(n): plateaus(times, counts[i, 0], config.min_plateau)
            for i, n in enumerate(config.sizes)
        },
        "seconds": time.time() - started,
    }
    arrays = {
        "times": times,
        "pde_times": pde_times,
        "densities": densities,
        "distance": distance,
        "counts": counts,
        "histogram": histogram,
    }
    fw.save(out, config, arrays, results, started)


def plot(out: Path) -> list[Path]:
    config, arrays, _ = fw.load(out)
    plt = fw.pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    t, tp = arrays["times"], arrays["pde_times"]
    axes[0].imshow(
        arrays["densities"].T, aspect="auto", origin="lower", extent=(0, tp[-1], 0, 2 * math.pi)
    )
    axes[0].set(title="PDE density ρ(t, θ)", xlabel="t", ylabel="θ")
    axes[1].imshow(
        arrays["histogram"].T, aspect="auto", origin="lower", extent=(0, t[-1], 0, 2 * math.pi)
    )
    axes[1].set(title=f"particles, N = {config['sizes'][-1]:.0e}", xlabel="t")
    for i, n in enumerate(config["sizes"]):
        axes[2].semilogy(t, np.nanmean(arrays["distance"][i], axis=0), label=f"N = {n:.0e}")
    axes[2].set(title="W1(particles, PDE)", xlabel="t")
    axes[2].legend()
    return [fw.savefig(fig, Path(out) / "circle_pde.png")]


def report(out: Path) -> fw.Report:
    config, _, r = fw.load(out)
    rate = r["rate"]
    largest = str(config["sizes"][-1])
    counts = ", ".join(
        f"{c} clusters from t = {s:.1f} for {d:.1f}" for c, s, d in r["plateaus"][largest]
    )
    claims = [
        fw.Claim(
            "the particles approach the PDE at the Monte-Carlo rate N^{-1/2} while the "
            "modes are small",
            f"W1 ∝ N^{rate:.2f} for t ≤ {r['linear_until']:.2f}",
            "agrees" if abs(rate + 0.5) < 0.1 else "differs",
        ),
        fw.Claim(
            "k* = argmax k²I_k(β) clusters form first (Bruno et al.)",
            f"k* = {r['dominant_mode']}; plateaus at N = {largest}: {counts or 'none'}",
            "n/a",
        ),
    ]
    summary = (
        f"PDE ({r['pde_status']}, to t = {r['pde_end']:.2f}, mass error "
        f"{r['mass_error']:.1e}) against particles: W1 ∝ N^{rate:.2f}."
    )
    notes = [f"PDE stopped: {r['unresolved']}"] if r["unresolved"] else []
    return fw.Report(summary, claims, [("circle_pde.png", "density, particles, W1")], notes=notes)
