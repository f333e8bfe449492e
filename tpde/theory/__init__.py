r"""Closed forms of the mean-field theory of attention, as functions (MATH.md §9).

Tokens on the sphere S^{d−1}, Q = K = V = I, score β⟨x, y⟩, self-attention included;
"sa": the softmax normaliser, Γ[μ](x) = ∫e^{β⟨x, y⟩} y dμ(y) / ∫e^{β⟨x, y⟩} dμ(y);
"usa": the 1/n normaliser, Γ[μ](x) = ∫e^{β⟨x, y⟩} y dμ(y) (Geshkovski, Letrouit,
Polyanskiy, Rigollet, "A mathematical perspective on Transformers", arXiv:2312.10794).

- **Equiangular laws** (:func:`equiangular_velocity`, :func:`equiangular_solution`,
  :func:`equiangular_frame`): n tokens with equal pairwise inner products stay equiangular
  under every normalisation scheme of :class:`tpde.fields.Normalized`, and their common
  inner product ρ (and common radius r) follow a scalar ODE (the reduction used in
  Rigollet's survey "The mean-field dynamics of transformers", arXiv:2512.01868).
- **Linear instability of the uniform measure on S¹** (:func:`instability_rate`,
  :func:`dominant_mode`): Fourier mode k grows at λ_k = k² I_k(β)/(β I_0(β)) (SA) or
  k² I_k(β)/β (USA) (the regime of Bruno, Pasqualotto, Agazzi, arXiv:2410.23228).
- **Rényi centres** (:func:`renyi_centres`): the long-lived centres of causal attention at
  large β (Karagodin, Polyanskiy, Rigollet, "Clustering in causal attention masking",
  arXiv:2411.04990, §5).
- **Voronoi rule of hardmax** (:func:`hardmax_vertices`): where each token goes under the
  zero-temperature dynamics with a positive semidefinite interaction (Alcalde, Geshkovski,
  Ruiz-Balet, "Attention's forward pass and Frank-Wolfe", arXiv:2508.09628).

The derivations marked [ours] in MATH.md §9 are tpde's; the experiment ``tpde run theory``
checks every formula here against particles.
"""

from tpde.fields import KERNELS
from tpde.theory.clusters import hardmax_vertices, renyi_centres
from tpde.theory.equiangular import (
    SCHEMES_WITH_LAW,
    EquiangularSolution,
    equiangular_frame,
    equiangular_solution,
    equiangular_velocity,
)
from tpde.theory.fourier import dominant_mode, instability_rate

__all__ = [
    "KERNELS",
    "SCHEMES_WITH_LAW",
    "EquiangularSolution",
    "dominant_mode",
    "equiangular_frame",
    "equiangular_solution",
    "equiangular_velocity",
    "hardmax_vertices",
    "instability_rate",
    "renyi_centres",
]
