"""How a field calls a field: the token positions and the "queries are the keys" flag
that wrappers (Sum, Normalized, LayerSchedule, MultiHead, Parallel, …) pass to their parts
(the protocol of :class:`~tpde.fields.base.Field`; docs/EXTENDING.md, "a wrapper"), and the
collector of the inner solves those calls make (:class:`InnerSolves`)."""

from __future__ import annotations

import functools
import inspect
import warnings

import torch

from tpde._validation import check_positions

__all__ = [
    "InnerSolves",
    "check_own",
    "own_tokens",
    "part_velocity",
    "queries_are_keys",
    "query_positions",
    "takes_own",
]


def part_velocity(field, t, mu, x, engine, info, positions, *, own=None) -> torch.Tensor:
    """``field.particle_velocity`` at points x with their ``positions`` (m,), passed on only
    to a field that uses them (:attr:`Field.needs_positions`): None means that x are μ's
    own tokens (their positions are μ's). ``own`` (whether the queries are the keys: x are
    μ's own tokens; None: not said) is passed on only to a field whose ``particle_velocity``
    declares the keyword (:func:`takes_own`), so a field with the older signature keeps
    working. What every wrapper calls for its parts, and the particle flows for the field."""
    own = check_own(own, x, mu)
    extra = {}
    if positions is not None and field.needs_positions:
        _check_takes_positions(field)
        extra["positions"] = positions
    if own is not None and takes_own(type(field)):
        extra["own"] = own
    return field.particle_velocity(t, mu, x, engine, info, **extra)


@functools.cache
def takes_own(cls: type) -> bool:
    """Whether ``cls.particle_velocity`` declares the keyword ``own`` (asked once per class)."""
    return _takes_keyword(cls, "own")


@functools.cache
def _takes_keyword(cls: type, name: str) -> bool:
    """Whether ``cls.particle_velocity`` declares the keyword ``name`` (once per class)."""
    method = getattr(cls, "particle_velocity", None)
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):  # not introspectable: call it the older way
        return False
    return name in parameters and parameters[name].kind in (
        inspect.Parameter.KEYWORD_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    )


@functools.cache
def _takes_keywords(cls: type) -> bool:
    """Whether ``cls.particle_velocity`` takes ``**keywords`` (once per class)."""
    try:
        parameters = inspect.signature(cls.particle_velocity).parameters.values()
    except (AttributeError, TypeError, ValueError):
        return False
    return any(p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters)


def _check_takes_positions(field) -> None:
    """Raise unless a field that needs positions takes them (a wrapper whose declared child
    uses positions needs ``positions=None`` in its ``particle_velocity``)."""
    if _takes_keyword(type(field), "positions") or _takes_keywords(type(field)):
        return
    raise TypeError(
        f"{_positions_user(field)} needs the positions of the points x, but "
        f"{type(field).__name__}.particle_velocity takes no positions=: declare "
        "particle_velocity(t, mu, x, engine, info=None, positions=None, *, own=None) and pass "
        "them on to the children with tpde.fields.part_velocity."
    )


def check_own(own, x=None, mu=None):
    """``own`` checked: True, False or None (not said), nothing else — a truthy "False" or
    [False] would silently read as True. With ``x`` and ``mu``, own=True also needs x to hold
    as many points as μ has tokens (x are μ's tokens). Every ``own=`` goes through here."""
    if own is not None and not isinstance(own, bool):
        raise TypeError(
            f"own says whether the points x are μ's own tokens: True, False or None (not "
            f"said); received {own!r} ({type(own).__name__}). Pass a bool."
        )
    if own and x is not None and mu is not None:
        n, m = mu.points.shape[-2], x.shape[-2]
        if m != n:
            raise ValueError(
                f"own=True says that x are μ's tokens, but x has {m} points and μ has {n} "
                "tokens. Pass own=False (new points, with their positions where the field "
                "uses them), or x = mu.points."
            )
    return own


