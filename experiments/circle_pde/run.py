"""The circle-pde study's computation: the PDE on each grid, the particles per β, N and
draw, W1 between them, the cluster counts and their plateaus (module notes of the
package)."""

from __future__ import annotations

import math
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from tpde.flows import integrate
from tpde.measures import Empirical
from tpde.metrics import w1_circle
from tpde.theory import dominant_mode, instability_rate

from .. import framework as fw
from ..common.circle_clusters import cluster_masses, density_masses, first_plateau, points_masses
from .config import Config, draws, initial_density, save_times
from .flow import follow, post_ln_field
from .gap import Gap
from .metastable import KMAX, meta_times, mode_amplitudes, sweep

#: The escape-only draws save every ESCAPE_STRIDE-th dense time (the crossing is
#: interpolated log-linearly: exact while the mode grows as e^{λt}).
ESCAPE_STRIDE = 2


def count(config: Config, masses: np.ndarray) -> int:
    return len(cluster_masses(masses, config.window, config.level, config.min_share))


def solve_pde(config: Config, grid: int, times: np.ndarray) -> dict:
    """The PDE on ``grid`` angles over the dense saves: its densities, counts and reach."""
    started = time.time()
    rho0 = initial_density(config, config.beta, grid)
    with warnings.catch_warnings():  # the stop is the expected outcome, in pde.status
        warnings.filterwarnings("ignore", "1 element.*status 'unresolved'", RuntimeWarning)
        pde = integrate(post_ln_field(config.beta), rho0, float(times[-1]), save=times.tolist())
    counts = [count(config, density_masses(m, config.cells)) for m in pde.measures]
    t = pde.times.numpy()
    k_star = dominant_mode(config.beta)
    first = next((float(s) for s, c in zip(t, counts, strict=True) if c >= 1), None)
    reached = next((float(s) for s, c in zip(t, counts, strict=True) if c == k_star), None)
    return {
        "grid": grid,
        "status": str(pde.status),
        "end": float(t[-1]),
        "unresolved": pde.stats["unresolved"],
        "mass_error": pde.stats["mass_error"],
        "count_at_end": counts[-1],
        "first_cluster": first,
        "first_k_star": reached,
        "seconds": time.time() - started,
        "_trajectory": pde,
        "_counts": counts,
    }


def seed_mean(distance: np.ndarray) -> np.ndarray:
    """The mean over draws (axis 1) of the finite entries, NaN where there are none."""
    finite = np.isfinite(distance)
    total = np.where(finite, distance, 0).sum(axis=1)
    number = finite.sum(axis=1)
    return np.where(number > 0, total / np.maximum(number, 1), np.nan)


def angles_histogram(points: torch.Tensor, bins: int) -> np.ndarray:
    angles = torch.remainder(torch.atan2(points[:, 1], points[:, 0]), 2 * math.pi)
    return np.histogram(angles.numpy(), bins, (0, 2 * math.pi), density=True)[0]


def law_fit(config: Config, beta: float, starts: dict) -> dict:
    """The first plateaus' start against log N: fitted slope and offset, the law's slope
    1/(2λ_k*) (:func:`tpde.theory.instability_rate`)."""
    k = dominant_mode(beta)
    rate = float(instability_rate(k, beta))
    pairs = [(math.log(n), s) for n, values in starts.items() for s in values if s is not None]
    fit = None
    if len({x for x, _ in pairs}) >= 2:
        slope, offset = np.polyfit(*zip(*pairs, strict=True), 1)
        fit = {"slope": float(slope), "offset": float(offset)}
    return {"k_star": k, "rate": rate, "law_slope": 1 / (2 * rate), "fit": fit}


