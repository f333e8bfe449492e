"""tpde's experiments: one module per study, run by ``tpde run`` (see :mod:`tpde.cli`).

This folder sits at the top of the repository (docs/DESIGN.md) and is installed as the
subpackage ``tpde.experiments`` (``setup.py`` maps it), never as a top-level
``experiments`` package: that name is taken on PyPI by an unrelated project and is the
name of countless research folders, which would shadow it or be shadowed by it. Modules
here import each other relatively, so nothing depends on the name they are loaded under.

Every experiment module has ``NAME``, ``TITLE``, ``Config``, ``QUICK``, ``run(config, out)``,
``plot(out)`` and ``report(out)`` (:mod:`._framework` describes them). The order below is
the order of ``tpde run`` and of the report.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

from . import _framework as framework  # the public face of the framework (tpde.cli uses it)

__all__ = ["REGISTRY", "framework", "get", "names"]

#: name on the command line -> module in this package.
REGISTRY = {
    "cones": "cones",
    "ranks": "ranks",
    "atlas": "atlas",
    "meanfield": "meanfield",
    "jko": "jko",
    "convexity": "convexity",
    "real-attention": "real_attention",
    "sphere": "sphere",
    "theory": "theory",
    "real-decoder": "real_decoder",
}


def names() -> list[str]:
    """Known experiment names, in run order."""
    return list(REGISTRY)


def get(name: str) -> ModuleType:
    """The experiment module called ``name`` (raises KeyError listing the known names)."""
    if name not in REGISTRY:
        known = ", ".join(REGISTRY)
        raise KeyError(f"unknown experiment {name!r}; known experiments: {known}.")
    return import_module(f"{__name__}.{REGISTRY[name]}")
