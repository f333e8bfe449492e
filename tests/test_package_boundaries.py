"""Package boundaries (tpde._imports, also ``python -m tpde._imports``): no import cycle
between modules (module-level, late and importlib imports alike), no private name imported
from outside the package that holds it, one dependency direction (tpde._imports.LAYERS),
and every subpackage placed in it; tpde, experiments/ and benchmarks/ all checked."""

import ast
from pathlib import Path
from types import ModuleType

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


def _in_a_study(name: str, studies: dict[str, ModuleType]) -> tuple[ModuleType | None, list[str]]:
    """(The study that the dotted ``name`` lies in, the parts of ``name`` below it):
    tpde.experiments.<study>.<module> gives (<study>, [<module>]); a name outside the
    studies (None, [])."""
    parts = name.split(".")
    if parts[:2] != ["tpde", "experiments"] or len(parts) < 3 or parts[2] not in studies:
        return None, []
    return studies[parts[2]], parts[3:]


def _binds_a_module(package: ModuleType, name: str) -> bool:
    """Whether ``from <package> import <name>`` binds one of the package's modules: a file
    ``<name>.py`` or a folder ``<name>/`` in a directory of its ``__path__`` (a study that is
    one module has none), unless the package defines ``<name>`` as something else (a
    study's ``run`` function stands for its ``run`` module, as ``Config`` for itself)."""
    folders = [Path(p) for p in getattr(package, "__path__", ())]
    found = any((f / f"{name}.py").is_file() or (f / name).is_dir() for f in folders)
    value = getattr(package, name, None)
    return found and (value is None or isinstance(value, ModuleType))


def _study_modules_imported(folder: Path, studies: dict[str, ModuleType]) -> list[str]:
    """Each import in ``folder``'s scripts that reaches a module of a study, as "file:line:
    module" (``studies``: each study by its module name): ``import
    tpde.experiments.<study>.<module>`` (with ``as`` or not), ``from
    tpde.experiments.<study>.<module> import …`` and ``from tpde.experiments.<study> import
    <module>``. The study itself (``from tpde.experiments import <study>``) and the names its
    package defines (``from tpde.experiments.<study> import Config``) are allowed."""
    bad = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names if _in_a_study(a.name, studies)[1]]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                study, below = _in_a_study(node.module, studies)
                if below:
                    names = [node.module]
                elif study is not None:
                    bound = [a.name for a in node.names if _binds_a_module(study, a.name)]
                    names = [f"{node.module}.{name}" for name in bound]
            bad += [f"{path.name}:{node.lineno}: {name}" for name in names]
    return bad


def test_benchmarks_reach_studies_only_through_common_builders():
    # A builder used by a study and a benchmark lives in experiments/common (issue 28: the
    # blow-up benchmark imported the cones study's run module). A benchmark may import a
    # study package itself (its Config) and the infrastructure, never a study's modules,
    # by their dotted name or by name from the package (benchmarks/paper.py imported
    # ``protocols`` from tpde.experiments.ranks).
    from tpde import experiments

    studies = {m.__name__.rsplit(".", 1)[-1]: m for m in experiments.studies().values()}
    root = Path(__file__).resolve().parents[1] / "benchmarks"
    bad = _study_modules_imported(root, studies)
    assert not bad, f"benchmarks importing a study's modules (move the builder to common): {bad}"


def test_the_benchmark_check_finds_every_form_of_a_study_module_import(tmp_path):
    # A study package (a folder with config.py, run.py and draws/; run and Config defined by
    # its __init__) and a study that is one module, neither imported: ModuleType stand-ins.
    folder = tmp_path / "probe"
    (folder / "draws").mkdir(parents=True)
    (folder / "config.py").write_text("")
    (folder / "run.py").write_text("")
    probe = ModuleType("tpde.experiments.probe")
    probe.__path__ = [str(folder)]
    probe.Config, probe.run = type("Config", (), {}), lambda config, out: None
    single = ModuleType("tpde.experiments.single")
    single.Config = probe.Config
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    (bench / "allowed.py").write_text(
        "from tpde.experiments import probe\n"
        "from tpde.experiments.probe import Config, run\n"
        "from tpde.experiments.single import Config as Single\n"
        "from tpde.experiments.common.paper import flow\n"
        "import tpde.experiments.probe\n"
        "import tpde.experiments.common.paper as paper\n"
    )
    (bench / "caught.py").write_text(
        "from tpde.experiments.probe import Config, config\n"
        "from tpde.experiments.probe import draws as d\n"
        "import tpde.experiments.probe.config as c\n"
        "from tpde.experiments.probe.config import Config\n"
        "def late():\n"
        "    import tpde.experiments.probe.draws\n"
    )
    found = _study_modules_imported(bench, {"probe": probe, "single": single})
    assert found == [
        "caught.py:1: tpde.experiments.probe.config",
        "caught.py:2: tpde.experiments.probe.draws",
        "caught.py:3: tpde.experiments.probe.config",
        "caught.py:4: tpde.experiments.probe.config",
        "caught.py:6: tpde.experiments.probe.draws",
    ]


def test_the_benchmark_check_reads_a_real_study_package_from_its_path(tmp_path):
    # ranks (a package): config.py is a module of it; Config and report (a function standing
    # for report.py) are names its __init__ defines.
    from tpde.experiments import ranks

    source = "from tpde.experiments.ranks import Config, config, report\n"
    (tmp_path / "bench.py").write_text(source)
    found = _study_modules_imported(tmp_path, {"ranks": ranks})
    assert found == ["bench.py:1: tpde.experiments.ranks.config"]
