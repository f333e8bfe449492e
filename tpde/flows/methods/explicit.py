"""Explicit Runge–Kutta methods: a Butcher tableau declaring its order, and the four
registered ones ("euler", "heun", "rk4", "dopri5").

The step contract is the method protocol's (:mod:`tpde.flows.methods.base`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tpde.flows.methods.base import Method, part_step, register_method

__all__ = ["DOPRI5", "EULER", "HEUN", "RK4", "ExplicitRK", "State"]

State = tuple[torch.Tensor, ...]


def _axpy(y: State, h, terms: list[tuple[float, State]]) -> State:
    """y + h Σ_s a_s k_s, part by part (a float step: one fused pass per term)."""
    out = []
    for index, part in enumerate(y):
        step = part_step(h, index)
        acc = part
        for coef, k in terms:
            if coef == 0.0:
                continue
            if isinstance(step, torch.Tensor):
                acc = acc + (step * coef) * k[index]
            else:
                acc = torch.add(acc, k[index], alpha=step * coef)
        out.append(acc)
    return tuple(out)


def _check_coefficients(tableau) -> None:
    """Every coefficient of a, b, c (and b_error) is a finite real number."""
    groups = {"a": [x for row in tableau.a for x in row], "b": tableau.b, "c": tableau.c}
    if tableau.b_error is not None:
        groups["b_error"] = tableau.b_error
    for name, values in groups.items():
        bad = [
            v
            for v in values
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
        ]
        if bad:
            raise ValueError(
                f"ExplicitRK {tableau.name!r}: the coefficients of {name} must be finite real "
                f"numbers; received {bad[0]!r}."
            )


@dataclass(frozen=True)
class ExplicitRK(Method):
    """Butcher tableau (a, b, c) of an explicit Runge–Kutta method.

    Attributes
    ----------
    name : str;  order : int (global order of the solution);  a : lower-triangular rows
    (row s has s entries);  b : solution weights;  c : nodes;  b_error : weights of the
    embedded lower-order solution (adaptive methods), or None;  fsal : whether the last
    stage is the derivative at the new state;  ssp : strong-stability preserving (a
    convex combination of forward Euler steps: the methods a grid flow may use, since
    they keep cell masses nonnegative under the CFL condition; Gottlieb, Shu, Tadmor,
    SIAM Review 43, 2001).

    The tableau is checked at construction: one row of ``a`` per stage with s entries in
    row s, ``b``, ``c`` (and ``b_error``) of one entry per stage, weights summing to 1,
    and c_s = Σ_j a_sj (the consistency every method here satisfies).
    """

    name: str
    order: int
    a: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]
    c: tuple[float, ...]
    b_error: tuple[float, ...] | None = None
    fsal: bool = False
    ssp: bool = False
    summary: str = ""

    def __post_init__(self):
        stages = len(self.b)
        if isinstance(self.order, bool) or not isinstance(self.order, int) or self.order < 1:
            raise ValueError(f"ExplicitRK {self.name!r}: order must be an int >= 1; "
                             f"received {self.order!r}.")  # fmt: skip
        _check_coefficients(self)
        sizes = {"a": len(self.a), "c": len(self.c)}
        if self.b_error is not None:
            sizes["b_error"] = len(self.b_error)
        wrong = {k: v for k, v in sizes.items() if v != stages}
        if stages == 0:
            raise ValueError(
                f"ExplicitRK {self.name!r}: the tableau has no stage (b is empty); give one row "
                "of a, one node c and one weight b per stage."
            )
        if wrong:
            raise ValueError(
                f"ExplicitRK {self.name!r}: inconsistent tableau sizes: b has {stages} "
                f"stages but {', '.join(f'{k} has {v}' for k, v in wrong.items())}. Give one "
                "row of a, one node c and one weight per stage."
            )
        for s, row in enumerate(self.a):
            if len(row) != s:
                raise ValueError(
                    f"ExplicitRK {self.name!r}: row {s} of a must have {s} entries (an explicit "
                    f"method's stage s uses the s earlier stages); received {len(row)}."
                )
            if not math.isclose(sum(row), self.c[s], abs_tol=1e-12):
                raise ValueError(
                    f"ExplicitRK {self.name!r}: node c[{s}] = {self.c[s]} must equal the sum "
                    f"of row {s} of a ({sum(row)})."
                )
        for name, weights in (("b", self.b), ("b_error", self.b_error)):
            if weights is not None and not math.isclose(sum(weights), 1.0, abs_tol=1e-12):
                raise ValueError(
                    f"ExplicitRK {self.name!r}: the weights {name} must sum to 1 "
                    f"(consistency); received {sum(weights)}."
                )
        if self.fsal and (self.b_error is None or tuple(self.a[-1]) != tuple(self.b[:-1])):
            raise ValueError(
                f"ExplicitRK {self.name!r}: fsal needs an adaptive tableau whose last row of "
                "a equals b (the last stage is then the derivative at the new state)."
            )

    @property
    def adaptive(self) -> bool:
        return self.b_error is not None

    def step(self, f, t: float, y: State, h, k1: State | None = None, h_clock: float = 0.0):
        """One step from (t, y); stage s is evaluated at time t + c_s·h_clock.

        ``h`` multiplies the stages (a float, or one tensor per part); ``h_clock`` is the
        step of the clock the right-hand side sees (the common step of a synchronous run;
        0 for an autonomous field stepped per element).
        """
        stages, _ = self.stages(f, t, y, h, k1, h_clock)
        return self.combine(y, h, stages)

    def stages(self, f, t: float, y: State, h, k1: State | None = None, h_clock: float = 0.0):
        """The stage derivatives k_s (a list of states) and the arguments of the last two
        stages (the states they were evaluated at), which the stiffness test of the
        "auto" method reads (:mod:`tpde.flows.methods.auto`)."""
        stages, last = [f(t, y) if k1 is None else k1], [y]
        for row, node in zip(self.a[1:], self.c[1:], strict=True):
            argument = _axpy(y, h, list(zip(row, stages, strict=False)))
            last = [last[-1], argument]
            stages.append(f(t + node * h_clock, argument))
        return stages, last

    def combine(self, y: State, h, stages: list[State]):
        """(y₁, error estimate or None, derivative at y₁ or None) from the stages."""
        y_new = _axpy(y, h, list(zip(self.b, stages, strict=True)))
        if not self.adaptive:
            return y_new, None, None
        error = _axpy(
            tuple(torch.zeros_like(p) for p in y),
            h,
            [(b - e, k) for b, e, k in zip(self.b, self.b_error, stages, strict=True)],
        )
        return y_new, error, stages[-1] if self.fsal else None


EULER = register_method(
    ExplicitRK(
        "euler", 1, a=((),), b=(1.0,), c=(0.0,), ssp=True, summary="forward Euler; SSP (grids)"
    )
)
HEUN = register_method(
    ExplicitRK(
        "heun",
        2,
        a=((), (1.0,)),
        b=(0.5, 0.5),
        c=(0.0, 1.0),
        ssp=True,
        summary="Heun = SSP-RK2 (grids with MUSCL)",
    )
)
RK4 = register_method(
    ExplicitRK(
        "rk4",
        4,
        a=((), (0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)),
        b=(1 / 6, 1 / 3, 1 / 3, 1 / 6),
        c=(0.0, 0.5, 0.5, 1.0),
        summary="the classical Runge–Kutta method",
    )
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
    summary="Dormand–Prince 5(4), error-controlled steps",
)
register_method(DOPRI5)
