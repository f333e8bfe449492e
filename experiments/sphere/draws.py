r"""The sphere study's metastability runs as tasks for the worker processes
(:class:`~experiments.common.pool.Workers`; issue 35: the full run's cost on 2 cores), as
:mod:`experiments.circle_pde.draws` does for S¹.

Every run starts from a cloud drawn beforehand, in the serial order, from the part's
generators (the escape clouds from ``seed + 900``, size by size and draw by draw, the β
sweep's from ``seed + 901``, β by β: :func:`draw_clouds`), and returns what the study
saves of it (:func:`escape_draw`, :func:`sweep_draw`). A task depends only on its
arguments, so the part gives the same arrays and results on one process or several
(tested); one worker runs the tasks in the order submitted, the serial order.

**Scheduling.** With w ≥ 2 workers the largest ``cost`` starts first: the cost of a run
is its tokens times its saves, N·T (every save counts the clusters and the amplitudes of
all N tokens). Measured CPU seconds, one thread: before the dense saves (every save a
landing target, which capped dopri5's step at 0.25; load 7–9, MATH.md §9) the 10⁶ escape
draw 776 s (89 steps of 6 field evaluations at ~1.25 s, 81 saves at 0.9 s), the sweep's
50 runs 625 s, and the full part took 698 s of wall on 2 idle cores (1375 s of CPU). With
dense saves (:func:`~experiments.circle_pde.flow.follow`: dopri5's own steps, every save
interpolated; the results unchanged to every printed digit, MATH.md §9) the 10⁶ draw
takes 49 steps and 443 s CPU, the part 1166 s CPU (escape 560, sweep 605), both at load
5–7 on the shared 2 cores with the circle-pde study running beside it. The 10⁶ draw
bounds the part's wall time from below; scheduled longest first on 2 workers
(:func:`~experiments.common.pool.longest_first`) the runs take ~580 s of wall at that
load, the 10⁶ draw on one worker and most of the rest on the other.
"""

from __future__ import annotations

import time

import numpy as np

from tpde.measures import Empirical, uniform_on_sphere
from tpde.theory import dominant_mode

from .. import framework as fw
from ..circle_pde.run import follow
from ..common.circle_clusters import first_plateau
from ..common.pool import Workers, cpu_per_part
from .metastable import (
    ABSORBED,
    LMAX,
    TOLERANCES,
    Watch,
    diagnosed,
    meta_cells,
    meta_times,
    plateau_row,
    post_ln,
    predictions,
    summary,
)

__all__ = ["draw_clouds", "escape_draw", "escape_saves", "run_metastable", "sweep_draw"]

#: The parts of the metastability study, the first entry of their tasks' keys.
PARTS = ("escape", "sweep")


def escape_saves(config) -> np.ndarray:
    """The escape runs' saves: every ``meta_dense_step`` from 0 to ``escape_t1``."""
    return np.arange(0.0, config.escape_t1 + config.meta_dense_step / 2, config.meta_dense_step)


def draw_clouds(config) -> dict:
    """Every initial cloud of the metastability part, drawn in the serial run's order.

    Returns
    -------
    dict with ``escape`` {(i, s): points (escape_sizes[i], 3)} for s < escape_draws[i]
    (from ``seed + 900``, size by size) and ``sweep`` {(b, s): points (meta_size, 3)} for
    s < meta_seeds (from ``seed + 901``, β by β).
    """
    g = fw.torch_generator(config.seed + 900)
    escape = {(i, s): uniform_on_sphere(n, 3, generator=g).points
              for i, n in enumerate(config.escape_sizes)
              for s in range(config.escape_draws[i])}  # fmt: skip
    g = fw.torch_generator(config.seed + 901)
    sweep = {(b, s): uniform_on_sphere(config.meta_size, 3, generator=g).points
             for b in range(len(config.meta_betas)) for s in range(config.meta_seeds)}  # fmt: skip
    return {"escape": escape, "sweep": sweep}


def _watch(config, times) -> Watch:
    counts = np.full(len(times), -1, dtype=np.int64)
    modes = np.full((len(times), LMAX), np.nan)
    return Watch(counts, modes, config.escape_level, meta_cells(config))


def escape_draw(config, points, times, *, dense: bool = True) -> dict:
    """One escape run at β = ``escape_beta`` from ``points`` (N, 3) over ``times`` (T,).

    Returns
    -------
    dict: ``counts`` (T,) (−1 where not reached), ``modes`` (T, LMAX) A_l (NaN where not
    reached), ``run``: its predictions, the :func:`~experiments.circle_pde.run.follow`
    info, its first plateau and its seeding (:func:`~.metastable.diagnosed`). ``dense``:
    follow's saves, interpolated (the default) or landed on.
    """
    beta, watch = config.escape_beta, _watch(config, times)
    guess = predictions(points, beta, watch.cells)
    info = follow(TOLERANCES, post_ln(beta), Empirical(points), times, watch, dense=dense)
    first = plateau_row(first_plateau(times, watch.counts, config.meta_min_plateau))
    return {"counts": watch.counts, "modes": watch.modes,
            "run": {**guess, **info, "first": first,
                    **diagnosed(points, watch, times, beta)}}  # fmt: skip


