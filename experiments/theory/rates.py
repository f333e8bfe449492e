r"""Part 2's random-token protocol, shared by S¹ (:mod:`.run`) and S² (:mod:`.sphere`).

N i.i.d. uniform tokens on S^{d−1} × S seeds (one batch), RK4 to the horizon where the
fastest mode's mean power would reach 5·level; a per-mode power P_k(t) (|m_k|² on S¹, the
degree-k energy E_k on S²), both ≈ e^{2λ_k t}/N while the modes are small; the rates fitted
on the linear window (:func:`experiments.common.kernels.fit_rate`), jackknife errors over
the seeds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import torch

from tpde.fields import Normalized
from tpde.flows import integrate
from tpde.measures import uniform_on_sphere
from tpde.theory import instability_rate

from .. import framework as fw
from ..common.kernels import fit_rate, kernel_field, time_scale

__all__ = ["forcing_rate_of", "jackknife_se", "random_rates", "rate_results"]


def random_rates(
    kernel: str, beta: float, *, d: int, modes: int, tokens: int, seeds: int, level: float,
    saves: int, steps: int, seed: int, power: Callable[[torch.Tensor], np.ndarray],
    engine: str = "auto", initial: Callable[[torch.Tensor], np.ndarray] | None = None,
) -> dict:  # fmt: skip
    r"""Measured growth rates of modes 1 … ``modes`` of ``tokens`` uniform tokens on S^{d−1}.

    USA runs use V = e^{−β}I (:func:`~experiments.common.kernels.kernel_field`,
    ``rescale``): the same orbits in time t·e^{β}; every rate returned is in the original
    time. The horizon is log(5·level·N)/(2 max_k λ_k) (rescaled time), ``saves`` equally
    spaced saved times, ``steps`` RK4 steps.

    Parameters
    ----------
    kernel : "sa" or "usa".
    beta : inverse temperature β > 0.
    d : ambient dimension (2: S¹, 3: S²).
    modes : K, the number of modes (or degrees) measured.
    tokens, seeds : N and S (S ≥ 2 for the jackknife).
    level : the linear window's bound on every mode's mean power.
    saves, steps : saved times (t = 0 included) and RK4 steps.
    seed : the generator's seed of the uniform draw.
    power : points (S, N, d) → (S, K) float64 array, the per-mode power.
    engine : ``integrate``'s engine.
    initial : points (S, N, d) at t = 0 → an array kept as ``initial`` (S2: the draw's
        moments for the second-order model, :mod:`.forcing`); None: none.

    Returns
    -------
    dict: predicted λ_k (K,), measured (K,), se (K,) (jackknife), window (last time of the
    fit window, original-time units of the run: rescaled for USA), used (saved times in the
    window), initial (``initial``'s array or None), growth 2λ_k·window (K,),
    seconds (the flow), power (T, K) (mean over seeds), seed_power (T, S, K), times (T,).
    """
    ks = np.arange(1, modes + 1)
    scale = time_scale(kernel, beta)  # USA runs rescaled (kernel_field)
    rates = instability_rate(ks, beta, kernel=kernel, d=d) * scale
    horizon = math.log(level * tokens * 5) / (2 * rates.max())
    times = np.linspace(0.0, horizon, saves)
    gen = fw.torch_generator(seed)
    mu = uniform_on_sphere(tokens, d, batch=(seeds,), generator=gen)
    field = Normalized(kernel_field(kernel, beta, d, rescale=True))
    start = time.perf_counter()
    traj = integrate(field, mu, horizon, dt=horizon / steps, method="rk4",
                     save=times.tolist(), events=(), engine=engine)  # fmt: skip
    seconds = time.perf_counter() - start
    every = np.stack([power(m.points) for m in traj.measures])  # (T, S, K)
    first = None if initial is None else initial(traj.measures[0].points)
    measured, used = fit_rate(times, every, level)
    se = jackknife_se(times, every, level)
    window = times[used - 1] if used else 0.0
    return {"predicted": rates / scale, "measured": measured / scale, "se": se / scale,
            "window": window, "used": used, "initial": first, "growth": 2 * rates * window,
            "seconds": seconds,
            "power": every.mean(1), "seed_power": every, "times": times}  # fmt: skip


def jackknife_se(times, power, level: float) -> np.ndarray:
    """Jackknife standard error of the fitted rates over the S seeds (axis 1 of ``power``,
    (T, S, K)): se² = (S − 1)/S · Σ_s (λ̂_(s) − λ̄)², λ̂_(s) the fit without seed s (Efron &
    Tibshirani, An Introduction to the Bootstrap, 1993, §11.2). Needs S >= 2 (the config
    check refuses fewer); with S = 2 it is |λ̂_(1) − λ̂_(2)|/2, one degree of freedom."""
    seeds = power.shape[1]
    jack = np.stack([fit_rate(times, np.delete(power, s, 1), level)[0] for s in range(seeds)])
    return np.sqrt((seeds - 1) * jack.var(0))


def rate_results(run: dict) -> dict:
    """The plain numbers of one :func:`random_rates` run for meta.json: relative errors
    λ̂_k/λ_k − 1 and their standard errors, growth 2λ_k·window, window, seconds."""
    return {
        "rel_error": (run["measured"] / run["predicted"] - 1).tolist(),
        "rel_se": (run["se"] / run["predicted"]).tolist(),
        "growth": run["growth"].tolist(), "window": run["window"], "seconds": run["seconds"],
    }  # fmt: skip


def forcing_rate_of(rates, k: int, feeds: Callable[[int, int, int], bool]) -> float:
    """max λ_j + λ_l over the pairs 1 ≤ j ≤ l ≤ len(rates) whose product ``feeds(j, l, k)``
    mode k: the growth rate of the quadratic forcing of mode k (−∞ where no pair feeds
    it). ``rates``: λ_1, λ_2, … up to the largest mode searched."""
    top = len(rates)
    return max((rates[j - 1] + rates[l - 1] for j in range(1, top + 1)
                for l in range(j, top + 1) if feeds(j, l, k)), default=-math.inf)  # fmt: skip
