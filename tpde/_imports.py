"""The import graph of tpde, checked: ``python -m tpde._imports`` (exit status 1 on a finding).

Read from the source files (AST, nothing is imported): tpde itself, the checkout's
``experiments/`` (installed as ``tpde.experiments``) and ``benchmarks/``. Every import is an
edge, wherever it stands: at module level, inside a function (a late import still couples
the two modules) or through ``importlib`` (a package that imports its folder's modules by
name, ``importlib.import_module(f"{__name__}.{name}")`` or ``export_modules(__name__, …)``,
imports each of them). Four rules:

- **no cycle** between modules. A package's ``__init__`` importing its own modules is the
  package's, not a cycle;
- **no private name across packages**: a private module (``pkg._mod``) or a private name
  (``_name``) is imported only from inside the package that holds it (``tpde._engines``
  anywhere in tpde; ``tpde.fields.attention._circle`` only in ``tpde.fields.attention``;
  nothing private from experiments/, which uses the public API; benchmarks/ may import
  tpde's private top modules, the engines it measures, and nothing else private);
- **one direction**: each layer of :data:`LAYERS` imports only those to its left (tpde's
  private top modules, e.g. ``tpde._engines``, serve every layer; the package ``tpde``
  itself re-exports its layers);
- **every module placed**: each subpackage and public top module of tpde is in a layer.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

__all__ = ["LAYERS", "check", "cycles", "direction", "graph", "private_crossings", "unplaced"]

#: The layers in dependency order: each may import those before it, never those after.
LAYERS = (
    "tpde.measures",
    "tpde.metrics",
    "tpde.fields",
    "tpde.attention",  # a façade over tpde.fields
    "tpde.flows",
    "tpde.theory",
    "tpde.plot",
    "tpde.pretrained",
    "tpde.experiments",
    "tpde.cli",
    "benchmarks",
)

ROOT = Path(__file__).resolve().parent
# Calls that import every public module of the package named by their first argument.
_FOLDER_IMPORTERS = ("import_module", "export_modules")


def sources(root: Path = ROOT) -> dict[str, Path]:
    """Module name -> file: tpde under ``root``, and beside it (a checkout) ``experiments/``
    as ``tpde.experiments`` and ``benchmarks/`` as ``benchmarks``."""
    found = {_dotted(path.relative_to(root.parent)): path for path in sorted(root.rglob("*.py"))}
    checkout = root.parent
    for folder, name in (("experiments", f"{root.name}.experiments"), ("benchmarks", "benchmarks")):
        if (checkout / folder).is_dir() and name not in found:
            prefix = Path(*name.split("."))
            for path in sorted((checkout / folder).rglob("*.py")):
                found[_dotted(prefix / path.relative_to(checkout / folder))] = path
    return found


def _dotted(relative: Path) -> str:
    return ".".join(relative.with_suffix("").parts).removesuffix(".__init__")


def _package(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _folder_import(node: ast.Call) -> bool:
    """``import_module(f"{__name__}.{…}")`` or ``export_modules(__name__, …)``."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in _FOLDER_IMPORTERS or not node.args:
        return False
    first = node.args[0]
    if isinstance(first, ast.JoinedStr) and first.values:
        first = first.values[0]
        first = first.value if isinstance(first, ast.FormattedValue) else first
    return isinstance(first, ast.Name) and first.id == "__name__"


