r"""The method protocol: the :class:`Method` base, its traits, and the table of methods.

A time-stepping method is an object the one stepping loop (:mod:`tpde.flows.loop`) calls
``step(f, t, y, h, k1, h_clock)`` on, and whose *traits* tell the loop and
:func:`tpde.flows.integrate` how to drive it. Every trait is declared here once, with its
default (:data:`TRAITS`); a method class states only the traits that differ.

A state is a tuple of tensors (particles: ``(points,)``; Gaussians: ``(mean, cov)``; grids:
``(masses, outflow)``). ``step`` returns the new state, the embedded error estimate
(adaptive methods; None otherwise) and the derivative at the new state when the method
has it for free (FSAL; None otherwise). ``h`` is a float, or a tuple with one step tensor
per state part (broadcasting against that part: one step per batch element); ``h_clock``
is the step of the clock the right-hand side sees (stage s is evaluated at t + c_s·h_clock).

**The table.** :data:`METHODS` maps every name :func:`integrate` accepts to its method;
each method module registers its methods (:func:`register_method`) when it is imported,
as the attention variants do (:mod:`tpde.fields.registry`). :func:`resolve_method`, the
error message listing the known methods and :func:`method_listing` (the ``integrate``
docstring, the API page) read the table, so a new method is its own module plus its test
(docs/EXTENDING.md, "A time-stepping method").
"""

from __future__ import annotations

import math

__all__ = [
    "METHODS",
    "REQUIRED",
    "TRAITS",
    "Method",
    "method_listing",
    "part_step",
    "register_method",
    "resolve_method",
]

#: The traits the loop needs and no default can supply, with what each means.
REQUIRED = {
    "name": "a str: the method's name (stats['method'], messages)",
    "order": "an int >= 1: the global order of the solution",
    "adaptive": "a bool: True if step returns an error estimate and the loop controls the "
    "step size, False for fixed steps",
    "step": "a callable step(f, t, y, h, k1, h_clock) -> (new state, error or None, "
    "derivative or None)",
}

#: The optional traits, each with its default (what :class:`Method` declares).
TRAITS = {
    "uses_k1": True,  # step takes the derivative at the step's start (k1) from the loop
    "uses_jacobian": False,  # step solves with f.jacobian (Rosenbrock): systems with one
    "splits": False,  # steps a sum's parts one at a time (f.part, f.project_part)
    "ssp": False,  # strong-stability preserving (what a grid flow may use)
    "composite": False,  # made of other methods (auto, splittings): no tableau of its own
    "error_exponent": 0.2,  # step-size exponent 1/(q + 1), q the embedded order
    "summary": "",  # one line for listings (method_listing)
}


def part_step(h, index: int):
    """The step multiplying state part ``index``: a float, or that part's step tensor."""
    return h[index] if isinstance(h, tuple) else h


class Method:
    """Base of the time-stepping methods: every trait the loop reads, with its default.

    A subclass sets ``name``, ``order`` and ``adaptive`` (:data:`REQUIRED`), implements
    :meth:`step`, and overrides the optional traits (:data:`TRAITS`) and hooks that
    differ. The hooks:

    - :meth:`fresh`: the object :func:`resolve_method` hands out for a name (itself; a
      method with per-run state, "auto", returns a new one);
    - :meth:`bind`: the method of one run on one system (itself; "auto" binds the system
      whose Jacobian it may switch to);
    - :meth:`observe`: sees every step's accept decision (``accepted``, the elements'
      times ``t`` at the step's start; numpy arrays with the batch shape);
    - :meth:`run_stats`: entries added to the trajectory's ``stats``.
    """

    name: str
    order: int
    adaptive: bool
    uses_k1 = TRAITS["uses_k1"]
    uses_jacobian = TRAITS["uses_jacobian"]
    splits = TRAITS["splits"]
    ssp = TRAITS["ssp"]
    composite = TRAITS["composite"]
    error_exponent = TRAITS["error_exponent"]
    summary = TRAITS["summary"]

    def step(self, f, t: float, y, h, k1=None, h_clock: float = 0.0):
        """One step from (t, y): (new state, error estimate or None, derivative or None)."""
        raise NotImplementedError(f"{type(self).__name__} must implement step.")

    def fresh(self) -> Method:
        return self

    def bind(self, system) -> Method:
        return self

    def observe(self, accepted, t) -> None:
        return None

    def run_stats(self) -> dict:
        return {}

    def describe(self) -> str:
        """One line: name, order, fixed or adaptive, and the summary."""
        kind = "adaptive" if self.adaptive else "fixed step"
        text = f"{self.name!r} (order {self.order}, {kind})"
        return f"{text}: {self.summary}" if self.summary else text


