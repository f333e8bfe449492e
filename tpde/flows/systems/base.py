"""The system protocol: what the one stepping loop (:mod:`tpde.flows.loop`) steps.

A system turns a measure into a state (a tuple of tensors with leading batch dimensions),
evaluates the field's right-hand side on it, turns it back into a measure, and measures
per batch element what the loop and the events need. The loop knows nothing else about
particles, Gaussians or grids; a new kind of state is a new :class:`System` in its own
module, registered for its measure type (:func:`~tpde.flows.systems.register_system`;
docs/EXTENDING.md, "A new kind of state").

The protocol (everything but ``part_dims``, ``initial``, ``rhs`` and ``measure`` has a
default):

- ``part_dims``: trailing dimensions of one element in each state part (particles
  ``(2,)``: points (n, d); Gaussians ``(1, 2)``: mean and covariance);
- ``initial() -> state``;  ``rhs(t, state) -> derivative`` (same structure);
  ``measure(state) -> Measure``;
- ``project(state) -> state``: applied after every accepted step (not to the initial
  state, which the field checks), the retraction onto the state's manifold: identity on
  R^d, symmetrisation of covariances, renormalisation onto the sphere, a LayerNorm.
  Applying it after whole steps only keeps the method's order (stages may leave the
  manifold by O(h^{p+1}));
- ``degenerate(old, new, adaptive) -> mask or None``: the elements whose new state
  (after ``project``) left the state's domain, with ``domain_status`` the status that
  says so: a covariance a fixed step took out of the PSD cone ("stiff": the exact flow
  keeps Σ PSD, only a too long explicit step leaves it), a token a projection sent to
  the origin ("lost_token"). The loop rejects such a step (adaptive methods retry a
  shorter one) or stops the element there (fixed steps); None: no domain to leave;
- ``propose_step(t, state, h) -> h`` and ``check_step(h) -> (ok, retry)``: a step-size
  controller of the system's own (the CFL condition of grids) besides the method's error
  estimate; ``record_step(h, state)`` sees every accepted step; ``stats()`` adds the
  system's diagnostics to the trajectory's;
- ``size``, ``trace``, ``rhs_norm``: per-element reductions read by the events;
- ``jacobian(t, state) -> Linearization``: the per-element Jacobian of ``rhs`` in flat
  coordinates, for the stiff methods (:mod:`tpde.flows.methods.rosenbrock`;
  :mod:`tpde.flows.systems.jacobian`); optional, and only the systems that have it can be
  stepped by them.

Inner solves (Sinkhorn scalings) report into the system's :class:`InnerSolves` collector,
passed explicitly to the field; the loop stops a run whose inner solve failed.
"""

from __future__ import annotations

import math

import torch

from tpde.fields import Field, InnerSolves, Sum

__all__ = ["System", "check_start", "reduce_element"]


def reduce_element(part: torch.Tensor, dims: int, op) -> torch.Tensor:
    """Reduce the last ``dims`` dimensions of ``part`` (one batch element's data)."""
    if dims == 0:
        return op(part.unsqueeze(-1), dim=-1)
    return op(part.reshape(*part.shape[: part.ndim - dims], -1), dim=-1)


def check_start(field, mu, t0: float, kind: type | None = None, system: str = "") -> None:
    """Raise unless ``mu`` is a ``kind`` (when given) that the field acting at t0 takes (a
    Mix-LN stack started after its switch is Pre-LN, which takes tokens off the sphere)."""
    if kind is not None and not isinstance(mu, kind):
        raise TypeError(
            f"a {system} steps {kind.__name__} measures; received {type(mu).__name__}. Let "
            "integrate(field, mu0, t1) choose the system of mu0 (tpde.flows.SYSTEMS)."
        )
    field.piece(t0).check_measure(mu)