def run(config: Config, out: Path) -> None:
    started, started_cpu, cpu = time.time(), time.process_time(), {}
    times = save_times(config)
    dense = times[times <= config.dense_until + 1e-9]
    tic = time.process_time()
    pdes = [solve_pde(config, grid, dense) for grid in fw.progress(config.grids, "grids")]
    cpu["pde"] = time.process_time() - tic
    gap = Gap(config, times, config.seed + 3)
    finest = max(pdes, key=lambda p: p["grid"])
    reference = finest["_trajectory"]
    at_pde = {round(float(t), 9): j for j, t in enumerate(reference.times.tolist())}
    betas = (config.beta, *config.more_betas)
    seeds = max(draws(config, n) for n in config.sizes)
    counts = np.full((len(betas), len(config.sizes), seeds, len(times)), -1, dtype=np.int64)
    distance = np.full((len(config.sizes), seeds, len(dense)), np.nan)
    histogram = np.zeros((len(times), config.bins))
    modes = np.full((len(config.sizes), max(seeds, config.escape_seeds), len(times), KMAX), np.nan)
    runs, g = [], fw.torch_generator(config.seed)
    tic = time.process_time()
    for b, beta in enumerate(betas):
        field, rho0 = post_ln_field(beta), initial_density(config, beta, min(config.grids))
        for i, n in enumerate(fw.progress(config.sizes, f"sizes (beta = {beta})")):
            if b > 0 and n == max(config.sizes):
                continue
            for s in range(draws(config, n)):

                def visit(j, mu, b=b, i=i, s=s, n=n):
                    counts[b, i, s, j] = count(config, points_masses(mu.points, config.cells))
                    if b == 0 and round(float(times[j]), 9) in at_pde:
                        pde_mu = reference.measures[at_pde[round(float(times[j]), 9)]]
                        distance[i, s, j] = float(w1_circle(mu, pde_mu))
                    if b == 0 and n == max(config.sizes) and s == 0:
                        histogram[j] = angles_histogram(mu.points, config.bins)
                        gap.visit(j, mu)
                    if b == 0:
                        modes[i, s, j] = mode_amplitudes(mu.points)

                wall, clock = time.time(), time.process_time()
                cloud = Empirical(rho0.sample(n, generator=g))
                info = follow(config, field, cloud, times, visit)
                runs.append({"beta": beta, "n": n, "seed": s, **info, "seconds": time.time() - wall,
                             "cpu_seconds": time.process_time() - clock})  # fmt: skip
    cpu["particles"] = time.process_time() - tic
    tic = time.process_time()
    runs += escape_draws(config, dense, modes)
    cpu["escape"] = time.process_time() - tic
    tic = time.process_time()
    meta_counts, metastable = sweep(
        config, follow, post_ln_field, fw.torch_generator(config.seed + 2)
    )
    cpu["sweep"] = time.process_time() - tic
    plateaus_found = {
        str(beta): {
            str(n): [
                plateau_row(times, counts[b, i, s], config.min_plateau)
                for s in range(draws(config, n))
                if counts[b, i, s, 0] >= 0
            ]
            for i, n in enumerate(config.sizes)
        }
        for b, beta in enumerate(betas)
    }
    laws = {
        beta: law_fit(
            config, float(beta), {int(n): [r and r[1] for r in rows] for n, rows in table.items()}
        )
        for beta, table in plateaus_found.items()
    }
    k_rate = float(instability_rate(dominant_mode(config.beta), config.beta))
    linear_until = math.log(0.1 * math.sqrt(min(config.sizes))) / k_rate
    early = [j for j, t in enumerate(dense) if 0 < t <= linear_until]
    mean = seed_mean(distance)  # (sizes, dense times)
    slopes = [
        float(np.polyfit(np.log(config.sizes), np.log(mean[:, j]), 1)[0])
        for j in early
        if np.isfinite(mean[:, j]).all()
    ]
    results = {
        "pde": [{k: v for k, v in p.items() if not k.startswith("_")} for p in pdes],
        "linear_until": linear_until,
        "rate": float(np.median(slopes)) if slopes else math.nan,
        "dominant_mode": dominant_mode(config.beta),
        "n_eff": 4 / config.amplitude**2 if config.amplitude > 0 else None,
        "plateaus": plateaus_found,
        "laws": laws,
        "runs": runs,
        "metastable": metastable,
        "gap": gap.results(),
        "seconds": time.time() - started,
        "cpu_seconds": {**cpu, "total": time.process_time() - started_cpu},
    }
    arrays = {
        "times": times,
        "pde_times": reference.times.numpy(),
        "pde_counts": np.asarray(finest["_counts"]),
        "densities": np.stack([m.density.numpy() for m in reference.measures])[
            :, :: max(1, finest["grid"] // 1024)
        ],
        "distance": distance,
        "counts": counts,
        "histogram": histogram,
        "modes": modes,
        "meta_times": meta_times(config),
        "meta_counts": meta_counts,
        **gap.arrays(),
    }
    fw.save(out, config, arrays, results, started)


def escape_draws(config: Config, dense: np.ndarray, modes: np.ndarray) -> list[dict]:
    """The draws beyond :func:`~.config.draws` up to ``escape_seeds`` per N at β, for the
    escape only (their own generator, seed + 1): |ĉ_k| into ``modes`` at every
    ``ESCAPE_STRIDE``-th dense save, stopped after the call where |ĉ_k*| reaches twice
    ``escape_level``."""
    k, field = dominant_mode(config.beta), post_ln_field(config.beta)
    rho0, g = (
        initial_density(config, config.beta, min(config.grids)),
        fw.torch_generator(config.seed + 1),
    )
    index = np.arange(0, len(dense), ESCAPE_STRIDE)
    runs = []
    for i, n in enumerate(config.sizes):
        for s in range(draws(config, n), config.escape_seeds):
            store = modes[i, s]

            def visit(j, mu, store=store):
                store[index[j]] = mode_amplitudes(mu.points)

            def stop(j, store=store):
                return store[index[j], k - 1] >= 2 * config.escape_level

            wall, clock = time.time(), time.process_time()
            info = follow(config, field, Empirical(rho0.sample(n, generator=g)), dense[index],
                          visit, stop)  # fmt: skip
            runs.append({"beta": config.beta, "n": n, "seed": s, "escape_only": True, **info,
                         "seconds": time.time() - wall,
                         "cpu_seconds": time.process_time() - clock})  # fmt: skip
    return runs


def plateau_row(times, counts, shortest: float) -> list | None:
    """[count, start, duration, censored, count after] of the first plateau, or None."""
    p = first_plateau(times, counts, shortest)
    return None if p is None else [p.count, p.start, p.duration, p.censored, p.after]
