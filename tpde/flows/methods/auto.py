r"""The default method ``"auto"``: dopri5 that switches to rodas4 when the flow turns stiff.

An explicit method's step is bounded by accuracy on a smooth flow and by *stability* on a
stiff one (a fast decaying mode beside slow ones: the contracting covariances of the
Gaussian moment ODE, the rank histograms with V = GᵀG, MATH.md §6): there dopri5 keeps
|hλ| on the boundary of its stability region, ≈ 3.3 on the negative real axis, however
slowly the solution moves, and a fixed-step method leaves the PSD cone. ``"auto"``
detects this as LSODA and Julia's ``AutoTsit5(Rosenbrock23())`` do, and switches.

**The rule.** Each step is a dopri5 step (Dormand & Prince, adaptive 5(4)). After every
accepted step, per batch element, Hairer's stiffness test estimates the step's hλ from the
two last stages, both at t + h (Hairer, Nørsett & Wanner, *Solving ODEs I*, 2nd ed.,
§IV.2 and the code dopri5.f):

    hλ ≈ ‖h (k₇ − k₆)‖ / ‖y₁ − ŷ₆‖,

ŷ₆ the argument of stage 6, y₁ that of stage 7 (the new state); the norms are Euclidean
over the element's whole state. A step with hλ > 3.25 is *stability-bound*; an element
with 15 stability-bound accepted steps in a row is *stiff* (6 accepted steps below the
bound reset the count: dopri5.f's constants). When the first element of a run turns stiff:

- on a system with a Jacobian (:class:`~tpde.flows.systems.GaussianSystem`, and a
  :class:`~tpde.flows.systems.ParticleSystem`: dense up to n·d = 256 coordinates, an
  operator with GMRES stage solves beyond, :mod:`tpde.flows.systems.krylov`) the whole run
  goes on with rodas4 (:mod:`tpde.flows.methods.rosenbrock`, L-stable, its step bounded by
  accuracy only) from that step on; the trajectory's ``stats["switched_at"]`` says when
  (the time of the element that triggered it; ``stats["stiff_detected"]`` which elements
  were found stiff) and ``stats["method"]`` reads
  ``"auto (dopri5 → rodas4)"``. A batch switches together (one method per run); rodas4 is
  accurate on the elements that were not stiff too.
- on a system without one (grids) the run goes on with dopri5 at
  its stability-bound steps, which stay correct, and a warning says so
  (``stats["stiff_at"]``; the budget ``max_steps`` ends it with that status, early when
  the steps left cannot reach t1: :mod:`tpde.flows.loop`).

There is no switch back (LSODA switches both ways): rodas4 is right on non-stiff stretches
and in tpde's flows stiffness comes from contraction, which persists. Every state returned
is an accepted step of an adaptive method: a Gaussian run never returns a covariance
outside the PSD cone (:meth:`~tpde.flows.systems.GaussianSystem.degenerate`).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from tpde.flows.methods.base import Method, part_step, register_method, resolve_method
from tpde.flows.methods.explicit import DOPRI5, ExplicitRK
from tpde.flows.methods.rosenbrock import RODAS4

__all__ = ["Auto"]

#: dopri5's stability boundary on the negative real axis, as dopri5.f tests it.
STABILITY_BOUND = 3.25
#: Stability-bound accepted steps in a row that make an element stiff (dopri5.f).
STIFF_STEPS = 15
#: Accepted steps below the bound that reset the count (dopri5.f).
CALM_STEPS = 6


class Auto(Method):
    """dopri5 with Hairer's stiffness test, switching to rodas4 (module notes).

    One object per run (``resolve_method("auto")`` makes one, :meth:`fresh`; it counts the
    run's steps): :func:`tpde.flows.integrate` binds it to the system it steps
    (:meth:`bind`: in place when it is not bound yet, else a bound copy).

    Parameters
    ----------
    explicit : the adaptive explicit tableau stepped first (dopri5: the test reads its
        two last stages, both at c = 1).
    stiff : the method switched to (rodas4).

    Raises
    ------
    ValueError
        ``explicit`` is not an adaptive tableau whose two last stages are at c = 1, or
        ``stiff`` is not an adaptive method with the Jacobian; :meth:`step` raises
        RuntimeError before :meth:`bind`.
    """

    name = "auto"
    adaptive = True
    composite = True
    summary = "the default: dopri5, switching to rodas4 when the flow turns stiff"
    # uses_jacobian stays False: it needs one only to switch, and bind() checks the system

    def __init__(self, explicit: ExplicitRK = DOPRI5, stiff=RODAS4):
        explicit, stiff = resolve_method(explicit), resolve_method(stiff)
        if not (
            isinstance(explicit, ExplicitRK)
            and explicit.adaptive
            and len(explicit.c) >= 2
            and explicit.c[-1] == explicit.c[-2] == 1.0
        ):
            raise ValueError(
                f"Auto's explicit method must be an adaptive ExplicitRK tableau whose two last "
                f"stages are both at c = 1 (the stiffness test reads them), such as 'dopri5'; "
                f"received {getattr(explicit, 'name', explicit)!r}."
            )
        if not (stiff.uses_jacobian and stiff.adaptive):
            raise ValueError(
                f"Auto's stiff method must be an adaptive method that solves with the "
                f"Jacobian (a Rosenbrock method such as 'rodas4'); received "
                f"{getattr(stiff, 'name', stiff)!r}."
            )
        self.explicit, self.stiff = explicit, stiff
        self.current = explicit
        self.system = None
        self.can_switch = False
        self.stiff_at: float | None = None
        self._h_lambda: np.ndarray | None = None
        self._count: np.ndarray | None = None
        self._calm: np.ndarray | None = None
        self.stiff_elements: np.ndarray | None = None

    def fresh(self) -> Auto:
        """A new, unbound Auto with the same two methods (one per run)."""
        return Auto(self.explicit, self.stiff)

    def bind(self, system) -> Auto:
        """This run's method for ``system``: switches only where the system has a Jacobian.
        An unbound Auto binds itself; a bound one (a second run) binds a fresh copy."""
        bound = self if self.system is None else self.fresh()
        bound.system = system
        bound.can_switch = callable(getattr(system, "jacobian", None))
        return bound

    @property
    def order(self) -> int:
        return self.current.order

    @property
    def error_exponent(self) -> float:
        """The step-size exponent of the method stepping now (dopri5 1/5, rodas4 1/4)."""
        return float(self.current.error_exponent)

    def step(self, f, t: float, y, h, k1=None, h_clock: float = 0.0):
        """One step of the method stepping now; a dopri5 step also measures its hλ."""
        if self.system is None:
            raise RuntimeError(
                "this Auto method is not bound to a system: integrate(..., method=Auto()) "
                "binds a fresh copy per run; to step by hand, call auto.bind(system) first."
            )
        if self.current is not self.explicit:
            return self.current.step(f, t, y, h, k1, h_clock)
        stages, (before, after) = self.explicit.stages(f, t, y, h, k1, h_clock)
        self._h_lambda = self._stiffness(h, stages, before, after)
        return self.explicit.combine(y, h, stages)

    def _stiffness(self, h, stages, before, after) -> np.ndarray:
        """hλ ≈ ‖h(k₇ − k₆)‖ / ‖y₁ − ŷ₆‖ per element; 0 where y₁ = ŷ₆ or where the ratio is
        undefined (∞/∞ near an overflow, which the blow-up checks judge). One transfer."""
        change = tuple(
            part_step(h, i) * (k7 - k6)
            for i, (k7, k6) in enumerate(zip(stages[-1], stages[-2], strict=True))
        )
        gap = tuple(a - b for a, b in zip(after, before, strict=True))
        squares = torch.stack([self._square_norm(change), self._square_norm(gap)])
        numerator, denominator = squares.cpu().numpy().astype(float)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            ratio = np.sqrt(numerator / denominator)
        return np.where(denominator > 0, np.nan_to_num(ratio, nan=0.0, posinf=math.inf), 0.0)

    def _square_norm(self, state) -> torch.Tensor:
        """Σ of squares of each element's entries (batch shape), in float64 (float32
        squares overflow from 1e19)."""
        total = 0
        for part, k in zip(state, self.system.part_dims, strict=True):
            square = part.detach().double().square()
            total = total + (square.flatten(square.ndim - k).sum(-1) if k else square)
        return total

    def observe(self, accepted: np.ndarray, t: np.ndarray) -> None:
        """Count the accepted steps that were stability-bound (the loop calls this after each
        step's decision; ``t``: each element's time at the step's start)."""
        if self.current is not self.explicit or self._h_lambda is None:
            return
        bound = np.broadcast_to(self._h_lambda > STABILITY_BOUND, accepted.shape)
        self._h_lambda = None
        if self._count is None:
            self._count = np.zeros(accepted.shape, dtype=np.int64)
            self._calm = np.zeros(accepted.shape, dtype=np.int64)
            self.stiff_elements = np.zeros(accepted.shape, dtype=bool)
        self._count = np.where(accepted & bound, self._count + 1, self._count)
        self._calm = np.where(accepted & bound, 0, np.where(accepted, self._calm + 1, self._calm))
        reset = self._calm >= CALM_STEPS
        self._count, self._calm = np.where(reset, 0, self._count), np.where(reset, 0, self._calm)
        newly = (self._count >= STIFF_STEPS) & ~self.stiff_elements
        if not newly.any():
            return
        first = not self.stiff_elements.any()
        self.stiff_elements = self.stiff_elements | newly
        if first:
            self._turn_stiff(float(np.min(np.broadcast_to(t, newly.shape)[newly])))

    def _turn_stiff(self, t: float) -> None:
        """Switch to the stiff method, or say that this system has none."""
        self.stiff_at = t
        if self.can_switch:
            self.current = self.stiff
            return
        warnings.warn(
            f"method 'auto': the flow turned stiff at t = {t:.6g} (dopri5's steps are bounded "
            f"by stability: hλ > {STABILITY_BOUND} for {STIFF_STEPS} steps in a row); a "
            f"{type(self.system).__name__} has no stiff method (rodas4 needs the system's "
            "Jacobian: Gaussians and particle clouds), so the "
            "run goes on with dopri5 at these short steps. Raise max_steps if the budget "
            "runs out, or integrate a Gaussian or a particle cloud.",
            RuntimeWarning,
            stacklevel=2,
        )

    def run_stats(self) -> dict:
        """What the trajectory's stats say about the switch."""
        switched = self.current is not self.explicit
        method = f"auto ({self.explicit.name} → {self.stiff.name})" if switched else "auto"
        stiff = self.stiff_elements
        return {
            "method": method,
            "stiff_at": self.stiff_at,
            "switched_at": self.stiff_at if switched else None,
            "stiff_detected": stiff if stiff is not None else np.zeros((), dtype=bool),
        }


register_method(Auto())
