"""The metastability runs' tasks, landed saves against dense ones (issue 35: the cost).

    python tools/metastability_cost.py             # S² escape N = 10⁵, S² sweep β = 10,
                                                   # S¹ main draw N = 10⁵, S¹ sweep β = 8
    python tools/metastability_cost.py --quick     # the same tasks at N = 10⁴, 1000, 10⁴, 1000
    python tools/metastability_cost.py --accuracy  # the accuracy numbers of flow.follow's
                                                   # docstring and MATH.md §9 (--quick: smaller)

One task of each kind of the two studies' metastability runs (the circle-pde study's
:mod:`~tpde.experiments.circle_pde.draws`, the sphere study's
:mod:`~tpde.experiments.sphere.draws`), from the studies' own first cloud of that kind and
their save times, run by the studies' draw functions with every save landed on
(``dense=False``, passed through to :func:`~tpde.experiments.circle_pde.flow.follow`, the
runs before issue 35) and with dense saves (the default: dopri5's own steps, the saves
interpolated), alternating which runs first, one torch thread. Rows: the CPU seconds of
each (``time.process_time``: steps and the saves' diagnostics as the study computes them,
except the S¹ main draw's W1 to the PDE and its gap, which need the PDE's run: its row
covers the flow and the cluster counts only, so its ratio overstates the study's), the
dopri5 steps, the ratio landed/dense, and what the task measures in both: the escape time
(the save-interpolated crossing of A_l* or |ĉ_k*| = 0.1, k* or l* the study's leading mode)
and the first plateau [count, start, duration], which should agree to the runs' tolerance.

A developer's tool, not a benchmark: it times the studies' own tasks through their modules
(draws, flow, metastable), which ``benchmarks/`` may not import (a benchmark reaches a study
through its package and ``experiments/common`` only: tests/test_package_boundaries.py).

``--accuracy``: saves every 0.25 to t = 8 from the studies' first clouds (S¹ β = 5, N =
10⁵, the circle-pde main draw's; S² β = 5, N = 10⁴, the sphere escape's), dense, landed
and at rtol 1e-9, atol 1e-12: the dopri5 steps and the largest distance of a token to the
rtol 1e-9 run at any save; then the S² escape draw of N = 10⁵ (its whole run, to t = 20)
dense and landed: the escape time's shift and whether the cluster counts agree at every
save (--quick: N = 10⁴, 1000 and 10⁴).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from types import SimpleNamespace

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
from tpde.experiments.sphere.metastable import TOLERANCES, post_ln, summary
from tpde.experiments.sphere.metastable import meta_times as sphere_times
from tpde.measures import Empirical
from tpde.theory import dominant_mode


def timed(task, dense: bool):
    """(CPU seconds, result) of ``task(dense)``."""
    clock = time.process_time()
    value = task(dense)
    return time.process_time() - clock, value


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

    def escape(dense):
        r = sphere.escape_draw(config, clouds["escape"][index, 0], escape_times, dense=dense)
        t = crossing(escape_times, r["modes"][:, r["run"]["l_star"] - 1], config.escape_level)
        return r["run"]["steps"], t, r["run"]["first"]

    def sweep(dense):
        beta = config.meta_betas[b]
        r = sphere.sweep_draw(config, beta, clouds["sweep"][b, 0], sweep_times, dense=dense)
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

    def draw(dense):  # no reference, no gap: the flow and the counts (module notes)
        r = circle.main_draw(config, config.beta, main, times, None, None, dense=dense)
        return r["info"]["steps"], float("nan"), plateau_row(times, r["counts"], 2.0)

    def sweep(dense):
        beta, sweep_times = config.meta_betas[b], meta_times(config)
        r = circle.sweep_draw(config, beta, clouds["sweep"][b, 0], sweep_times, dense=dense)
        # the study's escape: |ĉ_k*| reaches escape_level (circle_pde/metastable.py)
        k = dominant_mode(beta)
        leading = np.nan_to_num(r["modes"][:, k - 1], nan=0.0)  # NaN after the stop
        t = crossing(sweep_times, leading, config.escape_level)
        return r["info"]["steps"], t, plateau_row(sweep_times, r["counts"], 2.0)

    return {f"S¹ main draw, β = {config.beta:g}, N = {size}": draw,
            f"S¹ sweep, β = {config.meta_betas[b]:g}, N = {config.meta_size}": sweep}  # fmt: skip


def saved_run(tolerances, field, points, times, dense: bool):
    """(steps, saved points (T, N, d)) of :func:`~tpde.experiments.circle_pde.flow.follow`."""
    states = {}

    def visit(j, mu):
        states[j] = mu.points.clone()

    info = flow.follow(tolerances, field, Empirical(points), times, visit, dense=dense)
    return info["steps"], torch.stack([states[j] for j in sorted(states)])


def accuracy(quick: bool) -> None:
    """The accuracy of dense saves (module notes): steps and token errors, S¹ and S²; the
    S² escape draw's escape time and counts."""
    times = np.arange(0.0, 8.0 + 1e-9, 0.25)
    fine = SimpleNamespace(rtol=1e-9, atol=1e-12)
    circle_config, sphere_config = CircleConfig(), SphereConfig()
    n1, n2 = (10_000, 1000) if quick else (100_000, 10_000)
    generators = [torch.Generator().manual_seed(circle_config.seed + k) for k in range(3)]
    main = circle.draw_clouds(circle_config, *generators)["main"]
    s1 = main[0, circle_config.sizes.index(n1), 0]
    clouds = sphere.draw_clouds(sphere_config)["escape"]
    s2 = clouds[sphere_config.escape_sizes.index(n2), 0]
    beta1, beta2 = circle_config.beta, sphere_config.escape_beta
    runs = {
        f"S¹, β = {beta1:g}, N = {n1}": (circle_config, flow.post_ln_field(beta1), s1),
        f"S², β = {beta2:g}, N = {n2}": (TOLERANCES, post_ln(beta2), s2),
    }
    head = ["run", "steps landed → dense", "token error landed", "token error dense"]
    print("| " + " | ".join(head) + " |\n|" + " --- |" * len(head))
    for name, (tolerances, field, points) in runs.items():
        _, exact = saved_run(fine, field, points, times, False)
        (a, landed), (b, dense) = (
            saved_run(tolerances, field, points, times, d) for d in (False, True)
        )
        errors = [float((run - exact).norm(dim=-1).max()) for run in (landed, dense)]
        print(f"| {name} | {a} → {b} | {errors[0]:.2g} | {errors[1]:.2g} |")
    n3 = 10_000 if quick else 100_000
    config = sphere_config
    points = clouds[config.escape_sizes.index(n3), 0]
    escape_times = sphere.escape_saves(config)
    result = {}
    for dense in (False, True):
        r = sphere.escape_draw(config, points, escape_times, dense=dense)
        modes = r["modes"][:, r["run"]["l_star"] - 1]
        result[dense] = (crossing(escape_times, modes, config.escape_level), r["counts"])
    (t_landed, c_landed), (t_dense, c_dense) = result[False], result[True]
    print(f"\nS² escape draw, N = {n3}: escape time {t_landed:.6f} landed, {t_dense:.6f} dense "
          f"(moved {t_dense - t_landed:.2g}); counts equal at every save: "
          f"{bool(np.array_equal(c_landed, c_dense))}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--accuracy", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.accuracy:
        accuracy(args.quick)
        return
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
