"""Fixtures of the documentation's tests: the Sphinx extension docs/_ext/tpde_sphinx.py as a
module (it lives outside the package, so it is loaded from its file)."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ext():
    """docs/_ext/tpde_sphinx.py, loaded afresh for each test module."""
    path = ROOT / "docs" / "_ext" / "tpde_sphinx.py"
    spec = importlib.util.spec_from_file_location("tpde_sphinx_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
