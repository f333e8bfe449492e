r"""Hardmax attention: the zero-temperature (β → ∞) limit of softmax attention."""

from __future__ import annotations

import torch

from tpde._engines import check_engine
from tpde._scale_safe import product_direction, safe_norm, unit
from tpde._validation import as_tensor, check_positive
from tpde.fields.base import Field
from tpde.fields.forms import key_log_weights
from tpde.fields.params import QKV
from tpde.measures import Empirical

__all__ = ["Hardmax"]

#: Queries per block: a block of scores holds at most this many entries times the keys.
_BLOCK = 2**22
#: The score rules: "bilinear" yᵀAx (Softmax's limit), "cosine" cos(Qx, Ky) (Cosine's).
SCORES = ("bilinear", "cosine")


class Hardmax(Field):
    r"""Hardmax attention Γ[μ](x) = V · (mean of μ over the keys y maximising yᵀAx).

    With J(x) = {y ∈ supp μ : yᵀAx ≥ max_z zᵀAx − τ(x)} (the maximisers, ties within τ),

        Γ[μ](x) = V Σ_{y ∈ J(x)} μ({y}) y / Σ_{y ∈ J(x)} μ({y}),

    the β → ∞ limit of softmax attention with interaction βA (:class:`Softmax`): the
    softmax weights μ({y})e^{βyᵀAx}/Z concentrate on the maximisers, shared in proportion
    to their masses (equally for tokens of equal mass). Alcalde, Geshkovski, Ruiz-Balet,
    "Attention's forward pass and Frank-Wolfe" (arXiv:2508.09628) study its dynamics.

    With ``scores="cosine"`` the score is cos(Qx, Ky) instead of yᵀAx: the β → ∞ limit
    of :class:`Cosine` attention (normalised scores; a query or key with Qx = 0 or Ky = 0
    has no direction and scores 0).

    Parameters
    ----------
    Q, K : tensor (..., k, d) or callable ``t -> tensor``
        As for :class:`Softmax`: A = scale · KᵀQ, the score of query x on key y is yᵀAx.
    V : tensor (..., d, d) or callable
        Value matrix, applied to the averaged maximisers as in softmax.
    scale : float, optional
        Default 1/√k. Only the sign of the scale matters for the argmax (it must be > 0).
    tie_tol : float, optional
        Relative tie tolerance: keys whose score is within τ(x) = tie_tol · |Ax| · max_y |y|
        of the best are tied (|Ax|·max|y| bounds every score of x, so τ is a multiple of
        the rounding error of the scores). The scores are formed for Ax/|Ax| and y/max|y|,
        which have the same maximisers, so the tokens' scale (1e-300 … 1e300 in float64)
        changes nothing. Default 64·eps of the tokens' dtype (1.4e-14 in
        float64): exact ties of symmetric configurations are shared, distinct scores are not.

    scores : {"bilinear", "cosine"}
        The score rule (default "bilinear", yᵀAx).

    Notes
    -----
    The velocity is discontinuous where the maximiser changes; integrate with a fixed-step
    method or expect dopri5 to shorten its steps there. Scores are formed densely, in
    blocks of queries (O(m·n) time, O(block·n) memory); the engine argument accepts
    "auto", "dense" and "chunked" (all the same computation). There is no Gaussian closure
    and no energy.
    """

    def __init__(self, Q, K, V, scale=None, *, tie_tol: float | None = None, scores="bilinear"):
        self.params = QKV(Q, K, V, scale)
        self.dim = self.params.dim
        self.tie_tol = None if tie_tol is None else check_positive(tie_tol, "tie_tol")
        if scores not in SCORES:
            raise ValueError(
                f"Hardmax scores must be one of {', '.join(map(repr, SCORES))} (yᵀAx, or the "
                f"cosine of Qx and Ky: the β → ∞ limit of Cosine attention); received "
                f"{scores!r}."
            )
        self.scores = scores

    @classmethod
    def from_interaction(cls, A, V, *, tie_tol: float | None = None) -> Hardmax:
        """Build from the interaction matrix A (d × d): Q = A, K = I, scale = 1."""
        value = as_tensor(A(0.0) if callable(A) else A, "A")
        if value.ndim < 2 or value.shape[-1] != value.shape[-2]:
            raise ValueError(
                f"A must be a square (..., d, d) interaction matrix (the score is yᵀAx); "
                f"received shape {tuple(value.shape)}."
            )
        eye = torch.eye(value.shape[-1], dtype=torch.float64, device=value.device)
        return cls(A, eye, V, scale=1.0, tie_tol=tie_tol)

    @classmethod
    def from_field(cls, field: Field, *, tie_tol: float | None = None) -> Hardmax:
        """The β → ∞ limit of a :class:`Softmax` or :class:`Cosine` field (same Q, K, V).

        Softmax attention without biases has scores yᵀAx, cosine attention the normalised
        scores cos(Qx, Ky); scaling either by β → ∞ keeps its argmax, so the limit is
        hardmax with ``scores="bilinear"`` or ``"cosine"`` (the Frank–Wolfe picture of
        Alcalde, Geshkovski, Ruiz-Balet with normalised scores). Any other field (L2,
        Sinkhorn, sigmoid, multi-head, masked, normalised …) is refused with TypeError: its
        weights are not a softmax of scores that scale with β.
        """
        from tpde.fields.attention.cosine import Cosine
        from tpde.fields.attention.softmax import Softmax

        if type(field) is cls:
            return cls(
                *field.params._params[:3], field.params.scale, tie_tol=tie_tol,
                scores=field.scores,
            )  # fmt: skip
        if type(field) is Cosine:
            return cls(*field.params._params[:3], field.params.scale, tie_tol=tie_tol,
                       scores="cosine")  # fmt: skip
        if type(field) is not Softmax:
            raise TypeError(
                f"Hardmax.from_field takes a Softmax or Cosine field (its β → ∞ limit); "
                f"received {type(field).__name__}, whose attention weights are not a softmax "
                "of scores that scale with β, so it has no hardmax limit here. Build "
                "Hardmax(Q, K, V, scale) directly."
            )
        if field.params.has_bias:
            raise TypeError(
                "Hardmax.from_field takes a Softmax field without query/key/value biases (the "
                "biases do not scale with β); received one with biases."
            )
        return cls(*field.params._params[:3], field.params.scale, tie_tol=tie_tol)

    def particle_velocity(self, t, mu: Empirical, x, engine: str, info=None) -> torch.Tensor:
        engine = check_engine(engine)
        if engine not in ("auto", "dense", "chunked"):
            raise ValueError(
                f"hardmax attention forms its scores directly; engine must be 'auto', 'dense' "
                f"or 'chunked'; received {engine!r}."
            )
        p = self.params.at(t, like=x)
        points, log_w = key_log_weights(mu)
        weights = log_w.exp()
        tol = self.tie_tol if self.tie_tol is not None else 64 * torch.finfo(x.dtype).eps
        # The maximisers of ⟨Ax, y⟩ do not change when Ax and every key are scaled by > 0:
        # scores of unit queries and of keys scaled to norm ≤ 1 lie in [−1, 1] at every scale
        # of the tokens (no underflow to ties at 1e-200, no overflow at 1e200).
        queries, keys = self._directions(p, x, points)
        batch = torch.broadcast_shapes(queries.shape[:-2], points.shape[:-2])
        queries = queries.expand(*batch, *queries.shape[-2:])
        rows = max(1, _BLOCK // max(1, points.shape[-2]))
        out = []
        for start in range(0, queries.shape[-2], rows):
            q = queries[..., start : start + rows, :]
            scores = q @ keys.transpose(-1, -2)  # (..., b, n), |score| ≤ 1
            best = scores.amax(-1, keepdim=True)
            tied = (scores >= best - tol).to(x.dtype) * weights.unsqueeze(-2)
            out.append((tied @ points) / tied.sum(-1, keepdim=True))
        averaged = torch.cat(out, dim=-2)
        return averaged if self.params.value_is_identity else averaged @ p.V.transpose(-1, -2)

    def _directions(self, p, x, points):
        """(queries, keys) whose inner products have the scores' maximisers, in [−1, 1]."""
        if self.scores == "cosine":  # cos(Qx, Ky): unit Qx against unit Ky (0: no direction)
            return product_direction(x, p.Q), product_direction(points, p.K)
        queries = unit(x @ p.A.transpose(-1, -2))  # (..., m, d): score of key y is ⟨Ax, y⟩
        largest = safe_norm(points).amax(-1, keepdim=True)  # (..., 1)
        return queries, points / torch.where(largest > 0, largest, 1.0).unsqueeze(-1)

    def __repr__(self) -> str:
        cosine = ", scores='cosine'" if self.scores == "cosine" else ""
        return f"Hardmax(d={self.dim}, k={self.params.k}, scale={self.params.scale:.4g}{cosine})"
