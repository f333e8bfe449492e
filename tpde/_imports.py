"""The import graph of tpde, checked: ``python -m tpde._imports`` (exit status 1 on a finding).

Three rules, read from the source files (AST, nothing is imported):

- **no cycle** between modules, counting module-level imports (an import inside a function
  is a deliberate late binding and is not an edge). A package's ``__init__`` importing its
  own modules is the package's, not a cycle;
- **no private name across packages**: a private module (``pkg._mod``) or a private name
  (``_name``) is imported only from inside the package that holds it (``tpde._engines``
  anywhere in tpde; ``tpde.fields.attention._circle`` only in ``tpde.fields.attention``);
- **one direction**: measures ← metrics ← fields ← flows (a layer imports only those to its
  left; tpde's private modules at the top, e.g. ``tpde._engines``, serve every layer).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

__all__ = ["LAYERS", "check", "cycles", "direction", "graph", "private_crossings"]

#: The layers in dependency order: each may import those before it, never those after.
LAYERS = ("tpde.measures", "tpde.metrics", "tpde.fields", "tpde.flows")

ROOT = Path(__file__).resolve().parent


def _name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts).removesuffix(".__init__")


def _imports(path: Path, root: Path):
    """(line, module, names, module_level) of every tpde import in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = set(map(id, tree.body))
    package = _name(path, root).rsplit(".", 0 if path.name == "__init__.py" else 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # relative: resolve against the package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, module] if module else base)
            if module.split(".")[0] == root.name:
                yield node.lineno, module, [a.name for a in node.names], id(node) in top
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == root.name:
                    yield node.lineno, alias.name, [], id(node) in top


def _files(root: Path):
    return sorted(root.rglob("*.py"))


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the tpde modules it imports at module level."""
    names = {_name(path, root): path for path in _files(root)}
    edges = {}
    for module, path in names.items():
        deps = set()
        for _, target, imported, module_level in _imports(path, root):
            if not module_level:
                continue
            deps.add(target)
            deps.update(f"{target}.{name}" for name in imported)
        # a package's __init__ importing its own modules is not a cycle between modules
        edges[module] = {
            d for d in deps if d in names and d != module and not module.startswith(d + ".")
        }
    return edges


def cycles(edges: dict[str, set[str]]) -> list[str]:
    """Every cycle met by a depth-first walk, as 'a -> b -> a'."""
    visiting, done, found = set(), set(), []

    def visit(node, stack):
        visiting.add(node)
        for nxt in sorted(edges[node]):
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


def _owner(module: str, names: list[str], root: Path) -> str | None:
    """The package a private import belongs to, or None when nothing private is imported."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_"):
            return ".".join(parts[:i])
    if any(name.startswith("_") for name in names):
        is_package = root.parent.joinpath(*parts, "__init__.py").exists()
        return module if is_package else ".".join(parts[:-1])  # the package holding it
    return None


def private_crossings(root: Path = ROOT, files=None) -> list[str]:
    """Imports of a private module or name from outside the package that holds it."""
    found = []
    for path in files if files is not None else _files(root):
        importer = _name(path, root)
        for line, module, names, _ in _imports(path, root):
            owner = _owner(module, names, root)
            if owner is not None and not (importer == owner or importer.startswith(owner + ".")):
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
    for path in _files(root):
        importer = _name(path, root)
        own = _layer(importer)
        for line, module, _names, _ in _imports(path, root):
            target = _layer(module)
            if own is not None and target is not None and target > own:
                found.append(
                    f"{importer}:{line}: {LAYERS[own]} imports {module} ({LAYERS[target]} "
                    f"comes after it: {' <- '.join(LAYERS)})"
                )
    return found


def check(root: Path = ROOT) -> list[str]:
    """Every finding of the three rules (empty: the graph is clean)."""
    return [
        *(f"cycle: {c}" for c in cycles(graph(root))),
        *(f"private: {p}" for p in private_crossings(root)),
        *(f"direction: {d}" for d in direction(root)),
    ]


if __name__ == "__main__":
    findings = check()
    print(
        "\n".join(findings)
        or f"{len(graph())} modules: no cycle, no private crossing, "
        f"one direction ({' <- '.join(LAYERS)})."
    )
    sys.exit(1 if findings else 0)
