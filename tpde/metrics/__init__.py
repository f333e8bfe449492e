"""Distances and diagnostics between measures (MATH.md §5).

- :func:`w2`: exact W2 — Bures closed form for Gaussians, network simplex (or quantiles
  in d = 1) for particles and grids; a Gaussian against particles raises, saying what to
  call instead.
- :func:`w1_circle`: exact W1 on the circle S¹ (arc length) through distribution functions,
  for particles and :class:`~tpde.measures.CircleDensity`.
- :func:`sinkhorn_divergence`: debiased entropic OT, GeomLoss's convention, on GeomLoss
  for particles and in closed form for Gaussians; :func:`sinkhorn_solve` meets a relative
  tolerance and returns the error estimate (:class:`SinkhornResult`).
- Bures–Wasserstein geometry of :class:`~tpde.measures.Gaussian`: :func:`bures_wasserstein`,
  :func:`bures_monge_map`, :func:`bures_geodesic`, :func:`bures_exp`, :func:`bures_log`,
  :func:`bures_inner` with tangent vectors :class:`BuresTangent`; :func:`bures_barycenter`
  (fixed point, batched, result :class:`BuresBarycenter` with a status).
- :func:`entropic_ot_gaussian`: closed-form entropic OT between Gaussians, quadratic and
  attention costs.
- :func:`twisted_w2`: the twisted distance of softmax attention frozen at a reference.
- :func:`conditional_w2`: conditional W2 for particles with positions (masked attention).
- :mod:`tpde.metrics.diagnostics`: spectrum, ranks, anisotropy, clusters, Gaussianity.
- :mod:`tpde.metrics.clustering`: angular clusters of token clouds (on the sphere), GLPR's
  cluster density, cluster counts over time, time to a single cluster; batched.

Every distance is a tensor (0-d, or the batch shape of batched Gaussians): the distance,
not its square. Autograd is kept throughout; where POT's network simplex needs numpy, the
plan is computed on detached copies and the value rebuilt in torch (envelope theorem).
"""

from tpde.metrics import clustering, diagnostics
from tpde.metrics.barycenter import BuresBarycenter, bures_barycenter
from tpde.metrics.bures import (
    BuresTangent,
    GaussianMap,
    bures_exp,
    bures_geodesic,
    bures_inner,
    bures_log,
    bures_monge_map,
    bures_wasserstein,
)
from tpde.metrics.circle import w1_circle
from tpde.metrics.clustering import (
    angular_cluster_count,
    angular_cluster_labels,
    cluster_density,
    cluster_diameter,
    clusters_over_time,
    time_to_single_cluster,
)
from tpde.metrics.conditional import conditional_w2
from tpde.metrics.entropic_gaussian import EntropicGaussianOT, entropic_ot_gaussian
from tpde.metrics.sinkhorn import SinkhornResult, sinkhorn_divergence, sinkhorn_solve
from tpde.metrics.twisted import twisted_w2
from tpde.metrics.wasserstein import w2

__all__ = [
    "BuresBarycenter",
    "BuresTangent",
    "EntropicGaussianOT",
    "GaussianMap",
    "SinkhornResult",
    "angular_cluster_count",
    "angular_cluster_labels",
    "bures_barycenter",
    "bures_exp",
    "bures_geodesic",
    "bures_inner",
    "bures_log",
    "bures_monge_map",
    "bures_wasserstein",
    "cluster_density",
    "cluster_diameter",
    "clustering",
    "clusters_over_time",
    "conditional_w2",
    "diagnostics",
    "entropic_ot_gaussian",
    "sinkhorn_divergence",
    "sinkhorn_solve",
    "time_to_single_cluster",
    "twisted_w2",
    "w1_circle",
    "w2",
]
