r"""A sum of structured heads: twisted gradient flows of symmetric interaction energies.

MATH.md §12 [derived]. Head h keeps its query and key weights W_Q, W_K, scale c, key weight
a ∈ R^d and rotary encoding R (identity without one), and takes the symmetrised pair kernel

    log K(i, j) = ½ c (⟨R_i W_Q x_i, R_j W_K x_j⟩ + ⟨R_j W_Q x_j, R_i W_K x_i⟩) + aᵀx_i + aᵀx_j,

symmetric in the two tokens (R_i = R(p_i)); without RoPE the first term is x_jᵀ A_s x_i,
A_s = ½(A + Aᵀ). With K_μ(x_i) = Σ_j w_j K(i, j) and a mobility M (semidefinite, sign s),

    Γ_s[μ](x_i) = Σ_h M_h ∇_{x_i} log K^h_μ(x_i) + w,     w = Σ_h (u_h − M_h a_h) + b_O,

    ∇_{x_i} log K_μ(x_i) = a + J_iᵀ Σ_j P_ij k'_j,   J_i = ½c [R_i W_Q; R_i W_K],
    k'_j = [R_j W_K x_j; R_j W_Q x_j],   P_ij ∝ w_j exp(⟨J_i x_i, k'_j⟩ + aᵀx_j)

(one softmax average of the 2k-dimensional keys k'; no RoPE: J_iᵀk'_j = A_s x_j, so
Γ_s = Σ_h (M_h A_s ȳ_h + u_h) + b_O, the head with V = M A_s and its own biases). Each head
is exactly s_h times the gradient of E_h = ½∬K^h dμdμ in the metric ∫K^h_μ⟨(s_hM_h)⁺v, v⟩dμ;
a single head with w = 0 ascends 𝓔 = s E at the rate d𝓔/dt = ‖Γ_s‖²_g
(:meth:`StructuredAttention.metric_norm2`). No causal mask: a one-sided kernel has no
interaction energy (Karagodin, Polyanskiy, Rigollet, arXiv:2411.04990, study the masked
dynamics directly; Karagodin et al., arXiv:2510.22026, the normalised ones).

References: Castin, Ablin, Carrillo, Peyré, arXiv:2501.18322 (2025), §5; Sander, Ablin,
Blondel, Peyré, "Sinkformers", arXiv:2110.11773 (2022).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import torch

from tpde._engines import softmax_average
from tpde.fields.base import Field
from tpde.fields.calls import own_tokens
from tpde.fields.forms import key_log_weights
from tpde.fields.gradient_flow.projection import row_space
from tpde.measures import Empirical

__all__ = ["StructuredAttention", "StructuredHead"]


@dataclass(frozen=True, eq=False)
class StructuredHead:
    """One structured head (module notes), float64 on the CPU (moved to the tokens' device
    and dtype when evaluated).

    The mobility is kept in factor form, M = (BZ) D (BZ)ᵀ with B (d, r) orthonormal
    (r ≤ 2k + 2k_v, or d) and Z, D the eigenpairs of M's compression to range B:
    :attr:`M` forms the d × d matrix on request, :meth:`apply_mobility` multiplies without it.

    Attributes
    ----------
    Wq, Wk : (k, d);  scale : float c;  a : (d,) key weight;  basis : (d, r) B;
    vectors : (r, n) Z, orthonormal;  values : (n,) D, of sign ``sign`` (sM semidefinite);
    sign : s;  rope : :class:`~tpde.fields.RoPE` or None;
    coupling : (r − p, p) or None, C of the nearest mobility M* = [U, Y]·core·[U, Y]ᵀ
        with U = B[:, :p], Y = B[:, p:] C (MATH.md §12, "Factor form"): :attr:`span` holds
        range [U, Y] ⊇ range M* (None: range BZ).
    """

    Wq: torch.Tensor
    Wk: torch.Tensor
    scale: float
    a: torch.Tensor
    basis: torch.Tensor
    vectors: torch.Tensor
    values: torch.Tensor
    sign: int
    rope: object = None
    coupling: torch.Tensor | None = None

    @cached_property
    def M(self) -> torch.Tensor:
        """(d, d) the mobility (BZ) D (BZ)ᵀ, semidefinite of sign ``sign``."""
        F = self.basis @ self.vectors
        return (F * self.values) @ F.mT

    def apply_mobility(self, g: torch.Tensor) -> torch.Tensor:
        """g M for rows g (n, d) (M symmetric): (((g B) Z) D) Zᵀ Bᵀ, O(n·d·r)."""
        B, Z = self.basis.to(g), self.vectors.to(g)
        return (((g @ B) @ Z) * self.values.to(g)) @ Z.mT @ B.mT

    @cached_property
    def span(self) -> torch.Tensor:
        """(d, s) an orthonormal basis holding range(A_s), range(M) and a: the row space of
        [W_Q; W_K; an orthonormal basis of range [U, Y]ᵀ] (:attr:`coupling`)."""
        if self.coupling is None:
            F = self.basis @ self.vectors
        else:
            p = self.coupling.shape[-1]
            F = torch.cat([self.basis[:, :p], self.basis[:, p:] @ self.coupling], 1)
        return row_space(torch.cat([self.Wq, self.Wk, row_space(F.mT).mT]))


class StructuredAttention(Field):
    r"""Γ_s[μ] = Σ_h M_h ∇log K^h_μ + w: the nearest gradient field of an attention (module notes).

    Parameters
    ----------
    heads : sequence of :class:`StructuredHead`
        The heads, each with its kernel and mobility.
    drift : tensor (d,)
        The constant drift w = Σ_h (u_h − M_h a_h) + b_O.

    Notes
    -----
    Built by :func:`tpde.fields.nearest_gradient_field`; the velocity runs on the particle
    engines (one softmax average per head), at μ's own tokens (with positions when a head
    has RoPE) or at points x without RoPE.
    """

    def __init__(self, heads, drift: torch.Tensor):
        self.heads = tuple(heads)
        self.drift = drift
        self.dim = drift.shape[-1]

    @property
    def needs_positions(self) -> bool:
        """Whether a head rotates its queries and keys by position (RoPE)."""
        return any(head.rope is not None for head in self.heads)

    def particle_velocity(
        self, t, mu: Empirical, x, engine: str, info=None, positions=None, *, own=None
    ) -> torch.Tensor:
        if positions is None and self.needs_positions:
            own_tokens(x, mu, "a rotary (RoPE) structured head", own)
            positions = mu.positions
        return sum(self.head_velocities(mu, x, positions, engine=engine)) + self.drift.to(x)

    def head_velocities(self, mu: Empirical, x, positions=None, engine: str = "auto"):
        """M_h ∇log K^h_μ(x) for every head h: a list of (n, d) tensors (no drift)."""
        out = []
        for head in self.heads:
            grad = self.log_kernel_grad(head, mu, x, positions, engine)
            out.append(head.apply_mobility(grad))
        return out

    def log_kernel_grad(self, head: StructuredHead, mu: Empirical, x, positions, engine="auto"):
        """∇_x log K^h_μ(x) = a + J_xᵀ Σ_j P_j k'_j, shape (n, d)."""
        q, k, bias = self._pairs(head, mu, x, positions)
        avg = softmax_average(q, k, k, bias, engine)  # (n, 2k)
        return head.a.to(x) + self._pull_back(head, avg, x, positions)

    def log_partition(self, head: StructuredHead, mu: Empirical, x, positions=None):
        """log K^h_μ(x) = aᵀx + log Σ_j w_j exp(⟨J_x x, k'_j⟩ + aᵀx_j), shape (n,) (dense)."""
        q, k, bias = self._pairs(head, mu, x, positions)
        scores = q @ k.mT + bias
        return torch.logsumexp(scores, dim=-1) + x @ head.a.to(x)

    def head_log_energies(self, mu: Empirical) -> torch.Tensor:
        """log E_h(μ) = log ½ + log Σ_i w_i K^h_μ(x_i) for every head, shape (H,) (dense,
        O(n²) per head; finite where E_h itself overflows)."""
        log_w = mu.weights.log()
        values = [torch.logsumexp(self.log_partition(head, mu, mu.points, mu.positions) + log_w,
                                  dim=-1) for head in self.heads]  # fmt: skip
        return torch.stack(values) - math.log(2.0)

    def energy_log_scale(self, *measures: Empirical) -> float:
        """A common log-factor for 𝓔 at ``measures``: 0 while every E_h there stays below
        √(the largest float) (room for a rate's or a metric's factors), else the largest
        log E_h (a real decoder's unnormalised scores reach E_h ≈ e^{10³}). Pass it as
        ``log_scale`` to :meth:`energy`, :meth:`energy_rate`,
        :func:`tpde.flows.frozen_metric_distance`."""
        largest = max(float(self.head_log_energies(mu).detach().max()) for mu in measures)
        bound = 0.5 * math.log(torch.finfo(measures[0].points.dtype).max)
        return largest if bound < largest < math.inf else 0.0  # inf scores: no factor helps

    def head_energies(self, mu: Empirical, log_scale: float = 0.0) -> torch.Tensor:
        """e^{−log_scale}·E_h(μ), E_h = ½ Σ_i w_i K^h_μ(x_i), for every head, shape (H,)."""
        energies = (self.head_log_energies(mu) - log_scale).exp()
        if not bool(torch.isfinite(energies).all()):
            raise OverflowError(
                f"a structured energy E_h = ½∬K^h dμdμ overflowed in {energies.dtype} (largest "
                f"|token coordinate| {float(mu.points.detach().abs().max()):.3g}): compute "
                "in float64, rescale the tokens, or pass log_scale (a common factor "
                "e^{log_scale}, e.g. the largest of head_log_energies)."
            )
        return energies

    def energy(
        self, mu, *, t: float = 0.0, engine: str = "auto", info=None, log_scale: float = 0.0
    ) -> torch.Tensor:
        """𝓔(μ) = Σ_h s_h E_h(μ): the functional each head's flow ascends (module notes);
        e^{−log_scale}·𝓔 with ``log_scale`` given (signs and ratios unchanged, finite where
        𝓔 overflows)."""
        self.check_measure(mu)
        if not isinstance(mu, Empirical):
            raise TypeError(
                "the structured energy is computed on particles; received "
                f"{type(mu).__name__}: pass an Empirical (a Gaussian: sample it)."
            )
        signs = torch.tensor([h.sign for h in self.heads], dtype=mu.dtype, device=mu.device)
        return (signs * self.head_energies(mu, log_scale)).sum()

    def energy_rate(
        self, mu: Empirical, velocity: torch.Tensor | None = None, *, log_scale: float = 0.0
    ) -> torch.Tensor:
        """d𝓔/dt = Σ_i ∇_{x_i}𝓔(μ) · v_i when the tokens move with v (n, d), by autograd of
        :meth:`energy`; default v = Γ_s[μ], the structured flow's own rate (≥ 0 for one
        head with w = 0: ‖Γ_s‖²_g, module notes). A 0-d tensor, e^{−log_scale} times the
        rate with ``log_scale`` given."""
        with torch.enable_grad():
            x = mu.points.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(self.energy(mu.with_points(x), log_scale=log_scale), x)
        if velocity is None:
            velocity = self.velocity(mu)
        return (grad * velocity).sum()

    def metric_norm2(self, mu: Empirical, v: torch.Tensor, head: int = 0) -> torch.Tensor:
        """‖v‖²_g = Σ_i w_i K^h_μ(x_i) v_iᵀ(s_h M_h)⁺v_i in head h's metric, for v (n, d)."""
        h = self.heads[head]
        weight = self.log_partition(h, mu, mu.points, mu.positions).exp()
        inverse = torch.linalg.pinv(h.sign * h.M.to(v), hermitian=True)
        return (mu.weights * weight * ((v @ inverse) * v).sum(-1)).sum()

    # ------------------------------------------------------------------ pieces
    @staticmethod
    def _rotate(head: StructuredHead, z: torch.Tensor, positions) -> torch.Tensor:
        if head.rope is None:
            return z
        return head.rope.rotate(z.unsqueeze(-3), positions).squeeze(-3)

    def _pairs(self, head: StructuredHead, mu: Empirical, x, positions):
        """Queries J_x x (n, 2k), keys k' (m, 2k) and the key bias aᵀy + log w (m,)."""
        points, log_w = key_log_weights(mu)
        at = None if head.rope is None else _key_positions(mu)
        Wq, Wk, a = head.Wq.to(x), head.Wk.to(x), head.a.to(x)
        q = torch.cat([self._rotate(head, x @ Wq.mT, positions),
                       self._rotate(head, x @ Wk.mT, positions)], dim=-1)  # fmt: skip
        k = torch.cat([self._rotate(head, points @ Wk.mT, at),
                       self._rotate(head, points @ Wq.mT, at)], dim=-1)  # fmt: skip
        return 0.5 * head.scale * q, k, log_w + points @ a

    def _pull_back(self, head: StructuredHead, z: torch.Tensor, x, positions) -> torch.Tensor:
        """J_xᵀ z for z (n, 2k): ½c (W_Qᵀ R_xᵀ z₁ + W_Kᵀ R_xᵀ z₂)."""
        k = head.Wq.shape[0]
        back = None if positions is None else -positions
        z1 = self._rotate(head, z[..., :k], back)
        z2 = self._rotate(head, z[..., k:], back)
        return 0.5 * head.scale * (z1 @ head.Wq.to(x) + z2 @ head.Wk.to(x))

    def __repr__(self) -> str:
        rope = ", RoPE" if self.needs_positions else ""
        return f"StructuredAttention(d={self.dim}, heads={len(self.heads)}{rope})"


def _key_positions(mu: Empirical) -> torch.Tensor:
    """Positions of the keys with mass (those key_log_weights keeps)."""
    if mu.positions is None:
        raise ValueError(
            "a rotary (RoPE) structured head needs token positions: build the measure with "
            "Empirical(points, positions=p)."
        )
    keep = mu.weights > 0
    return mu.positions if bool(keep.all()) else mu.positions[keep]
