"""docs/_ext/tpde_sphinx.py: the Unicode math of the Markdown pages (MATH.md) as HTML scripts."""

from pathlib import Path
from types import SimpleNamespace

import pytest


def _render(ext, text: str, suffix: str = ".md") -> str:
    app = SimpleNamespace(env=SimpleNamespace(doc2path=lambda name: Path(f"{name}{suffix}")))
    source = [text]
    ext.render_markdown(app, "MATH", source)
    return source[0]


@pytest.mark.parametrize(
    ("text", "html"),
    [
        ("ẋ_i = P⊥_x Γ", "ẋ<sub>i</sub> = P⊥<sub>x</sub> Γ"),
        ("K_ij = w_i w_j", "K<sub>ij</sub> = w<sub>i</sub> w<sub>j</sub>"),
        ("ω_μ and E_β", "ω<sub>μ</sub> and E<sub>β</sub>"),
        ("x ∈ R^d, q^⊥", "x ∈ R<sup>d</sup>, q<sup>⊥</sup>"),
        ("Σ_k^{1/2}", "Σ<sub>k</sub><sup>1/2</sup>"),
        ("S^{d−1} and W_{2|η}", "S<sup>d−1</sup> and W<sub>2|η</sub>"),
        ("Γ[μ](x)", "Γ[μ\\](x)"),
    ],
)
def test_scripts_in_prose_become_html(ext, text, html):
    assert _render(ext, text) == html


@pytest.mark.parametrize(
    "text",
    [
        "stop when ‖rhs‖ < tol_low or after max_iter steps",  # longer tails are names
        "`x_i` and `R^d` in code spans",
        "```\nx_i = R^d\n```",  # fenced code
        "see [the notes](https://example.org/a/notes)",
    ],
)
def test_code_names_and_links_stay_as_they_are(ext, text):
    assert _render(ext, text) == text


def test_only_markdown_pages_are_touched(ext):
    assert _render(ext, "x_i", suffix=".rst") == "x_i"
