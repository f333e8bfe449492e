"""A package's public names, derived from its modules: one place lists nothing by hand.

Each package of :mod:`tpde.fields` imports its public modules (and subpackages) in name
order and takes the names of their ``__all__``: a new module (a variant, a feed-forward
field, a norm scheme, an energy) is exported, and registered where it registers itself,
without an edit to a list. A module whose name starts with ``_`` is private to its package
and is not exported.
"""

from __future__ import annotations

import importlib
import pkgutil

__all__ = ["export_modules"]


def export_modules(package: str, path, namespace: dict, as_modules=()) -> list[str]:
    """Import every public module of ``package`` and copy their ``__all__`` into ``namespace``.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    path : list of str
        The package's ``__path__``.
    namespace : dict
        The package's ``globals()``: receives each exported name.
    as_modules : tuple of str
        Modules exported as themselves (their names stay qualified, e.g. ``registry.build``).

    Returns
    -------
    list of str
        The exported names, sorted: the package's ``__all__``.

    Raises
    ------
    ImportError
        A public module without ``__all__``, or two modules exporting one name for two
        different objects.
    """
    names: dict[str, str] = {}
    for info in sorted(pkgutil.iter_modules(path), key=lambda item: item.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        if info.name in as_modules:
            names[info.name] = package
            continue
        exported = getattr(module, "__all__", None)
        if exported is None:
            raise ImportError(
                f"{module.__name__} has no __all__: a public module of {package} lists its "
                "public names in __all__ (they are exported by the package); name it with a "
                "leading underscore if it has none."
            )
        for name in exported:
            value = getattr(module, name)
            if name in names and namespace[name] is not value:
                raise ImportError(
                    f"{module.__name__} and {names[name]} both export {name!r}; rename one."
                )
            names[name] = module.__name__
            namespace[name] = value
    return sorted(names)
