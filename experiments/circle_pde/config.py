"""The circle-pde study's configuration, initial density and save times."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from tpde.measures import CircleDensity
from tpde.theory import dominant_mode

from ..common import circle_clusters as cc
from ..common.pool import check_workers

NAME = "circle-pde"
ORDER = 11  # place in ``tpde run`` and in the report
TITLE = "the circle PDE against particles: distance, rate in N, metastable plateaus"

#: N at and above which ``large_seeds`` clouds are drawn per β, and one from ONE_DRAW on
#: (one 10⁶ run costs as much as all the smaller ones).
LARGE, ONE_DRAW = 100_000, 1_000_000


@dataclass(frozen=True)
class Config:
    beta: float = 5.0  # the PDE, W1 and the plateaus at every size
    more_betas: tuple[float, ...] = (10.0,)  # the plateaus again, sizes below the largest
    grids: tuple[int, ...] = (1024, 4096, 16384)  # angles of the PDE's density, one run each
    amplitude: float = 2e-4  # of the modes 1 and k* in ρ₀ = (1 + a cos θ + a cos k*θ)/2π
    sizes: tuple[int, ...] = (1_000, 10_000, 100_000, 1_000_000)
    seeds: int = 4  # draws per N below LARGE …
    large_seeds: int = 2  # … from LARGE to ONE_DRAW (one at and above)
    t1: float = 300.0  # the particles' horizon
    dense_until: float = 20.0  # saves every dense_step up to here (the PDE's horizon) …
    dense_step: float = 0.25
    sparse_step: float = 10.0  # … then every sparse_step up to t1
    rtol: float = 1e-6  # dopri5 for the particles
    atol: float = 1e-8
    bins: int = 256  # of the particles' histogram
    cells: int = cc.CELLS  # of the cluster counter (common/circle_clusters.py)
    window: int = cc.WINDOW  # cells of its moving average (odd)
    level: float = cc.LEVEL  # in units of the uniform density
    min_share: float = cc.MIN_SHARE
    min_plateau: float = 2.0
    escape_level: float = 0.1  # |ĉ_k*| that ends the escape from uniform (metastable.py)
    escape_seeds: int = 3  # draws per N at least for the escape (extra ones stop after it)
    meta_betas: tuple[float, ...] = (2.0, 2.5, 3.0, 5.0, 8.0)  # the β sweep (metastable.py) …
    meta_size: int = 2000  # … its N …
    meta_seeds: int = 10  # … draws per β …
    meta_t1: float = 800.0  # … horizon …
    meta_step: float = 5.0  # … and saves after dense_until
    meta_count: int = 2  # the state whose lifetime is fitted against β (the last before one)
    long_t1: float = 50.0  # the PDE past its clusters (gap.py) to here (or t1) against N max …
    long_grid: int = 8192  # … on grids refined up to here, then along the characteristics …
    long_quadrature: float = 1e-6  # … while their check's gap stays below this
    seed: int = 0
    workers: int = 2  # processes for the independent runs (draws.py); 1: all in this one

    def check(self) -> None:
        betas = (self.beta, *self.more_betas)
        if min(betas) <= 0 or max(betas) > 1e12:
            raise ValueError(
                f"beta and more_betas must be > 0 and beta <= 1e12 (the range of "
                f"tpde.theory.dominant_mode); received beta = {self.beta}, more_betas = "
                f"{self.more_betas}."
            )
        if min(self.dense_step, self.sparse_step, self.rtol, self.atol) <= 0 or self.t1 <= 0:
            raise ValueError("t1, dense_step, sparse_step, rtol and atol must be > 0.")
        if not 0 < self.dense_until <= self.t1:
            raise ValueError(
                f"dense_until must lie in (0, t1]; received {self.dense_until} with t1 = {self.t1}."
            )
        small = not self.sizes or min(self.sizes) < 2 or min(self.seeds, self.large_seeds) < 1
        if small or not self.grids or min(self.grids) < 8:
            raise ValueError("sizes >= 2, seeds and large_seeds >= 1, grids >= 8 (one at least).")
        if len(set(self.sizes)) < 2:
            raise ValueError(
                f"sizes must hold two different N at least: the rate is the slope of log W1 "
                f"against log N; received {self.sizes}."
            )
        if not 0 <= self.amplitude <= 0.5 or self.bins < 1:
            raise ValueError(
                f"amplitude must be <= 1/2 (ρ₀ = (1 + a cos θ + a cos k*θ)/2π stays >= 0) and "
                f">= 0, bins >= 1; received amplitude = {self.amplitude}, bins = {self.bins}."
            )
        self.check_counter()
        self.check_meta()
        check_workers(self.workers)
        if self.long_t1 <= 0 or self.long_grid < min(self.grids) or self.long_quadrature <= 0:
            raise ValueError(
                f"long_t1 > 0 (the gap runs to min(long_t1, t1)), long_grid >= min(grids) = "
                f"{min(self.grids)} (the grid the PDE starts on) and long_quadrature > 0; "
                f"received long_t1 = {self.long_t1}, long_grid = {self.long_grid}, "
                f"long_quadrature = {self.long_quadrature}."
            )

    def check_meta(self) -> None:
        if not 0 < self.escape_level < 1 or self.escape_seeds < 1:
            raise ValueError(
                f"escape_level must lie in (0, 1) (|ĉ_k| <= 1) and escape_seeds >= 1; received "
                f"escape_level = {self.escape_level}, escape_seeds = {self.escape_seeds}."
            )
        if self.meta_betas and (min(self.meta_betas) <= 0 or max(self.meta_betas) > 1e12):
            raise ValueError(f"meta_betas must lie in (0, 1e12]; received {self.meta_betas}.")
        small = self.meta_size < 2 or self.meta_seeds < 1 or self.meta_count < 2
        if small or self.meta_step <= 0:
            raise ValueError(
                f"meta_size >= 2, meta_seeds >= 1, meta_count >= 2 and meta_step > 0; received "
                f"meta_size = {self.meta_size}, meta_seeds = {self.meta_seeds}, meta_count = "
                f"{self.meta_count}, meta_step = {self.meta_step}."
            )
        if self.meta_t1 < self.dense_until:
            raise ValueError(
                f"meta_t1 must be >= dense_until = {self.dense_until} (the sweep saves densely "
                f"to there); received {self.meta_t1}."
            )

    def check_counter(self) -> None:
        if self.cells > min(self.grids) or self.cells < 1:
            raise ValueError(
                f"cells must lie in [1, min(grids)] (the PDE's density is counted on them as "
                f"far as its grid resolves it); received cells = {self.cells}, grids = "
                f"{self.grids}."
            )
        if self.window % 2 == 0 or not 1 <= self.window <= self.cells:
            raise ValueError(
                f"window must be an odd number of cells in [1, cells = {self.cells}] (the "
                f"average is centred on each cell); received {self.window}."
            )
        if self.level <= 1 or not 0 <= self.min_share <= 1 or self.min_plateau < 0:
            raise ValueError(
                f"level must be > 1 (times the uniform density: the uniform law has no "
                f"cluster), min_share in [0, 1] and min_plateau >= 0; received level = "
                f"{self.level}, min_share = {self.min_share}, min_plateau = {self.min_plateau}."
            )

    def memory_bytes(self) -> int:
        chunk = CHUNK + 12  # saved clouds held at once (run.py) and the steps' stages
        return 8 * (max(self.sizes) * 2 * chunk + max(self.grids) * len(save_times(self)))


#: Saves per particle integrate call (run.py): the clouds of one call are held at once.
CHUNK = 16

QUICK = {
    "more_betas": "",
    "grids": "1024",
    "sizes": "1000,10000",
    "seeds": "2",
    "t1": "40.0",
    "dense_until": "16.0",
    "dense_step": "0.5",
    "sparse_step": "4.0",
    "escape_seeds": "6",
    "meta_betas": "2,2.5",
    "meta_size": "1000",
    "meta_seeds": "4",
    "meta_t1": "300.0",
    "long_t1": "20.0",
    "long_grid": "2048",
    "long_quadrature": "1e-4",
    "workers": "1",
}


def draws(config: Config, n: int) -> int:
    """Clouds drawn at N = n: ``seeds`` below :data:`LARGE`, ``large_seeds`` below
    :data:`ONE_DRAW`, one from there on."""
    return 1 if n >= ONE_DRAW else (config.large_seeds if n >= LARGE else config.seeds)


def save_times(config: Config) -> np.ndarray:
    """Every dense_step up to dense_until, then every sparse_step up to t1 (both ends in)."""
    dense = np.linspace(0, config.dense_until, round(config.dense_until / config.dense_step) + 1)
    span = config.t1 - config.dense_until
    sparse = np.linspace(
        config.dense_until, config.t1, max(1, round(span / config.sparse_step)) + 1
    )
    return np.concatenate([dense, sparse[1:]]) if span > 0 else dense


def initial_density(config: Config, beta: float, grid: int) -> CircleDensity:
    """ρ₀ ∝ 1 + a cos θ + a cos k*θ on ``grid`` angles (k* = dominant_mode(beta))."""
    k = dominant_mode(beta)
    theta = torch.arange(grid, dtype=torch.float64) * 2 * math.pi / grid
    a = config.amplitude
    return CircleDensity(1 + a * torch.cos(theta) + a * torch.cos(k * theta))
