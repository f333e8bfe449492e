"""L2 self-attention: a Gaussian kernel in the distance between queries and keys."""

from __future__ import annotations

import torch

from tpde import _lu as lu
from tpde._validation import check_choice
from tpde.fields.base import AffineDerivative, Field
from tpde.fields.forms import SoftmaxForm, key_log_weights
from tpde.fields.params import QKV, HeadParams
from tpde.fields.registry import register
from tpde.measures import Empirical

__all__ = ["L2"]

FORMS = ("distance", "code")


@register("l2")
class L2(Field):
    r"""L2 attention Γ[μ](x) = V ∫ k(x, y) y dμ(y) / ∫ k(x, y) dμ(y), k = e^{−scale·|Qx − Ky|²}.

    Parameters
    ----------
    Q, K : tensor (..., k, d) or callable ``t -> tensor``
        Query and key matrices.
    V : tensor (..., d, d) or callable
        Value matrix.
    scale : float, optional
        Inverse temperature of the kernel; default 1/√k (the paper's figures use 1/√d:
        pass it explicitly).
    form : {"distance", "code"}
        ``"distance"`` (default): the kernel above, k(x, y) = exp(−scale·|Qx − Ky|²).
        ``"code"``: the variant of the authors' experiment code (``rhs_L2`` of
        vcastin/2025-transformers-PDEs), where the cross term carries the scale and the key
        norm does not: k(x, y) ∝ exp(2·scale·⟨Qx, Ky⟩ − |Ky|²) in y. With scale = 1/√d it
        reproduces the paper's L2 figures; with scale = 1 the two forms coincide.

    Notes
    -----
    Expanding the square, k(x, y) ∝ exp(2·scale·⟨Qx, Ky⟩ − scale·|Ky|²) as a function of y
    (the factor e^{−scale·|Qx|²} cancels in the normalisation): L2 attention is softmax
    attention with queries 2·scale·Qx, keys Ky and the key bias −c·|Ky|² (c = scale, or
    c = 1 in the code form). Particles therefore run on every softmax engine, SDPA included
    (the bias is one extra query/key coordinate), with the log-weights added to the bias.

    Gaussian closure (tilt lemma, MATH.md §3; general scale: Q, K → √scale·Q, √scale·K):
    with A = scale·KᵀQ and M = I + 2cΣKᵀK,

        Γ[N(α, Σ)](x) = V M⁻¹(α + 2ΣAx),
        α̇ = V M⁻¹(I + 2ΣA)α,   Σ̇ = 2VΣ(I + 2cKᵀKΣ)⁻¹AΣ + transpose.

    Unlike softmax, the covariance cannot blow up in finite time when K is invertible
    (growth at most exponential, MATH.md §4.6): the key term −c|Ky|² caps the tilt.

    Reference: Castin, Ablin, Carrillo, Peyré, arXiv:2501.18322 (2025); Kim, Papamakarios,
    Mnih, "The Lipschitz constant of self-attention", ICML 2021 (L2 attention).
    """

    def __init__(
        self,
        Q,
        K,
        V,
        scale=None,
        *,
        form: str = "distance",
        query_bias=None,
        key_bias=None,
        value_bias=None,
    ):
        self.params = QKV(
            Q, K, V, scale, query_bias=query_bias, key_bias=key_bias, value_bias=value_bias
        )
        self.form = check_choice(form, "form", FORMS)
        self.dim = self.params.dim

    def _key_coefficient(self, p: HeadParams) -> float:
        """c in the key bias −c·|Ky|²: the scale, or 1 in the authors' code form."""
        return p.scale if self.form == "distance" else 1.0

    def softmax_form(self, t, mu: Empirical, x) -> SoftmaxForm:
        """L2 attention as a key-biased softmax average (shared with MultiHead, Masked).

        With u = Qx + b_q and v = Ky + b_k: −scale·|u − v|² = 2·scale⟨u, v⟩ − scale|v|² +
        (terms free of y): queries 2·scale·u, keys v, key bias log w − c|v|².
        """
        p = self.params.at(t, like=x)
        points, log_w = key_log_weights(mu)
        keys = points @ p.K.transpose(-1, -2)
        queries = x @ p.Q.transpose(-1, -2)
        if p.bk is not None:
            keys = keys + p.bk.unsqueeze(-2)
        if p.bq is not None:
            queries = queries + p.bq.unsqueeze(-2)
        bias = log_w - self._key_coefficient(p) * (keys**2).sum(-1)
        return SoftmaxForm((2 * p.scale) * queries, keys, bias, points, p.V, p.bv)

    def particle_velocity(self, t, mu: Empirical, x, engine: str, info=None) -> torch.Tensor:
        return self.softmax_form(t, mu, x).velocity(engine)

    def _closure(self, t, mean, cov):
        """(params, c, KᵀK, M, s, X): X = M⁻¹[α + Σs, 2ΣA] (one LU for both columns),
        M = I + 2cΣKᵀK, s = 2·scale·Kᵀb_q − 2c·Kᵀb_k the biases' linear tilt (or None)."""
        p = self.params.at(t, like=mean)
        eye = torch.eye(self.dim, dtype=mean.dtype, device=mean.device)
        coef = self._key_coefficient(p)
        KtK = p.K.transpose(-1, -2) @ p.K
        M = eye + 2 * coef * cov @ KtK
        shift = None
        for bias, factor in ((p.bq, 2 * p.scale), (p.bk, -2 * coef)):
            if bias is not None:
                term = factor * (p.K.transpose(-1, -2) @ bias.unsqueeze(-1)).squeeze(-1)
                shift = term if shift is None else shift + term
        tilt = mean if shift is None else mean + (cov @ shift.unsqueeze(-1)).squeeze(-1)
        rhs = 2 * cov @ p.A
        tilt = tilt.unsqueeze(-1).expand(*rhs.shape[:-1], 1)
        X = lu.solve(M, torch.cat([tilt, rhs], dim=-1))
        return p, coef, KtK, M, shift, X

    def gaussian_affine(self, t, mean, cov):
        """Γ[N(α, Σ)](x) = V M⁻¹(α + Σb + 2ΣAx) + b_v with M = I + 2cΣKᵀK.

        b = 2·scale·Kᵀb_q − 2c·Kᵀb_k collects the biases' linear tilt (0 without biases).
        """
        p, _, _, _, _, X = self._closure(t, mean, cov)
        solved = p.V @ X
        c = solved[..., 0]
        return (c if p.bv is None else c + p.bv), solved[..., 1:]

    def gaussian_affine_derivative(self, t, mean, cov) -> AffineDerivative:
        """(c, B) and their derivative. With X = M⁻¹[α + Σb, 2ΣA] = [x₀, X₁] and
        dM = 2c dΣ KᵀK: dc = P dα + P dΣ (b − 2cKᵀK x₀), dB = P dΣ (2A − 2cKᵀK X₁), where
        P = VM⁻¹ (d(M⁻¹N) = M⁻¹(dN − dM M⁻¹N))."""
        p, coef, KtK, M, shift, X = self._closure(t, mean, cov)
        solved = p.V @ X
        c = solved[..., 0] if p.bv is None else solved[..., 0] + p.bv
        P = lu.solve(M.transpose(-1, -2), p.V.transpose(-1, -2)).transpose(-1, -2)
        R = 2 * p.A - 2 * coef * KtK @ X[..., 1:]
        r = -2 * coef * (KtK @ X[..., :1]).squeeze(-1)
        if shift is not None:
            r = r + shift
        return AffineDerivative(c, solved[..., 1:], P, ((P, R, r),))

    def __repr__(self) -> str:
        return (
            f"L2(d={self.dim}, k={self.params.k}, scale={self.params.scale:.4g}, "
            f"form={self.form!r})"
        )
