"""Sphinx configuration of tpde's documentation site.

Build with ``make docs`` (docs/build.py), which stages docs/ and examples/ into a work
folder and runs Sphinx there; this file expects that staged layout (``examples/`` beside
it). Toolchain: Sphinx, autodoc + napoleon (NumPy docstrings), sphinx-gallery (executed
examples), myst-parser (MATH.md, DESIGN.md), pydata-sphinx-theme, and MathJax 3 served
from the site itself (no network at build or reading time).
"""

from __future__ import annotations

import sys
from pathlib import Path

import tpde

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
EXAMPLES = HERE / "examples"
if not EXAMPLES.is_dir():
    raise RuntimeError(
        f"{EXAMPLES} is missing: build the site with `make docs` (python docs/build.py), which "
        "stages docs/ and examples/ together."
    )

project = "tpde"
author = "the tpde authors"
copyright = "2025, the tpde authors"
version = release = tpde.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "sphinx_gallery.gen_gallery",
    "myst_parser",
    "tpde_sphinx",  # _ext/: GIF scraper, local MathJax, the gallery's status for the tests
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["examples", "gallery/*.ipynb", "gallery/*.py", "gallery/*.zip"]
root_doc = "index"
nitpicky = False

# ---------------------------------------------------------------- autodoc and napoleon
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "signature"
autodoc_inherit_docstrings = True
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
napoleon_use_ivar = True

# ---------------------------------------------------------------- math, offline
# MathJax 3 (SVG output: one self-contained file, no web fonts) from the
# django-static-mathjax wheel, copied into the site's _static/ by _ext/tpde_sphinx.py.
mathjax_path = "mathjax/tex-svg-full.js"
mathjax3_config = {"tex": {"inlineMath": [["\\(", "\\)"]], "displayMath": [["\\[", "\\]"]]}}
myst_heading_anchors = 3

# ---------------------------------------------------------------- gallery
sphinx_gallery_conf = {
    "examples_dirs": str(EXAMPLES),
    "gallery_dirs": "gallery",
    "filename_pattern": r"/plot_",
    "within_subsection_order": "FileNameSortKey",
    "image_scrapers": ("matplotlib", "tpde_sphinx.gif_scraper"),
    "remove_config_comments": True,
    "show_memory": False,
    "download_all_examples": False,
    "line_numbers": False,
    "min_reported_time": 1,
    "matplotlib_animations": False,
    "reset_modules_order": "both",
    # No execution-time pages: sphinx-gallery's loads jQuery and DataTables from CDNs.
    "write_computation_times": False,
}

# ---------------------------------------------------------------- HTML
html_theme = "pydata_sphinx_theme"
html_title = f"tpde {release}"
html_static_path = ["_static"]
html_css_files = ["tpde.css"]
html_show_sourcelink = False
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    # The page's table of contents on the right, except on gallery pages (room for code).
    "secondary_sidebar_items": {
        page: ["page-toc"] for page in ("index", "install", "api/*", "MATH", "DESIGN", "EXTENDING")
    },
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
# No left navigation on the pages that have no sub-pages.
html_sidebars = {page: [] for page in ("index", "install", "MATH", "DESIGN", "EXTENDING")}
