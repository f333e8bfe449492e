"""The circle PDE (a density on M angles) against particles on the spectral engine.

    python benchmarks/circle_pde.py            # M = 1024, 4096, 16384; N = 10⁴, 10⁵, 10⁶
    python benchmarks/circle_pde.py --quick    # M = 1024; N = 10⁴

One right-hand side of :class:`tpde.flows.CircleSystem` (SA, β = 5, a smooth density)
against one particle velocity evaluation of the same post-LN field at N tokens on the
spectral engine (float64): seconds (median of 5 after a warm-up) and ×PDE, the particles'
time over the PDE's, in one run. Then the circle-pde study's cluster count of the N tokens
(cell masses and window runs, :mod:`tpde.experiments.common.circle_clusters`) as a fraction
of that velocity evaluation: the study counts every saved cloud.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch

from tpde.experiments.common import circle_clusters as cc
from tpde.fields import Normalized, Softmax
from tpde.flows import CircleSystem
from tpde.measures import CircleDensity, uniform_on_sphere


def seconds(function, repeats: int = 5) -> float:
    function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    eye = torch.eye(2, dtype=torch.float64)
    field = Normalized(Softmax(eye, eye, eye, scale=5.0), "post-ln")
    grids = (1024,) if args.quick else (1024, 4096, 16384)
    sizes = (10_000,) if args.quick else (10_000, 100_000, 1_000_000)
    pde = {}
    for M in grids:
        theta = torch.arange(M, dtype=torch.float64) * 2 * math.pi / M
        system = CircleSystem(field, CircleDensity(torch.exp(0.5 * torch.cos(theta))))
        state = system.initial()
        pde[M] = seconds(lambda system=system, state=state: system.rhs(0.0, state))
        print(f"PDE rhs, M = {M}: {pde[M] * 1e3:.3f} ms")
    for n in sizes:
        mu = uniform_on_sphere(n, 2, generator=torch.Generator().manual_seed(0))
        t = seconds(lambda mu=mu: field.particle_velocity(0.0, mu, mu.points, "spectral"), 3)
        ratios = ", ".join(f"×{t / pde[M]:.0f} over M = {M}" for M in grids)
        print(f"particles (spectral), N = {n}: {t:.4f} s ({ratios})")
        c = seconds(lambda mu=mu: count_clusters(mu.points))
        print(f"cluster count, N = {n}: {c:.4f} s (×{c / t:.3f} of one velocity evaluation)")


def count_clusters(points: torch.Tensor) -> list[float]:
    """The circle-pde study's default cluster count of one cloud (common/circle_clusters)."""
    masses = cc.points_masses(points, cc.CELLS)
    return cc.cluster_masses(masses, cc.WINDOW, cc.LEVEL, cc.MIN_SHARE)


if __name__ == "__main__":
    main()
