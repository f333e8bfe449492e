"""Measures: the state a Transformer PDE evolves.

- :class:`Empirical`: weighted particles (tokens), optionally with positions.
- :class:`Gaussian`: N(α, Σ) with leading batch dimensions.
"""

from tpde.measures._base import Measure
from tpde.measures.empirical import Empirical
from tpde.measures.gaussian import Gaussian

__all__ = ["Empirical", "Gaussian", "Measure"]
