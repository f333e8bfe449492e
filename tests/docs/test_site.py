"""The documentation site: built once per session, then checked; each example run alone.

``docs/build.py`` (what ``make docs`` runs) builds the site into a temporary folder. The
default suite builds it without executing the gallery (about 16 s of CPU; executing it is
about 70 s on an idle machine, too much of one fixture's time limit on a busy one) and runs
every example as its own test at ``TPDE_EXAMPLE_SIZE=small``, in a fresh interpreter, so the
examples cannot fall out of date with the API and a slow machine spreads the time over
tests. The checks: the build has no warning, each example runs and ends in a figure, every
public name has its entry in the API pages, every local link and image resolves, and
nothing is loaded from the network (MathJax is served by the site). The whole executed
site (each gallery page shows its figures) is built by ``make docs`` and by the ``slow``
test here.
"""

import importlib
import importlib.util
import json
import re
import runpy
import warnings
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("plot_*.py"))
# Public modules and where their names are documented (docs/api/*.rst).
API_MODULES = (
    "tpde.measures",
    "tpde.fields",
    "tpde.fields.attention",
    "tpde.fields.feedforward",
    "tpde.fields.norms",
    "tpde.fields.gradient_flow",
    "tpde.flows",
    "tpde.metrics",
    "tpde.metrics.diagnostics",
    "tpde.plot",
    "tpde.theory",
    "tpde.pretrained",
    "tpde.experiments",
    "tpde.experiments.framework",
    "tpde.experiments.sweep",
)
# A package whose names are documented on the pages of its role folders: tpde.fields.Softmax
# is documented as tpde.fields.attention.Softmax.
DOCUMENTED_IN = {
    "tpde.fields": ("attention", "feedforward", "norms", "gradient_flow"),
    "tpde.theory": ("equiangular", "fourier", "clusters"),
}


def _load_build():
    spec = importlib.util.spec_from_file_location("docs_build", ROOT / "docs" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build_site(base: Path, execute: bool):
    """(html folder, build output, gallery status) of one build at the test size."""
    done = _load_build().build(
        base / "html", base / "work", "small", keep_going=True, capture=True, execute=execute
    )
    status_file = base / "work" / "doctrees" / "gallery_status.json"
    status = json.loads(status_file.read_text()) if status_file.exists() else None
    return base / "html", done, status


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """The site with the gallery's pages unexecuted (the examples run in their own tests)."""
    return _build_site(tmp_path_factory.mktemp("docs"), execute=False)


@pytest.fixture(scope="session")
def executed_site(tmp_path_factory):
    """The whole site as ``make docs`` builds it, every example executed (slow tests)."""
    return _build_site(tmp_path_factory.mktemp("docs-executed"), execute=True)


class _Links(HTMLParser):
    """Collects ids, and the local targets of href/src attributes, of one page."""

    def __init__(self):
        super().__init__()
        self.ids, self.targets, self.remote = set(), [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        for key in ("href", "src"):
            value = attrs.get(key)
            if not value:
                continue
            scheme = urlsplit(value).scheme
            if scheme in ("http", "https") or value.startswith("//"):
                # A link to another site is fine; loading a script, style or image is not.
                if tag in ("script", "img") or (tag == "link" and attrs.get("rel") != "canonical"):
                    self.remote.append(f"<{tag} {key}={value}>")
            elif scheme in ("", "file"):
                self.targets.append((tag, value))


def _parse(page: Path) -> _Links:
    parser = _Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


@pytest.fixture(scope="session")
def pages(site):
    html = site[0]
    # _static/ holds the theme's assets (its Jinja macros end in .html too), not pages.
    return {
        page: _parse(page)
        for page in sorted(html.rglob("*.html"))
        if "_static" not in page.relative_to(html).parts
    }


def test_the_site_builds_without_a_warning(site):
    html, done, _ = site
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-8000:]
    assert (html / "index.html").is_file()


@pytest.mark.parametrize("example", EXAMPLES)
def test_each_example_runs_and_ends_in_a_figure(tmp_path, monkeypatch, example):
    # As sphinx-gallery runs it: in this process (no second torch import), in a folder of
    # its own as the working directory (GIFs land there), on the Agg backend.
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.setenv("TPDE_EXAMPLE_SIZE", "small")
    monkeypatch.setenv("KEOPS_VERBOSE", "0")
    monkeypatch.chdir(tmp_path)
    plt.close("all")
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*non-interactive.*")
            runpy.run_path(str(ROOT / "examples" / example), run_name="__main__")
        figures = len(plt.get_fignums())
    finally:
        plt.close("all")
    assert figures + len(list(tmp_path.glob("*.gif"))) > 0, f"{example} ends in no figure"


def test_the_gallery_pages_exist_for_every_example(site, pages):
    html = site[0]
    missing = [e for e in EXAMPLES if (html / "gallery" / e.replace(".py", ".html")) not in pages]
    assert not missing, f"no gallery page for {missing}"


@pytest.mark.slow
def test_the_executed_site_shows_each_examples_figures(executed_site):
    html, done, status = executed_site
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-8000:]
    assert status is not None, "the build wrote no gallery status"
    assert not status["failing"], status["failing"]
    assert sorted(status["passing"]) == EXAMPLES
    for example in EXAMPLES:
        page = html / "gallery" / example.replace(".py", ".html")
        images = [src for tag, src in _parse(page).targets if tag == "img" and "sphx_glr_" in src]
        assert images, f"{page.name} shows no figure"
        assert all((page.parent / unquote(src)).is_file() for src in images)


