"""docs/_ext/tpde_sphinx.py: the tables of the families and of the GGUF architectures, built
from the family registry.

Each table is rendered here with docutils alone (no Sphinx build): valid reST (a malformed
table is an error message in the document tree), one row per registered family or GGUF map
in registry order, with what the entry declares; and the pages that used to hold hand lists
point to the registry instead.
"""

import dataclasses
from pathlib import Path

import pytest

from tpde.pretrained import families, gguf_architectures
from tpde.pretrained.families import FAMILIES

docutils_core = pytest.importorskip("docutils.core")
nodes = pytest.importorskip("docutils.nodes")

ROOT = Path(__file__).resolve().parents[2]


def _rows(lines: list[str]) -> list[list[str]]:
    """The rows (header first) of the one table of reST ``lines``, as cell texts, after a
    docutils render that must report nothing (any warning or error is a failure, as the docs
    build's -W)."""
    tree = docutils_core.publish_doctree(
        "\n".join(lines), settings_overrides={"report_level": 5, "halt_level": 5}
    )
    messages = [m.astext() for m in tree.findall(nodes.system_message)]
    assert not messages, messages
    (table,) = tree.findall(nodes.table)
    return [
        [cell.astext() for cell in row.findall(nodes.entry)] for row in table.findall(nodes.row)
    ]


def test_the_gguf_table_has_one_row_per_registered_map(ext):
    header, *rows = _rows(ext.gguf_table_rst())
    assert header[:2] == ["architecture", "family"]
    assert [row[0] for row in rows] == list(gguf_architectures())
    for architecture, family, notes in rows:
        entry = FAMILIES[gguf_architectures()[architecture]]
        assert family.split(", ")[0] == entry.family
        written = " ".join(entry.gguf.notes.split()).replace("``", "")
        assert notes == (written or ext.NO_NOTES)
    families = {row[0]: row[1] for row in rows}
    assert families["olmo2"] == "olmo2, olmo3" and families["llama"] == "llama, mistral"


def test_a_map_without_notes_has_the_row_that_says_so(ext, monkeypatch):
    """Empty ``GGUFMap.notes`` (nothing beyond llama.cpp's common keys) is allowed: its row
    says :data:`NO_NOTES` (gemma's map, its notes emptied in memory)."""
    entries = [
        dataclasses.replace(e, gguf=dataclasses.replace(e.gguf, notes=""))
        if e.family == "gemma" else e
        for e in families.ARCHITECTURES
    ]  # fmt: skip
    monkeypatch.setattr(families, "ARCHITECTURES", entries)
    _, *rows = _rows(ext.gguf_table_rst())
    assert {row[0]: row[2] for row in rows}["gemma"] == "nothing beyond the common keys"


class _Environment:
    """Sphinx's build environment, as far as the directives use it."""

    def __init__(self):
        self.dependencies = []

    def note_dependency(self, path: str) -> None:
        self.dependencies.append(path)


def test_the_directives_render_and_note_the_family_modules(ext, monkeypatch):
    """``.. tpde-gguf-table::`` and ``.. tpde-family-table::`` parsed by docutils: each
    renders its table (the rows of :func:`gguf_table_rst` / :func:`family_table_rst`), and,
    given a build environment, notes every module of ``tpde.pretrained.families`` as the
    page's dependency (an incremental Sphinx build then refreshes the tables); without one
    (docutils alone) it notes none and still renders."""
    directives = pytest.importorskip("docutils.parsers.rst.directives")
    monkeypatch.setitem(directives._directives, "tpde-gguf-table", ext.GGUFTable)
    monkeypatch.setitem(directives._directives, "tpde-family-table", ext.FamilyTable)
    modules = sorted(Path(families.__file__).parent.glob("*.py"))
    assert {"base.py", "llama.py", "starcoder2.py"} <= {path.name for path in modules}
    for name, lines in (("gguf", ext.gguf_table_rst()), ("family", ext.family_table_rst())):
        env = _Environment()
        for settings in ({"env": env}, {}):
            tree = docutils_core.publish_doctree(
                f".. tpde-{name}-table::\n",
                settings_overrides={"report_level": 5, "halt_level": 5, **settings},
            )
            assert not [m.astext() for m in tree.findall(nodes.system_message)]
            (table,) = tree.findall(nodes.table)
            assert len(list(table.findall(nodes.row))) == len(_rows(lines))
        assert sorted(env.dependencies) == [str(path) for path in modules]


def test_the_family_table_has_one_row_per_registered_family(ext):
    """Every family, in registry order, with its model types, norm, placement and summary
    (a family without a summary fails here, naming it)."""
    header, *rows = _rows(ext.family_table_rst())
    assert header[:2] == ["family", "model_type"]
    assert [row[0] for row in rows] == list(FAMILIES)
    empty = [row[0] for row in rows if not row[4]]
    assert not empty, f"the families {empty} have no Family.summary (their row of the table)"
    by_name = {row[0]: row for row in rows}
    assert by_name["bert"][1] == "bert, roberta"
    assert (
        by_name["olmo"][2] == "LayerNorm (no γ, b)" and by_name["cohere"][2] == "LayerNorm (no b)"
    )
    assert by_name["gptj"][3] == "pre, parallel"
    assert by_name["gpt_neox"][3] == "pre, parallel by use_parallel_residual"
    assert by_name["gemma2"][2:4] == ["RMSNorm", "sandwich"]


def test_the_pages_point_to_the_registry():
    """docs/api/pretrained.rst builds both tables (the directives, no hand-written rows or
    count), and so does the families' module docstring; README.md names the function that
    lists the architectures at run time and the attribute that holds the families."""
    rst = (ROOT / "docs" / "api" / "pretrained.rst").read_text()
    assert ".. tpde-gguf-table::" in rst and ".. tpde-family-table::" in rst
    assert "fourteen" not in rst and "``starcoder2``  starcoder2" not in rst
    assert "=============  " not in families.__doc__
    readme = (ROOT / "README.md").read_text()
    assert "tpde.pretrained.gguf_architectures()" in readme
    assert "every family of `tpde.pretrained.ARCHITECTURES`" in readme
    assert "`gpt2`, `gptneox`, `starcoder2`" not in readme
