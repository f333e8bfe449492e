"""The ``real-attention`` study's configuration: its name, title, sizes and their checks."""

from __future__ import annotations

from dataclasses import dataclass

import torch

NAME = "real-attention"
ORDER = 7  # place in ``tpde run`` and in the report
TITLE = "real attention: all-MiniLM-L6-v2 token clouds vs the Gaussian picture"
F64 = torch.float64
LAYERS = 6
ROUTES = ("real", "pde")


#: The most RK4 steps of one particle flow (integrate's default max_steps).
MAX_STEPS = 100_000


@dataclass(frozen=True)
class Config:
    sentences: int = 48  # the first sentences of the bundled corpus
    particle_dt: float = 0.05  # RK4 step of the attention-only PDE (20 steps per layer)
    ode_rtol: float = 1e-4  # Dormand–Prince tolerance of the moment ODE (blow-up time to 1e-6)
    blowup_trace: float = 1e4  # the ODE stops when tr Σ passes this (tr Σ₀ ≈ 85)
    closure_saves: int = 21  # per layer, for the closure error along depth
    gaussian_samples: int = 256  # Gaussian sample against which a cloud's W2 is taken
    floor_draws: int = 4  # Gaussian clouds of the same n for the ratio's denominator
    sample_sizes: tuple[int, ...] = (250, 1000)  # Gaussian-sampled clouds of sentence 0
    sample_t1: float = 0.5  # … followed over [0, sample_t1] of layer 0
    sphere_scale: float = 1.0  # sphere model: R_l = sphere_scale · |γ|₂ of layer l's input LN
    sphere_dt: float = 0.1  # its RK4 step: tokens within 3.3e-4 of dt = 0.025 (sentence 0)
    seed: int = 0

    def check(self) -> None:
        if not 1 <= self.sentences <= 238:
            raise ValueError(f"sentences must be in 1 … 238 (the corpus); got {self.sentences}.")
        if self.particle_dt <= 0 or self.particle_dt > 1 or self.ode_rtol <= 0:
            raise ValueError("particle_dt must be in (0, 1] and ode_rtol > 0.")
        if 6.0 / self.particle_dt > MAX_STEPS:
            raise ValueError(
                f"particle_dt must be >= {6.0 / MAX_STEPS:g}: the particle flow through the 6 "
                f"layers takes 6 / particle_dt RK4 steps, at most {MAX_STEPS} (integrate's "
                f"max_steps); received {self.particle_dt}."
            )
        if self.blowup_trace <= 0 or self.closure_saves < 2:
            raise ValueError("blowup_trace must be > 0 and closure_saves >= 2.")
        if self.gaussian_samples < 2 or self.floor_draws < 1:
            raise ValueError("gaussian_samples must be >= 2 and floor_draws >= 1.")
        if not self.sample_sizes or min(self.sample_sizes) < 2 or not 0 < self.sample_t1 <= 1:
            raise ValueError(
                "sample_sizes must be >= 2 (at least one size) and sample_t1 in (0, 1]."
            )
        if not 0 < self.sphere_scale < float("inf") or not 0 < self.sphere_dt <= 1:
            raise ValueError("sphere_scale must be finite and > 0, sphere_dt in (0, 1].")

    def memory_bytes(self) -> int:
        """float64 clouds of the largest sample (n² scores, ~6 at once) and the saved token
        states of every sentence (≤ 128 tokens × 384 coordinates × closure_saves × 6)."""
        n = max(self.sample_sizes)
        saved = self.sentences * 128 * 384 * self.closure_saves * 6
        return 8 * (6 * n * n + saved)


QUICK = {
    "sentences": "12",
    "closure_saves": "11",
    "gaussian_samples": "128",
    "floor_draws": "3",
    "sample_sizes": "100,400",
}
