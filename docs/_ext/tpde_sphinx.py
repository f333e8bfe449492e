"""Local Sphinx extension of tpde's docs.

- Docstrings and the Markdown pages write math in Unicode with TeX-like scripts
  (``|x − y|``, ``e^{yᵀAx}``, ``W_{2|η}``, ``Γ[μ](x)``), which reStructuredText and Markdown
  would read as markup (``|x|`` is a substitution, ``[μ](x)`` a link) or print as is:
  :func:`render_docstring` and :func:`render_markdown` escape the markup and set ``^{…}``
  and ``_{…}`` as superscripts and subscripts, without touching the sources.
- :func:`gif_scraper` shows the GIFs an example writes (tpde.plot.animate) in the gallery.
- ``.. tpde-family-table::`` and ``.. tpde-gguf-table::`` build the tables of the families and
  of the GGUF architectures from the family registry (:func:`family_table_rst`,
  :func:`gguf_table_rst`): no hand-kept list in docs/api/pretrained.rst.
- MathJax is copied into the site (offline), and the gallery's status is recorded for the
  tests (tests/docs).
"""

from __future__ import annotations

import json
import re
import shutil
from importlib import resources
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList

# Spans of reST that must stay as they are: inline literals, roles, interpreted text.
_PROTECTED = re.compile(r"``.+?``|:[\w.+-]+:`[^`]*`|`[^`]*`_{0,2}")
# Lines that open a block whose content is literal: "…::" (a literal block) and the
# directives that hold code or LaTeX (where "\|" means ‖).
_LITERAL_BLOCK = re.compile(r"^(\s*)(\.\. (math|code|code-block|sourcecode)::|.*::\s*$)")
# x^{…} and x_{…}: TeX-like scripts in Unicode prose (no nested braces).
_SCRIPT = re.compile(r"(?<=\S)([\^_])\{([^{}`\n]+)\}")


def _rst_script(match: re.Match) -> str:
    role = "sup" if match.group(1) == "^" else "sub"
    return f"\\ :{role}:`{match.group(2)}`\\ "


def _render_prose(text: str) -> str:
    return _SCRIPT.sub(_rst_script, text.replace("|", "\\|"))


def _render_line(line: str) -> str:
    out, last = [], 0
    for match in _PROTECTED.finditer(line):
        out.append(_render_prose(line[last : match.start()]))
        out.append(match.group())
        last = match.end()
    out.append(_render_prose(line[last:]))
    return "".join(out)


def render_docstring(app, what, name, obj, options, lines: list[str]) -> None:
    """Docstring prose: ``|`` is a norm or an absolute value, ``^{…}``/``_{…}`` scripts.

    Outside inline literals, roles, literal blocks and math or code directives, ``|`` is
    escaped (never a substitution) and ``x^{a}``, ``x_{a}`` become :sup:/:sub: roles.
    """
    block_indent = None  # indentation of the line that opened a literal block
    for i, line in enumerate(lines):
        indent = len(line) - len(line.lstrip())
        if block_indent is not None:
            if not line.strip() or indent > block_indent:
                continue
            block_indent = None
        opened = _LITERAL_BLOCK.match(line)
        if opened:
            block_indent = len(opened.group(1))
            if opened.group(3):  # a math or code directive: its own line is markup too
                continue
        lines[i] = _render_line(line)


# "[μ](x)" in Markdown prose is Γ[μ](x), not a link: a link target here is a URL, a path
# or an anchor (it holds "/", ".", ":" or "#").
_MATH_LINK = re.compile(r"\]\((?=[^)\s/.:#]*\))")
_TAG = {"^": "sup", "_": "sub"}
# x_i, K_ij, Σ_0, ω_μ, ‖v‖²_g in Markdown prose: an underscore and one or two letters,
# digits or Greek letters that end the word become a subscript (these pages write names of
# code in backticks, and a longer tail, as in max_steps, does not match).
_SHORT_SUB = re.compile(r"(?<=[^\s_\\`*<>/])_([A-Za-z0-9α-ω]{1,2})(?![A-Za-z0-9α-ω_{])")
# R^d, q^⊥, (…)^p: a superscript of one letter, digit or ⊥ that ends the word.
_SHORT_SUP = re.compile(r"(?<=[^\s^\\`*<>/])\^([A-Za-z0-9⊥])(?![A-Za-z0-9α-ω{])")


