"""Cosine-similarity attention: a softmax over the cosine of queries and keys."""

from __future__ import annotations

import torch

from tpde._scale_safe import product_direction
from tpde.fields.base import Field
from tpde.fields.forms import SoftmaxForm, key_log_weights
from tpde.fields.params import QKV
from tpde.fields.registry import register
from tpde.measures import Empirical

__all__ = ["Cosine"]


@register("cosine")
class Cosine(Field):
    r"""Cosine attention Γ[μ](x) = V ∫ e^{β cos(Qx, Ky)} y dμ(y) / ∫ e^{β cos(Qx, Ky)} dμ(y).

    cos(u, v) = ⟨u, v⟩ / (|u| |v|), β = ``scale`` (the inverse temperature 1/τ).

    Parameters
    ----------
    Q, K : tensor (..., k, d) or callable ``t -> tensor``
        Query and key matrices.
    V : tensor (..., d, d) or callable
        Value matrix.
    scale : float, optional
        Inverse temperature β = 1/τ; default 1/√k like every tpde variant (cosine scores
        lie in [−1, 1], so useful temperatures are small: pass e.g. scale=10 for τ = 0.1).

    Notes
    -----
    The score depends on the directions of Qx and Ky only, so Γ is invariant under
    rescaling the tokens, x ↦ cx (c > 0), in the weights and equivariant in the values.
    It is softmax attention with normalised queries β·Qx/|Qx| and keys Ky/|Ky| (a key of
    zero norm scores 0): one key-biased softmax average, so it runs on every softmax
    engine and under :class:`~tpde.fields.Masked`. Gaussians are not preserved
    (cos(Qx, Ky) is not linear in y), so there is no moment closure.

    Reference: Henry, Dachapally, Pawar, Chen, "Query-Key Normalization for Transformers",
    Findings of EMNLP 2020; Liu et al., "Swin Transformer V2", CVPR 2022 (scaled cosine
    attention).
    """

    def __init__(self, Q, K, V, scale=None):
        self.params = QKV(Q, K, V, scale)
        self.dim = self.params.dim

    def softmax_form(self, t, mu: Empirical, x) -> SoftmaxForm:
        """Queries β·Qx/|Qx|, keys Ky/|Ky|, key bias log w (shared with Masked)."""
        p = self.params.at(t, like=x)
        points, log_w = key_log_weights(mu)
        queries = product_direction(x, p.Q)  # a rounded 0 has no direction (scores 0)
        keys = product_direction(points, p.K)
        return SoftmaxForm(p.scale * queries, keys, log_w, points, p.V, None)

    def particle_velocity(self, t, mu: Empirical, x, engine: str, info=None) -> torch.Tensor:
        return self.softmax_form(t, mu, x).velocity(engine)

    def __repr__(self) -> str:
        return f"Cosine(d={self.dim}, k={self.params.k}, scale={self.params.scale:.4g})"