def sweep_draw(config, beta: float, points, times, *, dense: bool = True) -> dict:
    """One run of the β sweep from ``points`` (meta_size, 3) over ``times`` (T,): stopped
    once a count ≥ 2 has dropped to one cluster held over ABSORBED saves (the count is
    then 1 to the end: one cluster does not split). ``dense``: follow's saves.

    Returns
    -------
    dict: ``counts`` (T,), ``modes`` (T, LMAX) (NaN after a stop), ``run``: its
    predictions, the follow info and its seeding.
    """
    watch = _watch(config, times)
    series = watch.counts

    def stop(j):
        seen = series[: j + 1]
        return seen.max() >= 2 and (seen[-ABSORBED:] == 1).all()

    guess = predictions(points, beta, watch.cells)
    info = follow(TOLERANCES, post_ln(beta), Empirical(points), times, watch, stop, dense=dense)
    if info["status"] == "stopped":
        series[series < 0] = 1
    return {"counts": series, "modes": watch.modes,
            "run": {**guess, **info, **diagnosed(points, watch, times, beta)}}  # fmt: skip


def _tasks(config, pool: Workers) -> int:
    """Submit every run (the escape draws, then the sweep's: the serial order); return
    their number."""
    clouds, escape, sweep = draw_clouds(config), escape_saves(config), meta_times(config)
    for (i, s), points in clouds["escape"].items():
        pool.submit(("escape", i, s), escape_draw, config, points, escape,
                    cost=len(points) * len(escape))  # fmt: skip
    for (b, s), points in clouds["sweep"].items():
        pool.submit(("sweep", b, s), sweep_draw, config, config.meta_betas[b], points, sweep,
                    cost=len(points) * len(sweep))  # fmt: skip
    return sum(len(c) for c in clouds.values())


def _escape_results(config, done: dict) -> tuple[dict, dict | None]:
    """The escape arrays: times (T,), amplitudes (sizes, draws, T, LMAX), counts (sizes,
    draws, T) (NaN and −1 where not drawn or not reached); per draw its run."""
    if not config.escape_sizes:
        return {}, None
    times = escape_saves(config)
    draws = max(config.escape_draws)
    modes = np.full((len(config.escape_sizes), draws, len(times), LMAX), np.nan)
    counts = np.full((len(config.escape_sizes), draws, len(times)), -1, dtype=np.int64)
    runs = []
    for i, n in enumerate(config.escape_sizes):
        for s in range(config.escape_draws[i]):
            d = done["escape", i, s]
            modes[i, s], counts[i, s] = d.value["modes"], d.value["counts"]
            runs.append({"n": n, "seed": s, **d.value["run"], "seconds": d.wall,
                         "cpu_seconds": d.cpu})  # fmt: skip
    beta = config.escape_beta
    arrays = {"meta_escape_times": times, "meta_escape_modes": modes,
              "meta_escape_counts": counts}  # fmt: skip
    return arrays, {"beta": beta, "l_star": dominant_mode(beta, d=3), "runs": runs}


def _sweep_results(config, done: dict) -> tuple[dict, dict]:
    """The sweep's arrays: times (T,), counts (betas, meta_seeds, T), amplitudes (betas,
    meta_seeds, T, LMAX); per β its :func:`~.metastable.summary`."""
    if not config.meta_betas:
        return {}, {}
    times = meta_times(config)
    counts = np.full((len(config.meta_betas), config.meta_seeds, len(times)), -1, dtype=np.int64)
    modes = np.full((*counts.shape, LMAX), np.nan)
    results = {}
    for b, beta in enumerate(config.meta_betas):
        runs = []
        for s in range(config.meta_seeds):
            d = done["sweep", b, s]
            counts[b, s], modes[b, s] = d.value["counts"], d.value["modes"]
            runs.append({**d.value["run"], "seconds": d.wall, "cpu_seconds": d.cpu})
        results[str(beta)] = summary(config, beta, times, counts[b], runs)
    return {"meta_times": times, "meta_counts": counts, "meta_modes": modes}, results


def run_metastable(config) -> tuple[dict, dict]:
    """The escape runs and the β sweep on ``config.workers`` processes: (arrays, results)
    for the sphere study's data; ``cpu_seconds`` {escape, sweep, total} (total: this
    process's CPU seconds over the part plus its workers'), ``seconds`` (wall) and
    ``workers``."""
    wall, clock = time.time(), time.process_time()
    done = {}
    with Workers(config.workers) as pool:
        total = _tasks(config, pool)
        for d in fw.progress(pool.completed(), "S² metastability runs", total=total):
            done[d.key] = d
    cpu, on_workers = cpu_per_part(done, PARTS, config.workers)
    arrays, escape = _escape_results(config, done)
    found, sweep = _sweep_results(config, done)
    arrays.update(found)
    cpu["total"] = time.process_time() - clock + on_workers
    return arrays, {"escape": escape, "sweep": sweep, "cpu_seconds": cpu,
                    "seconds": time.time() - wall, "workers": config.workers}  # fmt: skip