def test_the_gallery_has_at_least_ten_examples():
    assert len(EXAMPLES) >= 10


@pytest.mark.parametrize("module_name", API_MODULES)
def test_every_public_name_is_in_the_api_pages(pages, site, module_name):
    module = importlib.import_module(module_name)
    ids = set().union(*(p.ids for page, p in pages.items() if page.parent.name == "api"))
    missing = []
    for name in module.__all__:
        obj = getattr(module, name)
        if type(obj).__name__ == "module":
            anchors = {f"module-{obj.__name__}"}
        else:
            places = [
                module_name,
                *(f"{module_name}.{s}" for s in DOCUMENTED_IN.get(module_name, ())),
            ]
            anchors = {f"{place}.{name}" for place in places}
        if not anchors & ids:
            missing.append(name)
    assert not missing, f"{module_name}: add {missing} to docs/api/*.rst"


def test_every_local_link_and_image_resolves(pages):
    broken = []
    for page, parsed in pages.items():
        for tag, target in parsed.targets:
            parts = urlsplit(target)
            path = page if not parts.path else (page.parent / unquote(parts.path)).resolve()
            if not path.exists():
                broken.append(f"{page.name}: <{tag}> {target}")
            elif parts.fragment and path.suffix == ".html" and path in pages:
                if unquote(parts.fragment) not in pages[path].ids:
                    broken.append(f"{page.name}: <{tag}> {target} (no such anchor)")
    assert not broken, "\n".join(broken[:40])


def test_nothing_is_loaded_from_the_network(pages, site):
    remote = [f"{page.name}: {r}" for page, parsed in pages.items() for r in parsed.remote]
    assert not remote, "\n".join(remote[:20])
    html = site[0]
    mathjax = html / "_static" / "mathjax" / "tex-svg-full.js"
    assert mathjax.is_file() and mathjax.stat().st_size > 1_000_000
    math_page = (html / "index.html").read_text(encoding="utf-8")
    assert re.search(r'<script[^>]+src="_static/mathjax/tex-svg-full\.js', math_page)


def test_extending_joins_the_navigation_when_it_exists(site):
    html = site[0]
    present = (ROOT / "docs" / "EXTENDING.md").is_file()
    assert (html / "EXTENDING.html").is_file() == present
    assert ('href="EXTENDING.html"' in (html / "index.html").read_text(encoding="utf-8")) == present
