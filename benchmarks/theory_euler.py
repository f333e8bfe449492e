"""The theory experiment's part 2 (linear instability on S¹) against a plain Euler loop.

    python benchmarks/theory_euler.py            # N = 2·10⁴ tokens × 4 seeds, β = 1, 5
    python benchmarks/theory_euler.py --quick    # N = 10³ × 2 seeds, β = 5, the loop run to the end

The check (``tpde run theory``, part 2 (a)): N tokens i.i.d. uniform on the circle, post-LN
softmax attention with Q = K = V = I and score β⟨x, y⟩; while the Fourier modes
m_k = (1/N)Σ_j e^{−ikθ_j} are small, E|m_k(t)|² ≈ e^{2λ_k t}/N with
λ_k = k²I_k(β)/(βI_0(β)) (:func:`tpde.theory.instability_rate`); the rates are the slopes of
log |m_k|² over the linear window, with jackknife errors over the seeds.

tpde: the experiment's own run (the spectral engine, exact to rounding in O(N·K) on the
circle; 20 RK4 steps to the end of the window). The baseline: the loop researchers write
for it (dense softmax scores in chunks of rows, x ← N(x + h P⊥_x Γ(x)), float64, one torch
thread) at their step h = 10⁻⁴. The loop cannot reach the window's end at N = 2·10⁴ in a
benchmark's time (each step sums N² pairs per seed): its seconds per step are the median of
5 steps after a warm-up, multiplied by the steps it needs (at the quick size the loop runs
to the end and its measured time is given too). Equal accuracy: in the linear regime a mode of
rate λ grows per step by R(hλ) (Euler: 1 + hλ; RK4: its stability polynomial), so each
stepper measures log R(hλ)/h instead of λ; the table gives that relative bias for both,
beside the Monte-Carlo standard error of the measured rates (the accuracy the tokens allow,
the same for both): both biases are far below it, so the two runs measure the rates to the
same accuracy. The loop's rates at the quick size, run to the end, confirm it.

Measured on the shared 2-core machine (one thread, other jobs running):

    N = 2·10⁴ × 4 seeds, β = 5: tpde 2.3 s (window 5.06, 20 RK4 steps); the loop 20.3 s per
        step × 50 593 steps = 1.0·10⁶ s (12 days) extrapolated: ×4.4·10⁵. Rates within 2.1 SE
        of the law, SE/λ ≤ 4 %; stepper bias RK4 6.4e-6, Euler 3.4e-5 (relative).
    N = 2·10⁴ × 4 seeds, β = 1: tpde 4.2 s; the loop ×3.9·10⁵ extrapolated; modes 1–4 within
        3.1 SE (modes 5–6, λ = 0.005 and 0.001, do not grow measurably in the window).
    --quick, N = 10³ × 2 seeds, β = 5: the loop run to the end, 28 652 steps in 1280 s
        against tpde's 0.46 s (×2.8·10³); its rates equal tpde's to 0.017 SE.
"""

# ruff: noqa: E402  (thread counts must be set before numpy and torch load)
from __future__ import annotations

import argparse
import math
import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import time

import numpy as np
import torch
from _common import print_table, torch_threads

from tpde.experiments.common.kernels import fit_rate, fourier_modes, kernel_field
from tpde.fields import Normalized
from tpde.flows import integrate
from tpde.measures import uniform_on_sphere
from tpde.theory import instability_rate

F64 = torch.float64
MODES = np.arange(1, 7)
LEVEL = 0.01  # the experiment's linear window: mean |m_k|² ≤ 0.01
EULER_STEP = 1e-4
RK4_STEPS = 20


def euler_step(x: torch.Tensor, beta: float, h: float, chunk: int = 2048) -> torch.Tensor:
    """One step of the researchers' loop on (S, N, 2) tokens: dense softmax in row chunks."""
    out = torch.empty_like(x)
    for start in range(0, x.shape[-2], chunk):
        q = x[..., start : start + chunk, :]
        weights = torch.softmax(beta * q @ x.mT, dim=-1)
        v = weights @ x
        v = v - (v * q).sum(-1, keepdim=True) * q  # tangent part
        moved = q + h * v
        out[..., start : start + chunk, :] = moved / moved.norm(dim=-1, keepdim=True)
    return out


