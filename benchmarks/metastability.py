"""The metastability runs' tasks, landed saves against dense ones (issue 35: the cost).

    python benchmarks/metastability.py           # S² escape N = 10⁵, S² sweep β = 10,
                                                 # S¹ main draw N = 10⁵, S¹ sweep β = 8
    python benchmarks/metastability.py --quick   # the same tasks at N = 10⁴, 1000, 10⁴, 1000

One task of each kind of the two studies' metastability runs (the circle-pde study's
:mod:`~tpde.experiments.circle_pde.draws`, the sphere study's
:mod:`~tpde.experiments.sphere.draws`), from the studies' own first cloud of that kind and
their save times, run by :func:`~tpde.experiments.circle_pde.flow.follow` with every save
landed on (``dense=False``, the runs before this change) and with dense saves (the
default: dopri5's own steps, the saves interpolated), alternating which runs first, one
torch thread. Rows: the CPU seconds of each (``time.process_time``, the task's whole cost:
steps, saves' diagnostics), the dopri5 steps, the ratio landed/dense, and what the task
measures in both: the escape time (the save-interpolated crossing of A_l* or |ĉ_k*| = 0.1)
and the first plateau [count, start, duration], which should agree to the runs' tolerance.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np
import torch

from tpde.experiments.circle_pde import draws as circle
from tpde.experiments.circle_pde import flow
from tpde.experiments.circle_pde.config import Config as CircleConfig
from tpde.experiments.circle_pde.config import save_times
from tpde.experiments.circle_pde.metastable import crossing, meta_times
from tpde.experiments.circle_pde.run import plateau_row
from tpde.experiments.sphere import draws as sphere
from tpde.experiments.sphere.config import Config as SphereConfig
from tpde.experiments.sphere.metastable import meta_times as sphere_times
from tpde.experiments.sphere.metastable import summary


def timed(task, dense: bool):
    """(CPU seconds, result) of ``task()`` with follow's saves dense or landed."""
    defaults = flow.follow.__kwdefaults__
    before, defaults["dense"] = defaults["dense"], dense
    try:
        clock = time.process_time()
        value = task()
        return time.process_time() - clock, value
    finally:
        defaults["dense"] = before


def sphere_tasks(quick: bool) -> dict:
    config = SphereConfig()
    size = 10_000 if quick else 100_000
    index = config.escape_sizes.index(size)
    clouds = sphere.draw_clouds(
        replace(config, escape_sizes=config.escape_sizes[: index + 1],
                escape_draws=config.escape_draws[: index + 1])
    )  # fmt: skip
    escape_times, sweep_times = sphere.escape_saves(config), sphere_times(config)
    b = config.meta_betas.index(3.0 if quick else 10.0)
    if quick:
        config = replace(config, meta_size=1000)
        clouds = {**clouds, "sweep": sphere.draw_clouds(config)["sweep"]}

    def escape():
        r = sphere.escape_draw(config, clouds["escape"][index, 0], escape_times)
        t = crossing(escape_times, r["modes"][:, r["run"]["l_star"] - 1], config.escape_level)
        return r["run"]["steps"], t, r["run"]["first"]

    def sweep():
        beta = config.meta_betas[b]
        r = sphere.sweep_draw(config, beta, clouds["sweep"][b, 0], sweep_times)
        first = summary(config, beta, sweep_times, r["counts"][None], [r["run"]])["first"][0]
        return r["run"]["steps"], float("nan"), first

    return {f"S² escape, N = {size}": escape,
            f"S² sweep, β = {config.meta_betas[b]:g}, N = {config.meta_size}": sweep}  # fmt: skip


def circle_tasks(quick: bool) -> dict:
    config = CircleConfig()
    if quick:
        config = replace(config, meta_size=1000)
    size = 10_000 if quick else 100_000
    generators = [torch.Generator().manual_seed(config.seed + k) for k in range(3)]
    clouds = circle.draw_clouds(config, *generators)
    main = clouds["main"][0, config.sizes.index(size), 0]
    times = save_times(config)
    b = config.meta_betas.index(2.5 if quick else 8.0)

    def draw():
        r = circle.main_draw(config, config.beta, main, times, None, None)
        return r["info"]["steps"], float("nan"), plateau_row(times, r["counts"], 2.0)

    def sweep():
        beta, sweep_times = config.meta_betas[b], meta_times(config)
        r = circle.sweep_draw(config, beta, clouds["sweep"][b, 0], sweep_times)
        # the escape of the leading mode: max_k |ĉ_k| reaches escape_level
        leading = np.nan_to_num(r["modes"], nan=0.0).max(axis=1)  # NaN after the stop
        t = crossing(sweep_times, leading, config.escape_level)
        return r["info"]["steps"], t, plateau_row(sweep_times, r["counts"], 2.0)

    return {f"S¹ main draw, β = {config.beta:g}, N = {size}": draw,
            f"S¹ sweep, β = {config.meta_betas[b]:g}, N = {config.meta_size}": sweep}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    tasks = {**sphere_tasks(args.quick), **circle_tasks(args.quick)}
    total = {True: 0.0, False: 0.0}
    head = ["task", "landed CPU s", "dense CPU s", "landed/dense", "steps", "escape time",
            "first plateau"]  # fmt: skip
    print("| " + " | ".join(head) + " |\n|" + " --- |" * len(head))
    for i, (name, task) in enumerate(tasks.items()):
        order = (False, True) if i % 2 == 0 else (True, False)
        runs = {dense: timed(task, dense) for dense in order}
        (landed, a), (dense, b) = runs[False], runs[True]
        total[False] += landed
        total[True] += dense
        print(f"| {name} | {landed:.1f} | {dense:.1f} | ×{landed / dense:.2f} | {a[0]} → {b[0]} | "
              f"{a[1]:.6f} → {b[1]:.6f} | {a[2]} → {b[2]} |")  # fmt: skip
    print(f"\nall four: landed {total[False]:.1f} s, dense {total[True]:.1f} s "
          f"(×{total[False] / total[True]:.2f})")  # fmt: skip


if __name__ == "__main__":
    main()
