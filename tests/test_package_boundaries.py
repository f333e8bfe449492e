"""Package boundaries: no import cycles, no private names imported across subpackages.

What flows need from a field is public in ``Field``; private names (a leading underscore)
stay inside their subpackage. The shared infrastructure modules ``tpde._bessel``, ``tpde._engines``,
``tpde._linalg``, ``tpde._scale_safe``, ``tpde._status`` and ``tpde._validation`` are private
to tpde, not to a subpackage, and may be imported anywhere inside it.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = {
    "tpde._bessel",
    "tpde._engines",
    "tpde._linalg",
    "tpde._scale_safe",
    "tpde._status",
    "tpde._validation",
}


def _package(path: Path) -> str:
    """tpde.<subpackage> of a source file (tpde for top-level modules)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:2]) if len(parts) > 2 else parts[0]


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tpde"):
            yield node.lineno, node.module, [a.name for a in node.names]


def _crossings(files):
    for path in files:
        own = _package(path)
        for line, module, names in _imports(path):
            if any(module == s or module.startswith(s + ".") for s in SHARED):
                continue
            target = ".".join(module.split(".")[:2])
            if target == own:
                continue
            private_module = any(part.startswith("_") for part in module.split(".")[1:])
            private_names = [n for n in names if n.startswith("_")]
            if private_module or private_names:
                yield f"{path.relative_to(ROOT)}:{line}: from {module} import {', '.join(names)}"


def test_no_private_name_is_imported_across_subpackages():
    files = sorted((ROOT / "tpde").rglob("*.py"))
    offenders = list(_crossings(files))
    assert not offenders, "\n".join(offenders)


def test_the_checker_finds_a_private_import(tmp_path):
    fake = ROOT / "tpde" / "flows" / "_probe_for_test.py"
    try:
        fake.write_text("from tpde.metrics.wasserstein import _hidden\n")
        assert len(list(_crossings([fake]))) == 1
    finally:
        fake.unlink()


def test_no_import_cycles_between_modules():
    # A module-level import graph of tpde/ (function-level imports are allowed to break a
    # cycle on purpose, but there should be none left to break).
    modules = {}
    for path in (ROOT / "tpde").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        deps = set()
        for node in ast.parse(path.read_text()).body:  # module level only
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tpde"):
                deps.add(node.module)
                deps.update(f"{node.module}.{a.name}" for a in node.names)
        modules[name] = deps
    graph = {m: {d for d in deps if d in modules and d != m} for m, deps in modules.items()}
    # Importing a package runs its __init__, which imports its modules: those edges are
    # the package's own, not a cycle between modules.
    for m in graph:
        graph[m] = {d for d in graph[m] if not m.startswith(d + ".")}
    visiting, done, cycles = set(), set(), []

    def visit(node, stack):
        visiting.add(node)
        for nxt in graph[node]:
            if nxt in visiting:
                cycles.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in done:
                visit(nxt, [*stack, nxt])
        visiting.discard(node)
        done.add(node)

    for m in sorted(graph):
        if m not in done:
            visit(m, [m])
    assert not cycles, "\n".join(cycles[:10])
