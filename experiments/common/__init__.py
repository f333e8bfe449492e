"""Builders shared by the studies and the benchmarks (one home each; no study imports another).

- :mod:`.paper`: the paper's fields, grids and Gaussian flows (cones, ranks, the sweeps);
- :mod:`.paper_euler`: the paper's projected Euler scheme (cones, ranks, benchmarks);
- :mod:`.rank_protocol`: the rank-histogram protocol, its batched ODE rounds and the paper's
  loop on the same pairs (ranks, benchmarks);
- :mod:`.panels`: the paper's 2-D panels and the closed-form softmax blow-up (cones,
  benchmarks);
- :mod:`.schemes`: GLPR's softmax under a normalisation scheme (sphere, theory, the sweeps);
- :mod:`.sphere_diagram`: GLPR's phase diagram of cluster densities (sphere, benchmarks);
- :mod:`.kernels`: the SA/USA kernels on the circle and their Fourier modes (theory,
  benchmarks);
- :mod:`.variants`: a registered attention variant from (Q, K, V) (atlas, meanfield);
- :mod:`.real_normalised`: the normalised routes of the real-model studies (real-attention,
  real-decoder).
"""