class _Adopted(Method):
    """A method object that does not subclass :class:`Method` (duck-typed): its required
    traits checked, its optional ones read once (the defaults of :data:`TRAITS`)."""

    def __init__(self, method):
        self.method = method
        self.name = getattr(method, "name", type(method).__name__)
        self.order, self.adaptive = method.order, method.adaptive
        for trait, default in TRAITS.items():
            setattr(self, trait, getattr(method, trait, default))
        for hook in ("fresh", "bind", "observe", "run_stats"):
            if callable(getattr(method, hook, None)):
                setattr(self, hook, getattr(method, hook))

    def step(self, f, t, y, h, k1=None, h_clock: float = 0.0):
        return self.method.step(f, t, y, h, k1, h_clock=h_clock)


def check_traits(method, where: str) -> None:
    """Raise, naming every trait at fault, unless ``method`` has every trait of
    :data:`REQUIRED` and its optional traits have the declared types. Checked where a method
    is registered and where one is resolved for a run (:func:`resolve_method`), so a method
    never registered is checked too."""
    label = getattr(method, "name", type(method).__name__)
    missing = [t for t in REQUIRED if not hasattr(method, t)]
    if isinstance(method, Method) and type(method).step is Method.step:
        missing.append("step")  # the base's step only raises
    if missing:
        needs = "; ".join(f"{t!r}: {REQUIRED[t]}" for t in missing)
        raise TypeError(
            f"{where}: method {label!r} ({type(method).__name__}) lacks the trait"
            f"{'s' if len(missing) > 1 else ''} {', '.join(repr(t) for t in missing)} that the "
            f"stepping loop needs ({needs}). Subclass tpde.flows.Method and set "
            f"{'them' if len(missing) > 1 else 'it'}."
        )
    wrong = [t for t, ok in _trait_checks(method).items() if not ok]
    if wrong:
        said = "; ".join(
            f"{t!r} as {REQUIRED.get(t, f'a {type(TRAITS.get(t)).__name__}')}, received "
            f"{getattr(method, t)!r}"
            for t in wrong
        )
        plural = "s" if len(wrong) > 1 else ""
        raise TypeError(f"{where}: method {label!r} must declare the trait{plural} {said}.")


def _trait_checks(method) -> dict[str, bool]:
    """Whether each trait of ``method`` (required and optional) has its declared type."""
    name, order, adaptive = method.name, method.order, method.adaptive
    checks = {
        "name": isinstance(name, str) and name != "",
        "order": isinstance(order, int) and not isinstance(order, bool) and order >= 1,
        "adaptive": isinstance(adaptive, bool),
        "step": callable(method.step),
    }
    for trait, default in TRAITS.items():
        value = getattr(method, trait, default)
        checks[trait] = (
            isinstance(value, type(default)) and not isinstance(value, bool)
            if isinstance(default, float)
            else isinstance(value, type(default))
        )
        if trait == "error_exponent" and checks[trait]:
            checks[trait] = math.isfinite(value) and value > 0
    return checks


#: Every method by name, in registration order (the method modules register theirs).
METHODS: dict[str, Method] = {}


def register_method(method: Method) -> Method:
    """Add ``method`` to :data:`METHODS` under its name; returns it.

    Refused (naming the trait or the name): an object that is not a :class:`Method`, one
    whose traits are missing or of the wrong type, and a name already registered.
    """
    if not isinstance(method, Method):
        raise TypeError(
            f"register_method takes a Method (subclass tpde.flows.Method); received "
            f"{type(method).__name__}."
        )
    check_traits(method, "register_method")
    if method.name in METHODS:
        raise ValueError(
            f"register_method: a method named {method.name!r} is already registered "
            f"({type(METHODS[method.name]).__name__}); choose another name."
        )
    METHODS[method.name] = method
    return method


def method_listing() -> str:
    """The registered methods, one line each (the ``integrate`` docstring, the API page)."""
    return "\n".join(f"- {m.describe()}" for m in METHODS.values())


def resolve_method(method, default: str = "auto") -> Method:
    """A method object from a name of :data:`METHODS` (``METHODS[name].fresh()``: "auto"
    is a new object per call, it counts its run's steps), or a method object itself (a
    duck-typed one is checked and adopted: :class:`Method`'s defaults fill what it lacks)."""
    if method is None:
        method = default
    if isinstance(method, str):
        if method not in METHODS:
            names = sorted(METHODS, key=lambda name: name != default)  # the default first
            known = ", ".join(repr(k) for k in names)
            raise ValueError(
                f"unknown method {method!r}; choose one of {known}, or pass a method object "
                "(an ExplicitRK tableau, a Splitting, a tpde.flows.Method)."
            )
        return METHODS[method].fresh()
    if isinstance(method, type):
        raise TypeError(
            f"method must be a method object or a name; received the class "
            f"{method.__name__} itself. Pass an instance (e.g. Splitting('strang'), Auto(), "
            "an ExplicitRK tableau) or a name such as 'rk4'."
        )
    if isinstance(method, Method):
        check_traits(method, "integrate")  # a subclass never registered is checked here
        return method
    if callable(getattr(method, "step", None)) and hasattr(method, "order"):
        check_traits(method, "integrate")
        return _Adopted(method)
    raise TypeError(
        f"method must be a name ({', '.join(METHODS)}) or a method object such as an "
        f"ExplicitRK; received {type(method).__name__}."
    )
