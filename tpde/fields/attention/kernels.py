r"""The two normalisers of the isotropic kernel e^{β⟨x, y⟩} by name: the vocabulary of the
theory of tokens on the sphere (Geshkovski, Letrouit, Polyanskiy, Rigollet,
arXiv:2312.10794; MATH.md §7, §9).

===========  ===================================================  =================
name         Γ[μ](x)                                              field
===========  ===================================================  =================
"sa"         ∫e^{β⟨x, y⟩} y dμ(y) / ∫e^{β⟨x, y⟩} dμ(y)  (softmax)  :class:`Softmax`
"usa"        ∫e^{β⟨x, y⟩} y dμ(y)  (the 1/n normaliser)            :class:`Exponential`
===========  ===================================================  =================

:data:`KERNELS` is the one table of these names: :mod:`tpde.theory` (its laws and rates take
``kernel=``), the circle PDE (:func:`tpde.flows.circle_model`), the experiments and the
benchmarks read it.
"""

from __future__ import annotations

from tpde.fields.attention.exponential import Exponential
from tpde.fields.attention.softmax import Softmax

__all__ = ["KERNELS"]

#: The kernel's normalisers by name: the field class of each.
KERNELS: dict[str, type] = {"sa": Softmax, "usa": Exponential}
