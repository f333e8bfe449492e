"""The SA and USA kernels on the circle and their Fourier modes (MATH.md §7; the ``theory``
study and the ``theory_euler`` benchmark)."""

from __future__ import annotations

import math

import numpy as np
import torch

from tpde.fields import KERNELS, Exponential, Field, Softmax

__all__ = ["fit_rate", "fourier_modes", "kernel_field"]

F64 = torch.float64


def kernel_field(kernel: str, beta, d: int, *, rescale: bool = False) -> Field:
    """Q = K = V = I, score β⟨x, y⟩: the field of ``kernel`` in :data:`tpde.fields.KERNELS`,
    Softmax ("sa") or Exponential ("usa"). β may be an array (one per leading batch
    element). ``rescale``: USA with V = e^{−β}I, the same orbits in time t·e^{β} (rates are
    multiplied by e^{−β}), so large β is not stiff."""
    kind = KERNELS[kernel]
    beta = torch.as_tensor(np.asarray(beta, dtype=float), dtype=F64)
    eye = torch.eye(d, dtype=F64)
    beta = beta.reshape(-1, 1, 1, 1) if beta.ndim else beta  # (nβ, 1, d, d): over a batch
    V = torch.exp(-beta) * eye if rescale else eye
    if kind is Softmax:
        return Softmax.from_interaction(beta * eye, eye)
    return Exponential(beta * eye, eye, V, scale=1.0)


def time_scale(kernel: str, beta):
    """The factor :func:`kernel_field` with ``rescale`` puts on every rate: 1 for SA, e^{−β}
    for USA (V = e^{−β}I). β a float (a float back) or an array (shape (nβ, 1) back)."""
    if kernel == "sa":
        return 1.0
    if np.ndim(beta):
        return np.exp(-np.asarray(beta, dtype=float))[:, None]
    return math.exp(-beta)


def fourier_modes(points: torch.Tensor, modes) -> torch.Tensor:
    """m_k = (1/N) Σ_j e^{−ikθ_j} of unit vectors (..., N, 2): (..., K) complex."""
    z = torch.complex(points[..., 0], points[..., 1])
    k = torch.as_tensor(np.asarray(modes)).reshape(-1, 1)
    return (z.conj().unsqueeze(-2) ** k).mean(-1)


def fit_rate(times, power, level: float) -> tuple[float, int]:
    """Half the slope of log(Σ_s |m_k(t)|² / Σ_s |m_k(0)|²) over the saved times where every
    mode's mean power is ≤ level (the linear window), and the number of times used."""
    ratio = power.sum(1) / power[0].sum(0)  # (T, K)
    inside = np.nonzero(power.mean(1).max(-1) <= level)[0]
    inside = inside[: np.argmax(np.diff(np.r_[inside, -1]) != 1) + 1]  # the first stretch
    if len(inside) < 3:
        return np.full(power.shape[-1], np.nan), len(inside)
    slope = np.polyfit(times[inside], np.log(ratio[inside]), 1)[0]
    return slope / 2, len(inside)
