r"""Spatial reconstructions of the finite-volume grid system (:mod:`tpde.flows.systems.grid`).

A reconstruction gives the masses on both sides of every face and a per-cell bound on
the outgoing mass fraction per unit time (what the CFL controller reads,
:mod:`tpde.flows.systems.cfl`); :data:`RECONSTRUCTIONS` lists them by name
(``FiniteVolumes(grid, scheme=...)``). A new one is a subclass of :class:`Reconstruction`
added to :data:`RECONSTRUCTIONS`. (The name ``SCHEMES`` is the norm schemes',
:data:`tpde.fields.SCHEMES`; ``tpde.flows.SCHEMES`` still reads this table, with a
DeprecationWarning.)

- ``"upwind"``: m_L, m_R are the cell masses (first order; default time method Euler).
- ``"muscl"``: piecewise-linear reconstruction with minmod-limited slopes
  σ_c = minmod(m_c − m_{c−1}, m_{c+1} − m_c), m_L/R = m ± σ/2 (second order on smooth
  solutions; van Leer, J. Comput. Phys. 32, 1979; default time method Heun = SSP-RK2).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

__all__ = ["MUSCL", "RECONSTRUCTIONS", "Reconstruction", "Upwind"]


def _minmod(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """minmod(a, b) = sign(a)·min(|a|, |b|) where a and b agree in sign, 0 elsewhere."""
    return torch.where(a * b > 0, torch.sign(a) * torch.minimum(a.abs(), b.abs()), 0.0 * a)


def _pad(m: torch.Tensor, axis: int, before: int, after: int) -> torch.Tensor:
    """Zero ghost cells along ``axis``."""
    pads = [0, 0] * m.ndim
    index = 2 * (m.ndim - 1 - axis)
    pads[index], pads[index + 1] = before, after
    return torch.nn.functional.pad(m, pads)


@dataclass(frozen=True)
class Reconstruction:
    """A spatial reconstruction: it declares its name, order and default time method."""

    name: str
    order: int
    default_method: str

    def face_values(self, m: torch.Tensor, axis: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Masses on the left and right side of every face along ``axis`` (n_k + 1 faces).

        Face j separates cells j − 1 and j; outside the box the ghost masses are 0.
        """
        raise NotImplementedError

    def outflow_rate(self, u: torch.Tensor, axis: int, h: float) -> torch.Tensor:
        """Per-cell bound r_c on the outgoing mass fraction per unit time (this axis)."""
        raise NotImplementedError


def _outgoing(u: torch.Tensor, axis: int):
    """Outgoing speeds through the right and left face of every cell along ``axis``."""
    n = u.shape[axis] - 1
    return u.narrow(axis, 1, n).clamp_min(0), (-u.narrow(axis, 0, n)).clamp_min(0)


@dataclass(frozen=True)
class Upwind(Reconstruction):
    """First-order upwind: the face value is the upwind cell's mass."""

    name: str = "upwind"
    order: int = 1
    default_method: str = "euler"

    def face_values(self, m, axis):
        return _pad(m, axis, 1, 0), _pad(m, axis, 0, 1)

    def outflow_rate(self, u, axis, h):
        right, left = _outgoing(u, axis)
        return (right + left) / h


@dataclass(frozen=True)
class MUSCL(Reconstruction):
    """Piecewise-linear reconstruction with minmod-limited slopes (second order)."""

    name: str = "muscl"
    order: int = 2
    default_method: str = "heun"

    def face_values(self, m, axis):
        padded = _pad(m, axis, 1, 1)
        n = m.shape[axis]
        backward = m - padded.narrow(axis, 0, n)
        forward = padded.narrow(axis, 2, n) - m
        half = 0.5 * _minmod(backward, forward)
        return _pad(m + half, axis, 1, 0), _pad(m - half, axis, 0, 1)

    def outflow_rate(self, u, axis, h):
        # Face values lie in [m/2, 3m/2] and add up to 2m: the outgoing flux is at most
        # ((u⁺_R + u⁻_L)/2 + max(u⁺_R, u⁻_L))·m.
        right, left = _outgoing(u, axis)
        return (0.5 * (right + left) + torch.maximum(right, left)) / h


RECONSTRUCTIONS = {scheme.name: scheme for scheme in (Upwind(), MUSCL())}


def renamed(module: str, name: str):
    """``RECONSTRUCTIONS`` under its former name ``SCHEMES`` (a module ``__getattr__``), with
    a DeprecationWarning; AttributeError for any other missing name."""
    if name != "SCHEMES":
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warnings.warn(
        "tpde.flows.SCHEMES (the grid's finite-volume reconstructions) is now "
        "tpde.flows.RECONSTRUCTIONS; SCHEMES names the norm schemes (tpde.fields.SCHEMES).",
        DeprecationWarning,
        stacklevel=3,
    )
    return RECONSTRUCTIONS