def window(beta: float, tokens: int) -> tuple[float, np.ndarray]:
    """The experiment's horizon (the window's end, 5× past the level) and save times."""
    rates = instability_rate(MODES, beta)
    horizon = math.log(LEVEL * tokens * 5) / (2 * rates.max())
    return horizon, np.linspace(0.0, horizon, 21)


def rates_of(clouds: list[torch.Tensor], times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Measured rates and their jackknife standard errors over the seeds."""
    power = np.stack([fourier_modes(c, MODES).abs().square().numpy() for c in clouds])
    measured, _ = fit_rate(times, power, LEVEL)
    seeds = power.shape[1]
    jack = np.stack([fit_rate(times, np.delete(power, s, 1), LEVEL)[0] for s in range(seeds)])
    return measured, np.sqrt((seeds - 1) * jack.var(0))


def tpde_run(start: torch.Tensor, beta: float, horizon: float, times: np.ndarray):
    field = Normalized(kernel_field("sa", beta, 2))
    clock = time.perf_counter()
    traj = integrate(field, start, horizon, dt=horizon / RK4_STEPS, method="rk4",
                     save=times.tolist(), events=())  # fmt: skip
    return time.perf_counter() - clock, [m.points for m in traj.measures]


def loop_seconds_per_step(points: torch.Tensor, beta: float, steps: int = 5) -> float:
    """Median seconds of one loop step, after a warm-up step (allocations)."""
    points = euler_step(points, beta, EULER_STEP)
    seconds = []
    for _ in range(steps):
        clock = time.perf_counter()
        points = euler_step(points, beta, EULER_STEP)
        seconds.append(time.perf_counter() - clock)
    return float(np.median(seconds))


def loop_run(points: torch.Tensor, beta: float, times: np.ndarray) -> list[torch.Tensor]:
    """The loop to the window's end, saving at the save times (each a multiple of h)."""
    clouds, t = [points], 0.0
    for target in times[1:]:
        for _ in range(round((target - t) / EULER_STEP)):
            points = euler_step(points, beta, EULER_STEP)
        t = target
        clouds.append(points)
    return clouds


def bias(step: float, rate: np.ndarray, kind: str) -> np.ndarray:
    """|log R(hλ)/h − λ|/λ: the relative error of a measured rate from the stepper alone."""
    z = step * rate
    growth = 1 + z if kind == "euler" else 1 + z + z**2 / 2 + z**3 / 6 + z**4 / 24
    return np.abs(np.log(growth) / step - rate) / rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    quick = parser.parse_args().quick
    tokens, seeds, betas = (1000, 2, (5.0,)) if quick else (20_000, 4, (1.0, 5.0))
    rows = []
    with torch_threads(1):
        for beta in betas:
            horizon, times = window(beta, tokens)
            gen = torch.Generator().manual_seed(int(100 * beta))
            mu = uniform_on_sphere(tokens, 2, batch=(seeds,), generator=gen, dtype=F64)
            seconds, clouds = tpde_run(mu, beta, horizon, times)
            measured, se = rates_of(clouds, times)
            per_step = loop_seconds_per_step(mu.points, beta)
            loop_steps = round(horizon / EULER_STEP)
            predicted = instability_rate(MODES, beta)
            row = {
                "β": beta,
                "N × seeds": f"{tokens} × {seeds}",
                "window": horizon,
                "tpde s": seconds,
                "loop s/step": per_step,
                "loop steps": loop_steps,
                "loop s (extrapolated)": per_step * loop_steps,
                "× tpde": per_step * loop_steps / seconds,
                "max |λ̂ − λ|/SE": float(np.max(np.abs(measured - predicted) / se)),
                "max SE/λ": float(np.max(se / predicted)),
                "RK4 bias": float(np.max(bias(horizon / RK4_STEPS, predicted, "rk4"))),
                "Euler bias": float(np.max(bias(EULER_STEP, predicted, "euler"))),
            }
            if quick:  # the loop to the end: its time and rates against tpde's, same tokens
                clock = time.perf_counter()
                looped, _ = rates_of(loop_run(mu.points, beta, times), times)
                row["loop s (run)"] = time.perf_counter() - clock
                row["× tpde (run)"] = row["loop s (run)"] / seconds
                row["max |λ̂ loop − λ̂ tpde|/SE"] = float(np.max(np.abs(looped - measured) / se))
            rows.append(row)
    print_table(rows, list(rows[0]))


if __name__ == "__main__":
    main()
