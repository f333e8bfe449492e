"""The ``sphere`` study's configuration: its name, title, sizes and their checks."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tpde.fields import SCHEMES, LayerNorm
from tpde.theory import SCHEMES_WITH_LAW

from .. import framework as fw
from ..common.pool import check_workers
from ..common.sphere_diagram import (
    check_diagram_size,
)
from .metastable import check_meta

NAME = "sphere"
ORDER = 8  # place in ``tpde run`` and in the report
#: The schemes of part (b), in the report's order (the quick run's summary lines name them):
#: every scheme with an equiangular law, then LayerNorm (its h → 0 limit is post-LN's).
SPHERE_SCHEMES = (*SCHEMES_WITH_LAW, LayerNorm.name)
TITLE = "normalised tokens: GLPR's phase diagram, LayerNorm schemes, blow-up"
F64 = torch.float64
DELTA = 1e-3  # GLPR: tokens i, j are clustered when ⟨x_i, x_j⟩ > 1 − δ = 0.999
BLOWUP_TRACE = 1e3


@dataclass(frozen=True)
class Config:
    systems: int = 2048  # per β (GLPR's batch)
    tokens: int = 32
    betas: int = 90
    beta_min: float = 0.1
    beta_max: float = 9.0
    t1: float = 30.0
    checkpoints: int = 200
    dims: tuple[int, ...] = (2, 3)
    steps_per_checkpoint: int = 1  # RK4 steps per checkpoint interval (30/199 ≈ 0.15)
    # (a') the d = 3 diagram at many tokens per cloud (harmonics engine), every
    # large_every-th β of the diagram, the density from large_pairs sampled pairs per cloud
    large_tokens: int = 4096
    large_systems: int = 4
    large_every: int = 6
    large_pairs: int = 20_000
    # (a'') the density against the tokens per cloud (d = 3, sizes.py): systems × N² ≈
    # size_budget (at least size_min_systems), the time to density size_level against ln N
    size_tokens: tuple[int, ...] = (32, 64, 128, 256, 512, 1024, 2048, 4096)
    size_betas: tuple[float, ...] = (1.0, 3.0, 6.0, 9.0)
    size_budget: int = 2**22
    size_min_systems: int = 8  # the crossing time varies by ~0.6 between systems
    size_level: float = 0.1
    size_exact_tokens: int = 1024  # above: the density from large_pairs sampled pairs
    cluster_seeds: int = 20
    cluster_beta: float = 1.0
    cluster_dim: int = 3
    cluster_t1: float = 60.0
    schemes: tuple[str, ...] = SPHERE_SCHEMES
    scheme_tokens: int = 64
    scheme_dim: int = 3
    scheme_beta: float = 1.0
    scheme_t1: float = 30.0
    scheme_saves: int = 121
    scheme_dt: float = 0.05
    ngpt_alpha: float = 1.0
    blowup_tokens: int = 256
    blowup_dim: int = 3
    blowup_beta: float = 1.0
    blowup_t1: float = 15.0
    movie_beta: float = 4.0
    movie_frames: int = 61
    # metastability on S² (metastable.py, issue 35): the β sweep, the escape runs, the counter
    meta_betas: tuple[float, ...] = (2.0, 2.5, 3.0, 5.0, 10.0)
    meta_size: int = 4000
    meta_seeds: int = 10
    meta_t1: float = 800.0
    meta_dense_until: float = 20.0
    meta_dense_step: float = 0.25
    meta_step: float = 5.0
    meta_count: int = 2  # the state whose lifetime is fitted against β
    meta_min_plateau: float = 2.0
    meta_cells: int = 4096
    meta_radius: float = 0.2
    meta_level: float = 2.0
    meta_min_share: float = 0.02
    escape_beta: float = 5.0
    # four sizes; the 10⁶ draw is most of the escape's cost (443 s CPU with dense saves at
    # load 5–7, 776 s landed at load 7–10: no before/after pair, MATH.md §9; one worker's
    # share of the part on 2 workers: draws.py)
    escape_sizes: tuple[int, ...] = (1000, 10000, 100000, 1000000)
    escape_draws: tuple[int, ...] = (4, 4, 2, 1)
    escape_t1: float = 20.0
    escape_level: float = 0.1
    seed: int = 0
    workers: int = 2  # processes for the metastability runs (draws.py); 1: all in this one

    def check(self) -> None:
        check_diagram_size(self.betas, self.systems, self.tokens)
        fw.check_choices("schemes", self.schemes, tuple(SCHEMES))
        if not self.dims or min(self.dims) < 2:
            raise ValueError(f"dims must be dimensions d >= 2 (tokens on S^(d-1)); received "
                             f"{self.dims}.")  # fmt: skip
        if min(self.checkpoints, self.scheme_saves, self.movie_frames) < 2:
            raise ValueError("checkpoints, scheme_saves and movie_frames must be >= 2.")
        if min(self.steps_per_checkpoint, self.cluster_seeds) < 1:
            raise ValueError("steps_per_checkpoint and cluster_seeds must be >= 1.")
        if min(self.large_systems, self.large_every, self.large_pairs) < 1 or (
            self.large_tokens < 2
        ):
            raise ValueError(
                "large_systems, large_every and large_pairs must be >= 1 and large_tokens >= 2; "
                f"received {self.large_systems}, {self.large_every}, {self.large_pairs}, "
                f"{self.large_tokens}."
            )
        self._check_sizes()
        check_meta(self)
        check_workers(self.workers)
        if self.cluster_dim < 3:
            raise ValueError(f"cluster_dim must be >= 3 (GLPR's one-cluster theorem is for "
                             f"d >= 3); received {self.cluster_dim}.")  # fmt: skip
        if (
            min(self.scheme_dim, self.blowup_dim) < 2
            or min(self.scheme_tokens, self.blowup_tokens) < 2
        ):
            raise ValueError("scheme_dim, blowup_dim, scheme_tokens and blowup_tokens must be "
                             ">= 2.")  # fmt: skip
        positive = ("t1", "cluster_t1", "scheme_t1", "scheme_dt", "ngpt_alpha", "blowup_t1",
                    "cluster_beta", "scheme_beta", "blowup_beta", "movie_beta")  # fmt: skip
        bad = [f"{k} = {getattr(self, k)}" for k in positive if not getattr(self, k) > 0]
        if bad:
            raise ValueError(f"these must be > 0: {', '.join(bad)}.")
        if not 0 <= self.beta_min <= self.beta_max:
            raise ValueError(f"need 0 <= beta_min <= beta_max; received {self.beta_min}, "
                             f"{self.beta_max}.")  # fmt: skip
        t_star = 1 / (2 * self.blowup_beta)  # Σ₀ = I: t* = 1/(2β λ_max(Σ₀))
        if self.blowup_t1 <= t_star:
            raise ValueError(
                f"blowup_t1 must exceed the blow-up time t* = 1/(2·blowup_beta) = {t_star:.3g} "
                f"of the R^d flow (part (c) compares the blow-up with clustering); received "
                f"blowup_t1 = {self.blowup_t1}."
            )
        if self.ngpt_alpha * self.scheme_dt > 1:
            raise ValueError(
                f"ngpt_alpha · scheme_dt must be <= 1 (nGPT's step x + αh(N(Γ) − x) moves "
                f"each token at most to N(Γ)); received {self.ngpt_alpha} · {self.scheme_dt} "
                f"= {self.ngpt_alpha * self.scheme_dt:.3g}."
            )

    def _check_sizes(self) -> None:
        tokens = self.size_tokens
        if tokens and (min(tokens) < 2 or list(tokens) != sorted(set(tokens))):
            raise ValueError(f"size_tokens must be increasing sizes >= 2 (or empty: no part "
                             f"(a'')); received {tokens}.")  # fmt: skip
        if tokens and (not self.size_betas or min(self.size_betas) <= 0):
            raise ValueError(f"size_betas must be values of beta > 0 (the instability rate "
                             f"divides by beta); received {self.size_betas}.")  # fmt: skip
        if self.size_budget < 1 or self.size_min_systems < 2:
            raise ValueError(
                f"size_budget must be >= 1 and size_min_systems >= 2 (a standard error needs "
                f"two systems); received {self.size_budget}, {self.size_min_systems}."
            )
        if not 0 < self.size_level < 1:
            raise ValueError(f"size_level is a cluster density, in (0, 1); received "
                             f"{self.size_level}.")  # fmt: skip

    def memory_bytes(self) -> int:
        """float64 arrays of the largest part: the phase diagram's betas · systems clouds
        (n² scores and ~6 RK4 copies of n × d each), the schemes' and the blow-up's saved
        clouds with their scores, the clustering seeds."""
        d = max(self.dims)
        diagram = self.betas * self.systems * self.tokens * (self.tokens + 6 * d)
        schemes = (
            len(self.schemes)
            * self.scheme_tokens
            * (self.scheme_tokens + self.scheme_saves * self.scheme_dim)
        )
        blowup = 3 * self.blowup_tokens * (self.blowup_tokens + 121 * self.blowup_dim)
        seeds = self.cluster_seeds * self.tokens * (self.tokens + 6 * self.cluster_dim)
        movie = self.tokens * (self.tokens + 2 * self.movie_frames)
        large_betas = -(-self.betas // self.large_every)
        large = large_betas * self.large_systems * self.large_tokens * 3 * 8 + 3 * self.large_pairs
        sizes = max(
            (len(self.size_betas) * max(self.size_min_systems, self.size_budget // n**2) * n
             * (n + 6 * 3) for n in self.size_tokens),
            default=0,
        )  # fmt: skip
        meta = max((*self.escape_sizes, self.meta_size)) * 3 * 28  # a chunk's clouds (metastable)
        return 8 * max(diagram, schemes, blowup, seeds, movie, large, sizes, meta)


QUICK = {
    "systems": "32",
    "betas": "12",
    "checkpoints": "60",
    "scheme_tokens": "32",
    "scheme_saves": "61",
    "scheme_dt": "0.2",
    "blowup_tokens": "128",
    "movie_frames": "16",
    "large_tokens": "512",
    "large_systems": "2",
    "large_pairs": "5000",
    "size_tokens": "32,64,128,256",
    "size_betas": "1,6",
    "size_budget": "65536",
    "size_min_systems": "4",
    "meta_betas": "3,5",
    "meta_size": "1000",
    "meta_seeds": "2",
    "meta_t1": "20.0",
    "meta_dense_until": "10.0",
    "meta_dense_step": "0.5",
    "escape_sizes": "1000,2000",
    "escape_draws": "2,1",
    "escape_t1": "7.0",
    "workers": "1",
}
