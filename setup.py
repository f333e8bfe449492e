"""Package discovery (the rest of the metadata is in pyproject.toml).

The repository keeps its experiments at the top level (``experiments/``, docs/DESIGN.md) but
installs them as the subpackage ``tpde.experiments``: a top-level ``experiments`` package
would clash with the unrelated PyPI project of that name and with the ``experiments/``
folder of whatever project a user runs from. pyproject.toml cannot map one folder to a
subpackage while finding the others, so discovery lives here.
"""

from setuptools import find_packages, setup

setup(
    packages=[
        *find_packages(include=["tpde", "tpde.*"]),
        "tpde.experiments",
        *(f"tpde.experiments.{name}" for name in find_packages("experiments")),
    ],
    package_dir={"tpde.experiments": "experiments"},
)
