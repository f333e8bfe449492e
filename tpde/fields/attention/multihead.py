"""Multi-head attention: a sum of single-head fields with output blocks C_h = W_hᵀ V_h."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tpde._validation import as_parameter, as_tensor
from tpde.fields.base import Field, GaussianNotPreserved, shared_capabilities
from tpde.fields.calls import part_velocity
from tpde.fields.params import evaluate_parameter as _evaluate
from tpde.fields.registry import register, variant
from tpde.measures import Empirical

__all__ = ["MultiHead"]


class MultiHead(Field):
    r"""Multi-head attention Γ[μ](x) = Σ_h W_hᵀ Γ_h[μ](x), a sum of single-head fields.

    Parameters
    ----------
    heads : sequence of H fields
        Single-head fields (:class:`Softmax`, :class:`L2`, :class:`Linear`,
        :class:`Sigmoid`, ...) acting on the same dimension d. Head h's value matrix V_h
        (d × d) is its output block when W is None.
    W : tensor (..., H, d, d), callable ``t -> tensor`` or None
        Output matrices: head h contributes W_hᵀ Γ_h, so its output block is
        C_h = W_hᵀ V_h (MATH.md §2). Default None: W_h = I, C_h = V_h.
    bias : tensor (..., d), callable or None
        Output bias b_O added once to the sum (the output projection W_O z + b_O of a
        real Transformer; its W_O is best folded into each head's V as W_O^h V_h).

    Notes
    -----
    In the paper's notation Γ[μ](x) = Σ_h C_h E_{π_x^h}[y], with π_x^h the attention of
    head h. The paper's W_h, V_h ∈ R^{k×d} fit here padded with zero rows to d × d (the
    same C_h); :meth:`split` builds the paper's code layout (Q, K, V cut into H row blocks,
    W = I).

    Particles: one pairwise pass per head. Softmax and L2 heads score in their head
    dimension k (queries scale·Qx, keys Ky) when k < d; other heads call their own
    velocity. Measured on a 2-core CPU (benchmarks/fields.py): the fused SDPA kernel's cost
    per query-key pair hardly depends on the width below ~32, so H heads cost about H
    single-head passes.

    Gaussian closure: the sum of the heads' affine closures, c = Σ_h W_hᵀ c_h and
    B = Σ_h W_hᵀ B_h; for softmax heads α̇ = Σ_h C_h(I + ΣA_h)α and
    Σ̇ = Σ_h (C_hΣA_hΣ + ΣA_hᵀΣC_hᵀ) (MATH.md §3). If one head does not keep Gaussians
    Gaussian, neither does the sum, and :meth:`gaussian_rhs` raises naming that head.

    Reference: Vaswani et al., "Attention is all you need", NeurIPS 2017; Castin, Ablin,
    Carrillo, Peyré, arXiv:2501.18322 (2025) and its code (``rhs_multihead``).
    """

    def __init__(self, heads: Sequence[Field], W=None, bias=None):
        self.heads = _check_heads(heads)
        self.dim = self.heads[0].dim
        self.W = None if W is None else as_parameter(W, "W")
        self.bias = None if bias is None else as_parameter(bias, "bias")
        self._W_at(0.0, None)  # shapes checked now, not in the first step of a run
        self._bias_at(0.0, None)

    #: Γ = Σ_h W_hᵀ Γ_h (Field.sums_children).
    sums_children = True

    def children(self) -> tuple[Field, ...]:
        """The heads, in order."""
        return self.heads

    @property
    def capabilities(self) -> frozenset:
        """ "gaussian" when every head keeps Gaussians Gaussian (the sum of affine closures)."""
        return shared_capabilities(self.heads)

    # ------------------------------------------------------------------ construction
    @classmethod
    def split(
        cls, Q, K, V, heads: int, scale=None, *, kind: str = "softmax", **options
    ) -> MultiHead:
        """The paper's code layout: cut Q, K, V into H row blocks, W = I.

        Parameters
        ----------
        Q, K : tensor (..., H·k, d) or callable
            Head h uses the rows h·k … (h+1)·k − 1: Q_h, K_h of shape (k, d).
        V : tensor (..., d, d) or callable, with d divisible by H
            Head h's output block is C_h = E_hᵀ V_h, V_h the h-th block of d/H rows of V
            and E_h the same rows of the identity: V with the other rows set to zero. So
            Σ_h C_h = V, and H = 1 is the single head ``kind(Q, K, V, scale)``.
        heads : int
            Number of heads H ≥ 1.
        scale : float, optional
            Score scale of every head; default 1/√k with k the head dimension (as in
            ``rhs_multihead`` of the authors' code).
        kind : str
            The single-head field of every head: a registered variant that can be a head
            (:func:`tpde.fields.registry.variant_names` with ``head=True``: "softmax",
            "l2", "linear", "sigmoid", …); ``options`` go to its constructor (e.g.
            ``form="code"`` for L2, ``bias=0.0`` for sigmoid).
        """
        H = _check_head_count(heads)
        head_class = variant(kind, head=True).build
        Q, K, V = (as_parameter(p, name) for p, name in ((Q, "Q"), (K, "K"), (V, "V")))
        q0, k0, v0 = (_evaluate(p, name, 0.0) for p, name in ((Q, "Q"), (K, "K"), (V, "V")))
        rows, d = _check_split_shapes(q0, k0, v0, H)
        k, r = rows // H, d // H
        fields = [
            head_class(
                _rows_of(Q, slice(h * k, (h + 1) * k)),
                _rows_of(K, slice(h * k, (h + 1) * k)),
                _masked_rows(V, slice(h * r, (h + 1) * r), d),
                scale,
                **options,
            )
            for h in range(H)
        ]
        return cls(fields)

    # ------------------------------------------------------------------ particles
    @property
    def time_dependent(self) -> bool:
        own = any(p is not None and not isinstance(p, torch.Tensor) for p in (self.W, self.bias))
        return own or any(head.time_dependent for head in self.heads)

    def particle_velocity(
        self, t, mu: Empirical, x, engine: str, info=None, positions=None, *, own=None
    ) -> torch.Tensor:
        W = self._W_at(t, x)
        total = 0
        for h, head in enumerate(self.heads):
            W_h = None if W is None else W[..., h, :, :]
            out = part_velocity(head, t, mu, x, engine, info, positions, own=own)
            total = total + (out if W_h is None else out @ W_h)  # row form of W_hᵀ Γ_h
        bias = self._bias_at(t, x)
        return total if bias is None else total + bias.unsqueeze(-2)

    # ------------------------------------------------------------------ Gaussians
    def gaussian_affine(self, t, mean, cov):
        """c = Σ_h W_hᵀ c_h, B = Σ_h W_hᵀ B_h from the heads' closures Γ_h = c_h + B_h x."""
        W = self._W_at(t, mean)
        c_total, B_total = 0, 0
        for h, head in enumerate(self.heads):
            try:
                c, B = head.gaussian_affine(t, mean, cov)
            except GaussianNotPreserved as err:
                raise GaussianNotPreserved(
                    f"multi-head attention keeps Gaussians Gaussian only if every head does; "
                    f"head {h} ({type(head).__name__}) does not: {err}"
                ) from None
            if W is not None:
                W_h = W[..., h, :, :].transpose(-1, -2)
                c, B = (W_h @ c.unsqueeze(-1)).squeeze(-1), W_h @ B
            c_total, B_total = c_total + c, B_total + B
        bias = self._bias_at(t, mean)
        return (c_total if bias is None else c_total + bias), B_total

    def children_output(self, t, like):
        """The output matrices W_h (..., H, d, d) and bias b_O (..., d), or None each."""
        return self._W_at(t, like), self._bias_at(t, like)

    # ------------------------------------------------------------------ checks
    def _W_at(self, t, like: torch.Tensor | None) -> torch.Tensor | None:
        if self.W is None:
            return None
        W = _evaluate(self.W, "W", t)
        H, d = len(self.heads), self.dim
        if W.ndim < 3 or W.shape[-3:] != (H, d, d):
            raise ValueError(
                f"W must have shape (..., H, d, d) = (..., {H}, {d}, {d}): one d × d output "
                f"matrix W_h per head (output block C_h = W_hᵀV_h); received "
                f"{tuple(W.shape)}."
            )
        return W if like is None else W.to(dtype=like.dtype, device=like.device)

    def _bias_at(self, t, like: torch.Tensor | None) -> torch.Tensor | None:
        if self.bias is None:
            return None
        bias = _evaluate(self.bias, "bias", t)
        if bias.ndim < 1 or bias.shape[-1] != self.dim:
            raise ValueError(
                f"bias must have shape (..., d) = (..., {self.dim}): the output bias b_O; "
                f"received {tuple(bias.shape)}."
            )
        return bias if like is None else bias.to(dtype=like.dtype, device=like.device)

    def __repr__(self) -> str:
        inner = ", ".join(repr(h) for h in self.heads)
        return f"MultiHead([{inner}], W={'I' if self.W is None else 'given'})"


# ---------------------------------------------------------------------- helpers
def _check_heads(heads) -> tuple[Field, ...]:
    if isinstance(heads, Field) or not isinstance(heads, Sequence):
        raise TypeError(
            f"heads must be a list of single-head fields; received {type(heads).__name__}. "
            "Wrap one field as [field], or use MultiHead.split(Q, K, V, heads=H)."
        )
    heads = tuple(heads)
    if not heads:
        raise ValueError("heads must hold at least one field; received an empty list.")
    for h, head in enumerate(heads):
        if not isinstance(head, Field):
            raise TypeError(
                f"heads must be tpde attention fields; head {h} is a {type(head).__name__}."
            )
    dims = [head.dim for head in heads]
    if len(set(dims)) > 1:
        listed = ", ".join(f"head {h}: d = {d}" for h, d in enumerate(dims))
        raise ValueError(
            f"all heads must act on the same token dimension d; received {listed}. Build "
            "every head with Q, K of shape (k, d) and V of shape (d, d) for one d."
        )
    return heads


def _check_head_count(heads) -> int:
    if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1:
        raise ValueError(f"heads must be a positive integer H; received {heads!r}.")
    return heads


def _check_split_shapes(Q, K, V, H: int) -> tuple[int, int]:
    """Rows of Q and the dimension d, after checking that H divides both."""
    if Q.ndim < 2 or K.shape[-2:] != Q.shape[-2:]:
        raise ValueError(
            f"split needs Q and K of the same shape (..., H·k, d); received Q "
            f"{tuple(Q.shape)} and K {tuple(K.shape)}."
        )
    rows, d = Q.shape[-2:]
    if rows % H:
        raise ValueError(
            f"cannot split Q, K with {rows} rows into {H} heads of equal size; pass Q and K "
            f"with H·k rows (a multiple of {H})."
        )
    if V.ndim < 2 or V.shape[-2:] != (d, d):
        raise ValueError(
            f"split needs V of shape (..., {d}, {d}) for tokens of dimension {d}; received "
            f"{tuple(V.shape)}."
        )
    if d % H:
        raise ValueError(
            f"cannot split V ({d} × {d}) into {H} row blocks: the token dimension d = {d} "
            f"must be divisible by the number of heads H = {H}."
        )
    return rows, d


def _rows_of(param, rows: slice):
    """Rows of a parameter: a view of a tensor, or a callable taking them at each t."""
    if isinstance(param, torch.Tensor):
        return param[..., rows, :]
    return lambda t: as_tensor(param(t), "parameter")[..., rows, :]


def _masked_rows(V, rows: slice, d: int):
    """V with every row outside ``rows`` set to zero: the output block E_hᵀ V_h."""

    def mask(value: torch.Tensor) -> torch.Tensor:
        keep = torch.zeros(d, 1, dtype=value.dtype, device=value.device)
        keep[rows] = 1
        return value * keep

    if isinstance(V, torch.Tensor):
        return mask(V)
    return lambda t: mask(as_tensor(V(t), "V"))


@register("multihead", head=False)
def _split_two_heads(Q, K, V, scale=None, *, heads: int = 2, kind: str = "softmax", **options):
    """Multi-head attention in the paper's layout (MultiHead.split), two heads by default."""
    return MultiHead.split(Q, K, V, heads=heads, scale=scale, kind=kind, **options)
