r"""Rosenbrock methods: linearly implicit, L-stable steps for stiff flows (``"rodas4"``).

An explicit method's step is bounded by stability, |hλ| ≲ 3 for the fastest mode λ of the
Jacobian, however slowly the solution moves. The Gaussian moment ODEs of the rank
histograms with V = GᵀG (MATH.md §6) are such flows: fast modes of rate ~‖V‖‖A‖‖Σ‖ decay
at once, while the covariance creeps to its stationary point over horizons of 10³–10⁴.
A Rosenbrock method solves one linear system per stage with the Jacobian J = ∂f/∂y at the
step's start, so its step is bounded by accuracy only.

One step of an s-stage method, in the form of Hairer & Wanner's code RODAS (*Solving
Ordinary Differential Equations II*, 2nd ed., Springer 1996, §IV.7, eqs. (7.4')–(7.5)),
each stage equation multiplied by hγ:

    (I − hγJ) k_i = hγ f(t + c_i h, y₀ + Σ_{j<i} a_ij k_j) + γ Σ_{j<i} C_ij k_j + γ d_i h² f_t,
    y₁ = y₀ + Σ_i m_i k_i,        error estimate  Σ_i e_i k_i,

with f_t = ∂f/∂t(t, y₀) (zero for autonomous fields). Multiplied by hγ, a zero step gives
k = 0 exactly: a batch element that does not move this iteration needs no special case.
One Jacobian and one LU factorisation per step (per batch element, batched) serve every
stage; a rejected step computes both again at the same state with the smaller step.

The right-hand side ``f`` the loop passes has ``f.jacobian(t, y)``, a linearisation from
the system (:meth:`tpde.flows.systems.GaussianSystem.jacobian`) with ``matrix`` (…, n, n)
acting on flat coordinates, ``to_vector``/``to_state``, ``per_element(h)`` and
``time_derivative`` (f_t in flat coordinates, or None). Only systems that provide it can
be stepped by these methods; :func:`tpde.flows.integrate` says which.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tpde.flows.methods.base import Method, register_method

__all__ = ["RODAS4", "Rosenbrock"]


@dataclass(frozen=True)
class Rosenbrock(Method):
    """Coefficients of an s-stage Rosenbrock method with an embedded error estimate.

    Attributes
    ----------
    name : str;  order : int (global order of the solution);  embedded_order : int (of the
    embedded solution, whose difference with y₁ is the error estimate: the step controller
    uses the exponent 1/(embedded_order + 1));  gamma : the diagonal γ;  a, C : strictly
    lower-triangular rows (row i has i entries): stage arguments and stage couplings;
    c : nodes;  d : coefficients of the time derivative f_t (γ_i of Hairer & Wanner);
    m : solution weights;  e : error weights (module notes).

    The sizes are checked at construction: s rows of ``a`` and ``C`` with i entries in row
    i, s entries in ``c``, ``d``, ``m`` and ``e``.
    """

    name: str
    order: int
    embedded_order: int
    gamma: float
    a: tuple[tuple[float, ...], ...]
    C: tuple[tuple[float, ...], ...]
    c: tuple[float, ...]
    d: tuple[float, ...]
    m: tuple[float, ...]
    e: tuple[float, ...]
    summary: str = ""

    #: Rosenbrock methods carry their own error estimate.
    adaptive = True
    #: They need the Jacobian of the right-hand side (``f.jacobian``).
    uses_jacobian = True

    def __post_init__(self):
        stages = len(self.m)
        sizes = {name: len(getattr(self, name)) for name in ("a", "C", "c", "d", "e")}
        wrong = {k: v for k, v in sizes.items() if v != stages}
        if stages == 0 or wrong:
            raise ValueError(
                f"Rosenbrock {self.name!r}: inconsistent sizes: m has {stages} stages but "
                f"{', '.join(f'{k} has {v}' for k, v in wrong.items())}."
            )
        for name in ("a", "C"):
            for i, row in enumerate(getattr(self, name)):
                if len(row) != i:
                    raise ValueError(
                        f"Rosenbrock {self.name!r}: row {i} of {name} must have {i} entries "
                        f"(stage i uses the i earlier stages); received {len(row)}."
                    )
        for name in ("a", "C", "c", "d", "m", "e"):
            values = getattr(self, name)
            flat = [x for row in values for x in row] if name in ("a", "C") else list(values)
            if not all(math.isfinite(x) for x in flat):
                raise ValueError(
                    f"Rosenbrock {self.name!r}: the coefficients of {name} must be finite."
                )
        if not (
            0 < self.embedded_order < self.order and math.isfinite(self.gamma) and self.gamma > 0
        ):
            raise ValueError(
                f"Rosenbrock {self.name!r}: needs 0 < embedded_order < order and a finite "
                "gamma > 0; "
                f"received {self.embedded_order}, {self.order}, {self.gamma}."
            )

    @property
    def error_exponent(self) -> float:
        """Exponent of the step-size update h ← h·0.9·err^(−exponent)."""
        return 1.0 / (self.embedded_order + 1)

    def step(self, f, t: float, y, h, k1=None, h_clock: float = 0.0):
        """One step from (t, y) (module notes); same contract as ``ExplicitRK.step``.

        ``h`` is a float or one step tensor per state part (one step per batch element);
        stage i is evaluated at time t + c_i·h_clock. Returns (y₁, error estimate, None).
        """
        jacobian = getattr(f, "jacobian", None)
        if not callable(jacobian):
            raise TypeError(
                f"the Rosenbrock method {self.name!r} needs the Jacobian of the right-hand "
                "side (f.jacobian(t, y)), which the stepping loop passes for systems that "
                "provide one (GaussianSystem); this f has none."
            )
        lin = jacobian(t, y)
        step = lin.per_element(h)  # float, or a tensor with the batch shape
        col = step if isinstance(step, float) else step.unsqueeze(-1)  # against (…, n)
        solve = lin.solver(step, self.gamma)  # LU of a dense J, or GMRES on an operator
        y0 = lin.to_vector(y)
        slopes = lin.to_vector(f(t, y) if k1 is None else k1)
        f_t = lin.time_derivative
        ks: list[torch.Tensor] = []
        for i in range(len(self.m)):
            if i > 0:
                argument = _combine(y0, self.a[i], ks)
                slopes = lin.to_vector(f(t + self.c[i] * h_clock, lin.to_state(argument)))
            rhs = (col * self.gamma) * slopes
            rhs = _combine(rhs, [self.gamma * coef for coef in self.C[i]], ks)
            if f_t is not None and self.d[i] != 0.0:
                rhs = rhs + (self.gamma * self.d[i]) * (col * col) * f_t
            ks.append(solve(rhs))
        y1 = _combine(y0, self.m, ks)
        error = _combine(torch.zeros_like(y0), self.e, ks)
        return lin.to_state(y1), lin.to_state(error), None


def _combine(base: torch.Tensor, coefs, ks) -> torch.Tensor:
    """base + Σ_j coefs_j k_j (zero coefficients skipped)."""
    for coef, k in zip(coefs, ks, strict=False):
        if coef != 0.0:
            base = base + coef * k
    return base


# Hairer & Wanner's RODAS (order 4, embedded order 3, six stages, stiffly accurate and
# L-stable: R(∞) = 0), coefficients of the Fortran code rodas.f (subroutine RODCOE,
# METH = 1), E. Hairer and G. Wanner, *Solving Ordinary Differential Equations II*, 2nd ed.,
# Springer 1996, §VI.4; the same constants as Numerical Recipes 3rd ed. §17.5 (StepperRoss)
# and OrdinaryDiffEq.jl's Rodas4. Stages 5 and 6 sit at c = 1; y₁ = (stage-6 argument) + k₆
# and the embedded solution is the stage-6 argument, so the error estimate is k₆.
_A5 = (1.221224509226641, 6.019134481288629, 12.53708332932087, -0.6878860361058950)
RODAS4 = Rosenbrock(
    "rodas4",
    order=4,
    embedded_order=3,
    gamma=0.25,
    a=(
        (),
        (1.544,),
        (0.9466785280815826, 0.2557011698983284),
        (3.314825187068521, 2.896124015972201, 0.9986419139977817),
        _A5,
        (*_A5, 1.0),
    ),
    C=(
        (),
        (-5.6688,),
        (-2.430093356833875, -0.2063599157091915),
        (-0.1073529058151375, -9.594562251023355, -20.47028614809616),
        (7.496443313967647, -10.24680431464352, -33.99990352819905, 11.70890893206160),
        (
            8.083246795921522,
            -7.981132988064893,
            -31.52159432874371,
            16.31930543123136,
            -6.058818238834054,
        ),
    ),
    c=(0.0, 0.386, 0.21, 0.63, 1.0, 1.0),
    d=(0.25, -0.1043, 0.1035, -0.3620000000000023e-01, 0.0, 0.0),
    m=(*_A5, 1.0, 1.0),
    e=(0.0, 0.0, 0.0, 0.0, 0.0, 1.0),
    summary="L-stable Rosenbrock 4(3) for stiff flows; needs the system's Jacobian",
)
register_method(RODAS4)
