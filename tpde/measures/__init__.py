"""Measures: the state a Transformer PDE evolves.

- :class:`Empirical`: weighted particles (tokens), optionally with positions.
- :class:`Gaussian`: N(α, Σ) with leading batch dimensions.
- :class:`CircleDensity`: a density on the circle S¹ at uniform angles (the circle PDE).
- :class:`Grid`: cell masses of a density on a box, d = 1 or 2 (Eulerian flows).
- :func:`uniform_on_sphere`: uniform tokens on S^{d−1} (normalised Transformers).
"""

from tpde.measures._base import Measure
from tpde.measures.circle import CircleDensity
from tpde.measures.empirical import Empirical
from tpde.measures.gaussian import Gaussian
from tpde.measures.grid import Grid
from tpde.measures.sphere import uniform_on_sphere

__all__ = ["CircleDensity", "Empirical", "Gaussian", "Grid", "Measure", "uniform_on_sphere"]