def queries_are_keys(own, x: torch.Tensor, mu) -> bool:
    """Whether the evaluation points x are μ's own tokens (the queries are the keys).

    ``own`` as the caller said it (True or False; False even where x equals μ's tokens in
    value: the caller evaluates at new points); None, when a caller outside tpde did not
    say: x is μ's tokens when it is the same tensor or equal to it (the one place tpde
    compares tensors to decide this; every call inside tpde says ``own``).
    """
    own = check_own(own, x, mu)
    if own is not None:
        return own
    points = mu.points
    return x is points or (x.shape == points.shape and torch.equal(x, points))


def own_tokens(x: torch.Tensor, mu, who: str, own=None) -> None:
    """Raise unless x are μ's own tokens (:func:`queries_are_keys`): a field with positions
    called at other points without their positions (by a wrapper defined outside tpde that
    does not pass ``positions=`` on) would otherwise give x the positions of μ's tokens."""
    if queries_are_keys(own, x, mu):
        return
    raise ValueError(
        f"{who} evaluates at points x other than μ's tokens only with their positions, and "
        "none were passed: call velocity(mu, x, positions=p), p of shape (m,). A wrapper "
        "defined outside tpde must pass positions on to its parts (tpde.fields."
        "part_velocity) and say so with needs_positions."
    )


def _positions_user(field) -> str:
    """Who needs positions, for messages: the field, or the wrapper and its part."""
    name = type(field).__name__
    inner = _positional_part(field)
    if inner is None or inner is field:
        return name
    return f"{name} (its part {type(inner).__name__} uses positions)"


def _positional_part(field):
    """The first field inside ``field`` (itself included) that uses positions, or None."""
    if not field.needs_positions:
        return None
    for child in field.children():
        if child.needs_positions:
            return _positional_part(child)
    return field


def query_positions(positions, x, who: str, uses: bool = True):
    """The checked positions (m,) of evaluation points x (m, d) of a field that ``uses``
    positions; None where x is None or the field uses none (and then ``positions`` must be
    None: they would be ignored)."""
    if x is None or not uses:
        if positions is not None and not uses:
            raise ValueError(
                "positions were given, but this field uses none (not causal, no positional "
                "encoding), so they would be ignored: drop positions=."
            )
        if positions is not None:
            raise ValueError(
                "positions are the positions of the evaluation points x, for a field that "
                "uses positions; pass x too, or drop positions to evaluate at μ's own tokens."
            )
        return None
    if positions is None:
        raise ValueError(
            f"{who} at points x needs their positions: pass positions of shape ({x.shape[0]},)."
        )
    return _check_positions(positions, x)


def _check_positions(positions, x) -> torch.Tensor:
    return check_positions(
        positions, x.shape[0], x,
        f"positions must have shape ({x.shape[0]},) to match x {tuple(x.shape)}; "
        "received {got}.",
    )  # fmt: skip


class InnerSolves:
    """Collects the reports of inner solves (Sinkhorn scalings) made by velocity calls.

    Passed explicitly (``info=``) to :meth:`Field.particle_velocity`, :meth:`Field.velocity`
    and the energies; a field with an inner solve appends one report per solve. A report
    has ``converged`` (True, False, or None when unchecked) and ``warning()`` (the warning
    to raise when it failed). Nothing is stored on the field itself.
    """

    def __init__(self):
        self.reports: list = []

    def record(self, report) -> None:
        self.reports.append(report)

    @property
    def last(self):
        """The latest report, or None."""
        return self.reports[-1] if self.reports else None

    @property
    def failure(self):
        """The first report whose solve missed its tolerance, or None."""
        return next((r for r in self.reports if r.converged is False), None)

    def warn(self, since: int = 0, stacklevel: int = 2) -> None:
        """Warn for every failed report from index ``since`` on (``stacklevel`` as in
        :func:`warnings.warn`, counted from the caller of this method)."""
        for report in self.reports[since:]:
            if report.converged is False:
                warnings.warn(report.warning(), stacklevel=stacklevel + 1)

    def __len__(self) -> int:
        return len(self.reports)