class System:
    """Base class of systems: per-element reductions and the default hooks (module notes)."""

    part_dims: tuple[int, ...]
    #: The method :func:`tpde.flows.integrate` uses when none is given.
    default_method: str | None = "auto"

    def __init__(self, field):
        if not isinstance(field, Field):
            raise TypeError(
                f"{type(self).__name__} steps a tpde field; received {type(field).__name__} as "
                f"the field. Call {type(self).__name__}(field, measure, ...)."
            )
        self.base_field = self.field = field
        #: Reports of the inner solves made by the field during this run.
        self.inner = InnerSolves()
        self._capabilities: dict[tuple[int, str], tuple] = {}

    def reset_run(self) -> None:
        """Start a run afresh: the inner-solve reports and the piece in time of a previous
        run are dropped (:func:`tpde.flows.integrate` calls this; subclasses with per-run
        counters extend it)."""
        self.inner = InnerSolves()
        self.field = self.base_field
        self._capabilities = {}

    def capable(self, field, capability: str) -> bool:
        """``field.supports(capability)``, asked once per field and run (a run's fields —
        its pieces in time and their parts — do not change during it)."""
        key = (id(field), capability)
        cached = self._capabilities.get(key)
        if cached is None or cached[0] is not field:
            cached = self._capabilities[key] = (field, field.supports(capability))
        return cached[1]

    # ------------------------------------------------------------------ pieces in time
    def enter(self, t: float) -> bool:
        """Use the piece of a piecewise-in-time field (``field.piece(t)``) active at t.

        Returns True when the piece changed (the loop then drops cached stages).
        """
        if not self.base_field.breakpoints:
            return False
        current = self.base_field.piece(t)
        changed = current is not self.field
        self.field = current
        return changed

    # ------------------------------------------------------------------ per element
    def batch_of(self, state) -> torch.Size:
        return state[0].shape[: state[0].ndim - self.part_dims[0]]

    def unbatched(self) -> bool:
        """Whether the run's initial state is one element (no batch dimensions)."""
        return tuple(self.batch_of(self.initial())) == ()

    def finite(self, state) -> torch.Tensor:
        """Whether every entry of an element is finite (a state the loop may keep).

        One sum per element (a NaN or an infinite entry makes it non-finite: 10× faster
        than an elementwise isfinite map), finite where s − s = 0 (NaN for ±Inf and NaN:
        two kernels where ``torch.isfinite`` takes four); an element whose sum is not finite
        is checked again by its smallest and largest entries, since a sum of huge finite
        entries can overflow.
        """
        flags = []
        for part, k in zip(state, self.part_dims, strict=True):
            flat = part.detach() if part.requires_grad else part
            flat = flat.reshape(*part.shape[: part.ndim - k], -1)
            if flat.shape[-1] == 0 or not flat.is_floating_point():
                flags.append(reduce_element(torch.isfinite(part), k, torch.all))
                continue
            total = flat.sum(-1)
            ok = (total - total) == 0
            if not bool(ok if ok.ndim == 0 else ok.all()):
                suspect = ~ok
                low, high = torch.aminmax(flat[suspect], dim=-1)
                ok = ok.clone()
                ok[suspect] = torch.isfinite(low) & torch.isfinite(high)
            flags.append(ok)
        return flags[0] if len(flags) == 1 else torch.stack(flags).all(dim=0)

    def error_norm(self, error, y0, y1, rtol: float, atol: float) -> torch.Tensor:
        """RMS of error / (atol + rtol·max(|y0|, |y1|)) per element (Hairer's norm)."""
        total, count = 0.0, 0
        for e, a, b, k in zip(error, y0, y1, self.part_dims, strict=True):
            scaled = e.detach() / (atol + rtol * torch.maximum(a.detach().abs(), b.detach().abs()))
            total = total + reduce_element(scaled**2, k, torch.sum)
            count += math.prod(e.shape[e.ndim - k :])
        return (total / count).sqrt()

    def mask(self, keep: torch.Tensor, new, old):
        """Per-element choice between two states (keep → new)."""
        return tuple(
            torch.where(keep.reshape(*keep.shape, *(1,) * k), a, b)
            for a, b, k in zip(new, old, self.part_dims, strict=True)
        )

    def per_part(self, step: torch.Tensor):
        """A per-element step (batch shape) as one broadcastable tensor per state part."""
        return tuple(step.reshape(*step.shape, *(1,) * k) for k in self.part_dims)

    # ------------------------------------------------------------------ starting a run
    def check_method(self, method) -> None:
        """Raise if this system cannot be stepped by ``method`` (default: any)."""

    def first_step(self, t0: float, t1: float, dt):
        """The first (or fixed) step: ``dt``, default (t1 − t0)/100."""
        if dt is not None:
            return dt
        first = (t1 - t0) / 100
        return 1.0 if first == 0 else first  # t1 == t0 and no dt given

    # ------------------------------------------------------------------ splitting
    @property
    def split_fields(self) -> tuple:
        """The fields a splitting method steps one at a time: a :class:`~tpde.fields.Sum`'s
        parts, or the field acting now alone (any other field, a parallel block included)."""
        return self.field.parts if isinstance(self.field, Sum) else (self.field,)

    @property
    def parts(self) -> int:
        """Number of parts of the field acting now (:attr:`split_fields`)."""
        return len(self.split_fields)

    def part_field(self, index: int):
        """The field of part ``index`` acting now."""
        return self.split_fields[index]

    def rhs_part(self, index: int, t, state):
        """The right-hand side of one part alone (splitting methods)."""
        return self.rhs(t, state, field=self.part_field(index))

    def project_part(self, index: int, state):
        """The retraction of one part after its sub-step (default: the system's own)."""
        return self.project(state)

    # ------------------------------------------------------------------ default hooks
    #: The status of an element whose state left the domain (see ``degenerate``).
    domain_status = None

    def project(self, state):
        return state

    def degenerate(self, old, new, adaptive: bool) -> torch.Tensor | None:
        """Per element: whether the step from ``old`` to ``new`` left the state's domain
        (module notes; ``adaptive``: the step comes from an adaptive method); None: never."""
        return None

    def propose_step(self, t: float, state, h):
        return h

    def check_step(self, h) -> tuple[bool, float | None]:
        return True, None

    def record_step(self, h, state) -> None:
        return None

    def stats(self, saved, final) -> dict:
        """Diagnostics of the run for ``Trajectory.stats`` (saved states, final state)."""
        return {}