def render_markdown(app, docname: str, source: list[str]) -> None:
    """MATH.md, DESIGN.md: Γ[μ](x) stays text; ``^{…}``, ``_{…}``, ``x_i``, ``R^d`` are scripts.

    Code (fenced, indented by four spaces after a blank line, or in backticks) is left alone.
    """
    if app.env.doc2path(docname).suffix != ".md":
        return
    out, fenced, code, blank = [], False, False, True
    for line in source[0].split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        indented = line.startswith("    ") and bool(line.strip())
        code = indented and (blank or code)
        if not fenced and not code:
            parts = line.split("`")  # odd parts are inline code
            for k in range(0, len(parts), 2):
                text = _MATH_LINK.sub(r"\\](", parts[k])
                text = _SCRIPT.sub(
                    lambda m: f"<{_TAG[m.group(1)]}>{m.group(2)}</{_TAG[m.group(1)]}>", text
                )
                text = _SHORT_SUB.sub(r"<sub>\1</sub>", text)
                parts[k] = _SHORT_SUP.sub(r"<sup>\1</sup>", text)
            line = "`".join(parts)
        blank = not line.strip()
        out.append(line)
    source[0] = "\n".join(out)


# Pages that join the front page's toctree, after ANCHOR, when their source exists.
OPTIONAL_PAGES = {"EXTENDING": "Extending"}
ANCHOR = "   Design <DESIGN>"


def optional_pages(app, docname: str, source: list[str]) -> None:
    """Add docs/EXTENDING.md to the navigation when it exists (the site builds without it)."""
    if docname != app.config.root_doc:
        return
    entries = [f"   {title} <{page}>" for page, title in OPTIONAL_PAGES.items()
               if page in app.env.found_docs]  # fmt: skip
    if ANCHOR not in source[0]:
        raise ValueError(f"the front page's toctree must hold the line {ANCHOR.strip()!r}.")
    source[0] = source[0].replace(ANCHOR, "\n".join([ANCHOR, *entries]))


#: The notes column of a GGUF map whose ``notes`` are empty (``GGUFMap.notes``: the
#: translator reads nothing beyond llama.cpp's common keys for its files).
NO_NOTES = "nothing beyond the common keys"


def gguf_table_rst() -> list[str]:
    """The reST lines of the table of GGUF architectures :func:`tpde.pretrained.load` reads,
    built from the registry (``tpde.pretrained.families``): one row per family with a
    ``GGUFMap``, in registration order — its ``architecture``, the family (and the family a
    file is read as where its ``windowed`` values name another ``model_type``: llama's
    Mistral, olmo2's OLMo-3) and its ``notes`` (:data:`NO_NOTES` where empty). A
    ``list-table`` (no column widths to keep).
    """
    from tpde.pretrained.families import ARCHITECTURES

    rows = [["architecture", "family",
             "what the translator undoes or reads beyond llama.cpp's common keys"]]  # fmt: skip
    for entry in ARCHITECTURES:
        if entry.gguf is None:
            continue
        other = entry.gguf.windowed.get("model_type")
        read_as = [f.family for f in ARCHITECTURES if f is not entry and other in f.model_types]
        notes = " ".join(entry.gguf.notes.split()) or NO_NOTES
        rows.append([f"``{entry.gguf.architecture}``", ", ".join([entry.family, *read_as]), notes])
    return _list_table("14 14 72", rows)


def _list_table(widths: str, rows: list[list[str]]) -> list[str]:
    """The reST lines of a ``list-table`` of these column ``widths`` whose first row is the
    header."""
    lines = [".. list-table::", "   :header-rows: 1", f"   :widths: {widths}", ""]
    for row in rows:
        lines += [f"   * - {row[0]}", *(f"     - {cell}" for cell in row[1:])]
    return [*lines, ""]


_NORMS = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}
_NORM_PARTS = {(): " (no γ, b)", ("weight",): " (no b)"}


def _placement(entry) -> str:
    """The family's placement, with its parallel block (always, or as a config key says)."""
    if entry.parallel is True:
        return f"{entry.placement}, parallel"
    if isinstance(entry.parallel, str | tuple):
        key = entry.parallel if isinstance(entry.parallel, str) else entry.parallel[0]
        return f"{entry.placement}, parallel by ``{key}``"
    return entry.placement


