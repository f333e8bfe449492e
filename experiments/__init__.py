"""tpde's experiments: one study per module or package, run by ``tpde run`` (see :mod:`tpde.cli`).

This folder sits at the top of the repository (docs/DESIGN.md) and is installed as the
subpackage ``tpde.experiments`` (``setup.py`` maps it), never as a top-level
``experiments`` package: that name is taken on PyPI by an unrelated project and is the
name of countless research folders, which would shadow it or be shadowed by it. Modules
here import each other relatively, so nothing depends on the name they are loaded under.

A study is a module (or, past about 450 lines, a package with ``config``, ``run``, ``plot``
and ``report`` modules) with ``NAME``, ``TITLE``, ``ORDER``, ``Config``, ``QUICK``,
``run(config, out)``, ``plot(out)`` and ``report(out)`` (:mod:`.framework` describes them).
The studies are found here, not listed: every public module or package of this folder that
has the whole protocol is one (:mod:`.framework`, :mod:`.workers`, :mod:`.common` and
:mod:`.sweep` are infrastructure), in the order of their ``ORDER`` (the order of ``tpde
run`` and of the report). Builders shared by studies or benchmarks live in
:mod:`.common`; no study imports another.
"""

from __future__ import annotations

import pkgutil
from functools import cache
from importlib import import_module
from types import ModuleType

from . import framework

__all__ = ["PROTOCOL", "framework", "get", "names", "studies", "title"]

#: The attributes every study has.
PROTOCOL = ("NAME", "TITLE", "ORDER", "Config", "QUICK", "run", "plot", "report")


@cache
def studies() -> dict[str, ModuleType]:
    """Every study of this folder by its command-line name, in run order.

    Raises ValueError when two studies share a name or an order, or a module has part of
    the protocol (a study missing an attribute), naming the modules.
    """
    found, orders = {}, {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = import_module(f"{__name__}.{info.name}")
        present = [a for a in PROTOCOL if hasattr(module, a)]
        if not present or present == ["run"]:  # infrastructure (framework, common, sweep)
            continue
        missing = [a for a in PROTOCOL if a not in present]
        if missing:
            raise ValueError(
                f"experiment module {module.__name__} lacks {', '.join(missing)} of the study "
                f"protocol ({', '.join(PROTOCOL)}); add them or rename it with a leading _."
            )
        for key, table, value in (("name", found, module.NAME), ("order", orders, module.ORDER)):
            if value in table:
                other = table[value] if key == "order" else table[value].__name__
                raise ValueError(
                    f"experiments {other} and {module.__name__} share the {key} {value!r}; "
                    f"give each study its own {key.upper()}."
                )
        found[module.NAME], orders[module.ORDER] = module, module.__name__
    return dict(sorted(found.items(), key=lambda item: item[1].ORDER))


def names() -> list[str]:
    """Known experiment names, in run order."""
    return list(studies())


def get(name: str) -> ModuleType:
    """The experiment module called ``name`` (raises KeyError listing the known names)."""
    known = studies()
    if name not in known:
        raise KeyError(f"unknown experiment {name!r}; known experiments: {', '.join(known)}.")
    return known[name]


def title(name: str) -> str:
    """The heading of study ``name`` in the report: "Experiment ORDER — TITLE" (the number
    is the study's ``ORDER``, unique among the studies, whatever the selection)."""
    module = get(name)
    return f"Experiment {module.ORDER} — {module.TITLE}"
