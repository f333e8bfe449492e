"""GLPR's softmax (Q = K = V = I, score β⟨x, y⟩) under a normalisation scheme (MATH.md §7).

Used by the ``sphere`` and ``theory`` studies and the ``clustering`` sweep. The scheme
names are those of tpde's table of schemes (:data:`tpde.fields.SCHEMES`), the only place
they are listed.
"""

from __future__ import annotations

import torch

from tpde.experiments.common.kernels import kernel_field
from tpde.fields import Normalized, NormScheme, Softmax
from tpde.fields.norms.schemes import scheme_from

__all__ = ["glpr_softmax", "scheme_field", "scheme_object", "scheme_start"]

F64 = torch.float64


def glpr_softmax(beta: float, d: int) -> Softmax:
    """Softmax with Q = K = V = I and score β⟨x, y⟩ in dimension d (float64)."""
    return kernel_field("sa", beta, d)


def scheme_field(scheme: str, beta: float, d: int, horizon: float, *, switch: float = 0.5,
                 alpha: float = 1.0) -> Normalized:  # fmt: skip
    """GLPR's softmax under ``scheme``: Mix-LN hands over at ``switch`` × ``horizon`` (its
    depth), nGPT steps by ``alpha`` (also the clustering sweep)."""
    return Normalized(glpr_softmax(beta, d), scheme_object(scheme, horizon, switch=switch,
                                                           alpha=alpha))  # fmt: skip


def scheme_object(name: str, horizon: float, *, switch: float = 0.5, alpha: float = 1.0
                  ) -> NormScheme:  # fmt: skip
    """The scheme named ``name`` (a key of :data:`tpde.fields.SCHEMES`) with these options:
    Mix-LN hands over at ``switch`` × ``horizon`` (its depth), nGPT steps by ``alpha``."""
    options = {
        "mix-ln": {"switch": switch * horizon, "depth": horizon},
        "ngpt": {"alpha": alpha},
    }.get(name, {})
    return scheme_from(name, options)


def scheme_start(field: Normalized, mu):
    """The start of a scheme's run: the scheme's own :meth:`~tpde.fields.NormScheme.start`
    (LayerNorm starts from the tokens after the model's own LayerNorm, so that no step is
    spent jumping onto its manifold; the others from ``mu``)."""
    return field.scheme.start(mu)
