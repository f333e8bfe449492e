r"""Splitting methods over the parts of a sum of fields (MATH.md §8).

For ẏ = Σ_p F_p(y) (a :class:`~tpde.fields.Sum`: a Transformer layer's attention and
feed-forward parts), a splitting step advances each part on its own with an inner method:

- **Lie–Trotter** (order 1): y ← Φ_{F_P}^h ∘ … ∘ Φ_{F_1}^h (y), parts in order;
- **Strang** (order 2): the symmetric composition
  Φ_{F_1}^{h/2} ∘ … ∘ Φ_{F_{P−1}}^{h/2} ∘ Φ_{F_P}^h ∘ Φ_{F_{P−1}}^{h/2} ∘ … ∘ Φ_{F_1}^{h/2}.

Φ^h is one step of the inner method (Euler for Lie–Trotter, Heun for Strang by default:
the lowest order that keeps the composition's). After each sub-step the part's own
projection is applied (its norm scheme's retraction, when it has one): so Lie–Trotter with
Euler sub-steps at h = 1 *is* the discrete sequential layer, x ← x + Attn(N₁x);
x ← x + F(N₂x) for a Pre-norm layer and x ← LN₁(x + Attn x); x ← LN₂(x + F x) for a
Post-norm one (Lu et al., "Understanding and improving Transformer from a multi-particle
dynamic system point of view", arXiv:1906.02762, read the Transformer as this splitting;
Strang is their "Macaron" layer). The order is that of the composition, capped by the inner
method's: min(1, q) for Lie–Trotter, min(2, q) for Strang (Hairer, Lubich & Wanner,
*Geometric Numerical Integration*, §II.5). Splitting steps are fixed (no error estimate).

Part p's sub-step over [t, t + τ] evaluates the part at the times of the inner method's
stages in that interval (Strang's two half steps of a part cover [t, t + h/2] and
[t + h/2, t + h]).
"""

from __future__ import annotations

from dataclasses import dataclass

from tpde.flows.methods.base import Method, register_method, resolve_method
from tpde.flows.methods.explicit import EULER, HEUN

__all__ = ["LIE_TROTTER", "SPLITTINGS", "STRANG", "Splitting"]

KINDS = ("lie-trotter", "strang")
#: The default inner method of each kind: the lowest order that keeps the composition's
#: (Lie–Trotter with Euler at h = 1 is the discrete network; Strang with Heun is order 2).
DEFAULT_INNER = {"lie-trotter": EULER, "strang": HEUN}


def _scaled(h, fraction: float):
    """A step (a float, or one tensor per state part) times ``fraction``."""
    if isinstance(h, tuple):
        return tuple(part * fraction for part in h)
    return h * fraction


@dataclass(frozen=True)
class Splitting(Method):
    """A splitting method: Lie–Trotter or Strang over a sum's parts (module notes).

    Parameters
    ----------
    kind : "lie-trotter" or "strang".
    inner : a method name or object (default: Euler for Lie–Trotter, Heun for Strang, so
        that each has its composition's order): the scheme of each sub-step; fixed step
        (an adaptive inner method is stepped without its error estimate).

    Attributes
    ----------
    name, order (min of the composition's order and the inner method's), adaptive = False,
    splits = True (the loop hands it the parts: ``f.part(p)`` and ``f.project_part(p, y)``).
    """

    kind: str = "lie-trotter"
    inner: object = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(
                f"unknown splitting {self.kind!r}; choose 'lie-trotter' (order 1) or 'strang' "
                "(order 2)."
            )
        inner = resolve_method(
            DEFAULT_INNER[self.kind] if self.inner is None else self.inner, default="euler"
        )
        if inner.splits:
            raise ValueError("the inner method of a splitting cannot be a splitting itself.")
        if inner.composite:
            raise ValueError(
                f"the inner method of a splitting steps fixed sub-steps; {inner.name!r} "
                "chooses its own steps and method. Give a fixed inner method ('euler', "
                "'heun', 'rk4') or an explicit tableau."
            )
        if inner.uses_jacobian:
            raise ValueError(
                f"the inner method of a splitting must be explicit; received {inner.name!r}, "
                "which needs the Jacobian of the whole system."
            )
        object.__setattr__(self, "inner", inner)

    adaptive = False
    splits = True
    uses_k1 = False
    composite = True

    @property
    def name(self) -> str:
        default = self.inner is DEFAULT_INNER[self.kind]
        return self.kind if default else f"{self.kind}({self.inner.name})"

    @property
    def summary(self) -> str:
        what = (
            "a sum's parts one after the other"
            if self.kind == "lie-trotter"
            else ("the symmetric composition of a sum's parts")
        )
        return f"{what}, {self.inner.name} sub-steps (for a Sum of fields)"

    @property
    def order(self) -> int:
        return min(1 if self.kind == "lie-trotter" else 2, self.inner.order)

    def sequence(self, parts: int) -> list[tuple[int, float, float]]:
        """(part, start fraction, length fraction) of each sub-step of one step."""
        if self.kind == "lie-trotter" or parts == 1:
            return [(p, 0.0, 1.0) for p in range(parts)]
        first = [(p, 0.0, 0.5) for p in range(parts - 1)]
        last = [(p, 0.5, 0.5) for p in reversed(range(parts - 1))]
        return [*first, (parts - 1, 0.0, 1.0), *last]

    def step(self, f, t: float, y, h, k1=None, h_clock: float = 0.0):
        """One splitting step of ``f`` (the loop's right-hand side, with its parts)."""
        for part, start, length in self.sequence(f.parts):
            result = self.inner.step(
                f.part(part),
                t + start * h_clock,
                y,
                _scaled(h, length),
                None,
                h_clock=h_clock * length,
            )
            if not isinstance(result, tuple) or len(result) != 3:
                raise TypeError(
                    f"the inner method {self.inner.name!r} of {self.name!r}: step must return "
                    "(new state, error estimate, derivative) (error and derivative may be "
                    f"None); received {type(result).__name__}"
                    f"{f' of length {len(result)}' if isinstance(result, tuple) else ''}."
                )
            y = f.project_part(part, result[0])
        return y, None, None


LIE_TROTTER = register_method(Splitting("lie-trotter"))
STRANG = register_method(Splitting("strang"))

#: The splitting methods by name (``integrate(method="lie-trotter")``); any inner method:
#: ``Splitting("strang", inner="rk4")``.
SPLITTINGS = {m.kind: m for m in (LIE_TROTTER, STRANG)}
