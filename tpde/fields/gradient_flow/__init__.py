"""Gradient-flow structure: energies, the structure of a field, and the flows they define.

:mod:`~tpde.fields.gradient_flow.energies` (:class:`Energy`, potential and interaction
energies), :mod:`~tpde.fields.gradient_flow.structure` (which fields are gradient flows and
of what), the softmax and Sinkhorn energies their fields use,
:mod:`~tpde.fields.gradient_flow.field` (:class:`GradientFlowField`, the gap and the
dissipation identity) and :mod:`~tpde.fields.gradient_flow.convexity` (the geodesic
convexity probe). Every name of a module's ``__all__`` is exported here and from
:mod:`tpde.fields`.
"""

from tpde.fields._exports import export_modules

__all__ = export_modules(__name__, __path__, globals())
