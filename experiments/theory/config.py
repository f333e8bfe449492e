"""The theory study's configuration: sizes, seeds, tolerances and their bounds."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tpde.fields import KERNELS

from .. import framework as fw

NAME = "theory"
ORDER = 9  # place in ``tpde run`` and in the report
TITLE = "mean-field theory as executed checks"


@dataclass(frozen=True)
class Config:
    kernels: tuple[str, ...] = tuple(KERNELS)
    eq_ns: tuple[int, ...] = (3, 8, 32)
    eq_beta: float = 2.0
    eq_t1: float = 5.0
    eq_saves: int = 11
    eq_rtol: float = 1e-12
    ngpt_alpha: float = 0.7
    ln_dt: float = 0.01
    inst_kernels: tuple[str, ...] = tuple(KERNELS)
    inst_betas: tuple[float, ...] = (1.0, 5.0, 10.0)
    inst_tokens: int = 1_000_000
    inst_seeds: int = 4
    inst_modes: int = 6
    inst_level: float = 0.01
    inst_saves: int = 21
    inst_steps: int = 20
    lat_tokens: int = 256
    lat_modes: int = 12
    lat_beta_max: int = 20
    lat_delta: float = 1e-6
    s2_tokens: int = 100_000
    s2_seeds: int = 4
    s2_modes: int = 6
    s2_level: float = 0.01
    s2_steps: int = 12
    s2_lat_degree: int = 47
    s2_lat_modes: int = 8
    s2_lat_delta: float = 1e-5
    s2_lat_steps: int = 40
    causal_dims: tuple[int, ...] = (2, 3, 8)
    causal_tokens: int = 32
    causal_seeds: int = 20
    causal_t1: float = 1000.0
    causal_tol: float = 1e-7
    renyi_beta: float = 64.0
    renyi_tokens: int = 200
    renyi_seeds: int = 20
    renyi_delta: float = 4.0
    renyi_times: tuple[float, ...] = (5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
    hard_seeds: int = 40
    hard_vertices: int = 5
    hard_interior: int = 30
    hard_betas: tuple[float, ...] = (10.0, 30.0, 100.0, 300.0)
    hard_t1: float = 8.0
    sync_ns: tuple[int, ...] = (4, 8, 16, 32, 64)
    sync_betas: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
    sync_seeds: int = 100
    sync_t1: float = 1000.0
    seed: int = 0

    def check(self) -> None:
        """Every key in its range before any work: types, signs, the float64 limits of the
        formulas (USA weights e^β overflow past β ≈ 709), the tolerances dopri5 can meet,
        step counts (bounded at 10⁶) and sizes (with :meth:`memory_bytes`)."""
        fw.check_choices("kernels", self.kernels, tuple(KERNELS))
        fw.check_choices("inst_kernels", self.inst_kernels, tuple(KERNELS))
        if not self.eq_ns or min(self.eq_ns) < 2:
            raise ValueError(f"eq_ns are token counts >= 2; received {self.eq_ns}.")
        positive = ("eq_t1", "eq_rtol", "ngpt_alpha", "ln_dt", "inst_level", "lat_delta",
                    "causal_t1", "causal_tol", "renyi_beta", "renyi_delta", "hard_t1",
                    "sync_t1")  # fmt: skip
        bad = [f"{k} = {getattr(self, k)}" for k in positive if not getattr(self, k) > 0]
        betas = (*self.inst_betas, *self.hard_betas, *self.sync_betas)
        if bad or not betas or min(betas) <= 0:
            raise ValueError(f"these must be > 0: {', '.join(bad) or 'every β'}.")
        counts = ("eq_saves", "inst_tokens", "inst_saves", "inst_steps", "lat_tokens",
                  "causal_tokens", "renyi_tokens", "hard_vertices")  # fmt: skip
        small = [f"{k} = {getattr(self, k)}" for k in counts if getattr(self, k) < 3]
        if small:
            raise ValueError(f"these must be >= 3: {', '.join(small)}.")
        ones = ("inst_seeds", "inst_modes", "lat_modes", "lat_beta_max", "causal_seeds",
                "renyi_seeds", "hard_seeds", "hard_interior", "sync_seeds")  # fmt: skip
        zero = [f"{k} = {getattr(self, k)}" for k in ones if getattr(self, k) < 1]
        if zero:
            raise ValueError(f"these must be >= 1: {', '.join(zero)}.")
        if self.inst_seeds < 2:
            raise ValueError(
                f"inst_seeds must be >= 2: the measured rates carry jackknife errors over the "
                f"seeds (leave one out), which need two seeds at least; received "
                f"{self.inst_seeds}."
            )
        if 2 * self.lat_modes >= self.lat_tokens:
            raise ValueError(f"lat_modes must be below lat_tokens/2 (aliasing); received "
                             f"{self.lat_modes} modes on {self.lat_tokens} tokens.")  # fmt: skip
        if 2 * self.inst_modes >= self.inst_tokens:
            raise ValueError(f"inst_modes must be below inst_tokens/2 (aliasing); received "
                             f"{self.inst_modes} modes on {self.inst_tokens} tokens.")  # fmt: skip
        if not self.causal_dims or min(self.causal_dims) < 2 or not self.sync_ns:
            raise ValueError("causal_dims need d >= 2 and sync_ns at least one n.")
        if not self.renyi_times or min(self.renyi_times) <= 0:
            raise ValueError(f"renyi_times must be times > 0; received {self.renyi_times}.")
        self._check_ranges()
        self._check_sphere()

    def _check_sphere(self) -> None:
        """Part 2 on S² (:mod:`.sphere`): sizes, the fit window and the lattice's degree."""
        small = [f"{k} = {getattr(self, k)}" for k in ("s2_tokens", "s2_steps", "s2_lat_steps")
                 if getattr(self, k) < 3]  # fmt: skip
        if small or self.s2_modes < 1 or self.s2_lat_modes < 0:
            raise ValueError(
                f"s2_tokens, s2_steps, s2_lat_steps must be >= 3, s2_modes >= 1 and "
                f"s2_lat_modes >= 0 (0: no lattice run); received {', '.join(small) or ''}"
                f"{'' if not small else ', '}s2_modes = {self.s2_modes}, s2_lat_modes = "
                f"{self.s2_lat_modes}."
            )
        if self.s2_seeds < 2:
            raise ValueError(f"s2_seeds must be >= 2 (jackknife errors over the seeds); "
                             f"received {self.s2_seeds}.")  # fmt: skip
        if not 0 < self.s2_level <= 1 or self.s2_level * self.s2_tokens < 2:
            raise ValueError(
                f"s2_level must lie in [2/s2_tokens, 1] (the fit window starts at E_k = 1/N "
                f"and E_k <= 1); received s2_level = {self.s2_level} with s2_tokens = "
                f"{self.s2_tokens}."
            )
        if not 1e-12 <= self.s2_lat_delta <= 1e-2:
            raise ValueError(f"s2_lat_delta must lie in [1e-12, 0.01] (a linear amplitude "
                             f"float64 resolves); received {self.s2_lat_delta}.")  # fmt: skip
        if self.s2_lat_modes and self.s2_lat_degree < 2 * self.s2_lat_modes + 1:
            raise ValueError(
                f"s2_lat_degree must be at least 2·s2_lat_modes + 1 = "
                f"{2 * self.s2_lat_modes + 1} (the grid integrates the moments of a degree-k "
                f"perturbation exactly); received {self.s2_lat_degree}."
            )
        if max(self.s2_steps, self.s2_lat_steps, self.s2_lat_degree) > MAX_STEPS:
            raise ValueError(f"s2_steps, s2_lat_steps and s2_lat_degree must be at most "
                             f"{MAX_STEPS:.0e}.")  # fmt: skip

    def _check_ranges(self) -> None:
        """The ranges beyond the signs (the module notes' float64 and step limits)."""
        for name in ("inst_betas", "hard_betas", "sync_betas"):
            if not getattr(self, name):
                raise ValueError(f"{name} must hold at least one β > 0; received none.")
        if min(self.sync_ns) < 2:
            raise ValueError(f"sync_ns are token counts >= 2; received {self.sync_ns}.")
        if list(self.renyi_times) != sorted(set(self.renyi_times)):
            raise ValueError(
                f"renyi_times must be increasing (the saved times of one run); received "
                f"{self.renyi_times}."
            )
        usa = ("eq_beta" if "usa" in self.kernels else None,
               "inst_betas" if "usa" in self.inst_kernels else None,
               "lat_beta_max" if "usa" in self.inst_kernels else None, "sync_betas")  # fmt: skip
        for name in filter(None, usa):
            value = getattr(self, name)
            largest = max(map(abs, value)) if isinstance(value, tuple) else abs(value)
            if largest > MAX_USA_BETA:
                raise ValueError(
                    f"{name} must be at most {MAX_USA_BETA:g} in size where the USA kernel is "
                    f"used: its weights e^beta overflow float64 past beta ≈ 709; received "
                    f"{value}. Use the SA kernel only (kernels=sa, inst_kernels=sa) for "
                    "larger beta (sync_betas are USA runs)."
                )
        if self.inst_level * self.inst_tokens < 2:
            raise ValueError(
                f"inst_level must be at least 2/inst_tokens: the fit window holds the times "
                f"where a mode's mean power is below it, and it starts at 1/N; received "
                f"inst_level = {self.inst_level} with inst_tokens = {self.inst_tokens}."
            )
        if max(self.renyi_beta, *self.hard_betas) > MAX_SOFTMAX_BETA:
            raise ValueError(
                f"renyi_beta and hard_betas must be at most {MAX_SOFTMAX_BETA:g} (dopri5 on a "
                f"softmax that is a hardmax to rounding past that); received renyi_beta = "
                f"{self.renyi_beta}, hard_betas = {self.hard_betas}."
            )
        ranges = {  # key: (low, high, why)
            "eq_rtol": (1e-14, 1e-2, "dopri5 cannot meet a tolerance below 1e-14"),
            "ngpt_alpha": (0, 10, "nGPT's step α is a learning rate of order 1"),
            "ln_dt": (0, self.eq_t1 / 2, "two LayerNorm steps h, h/2 inside eq_t1"),
            "inst_level": (0, 1, "a mode's mean power |m_k|² is at most 1"),
            "lat_delta": (1e-12, 1e-2, "a linear amplitude float64 resolves"),
            "causal_tol": (1e-14, 2, "a diameter on the unit sphere, resolvable in float64"),
        }
        for key, (low, high, why) in ranges.items():
            value = getattr(self, key)
            if not low < value <= high if low == 0 else not low <= value <= high:
                bracket = "(" if low == 0 else "["
                raise ValueError(f"{key} must lie in {bracket}{low:g}, {high:g}] ({why}); "
                                 f"received {value}.")  # fmt: skip
        steps = {
            "eq_t1 / ln_dt": self.eq_t1 / self.ln_dt,
            "inst_steps": self.inst_steps,
            "hard_t1 / 0.05": self.hard_t1 / 0.05,
            "lat_beta_max": self.lat_beta_max,
        }
        over = [f"{k} = {v:.3g}" for k, v in steps.items() if v > MAX_STEPS]
        if over:
            raise ValueError(
                f"these step counts must be at most {MAX_STEPS:.0e} (fixed-step RK4 runs, one "
                f"run per integer beta): {', '.join(over)}."
            )
        sizes = (*self.eq_ns, *self.sync_ns, *self.causal_dims, self.hard_vertices)
        if max(sizes) > MAX_SIZE:
            raise ValueError(
                f"eq_ns, sync_ns, causal_dims and hard_vertices must be at most {MAX_SIZE} "
                f"(dense n × n attention per step); received up to {max(sizes)}."
            )

    def memory_bytes(self) -> int:
        """float64 arrays of the largest part: the instability clouds (inst_seeds ×
        inst_tokens tokens, chunked scores of ≤ 2²³ entries, ~6 RK4 copies, inst_saves
        saved), the Rényi clouds (renyi_seeds × renyi_tokens², ~6 copies), the
        synchronisation runs (sync_seeds × max(sync_ns)², ~6 copies), the equiangular
        frames (max(eq_ns)² per copy, eq_saves saved), the lattices (lat_beta_max ×
        lat_modes elements of lat_tokens², ~6 copies), the causal and hardmax batches."""
        d = max(3, *self.causal_dims)
        inst = 6 * min(self.inst_tokens**2, 2**23) + self.inst_seeds * self.inst_tokens * d * (
            6 + self.inst_saves
        )
        renyi = 6 * self.renyi_seeds * self.renyi_tokens**2
        sync = 6 * self.sync_seeds * max(self.sync_ns) ** 2 * len(self.sync_betas)
        n = max(self.eq_ns)
        equiangular = (n + 1) ** 2 * (12 + self.eq_saves)
        lattice = 6 * self.lat_beta_max * self.lat_modes * self.lat_tokens * (self.lat_tokens + 2)
        causal = 6 * self.causal_seeds * self.causal_tokens * (d + self.causal_tokens)
        hard = (
            6
            * self.hard_seeds
            * (self.hard_vertices + self.hard_interior) ** 2
            * max(1, len(self.hard_betas))
        )
        sphere = self.s2_seeds * self.s2_tokens * 3 * (8 + self.s2_steps)
        grid = (self.s2_lat_degree + 2) ** 2 // 2  # tokens of the zonal grid
        lat = 6 * len(self.inst_betas) * 2 * self.s2_lat_modes * grid * 3 + 2**23
        inst = max(inst, sphere, lat)
        return 8 * max(inst, renyi, sync, equiangular, lattice, causal, hard)


