"""The circle-pde study's computation: the PDE on each grid, the particles per β, N and
draw, W1 between them, the cluster counts and their plateaus (module notes of the
package)."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from tpde.theory import dominant_mode, instability_rate

from .. import framework as fw
from ..common.circle_clusters import first_plateau
from ..common.pool import Workers, cpu_per_part
from .config import Config, draws, save_times
from .draws import draw_clouds, escape_draw, main_draw, solve_pde, sweep_draw
from .flow import follow
from .metastable import KMAX, meta_times, sweep_summary

#: The escape-only draws save every ESCAPE_STRIDE-th dense time (the crossing is
#: interpolated log-linearly: exact while the mode grows as e^{λt}).
ESCAPE_STRIDE = 2

#: :func:`~.flow.follow` is imported from here by the sphere study.
__all__ = ["ESCAPE_STRIDE", "follow", "law_fit", "plateau_row", "run", "seed_mean"]


def seed_mean(distance: np.ndarray) -> np.ndarray:
    """The mean over draws (axis 1) of the finite entries, NaN where there are none."""
    finite = np.isfinite(distance)
    total = np.where(finite, distance, 0).sum(axis=1)
    number = finite.sum(axis=1)
    return np.where(number > 0, total / np.maximum(number, 1), np.nan)


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
    started, started_cpu = time.time(), time.process_time()
    times = save_times(config)
    dense = times[times <= config.dense_until + 1e-9]
    betas = (config.beta, *config.more_betas)
    done = particle_runs(config, times, dense)
    cpu, on_workers = cpu_per_part(done, ("pde", "particles", "escape", "sweep"), config.workers)
    pdes = [{**done["pde", grid].value, "seconds": done["pde", grid].wall} for grid in config.grids]
    finest = max(pdes, key=lambda p: p["grid"])
    seeds = max(draws(config, n) for n in config.sizes)
    counts = np.full((len(betas), len(config.sizes), seeds, len(times)), -1, dtype=np.int64)
    distance = np.full((len(config.sizes), seeds, len(dense)), np.nan)
    modes = np.full((len(config.sizes), max(seeds, config.escape_seeds), len(times), KMAX), np.nan)
    runs = []
    for (_, b, i, s), d in sorted((k, d) for k, d in done.items() if k[0] == "particles"):
        counts[b, i, s] = d.value["counts"]
        for j, w1 in d.value["distance"].items():
            distance[i, s, j] = w1
        if d.value["modes"] is not None:
            modes[i, s] = d.value["modes"]
        if d.value["gap"] is not None:
            (gap, gap_arrays), histogram = d.value["gap"], d.value["histogram"]
        runs.append({"beta": betas[b], "n": config.sizes[i], "seed": s, **d.value["info"],
                     "seconds": d.wall, "cpu_seconds": d.cpu})  # fmt: skip
    index = np.arange(0, len(dense), ESCAPE_STRIDE)
    for (_, i, s), d in sorted((k, d) for k, d in done.items() if k[0] == "escape"):
        modes[i, s, index] = d.value["modes"]
        runs.append({"beta": config.beta, "n": config.sizes[i], "seed": s, "escape_only": True,
                     **d.value["info"], "seconds": d.wall, "cpu_seconds": d.cpu})  # fmt: skip
    meta_counts, metastable = sweep_results(config, done)
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
        "gap": gap,
        "seconds": time.time() - started,
        "workers": config.workers,
        "cpu_seconds": {**cpu, "total": time.process_time() - started_cpu + on_workers},
    }
    arrays = {
        "times": times,
        "pde_times": finest["_times"],
        "pde_counts": np.asarray(finest["_counts"]),
        "densities": np.stack([m.density.numpy() for m in finest["_measures"]])[
            :, :: max(1, finest["grid"] // 1024)
        ],
        "distance": distance,
        "counts": counts,
        "histogram": histogram,
        "modes": modes,
        "meta_times": meta_times(config),
        "meta_counts": meta_counts,
        **gap_arrays,
    }
    fw.save(out, config, arrays, results, started)


def particle_runs(config: Config, times: np.ndarray, dense: np.ndarray) -> dict:
    """Every run of the study on ``config.workers`` processes (:class:`~experiments.common.
    pool.Workers`): the PDE per grid, then the main draws at β against the finest PDE (the
    others at once), the escape-only draws and the β sweep's. Returns {key: Done} with keys
    ("pde", grid), ("particles", b, i, s), ("escape", i, s), ("sweep", b, s)."""
    clouds = draw_clouds(config, *(fw.torch_generator(config.seed + k) for k in range(3)))
    index = np.arange(0, len(dense), ESCAPE_STRIDE)
    betas, largest, done = (config.beta, *config.more_betas), max(config.sizes), {}
    with Workers(config.workers) as pool:
        for grid in config.grids:
            pool.submit(("pde", grid), solve_pde, config, grid, dense, cost=math.inf)
        for (b, i, s), points in clouds["main"].items():
            if b > 0:
                pool.submit(("particles", b, i, s), main_draw, config, betas[b], points, times,
                            None, None, cost=len(points) * config.t1)  # fmt: skip
        for (i, s), points in clouds["escape"].items():
            pool.submit(("escape", i, s), escape_draw, config, points, dense[index],
                        cost=len(points) * config.dense_until)  # fmt: skip
        for (b, s), points in clouds["sweep"].items():
            pool.submit(("sweep", b, s), sweep_draw, config, config.meta_betas[b], points,
                        meta_times(config), cost=len(points) * config.meta_t1)  # fmt: skip
        total = len(config.grids) + sum(len(c) for c in clouds.values())
        for d in fw.progress(pool.completed(), "runs", total=total):
            done[d.key] = d
            if sum(key[0] == "pde" for key in done) < len(config.grids) or d.key[0] != "pde":
                continue
            finest = max((v.value for k, v in done.items() if k[0] == "pde"),
                         key=lambda p: p["grid"])  # fmt: skip
            at_pde = {round(float(t), 9): j for j, t in enumerate(finest["_times"])}
            reference = {j: finest["_measures"][at_pde[round(float(t), 9)]]
                         for j, t in enumerate(times) if round(float(t), 9) in at_pde}  # fmt: skip
            for (b, i, s), points in clouds["main"].items():
                if b == 0:
                    gap = config.seed + 3 if (config.sizes[i], s) == (largest, 0) else None
                    pool.submit(("particles", b, i, s), main_draw, config, betas[b], points,
                                times, reference, gap, cost=len(points) * config.t1)  # fmt: skip
    return done


def sweep_results(config: Config, done: dict) -> tuple[np.ndarray, dict]:
    """The β sweep's counts (betas, meta_seeds, T) and per β its results
    (:func:`~.metastable.sweep_summary`) from the finished sweep draws."""
    times = meta_times(config)
    counts = np.full((len(config.meta_betas), config.meta_seeds, len(times)), -1, dtype=np.int64)
    results = {}
    for b, beta in enumerate(config.meta_betas):
        found = [done["sweep", b, s] for s in range(config.meta_seeds)]
        for s, d in enumerate(found):
            counts[b, s] = d.value["counts"]
        runs = [{**d.value["info"], "seconds": d.wall, "cpu_seconds": d.cpu} for d in found]
        amplitudes = [d.value["modes"] for d in found]
        results[str(beta)] = sweep_summary(config, beta, times, counts[b], runs, amplitudes)
    return counts, results


def plateau_row(times, counts, shortest: float) -> list | None:
    """[count, start, duration, censored, count after] of the first plateau, or None."""
    p = first_plateau(times, counts, shortest)
    return None if p is None else [p.count, p.start, p.duration, p.censored, p.after]