def _imports(module: str, path: Path, top: str):
    """(line, imported module, names, module_level) of every import of ``top`` in the file;
    a folder import yields its package with the names ``["*"]``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    level0 = set(map(id, tree.body))
    package = _package(module, path)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:  # relative: resolve against the package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, target] if target else base)
            if target.split(".")[0] in (top, "benchmarks"):
                yield node.lineno, target, [a.name for a in node.names], id(node) in level0
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in (top, "benchmarks"):
                    yield node.lineno, alias.name, [], id(node) in level0
        elif isinstance(node, ast.Call) and _folder_import(node):
            yield node.lineno, package, ["*"], False


def _targets(target: str, names: list[str], known: dict[str, Path]) -> set[str]:
    """The modules an import reaches: the module, and each imported name that is one."""
    if names == ["*"]:  # a folder import: every public module directly in the package
        prefix = target + "."
        return {m for m in known if m.startswith(prefix) and "." not in m[len(prefix) :]
                and not m[len(prefix) :].startswith("_")}  # fmt: skip
    return {target, *(f"{target}.{name}" for name in names)} & set(known)


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the tpde (and benchmarks) modules it imports, at any level."""
    known = sources(root)
    edges = {}
    for module, path in known.items():
        deps = set()
        for _, target, names, _ in _imports(module, path, root.name):
            deps |= _targets(target, names, known)
        # a package's __init__ importing its own modules is not a cycle between modules
        edges[module] = {d for d in deps if d != module and not module.startswith(d + ".")}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[str]:
    """Every cycle met by a depth-first walk, as 'a -> b -> a'."""
    visiting, done, found = set(), set(), []

    def visit(node, stack):
        visiting.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt in visiting:
                found.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in done:
                visit(nxt, [*stack, nxt])
        visiting.discard(node)
        done.add(node)

    for node in sorted(edges):
        if node not in done:
            visit(node, [node])
    return found


def _owner(module: str, names: list[str], known: dict[str, Path]) -> str | None:
    """The package a private import belongs to, or None when nothing private is imported."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_"):
            return ".".join(parts[:i])
    if any(name.startswith("_") for name in names):
        path = known.get(module)
        return module if path is None or path.name == "__init__.py" else ".".join(parts[:-1])
    return None


def private_crossings(root: Path = ROOT, files=None) -> list[str]:
    """Imports of a private module or name from outside the package that holds it."""
    known = sources(root)
    found = []
    for importer, path in known.items():
        if files is not None and path not in files:
            continue
        for line, module, names, _ in _imports(importer, path, root.name):
            owner = _owner(module, names, known)
            if owner is None:
                continue
            inside = importer == owner or importer.startswith(owner + ".")
            # benchmarks measure tpde's engines: its private top modules serve them too
            engines = owner == root.name and importer.split(".")[0] == "benchmarks"
            if not (inside or engines):
                found.append(f"{importer}:{line}: from {module} import {', '.join(names)}")
    return found


def _layer(module: str) -> int | None:
    for i, layer in enumerate(LAYERS):
        if module == layer or module.startswith(layer + "."):
            return i
    return None


def direction(root: Path = ROOT) -> list[str]:
    """Imports (at any level) from a layer to one after it in :data:`LAYERS`."""
    found = []
    for importer, path in sources(root).items():
        own = _layer(importer)
        for line, module, _names, _ in _imports(importer, path, root.name):
            target = _layer(module)
            if own is not None and target is not None and target > own:
                found.append(
                    f"{importer}:{line}: {LAYERS[own]} imports {module} ({LAYERS[target]} "
                    f"comes after it in {' <- '.join(LAYERS)})"
                )
    return found


def unplaced(root: Path = ROOT) -> list[str]:
    """Public subpackages and top modules of tpde that no layer of :data:`LAYERS` holds."""
    tops = {m.split(".")[1] for m in sources(root) if m.count(".") >= 1 and m.startswith(root.name)}
    return [
        f"{root.name}.{name} is in no layer: add it to tpde._imports.LAYERS"
        for name in sorted(tops)
        if not name.startswith("_") and _layer(f"{root.name}.{name}") is None
    ]


def check(root: Path = ROOT) -> list[str]:
    """Every finding of the four rules (empty: the graph is clean)."""
    return [
        *(f"cycle: {c}" for c in cycles(graph(root))),
        *(f"private: {p}" for p in private_crossings(root)),
        *(f"direction: {d}" for d in direction(root)),
        *(f"unplaced: {u}" for u in unplaced(root)),
    ]


if __name__ == "__main__":
    findings = check()
    print(
        "\n".join(findings)
        or f"{len(graph())} modules: no cycle, no private crossing, one direction "
        f"({' <- '.join(LAYERS)}), every module placed."
    )
    sys.exit(1 if findings else 0)
