"""Explicit Runge–Kutta time-stepping methods, each a tableau that declares its order.

A state is a tuple of tensors (particles: ``(points,)``; Gaussians: ``(mean, cov)``).
``step(f, t, y, h, k1)`` returns the new state, the embedded error estimate (adaptive
methods only) and the derivative at the new state when the method has it for free (FSAL).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

State = tuple[torch.Tensor, ...]


def _axpy(y: State, h: float, terms: list[tuple[float, State]]) -> State:
    """y + h Σ_s a_s k_s, part by part."""
    out = []
    for index, part in enumerate(y):
        acc = part
        for coef, k in terms:
            if coef != 0.0:
                acc = acc + (h * coef) * k[index]
        out.append(acc)
    return tuple(out)


@dataclass(frozen=True)
class ExplicitRK:
    """Butcher tableau (a, b, c) of an explicit Runge–Kutta method.

    Attributes
    ----------
    name : str;  order : int (global order of the solution);  a : lower-triangular rows;
    b : solution weights;  c : nodes;  b_error : weights of the embedded lower-order
    solution (adaptive methods), or None;  fsal : whether the last stage is the
    derivative at the new state.
    """

    name: str
    order: int
    a: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]
    c: tuple[float, ...]
    b_error: tuple[float, ...] | None = None
    fsal: bool = False  # first stage of the next step = last stage of this one

    @property
    def adaptive(self) -> bool:
        return self.b_error is not None

    def step(self, f, t: float, y: State, h: float, k1: State | None = None):
        stages = [f(t, y) if k1 is None else k1]
        for row, node in zip(self.a[1:], self.c[1:], strict=True):
            stages.append(f(t + node * h, _axpy(y, h, list(zip(row, stages, strict=False)))))
        y_new = _axpy(y, h, list(zip(self.b, stages, strict=True)))
        if not self.adaptive:
            return y_new, None, None
        error = _axpy(
            tuple(torch.zeros_like(p) for p in y),
            h,
            [(b - e, k) for b, e, k in zip(self.b, self.b_error, stages, strict=True)],
        )
        return y_new, error, stages[-1] if self.fsal else None


EULER = ExplicitRK("euler", 1, a=((),), b=(1.0,), c=(0.0,))
HEUN = ExplicitRK("heun", 2, a=((), (1.0,)), b=(0.5, 0.5), c=(0.0, 1.0))
RK4 = ExplicitRK(
    "rk4",
    4,
    a=((), (0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)),
    b=(1 / 6, 1 / 3, 1 / 3, 1 / 6),
    c=(0.0, 0.5, 0.5, 1.0),
)
# Dormand & Prince (1980), "A family of embedded Runge-Kutta formulae", J. Comp. Appl. Math.
DOPRI5 = ExplicitRK(
    "dopri5",
    5,
    a=(
        (),
        (1 / 5,),
        (3 / 40, 9 / 40),
        (44 / 45, -56 / 15, 32 / 9),
        (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
        (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
        (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84),
    ),
    b=(35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0),
    c=(0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0),
    b_error=(5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40),
    fsal=True,
)

METHODS = {m.name: m for m in (EULER, HEUN, RK4, DOPRI5)}
