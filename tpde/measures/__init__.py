"""Measures: the state a Transformer PDE evolves.

- :class:`Empirical`: weighted particles (tokens), optionally with positions.
- :class:`Gaussian`: N(α, Σ) with leading batch dimensions.
- :class:`Grid`: cell masses of a density on a box, d = 1 or 2 (Eulerian flows).
"""

from tpde.measures._base import Measure
from tpde.measures.empirical import Empirical
from tpde.measures.gaussian import Gaussian
from tpde.measures.grid import Grid

__all__ = ["Empirical", "Gaussian", "Grid", "Measure"]
