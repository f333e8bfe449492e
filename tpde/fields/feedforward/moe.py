r"""A routed mixture of experts (Mixtral, Qwen2-MoE) as a per-token velocity field."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch

from tpde.fields.feedforward.base import FeedForward
from tpde.fields.params import Weights, linear

__all__ = ["MixtureOfExperts"]


class MixtureOfExperts(FeedForward):
    r"""Routed feed-forward field F(x) = Σ_{e ∈ T(x)} g_e(x) F_e(x) [+ σ(w_sᵀx) S(x)] (MATH.md §8).

    The router scores the E experts of token x, z = W_r x, and their probabilities
    p = softmax(z); T(x) are the k experts of largest p_e (``torch.topk``), and expert e ∈ T(x)
    weighs

        g_e(x) = p_e / Σ_{e' ∈ T(x)} p_e' = softmax over the chosen logits   (normalize=True),
        g_e(x) = p_e                                                      (normalize=False),

    the first Mixtral's (and Qwen2-MoE's with ``norm_topk_prob``), the second Qwen2-MoE's
    default. The experts outside T(x) are not evaluated at x. A shared expert S (Qwen2-MoE)
    acts on every token, weighed by the sigmoid gate σ(w_sᵀx) (or 1 without ``shared_gate``).

    Parameters
    ----------
    router : tensor (E, d) or callable ``t -> tensor``
        W_r, the router's weight (``gate`` of transformers' sparse MoE block), no bias.
    experts : sequence of E feed-forward fields on R^d
        F_e (:class:`~tpde.fields.SwiGLU` for Mixtral's and Qwen2-MoE's experts).
    top_k : int
        k, 1 ≤ k ≤ E.
    normalize : bool, default True
        Renormalise the chosen probabilities (above).
    shared : feed-forward field on R^d, optional
        S, the shared expert.
    shared_gate : tensor (1, d) or callable, optional
        w_s of the shared expert's gate (needs ``shared``).

    Notes
    -----
    Per token, no interaction: μ, the engine and ``info`` play no part. F is a sum over
    experts, F = Σ_e v_e with v_e(x) = g_e(x) F_e(x) (0 for e ∉ T(x)) and the shared term
    last: :meth:`expert_velocities` returns these terms, the per-expert split of the MLP
    sub-step (:meth:`tpde.pretrained.Transformer.split` with ``experts=True``). The routing
    is piecewise constant in x: F is discontinuous where two probabilities tie at the k-th
    place (a flow through such a point is defined by its one-sided steps only). Computed in
    the points' dtype, the router's softmax included (transformers forms it in float32).
    Gaussians are refused (a nonlinear per-token field).

    Reference: Shazeer et al., "Outrageously large neural networks: the sparsely-gated
    mixture-of-experts layer", ICLR 2017; Jiang et al., "Mixtral of experts",
    arXiv:2401.04088 (2024); Qwen team, "Qwen1.5-MoE" (2024).
    """

    def __init__(self, router, experts: Sequence[FeedForward], top_k: int, *,
                 normalize: bool = True, shared=None, shared_gate=None):  # fmt: skip
        if isinstance(experts, FeedForward) or not isinstance(experts, Sequence) or not experts:
            raise TypeError(
                "MixtureOfExperts takes a non-empty list of feed-forward fields (the experts); "
                f"received {type(experts).__name__}."
            )
        for index, expert in enumerate([*experts, *([] if shared is None else [shared])]):
            if not isinstance(expert, FeedForward):
                what = "the shared expert" if index == len(experts) else f"expert {index}"
                raise TypeError(
                    f"MixtureOfExperts: {what} must be a feed-forward field (SwiGLU, MLP); "
                    f"received {type(expert).__name__}."
                )
        if shared_gate is not None and shared is None:
            raise ValueError("MixtureOfExperts: shared_gate gates the shared expert; pass shared.")
        if not isinstance(normalize, bool):
            raise TypeError(f"normalize must be True or False; received {normalize!r}.")
        self.params = Weights(
            "MixtureOfExperts", {"W_r": ("E", "d"), "w_s": ("one", "d")},
            {"W_r": router, "w_s": shared_gate}, optional=("w_s",),
        )  # fmt: skip
        self.dim, count = self.params.sizes["d"], self.params.sizes["E"]
        if len(experts) != count:
            raise ValueError(
                f"MixtureOfExperts: the router scores E = {count} experts (its weight has "
                f"{count} rows) but {len(experts)} experts were given; pass one per row."
            )
        if shared_gate is not None and self.params.sizes["one"] != 1:
            raise ValueError(
                f"MixtureOfExperts: shared_gate must have shape (1, {self.dim}); received "
                f"{self.params.sizes['one']} rows."
            )
        for index, expert in enumerate([*experts, *([] if shared is None else [shared])]):
            if expert.dim != self.dim:
                raise ValueError(
                    f"MixtureOfExperts: expert {index} acts on d = {expert.dim}, the router on "
                    f"d = {self.dim}."
                )
        if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 1:
            raise ValueError(f"top_k must be a positive integer; received {top_k!r}.")
        if top_k > count:
            raise ValueError(
                f"top_k = {top_k} experts per token exceeds the E = {count} experts; pass "
                f"top_k ≤ {count}."
            )
        self.experts, self.top_k, self.normalize = tuple(experts), int(top_k), normalize
        self.shared = shared

    @property
    def time_dependent(self) -> bool:
        parts = [*self.experts, *([] if self.shared is None else [self.shared])]
        return any(p.time_dependent for p in parts) or super().time_dependent

    def routing(self, t: float, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(g, T): the weights g (..., n, k) of the chosen experts T (..., n, k) of x (..., n, d),
        in decreasing order of probability (class equation)."""
        W_r, _ = self.params.at(t, like=x)
        probabilities = torch.softmax(linear(x, W_r, None), dim=-1)
        weights, chosen = torch.topk(probabilities, self.top_k, dim=-1)
        if self.normalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights, chosen

    def _routed(self, t: float, x: torch.Tensor, each):
        """Call ``each(e, tokens, v)`` with the flat indices of the tokens routed to expert e
        and their terms v = g_e F_e (rows of x flattened to (N, d))."""
        weights, chosen = self.routing(t, x)
        flat, weights, chosen = (
            x.reshape(-1, self.dim),
            weights.flatten(0, -2),
            chosen.flatten(0, -2),
        )
        for e, expert in enumerate(self.experts):
            tokens, slot = torch.where(chosen == e)
            if tokens.numel():
                each(e, tokens, expert.feed_forward(t, flat[tokens]) * weights[tokens, slot, None])

    def _shared_term(self, t: float, x: torch.Tensor) -> torch.Tensor:
        _, w_s = self.params.at(t, like=x)
        term = self.shared.feed_forward(t, x)
        return term if w_s is None else torch.sigmoid(linear(x, w_s, None)) * term

    def feed_forward(self, t: float, x: torch.Tensor) -> torch.Tensor:
        """F(x) for x (..., n, d): each expert on the tokens routed to it, weighed, summed."""
        out = torch.zeros(x.numel() // self.dim, self.dim, dtype=x.dtype, device=x.device)
        self._routed(t, x, lambda e, tokens, v: out.index_add_(0, tokens, v.to(out.dtype)))
        out = out.reshape(x.shape)
        return out if self.shared is None else out + self._shared_term(t, x)

    def expert_velocities(self, t: float, x: torch.Tensor) -> torch.Tensor:
        """The terms v_e (E [+ 1], ..., n, d) of F(x) = Σ_e v_e: expert e's g_e(x)F_e(x) at the
        tokens routed to it, 0 elsewhere, then the shared expert's gated term (if any)."""
        out = x.new_zeros(len(self.experts), x.numel() // self.dim, self.dim)
        self._routed(t, x, lambda e, tokens, v: out[e].index_copy_(0, tokens, v.to(out.dtype)))
        out = out.reshape(len(self.experts), *x.shape)
        return out if self.shared is None else torch.cat([out, self._shared_term(t, x)[None]])

    def __repr__(self) -> str:
        extra = "" if self.normalize else ", normalize=False"
        extra += "" if self.shared is None else f", shared={self.shared!r}"
        return (f"MixtureOfExperts(d={self.dim}, experts={len(self.experts)}, "
                f"top_k={self.top_k}{extra})")  # fmt: skip