def family_table_rst() -> list[str]:
    """The reST lines of the table of the families :func:`tpde.pretrained.load` reads, built
    from the registry in registration order: each ``Family``'s name, ``model_types``, norm
    (a parameter-free or bias-free LayerNorm marked from ``norm_parts``), placement (and
    parallel block) and ``summary``. A ``list-table``."""
    from tpde.pretrained.families import ARCHITECTURES

    rows = [["family", "model_type", "norm", "placement", "attention, feed-forward, positions"]]
    for entry in ARCHITECTURES:
        norm = _NORMS[entry.norm] + _NORM_PARTS.get(entry.norm_parts.get("*"), "")
        rows.append([entry.family, ", ".join(entry.model_types), norm, _placement(entry),
                     " ".join(entry.summary.split())])  # fmt: skip
    return _list_table("12 14 12 14 48", rows)


def registry_sources() -> list[Path]:
    """The files the registry tables are built from: every module of
    ``tpde.pretrained.families`` (each family's entry, and ``base.py``'s record and defaults)."""
    from tpde.pretrained import families

    return sorted(Path(families.__file__).parent.glob("*.py"))


class _RegistryTable(Directive):
    """A table built from the family registry: a subclass's ``lines`` gives its reST. Under
    Sphinx the family modules are noted as the page's dependencies (``env.note_dependency``),
    so that an incremental build rebuilds the page when a family changes; docutils alone has
    no environment and notes none."""

    has_content = False

    def run(self):
        env = getattr(self.state.document.settings, "env", None)
        if env is not None:
            for path in registry_sources():
                env.note_dependency(str(path))
        node = nodes.container()
        source = StringList(self.lines(), source=f"{self.name} (the family registry)")
        self.state.nested_parse(source, self.content_offset, node)
        return node.children


class GGUFTable(_RegistryTable):
    """``.. tpde-gguf-table::``: :func:`gguf_table_rst`, parsed in place."""

    lines = staticmethod(gguf_table_rst)


class FamilyTable(_RegistryTable):
    """``.. tpde-family-table::``: :func:`family_table_rst`, parsed in place."""

    lines = staticmethod(family_table_rst)


def gif_scraper(block, block_vars, gallery_conf):
    """sphinx-gallery scraper: GIFs an example wrote into its folder become its images.

    Examples run in their own (staged) folder; :func:`tpde.plot.animate` writes there.
    Each GIF is moved to the gallery's image folder, so it is shown once.
    """
    from sphinx_gallery.scrapers import figure_rst

    folder = Path(block_vars["src_file"]).parent
    images = []
    for gif, target in zip(
        sorted(folder.glob("*.gif")), block_vars["image_path_iterator"], strict=False
    ):
        target = Path(target).with_suffix(".gif")
        shutil.move(gif, target)
        images.append(target)
    return figure_rst(images, gallery_conf["src_dir"]) if images else ""


def _copy_mathjax(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    name = Path(app.config.mathjax_path).name
    source = resources.files("mathjax").joinpath("static", "mathjax", "es5", name)
    target = Path(app.outdir) / "_static" / "mathjax"
    target.mkdir(parents=True, exist_ok=True)
    with resources.as_file(source) as path:
        shutil.copy2(path, target / name)


def _gallery_status(app, exception):
    """Record which examples ran and which failed (tests/docs reads it)."""
    conf = app.config.sphinx_gallery_conf
    status = {
        "passing": sorted(Path(p).name for p in conf.get("passing_examples", [])),
        "stale": sorted(Path(p).name for p in conf.get("stale_examples", [])),
        "failing": {Path(p).name: tb for p, tb in conf.get("failing_examples", {}).items()},
    }
    Path(app.doctreedir, "gallery_status.json").write_text(json.dumps(status, indent=1))


def setup(app):
    """Register the hooks (the scraper is named in conf.py's sphinx_gallery_conf)."""
    # Before sphinx-gallery's own build-finished summary, which raises on a failing example.
    app.connect("build-finished", _gallery_status, priority=100)
    app.connect("build-finished", _copy_mathjax)
    app.connect("autodoc-process-docstring", render_docstring, priority=600)  # after napoleon
    app.connect("source-read", render_markdown)
    app.connect("source-read", optional_pages)
    app.add_directive("tpde-gguf-table", GGUFTable)
    app.add_directive("tpde-family-table", FamilyTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
