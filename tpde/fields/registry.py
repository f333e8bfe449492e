"""The variant registry: one name → constructor table for every attention variant.

A variant is built from the common parameters ``(Q, K, V, scale=None, **options)``
(docs/DESIGN.md) by its :class:`Variant` entry. The table is read by
:meth:`tpde.fields.MultiHead.split` (``kind=``: the variants that can be a head), by the
experiments (the atlas runs every registered variant, the paper's panels build theirs
here) and by the engine agreement tests (every variant with the capability
``"softmax_form"`` runs on every softmax engine and under :class:`~tpde.fields.Masked`).
A new variant is its own module that decorates its class (or a builder) with
:func:`register`, plus its test (docs/EXTENDING.md).

Feed-forward fields (:class:`~tpde.fields.MLP`, :class:`~tpde.fields.SwiGLU`) are not
registered: they have no Q, K, V to build from, cannot be a head of ``MultiHead.split`` and
do not interact, so nothing that reads this table applies to them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = [
    "PAPER_ORDER",
    "VARIANTS",
    "Variant",
    "build",
    "register",
    "variant",
    "variant_names",
]


@dataclass(frozen=True)
class Variant:
    """A registered attention variant.

    Attributes
    ----------
    name : its name in the table (``kind=`` of MultiHead.split, the atlas, sweeps).
    build : ``(Q, K, V, scale=None, **options) -> Field``.
    head : whether it can be one head of :meth:`MultiHead.split` (a single-head field).
    positions : whether its tokens need positions (causal attention: particles built
        with ``Empirical(points, positions=...)``; no grid, no Gaussian).
    defaults : options the experiments add (e.g. sigmoid's mean-field bias 0, where the
        class default is the literature layer): :meth:`standard` applies them, ``build``
        and :func:`build` do not.
    summary : one line for listings.
    """

    name: str
    build: Callable
    head: bool = True
    positions: bool = False
    defaults: dict = field(default_factory=dict)
    summary: str = ""

    def standard(self, Q, K, V, scale=None, **options):
        """The variant as the experiments run it: its ``defaults`` under ``options``."""
        return self.build(Q, K, V, scale, **{**self.defaults, **options})


#: name -> :class:`Variant`, in registration order.
VARIANTS: dict[str, Variant] = {}


def register(name: str, *, head: bool = True, positions: bool = False, defaults=None, summary=""):
    """Class (or builder) decorator: add a variant to :data:`VARIANTS` under ``name``."""

    def decorate(builder):
        if name in VARIANTS:
            raise ValueError(f"an attention variant named {name!r} is already registered.")
        doc = (builder.__doc__ or "").strip().splitlines()
        VARIANTS[name] = Variant(
            name, builder, head, positions, dict(defaults or {}), summary or (doc[0] if doc else "")
        )
        return builder

    return decorate


def variant(name: str, *, head: bool = False) -> Variant:
    """The registered variant ``name`` (``head=True``: one that can be a MultiHead head)."""
    known = variant_names(head=head)
    if head and name in VARIANTS and name not in known:
        raise ValueError(
            f"{name!r} is registered but cannot be a head of MultiHead.split (it is not a "
            f"single-head field: head=False in tpde.fields.registry); heads: "
            f"{', '.join(map(repr, known))}. Build it on its own with "
            f"tpde.fields.registry.build({name!r}, Q, K, V)."
        )
    if name not in known:
        what = "kind" if head else "variant"
        raise ValueError(
            f"unknown {what} {name!r}; choose one of {', '.join(map(repr, known))} (the "
            "registered variants, tpde.fields.registry)."
        )
    return VARIANTS[name]


#: The paper's variants, listed first (in this order) wherever every variant is run.
PAPER_ORDER = ("softmax", "l2", "sinkhorn", "sigmoid", "linear", "multihead", "masked")


def variant_names(*, head: bool = False) -> list[str]:
    """Registered names: the paper's first (:data:`PAPER_ORDER`), then the others in
    registration order; only those that can be a head with ``head=True``."""
    names = [n for n in PAPER_ORDER if n in VARIANTS]
    names += [n for n in VARIANTS if n not in PAPER_ORDER]
    return [n for n in names if VARIANTS[n].head or not head]


def build(name: str, Q, K, V, scale=None, **options):
    """Build the variant ``name`` from (Q, K, V, scale) and its options (no defaults added).

    An option the variant's builder does not take is refused with the options it takes.
    """
    entry = variant(name)
    _check_options(entry, options)
    return entry.build(Q, K, V, scale, **options)


def _check_options(entry: Variant, options: dict) -> None:
    params = inspect.signature(entry.build).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return  # a builder that forwards its options checks them itself
    known = [p.name for p in params if p.kind is not inspect.Parameter.VAR_POSITIONAL]
    known = [k for k in known if k not in ("self", "Q", "K", "V", "scale")]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(
            f"variant {entry.name!r} takes no option {', '.join(map(repr, unknown))}; its "
            f"options are: {', '.join(known) or 'none'}."
        )
