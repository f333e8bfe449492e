"""Package boundaries (tpde._imports, also ``python -m tpde._imports``): no import cycle
between modules, no private name imported from outside the package that holds it, and one
dependency direction, measures ← metrics ← fields ← flows."""

from pathlib import Path

from tpde import _imports

ROOT = Path(_imports.__file__).resolve().parent


def test_no_import_cycles_between_modules():
    assert not _imports.cycles(_imports.graph()), "\n".join(_imports.cycles(_imports.graph()))


def test_no_private_name_is_imported_across_packages():
    offenders = _imports.private_crossings()
    assert not offenders, "\n".join(offenders)


def test_dependencies_point_one_way():
    offenders = _imports.direction()
    assert not offenders, "\n".join(offenders)


def test_the_command_reports_a_clean_graph():
    assert _imports.check() == []


def _probe(tmp_path, relative: str, source: str) -> Path:
    """A copy of tpde's layout with one extra file (the real tree is left alone)."""
    root = tmp_path / "tpde"
    for path in ROOT.rglob("__init__.py"):
        target = root / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("")
    probe = root / relative
    probe.parent.mkdir(parents=True, exist_ok=True)
    probe.write_text(source)
    return root


def test_the_checker_finds_a_private_import(tmp_path):
    root = _probe(tmp_path, "flows/probe.py", "from tpde.metrics.wasserstein import _hidden\n")
    assert len(_imports.private_crossings(root)) == 1


def test_the_checker_finds_a_private_module_of_a_sibling_folder(tmp_path):
    source = "from tpde.fields.attention._circle import circle_route\n"
    root = _probe(tmp_path, "fields/gradient_flow/probe.py", source)
    assert len(_imports.private_crossings(root)) == 1
    root = _probe(tmp_path / "inside", "fields/attention/probe.py", source)
    assert _imports.private_crossings(root) == []


def test_tpde_private_modules_serve_every_package(tmp_path):
    root = _probe(tmp_path, "fields/probe.py", "from tpde._engines import logsumexp\n")
    assert _imports.private_crossings(root) == []


def test_the_checker_finds_an_import_against_the_direction(tmp_path):
    root = _probe(tmp_path, "fields/probe.py", "from tpde.flows import integrate\n")
    (found,) = _imports.direction(root)
    assert "tpde.fields imports tpde.flows" in found


def test_the_checker_finds_a_cycle(tmp_path):
    root = _probe(tmp_path, "fields/a.py", "from tpde.fields.b import x\n")
    (root / "fields" / "b.py").write_text("from tpde.fields import a\n")
    assert _imports.cycles(_imports.graph(root)) == [
        "tpde.fields.a -> tpde.fields.b -> tpde.fields.a"
    ]


def test_a_late_import_is_not_an_edge(tmp_path):
    root = _probe(tmp_path, "fields/a.py", "from tpde.fields.b import x\n")
    (root / "fields" / "b.py").write_text("def f():\n    from tpde.fields import a\n")
    assert _imports.cycles(_imports.graph(root)) == []


def test_benchmarks_reach_studies_only_through_common_builders():
    # A builder used by a study and a benchmark lives in experiments/common (issue 28: the
    # blow-up benchmark imported the cones study's run module). A benchmark may import a
    # study package itself (its Config) and the infrastructure, never a study's modules.
    import ast

    from tpde import experiments

    studies = set(experiments.names()) | {m.__name__.rsplit(".", 1)[-1]
                                          for m in experiments.studies().values()}  # fmt: skip
    root = Path(__file__).resolve().parents[1] / "benchmarks"
    bad = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else (
                [a.name for a in node.names] if isinstance(node, ast.Import) else [])  # fmt: skip
            for name in names:
                parts = name.split(".")
                if parts[:2] == ["tpde", "experiments"] and len(parts) > 3 and parts[2] in studies:
                    bad.append(f"{path.name}: {name}")
    assert not bad, f"benchmarks importing a study's modules (move the builder to common): {bad}"