#: The largest |β| of a run with the USA kernel (e^β overflows float64 past ≈ 709.78).
MAX_USA_BETA = 700.0
#: The largest β of the adaptive softmax runs (Rényi centres, hardmax approach).
MAX_SOFTMAX_BETA = 1e4
#: The largest step count of a fixed-step run (or number of lattice β).
MAX_STEPS = 10**6
#: The largest token count or dimension of the dense runs.
MAX_SIZE = 4096


QUICK = {
    "eq_t1": "2",
    "eq_saves": "5",
    "eq_rtol": "1e-10",
    "ln_dt": "0.04",
    "inst_tokens": "500",
    "inst_seeds": "4",
    "inst_level": "0.05",
    "inst_steps": "20",
    "inst_saves": "11",
    "s2_tokens": "2000",
    "s2_seeds": "4",  # with s2_level 0.01 the second order holds in the window (forcing.py)
    "s2_level": "0.01",
    "s2_steps": "6",
    "s2_lat_degree": "27",
    "s2_lat_modes": "3",
    "s2_lat_steps": "8",
    "lat_tokens": "64",
    "lat_modes": "10",
    "causal_tokens": "8",
    "causal_t1": "600",
    "renyi_tokens": "64",
    "renyi_seeds": "6",
    "renyi_times": "10,40",
    "hard_seeds": "10",
    "hard_interior": "20",
    "sync_ns": "4,8,16",
    "sync_betas": "0.5,1,4",
    "sync_seeds": "12",
    "sync_t1": "300",
}

F64 = torch.float64

#: Part 1's agreement target (issue 22) and part 2's.
LAW_TOL, RATE_TOL = 1e-8, 0.03
#: Part 2 on S², one mode on the exact grid: relative target (RK4's (λh)⁴/120 and the δ²
#: terms are ~1e-8 at the defaults) and absolute floor (float64 resolves log(c_k(T)/c_k(0))
#: of a moment of size ~δ to ~eps/δ ≈ 2e-11 at δ = 1e-5: rates below floor/tol ≈ 1e-4, e.g.
#: λ_8 ≈ 2e-6 at β = 1, are checked in absolute terms).
S2_LATTICE_TOL, S2_LATTICE_FLOOR = 1e-6, 1e-10
