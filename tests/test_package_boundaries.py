"""Package boundaries (tpde._imports, also ``python -m tpde._imports``): no import cycle
between modules (module-level, late and importlib imports alike), no private name imported
from outside the package that holds it, one dependency direction (tpde._imports.LAYERS),
and every subpackage placed in it; tpde, experiments/ and benchmarks/ all checked."""

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


def test_a_late_import_is_an_edge_and_a_planted_late_cycle_fails(tmp_path):
    # issue 36: an import inside a function still couples the modules (base -> sum was one)
    root = _probe(tmp_path, "fields/a.py", "from tpde.fields.b import x\n")
    (root / "fields" / "b.py").write_text("def f():\n    from tpde.fields import a\n")
    assert _imports.cycles(_imports.graph(root)) == [
        "tpde.fields.a -> tpde.fields.b -> tpde.fields.a"
    ]
    assert "cycle: tpde.fields.a -> tpde.fields.b -> tpde.fields.a" in _imports.check(root)


def test_an_importlib_folder_import_is_an_edge_to_every_public_module(tmp_path):
    source = "import importlib\nfor n in ('a',):\n    importlib.import_module(f'{__name__}.{n}')\n"
    root = _probe(tmp_path, "flows/methods/__init__.py", source)
    (root / "flows" / "methods" / "a.py").write_text("import tpde.flows.methods.b\n")
    (root / "flows" / "methods" / "b.py").write_text("")
    (root / "flows" / "methods" / "_c.py").write_text("")
    edges = _imports.graph(root)
    # every public module of the folder, not the private one
    assert edges["tpde.flows.methods"] == {"tpde.flows.methods.a", "tpde.flows.methods.b"}
    exports = "from tpde.fields._exports import export_modules\nexport_modules(__name__, [], {})\n"
    root = _probe(tmp_path / "fields", "fields/x/__init__.py", exports)
    (root / "fields" / "x" / "y.py").write_text("from tpde.flows import integrate\n")
    (root / "fields" / "x" / "z.py").write_text("import tpde.fields.x\n")
    found = _imports.check(root)
    assert any("direction: tpde.fields.x.y" in f for f in found)


def test_a_private_import_in_experiments_fails(tmp_path):
    root = _probe(tmp_path, "fields/probe.py", "")
    study = tmp_path / "experiments" / "study"
    study.mkdir(parents=True)
    (tmp_path / "experiments" / "__init__.py").write_text("")
    (study / "__init__.py").write_text("from tpde.pretrained._model import model_dir\n")
    (found,) = _imports.private_crossings(root)
    assert found.startswith("tpde.experiments.study:1: from tpde.pretrained._model")
    assert "private: tpde.experiments.study:1" in "\n".join(_imports.check(root))


def test_benchmarks_may_import_the_engines_and_nothing_else_private(tmp_path):
    root = _probe(tmp_path, "fields/probe.py", "")
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    (bench / "speed.py").write_text("from tpde._engines import pick_engine\n")
    assert _imports.private_crossings(root) == []
    (bench / "other.py").write_text("from tpde.fields.attention._circle import route\n")
    (found,) = _imports.private_crossings(root)
    assert found.startswith("benchmarks.other:1")


def test_a_subpackage_outside_the_layers_is_named(tmp_path):
    root = _probe(tmp_path, "newpart/__init__.py", "")
    assert _imports.unplaced(root) == [
        "tpde.newpart is in no layer: add it to tpde._imports.LAYERS"
    ]


def test_every_subpackage_of_tpde_is_placed_and_experiments_and_benchmarks_are_read():
    assert _imports.unplaced() == []
    modules = _imports.graph()
    assert "tpde.experiments.framework" in modules and "benchmarks.fields" in modules
    assert "tpde.experiments" in modules["tpde.cli"]  # cli's late imports are edges now


def test_the_facade_is_not_first_in_the_package():
    import tpde

    assert tpde.__all__[0] != "attention" and "attention" in tpde.__all__


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
