r"""Harmonics engine: the isotropic exponential kernel on the sphere S² in spherical harmonics.

For tokens on the unit sphere S² ⊂ R³ and the kernel e^{β⟨x, y⟩} (β > 0: A = βI), the
Funk–Hecke expansion (Abramowitz & Stegun 10.2.36 with the addition theorem, DLMF 14.30.9)

    e^{βt} = Σ_{l≥0} (2l + 1) i_l(β) P_l(t),
    P_l(⟨x, y⟩) = 4π/(2l + 1) Σ_{m=0}^{l} ε_m Λ_l^m(cos θ_x) Λ_l^m(cos θ_y) cos m(φ_x − φ_y)

(i_l the modified spherical Bessel function, Λ_l^m the fully normalised associated
Legendre functions, ε_0 = 1, ε_m = 2) turns the pairwise sums of one token cloud, weights
w_j, into sums of (L + 1)² real spherical harmonics:

    S^{(r)}(x) := e^{−β} Σ_j w_j^{(r)} e^{β⟨x, x_j⟩},   w^{(0)} = w,  w^{(1, 2, 3)} = w ⊙ x,
    S^{(r)}(x) = Σ_{l ≤ L} a_l Σ_m ε_m Λ_l^m(cos θ) Σ_j w_j^{(r)} Λ_l^m(cos θ_j)
                 cos m(φ − φ_j) + (truncation),   a_l = 4π e^{−β} i_l(β).

The softmax (SA) average is S^{(1..3)}/S^{(0)}, the unnormalised (USA) sum e^{β}S^{(1..3)}.

Evaluation as a bilinear form. Λ_l^m(cos θ), with sin θ signed, is a trigonometric
polynomial of degree l in θ: a cosine series for even m, a sine series for odd m, with
coefficients C^m_{lk} bounded by the function itself (|Λ_l^m| ≤ √((2l + 1)/4π)) — unlike
its monomial coefficients in cos θ, which reach 10¹⁰ by l = 60. So per token the sums are
A(x)ᵀ G T(x): A = (cos mφ, sin mφ)_{m ≤ L} the azimuth table, T = (cos kθ)_{k ≤ L} or
(sin kθ)_{1 ≤ k ≤ L} the polar table (both by complex products from e^{iθ} = z + i√(x₁² + x₂²)
and e^{iφ} = (x₁ + ix₂)/sin θ, no trigonometric function), G = K^m M with the cloud's
moments M_{(m, ·), k} = Σ_j w_j A_m(x_j) T_k(x_j) (one matrix product over the tokens) and
the kernel matrix K^m = ε_m C^{mᵀ} diag(a) C^m of order m, (L + 1) × (L + 1). The moments
of the channels w ⊙ x are not summed: they follow exactly from those of w at degree L + 1
(x₃ = cos θ, x₁ + ix₂ = sin θ e^{iφ}; :mod:`tpde._engines._harmonic_passes`). Cost
(:func:`flops`): about 2(L + 2)² multiply-adds per token for the moments and 8(L + 1)² for
the sums, in matrix products, ≈ 20(L + 1)² flops per token; O(n·L) elsewhere; O(L⁴) for the
kernel matrices, cached per β.

Truncation (the S¹ engine's rule, :mod:`tpde._engines.spectral`). The scaled coefficients
c_l = e^{−β}(2l + 1)i_l(β) are positive with Σ_l c_l = 1 (e^{βt} at t = 1) and |P_l| ≤ 1, so
dropping the degrees l > L changes S by at most W·τ(L), τ(L) = Σ_{l>L} c_l, W = Σ_j |w_j|;
at a cloud's own tokens D_i ≥ w_i e^{β}, and :func:`truncation` takes the smallest L with
τ(L) ≤ eps·min_i w_i/W: truncation never exceeds rounding. L = 11, 18, 38, 103 at
β = 0.1, 1, 10, 100 (10⁶ tokens of weight 1/n, float64; 7, 12, 28, 78 in float32).

Rounding: relative to e^{β}W, as on S¹ (module notes of :mod:`tpde._engines.spectral`), with
a factor growing slowly with L from the sizes of the Legendre coefficients: measured against
dense rows in float64, ≤ 2.3e-14 relative for β = 0.1 … 100 (2000 tokens), ≤ 1.3e-13 at 10⁶
tokens (64 sampled rows, benchmarks/sphere_harmonics.py). The moments are summed so that
their rounding does not grow with the number of tokens (matrix products over chunks of
64 tokens, the chunks and the blocks summed pairwise): with equal weights 1/N
a running sum made 2000 × (1/2000) = 1 − 5.5e-14, and the softmax average of clustered
clouds (N = 2000 … 4000, β = 10 and 50) was 1.6e-12 off a direct float64 sum; pairwise,
≤ 7.5e-14 (tokens between clusters, where D_i is small against e^{β}W) and ≤ 1e-14
inside clusters (tests/adversarial/test_round5_engines.py).

Degree bound: the tables take table_bytes(L) = 8(L + 1)²(2L + 4) bytes; past
HARMONICS_MAX_BYTES (1 GiB, L ≤ 405, β up to about 1800 at 3000 tokens in float64) the
engine refuses, naming β, the degree and the memory ("auto" takes SDPA instead).

Gradients: torch operations only, checkpointed per block of tokens; in the tokens and
weights, not in β. The sums equal the kernel sums on the sphere, so derivatives along it
are exact (a field wrapped in ``Normalized`` sees only those); the azimuth e^{iφ} divides
by sin θ, so a token exactly at a pole (x₁ = x₂ = 0) has no derivative in its azimuth (its
sums are still exact).

Coefficients: the ratios r_l = i_l/i_{l−1} by the backward recurrence
r_l = β/(2l + 1 + β r_{l+1}) (Miller's algorithm, i_l the minimal solution of
i_{l−1} − i_{l+1} = (2l + 1)i_l/β), normalised by Σ_l c_l = 1; the Legendre coefficients by
FFT of the stable three-term recurrence of Λ_l^m on a uniform θ grid of 2L + 4 points
(exact for degree-L trigonometric polynomials).
"""

from __future__ import annotations

import functools
import math

import torch

from tpde._engines import _harmonic_passes as passes
from tpde._engines._harmonic_passes import flops, pairwise_sum
from tpde._engines.spectral import _blocks, _recurrence_length, degree_estimate
from tpde._engines.tiled import sums_on_workers

__all__ = [
    "HARMONICS_MIN_TOKENS",
    "exp_sum_harmonics",
    "flops",
    "pick_harmonics",
    "softmax_average_harmonics",
    "sphere_sums",
    "spherical_ive",
    "truncation",
]


# Tokens per block, over all the clouds of a batch, and at least BLOCK_MIN per cloud: in
# pass 1 BLOCK_TOKENS (its chunks are summed pairwise within the block, then the blocks:
# the rounding of the moments depends on it), in pass 2 SYNTHESIS_TOKENS (a block's tables
# and products stay in the cache; the tokens are independent there, so it changes no sum).
BLOCK_TOKENS = 2**12
SYNTHESIS_TOKENS = 2**11
BLOCK_MIN = 256


def spherical_ive(beta: torch.Tensor, lmax: int) -> torch.Tensor:
    """c_l = e^{−β}(2l + 1)i_l(β) for l = 0 … lmax, shape (..., lmax + 1), float64; β > 0.

    i_l(β) = √(π/2β) I_{l+1/2}(β); Σ_{l≥0} c_l = 1. Miller's backward recurrence on the
    ratios from l = M ≫ β, normalised by that sum.
    """
    beta = torch.as_tensor(beta, dtype=torch.float64, device=getattr(beta, "device", "cpu"))
    length = max(lmax, _recurrence_length(float(beta.max())))
    ratios, r = [], torch.zeros_like(beta)
    for l in range(length, 0, -1):
        r = beta / (2 * l + 1 + beta * r)
        ratios.append(r)
    products = torch.cumprod(torch.stack(ratios[::-1], dim=-1), dim=-1)  # i_l/i_0, l ≥ 1
    odd = torch.arange(3, 2 * length + 2, 2, dtype=torch.float64, device=beta.device)
    c0 = 1 / (1 + (odd * products).sum(-1, keepdim=True))
    return torch.cat([c0, c0 * odd[:lmax] * products[..., :lmax]], dim=-1)


#: The most memory the harmonics engine's kernel tables may take (:func:`table_bytes`): 1 GiB,
#: degree L ≈ 320 (β up to about 1000 in float64); beyond it SDPA's cost, which does not
#: grow with β, wins anyway.
HARMONICS_MAX_BYTES = 2**30


def table_bytes(L: int) -> int:
    """Bytes of the largest table at degree L: the Legendre recurrence on 2L + 4 angles,
    (L + 1)²(2L + 4) float64 numbers (the Fourier coefficients and kernels are as large)."""
    return 8 * (L + 1) ** 2 * (2 * L + 4)


@functools.cache
def _max_degree() -> int:
    """The largest L whose tables fit :data:`HARMONICS_MAX_BYTES`."""
    L = 1
    while table_bytes(L + 1) <= HARMONICS_MAX_BYTES:
        L += 1
    return L


def check_degree(beta_max: float, L: int) -> int:
    """``L``, or a ValueError naming β, the degree and the memory its tables would need."""
    if table_bytes(L) > HARMONICS_MAX_BYTES:
        raise ValueError(
            f"the harmonics engine at beta = {beta_max:.6g} needs degree L = {L}, whose "
            f"tables would take {table_bytes(L) / 2**30:.3g} GiB, past its bound of "
            f"{HARMONICS_MAX_BYTES / 2**30:.3g} GiB (L <= {_max_degree()}): use "
            "engine='sdpa' or 'dense' (their cost does not grow with beta)."
        )
    return L


def _degree(betas: tuple[float, ...], target: float) -> tuple[int, torch.Tensor]:
    """:func:`_coefficients` behind the degree bound: ValueError before any table is built."""
    beta_max = max(betas)
    estimate = degree_estimate(beta_max, target, "harmonics", math.inf)
    if table_bytes(int(estimate / 2)) > HARMONICS_MAX_BYTES:  # L is within 2× of it
        raise ValueError(
            f"the harmonics engine at beta = {beta_max:.6g} needs degree L ≈ {estimate:.0f}, "
            f"whose tables would take about {table_bytes(int(estimate)) / 2**30:.3g} GiB, past "
            f"its bound of {HARMONICS_MAX_BYTES / 2**30:.3g} GiB (L <= {_max_degree()}): use "
            "engine='sdpa' or 'dense' (their cost does not grow with beta)."
        )
    L, c = _coefficients(betas, target)
    return check_degree(beta_max, L), c


def truncation(beta_max: float, dtype: torch.dtype, floor: float) -> int:
    """The degree L: the smallest with τ(L) = Σ_{l>L} c_l ≤ eps·floor (module notes);
    ValueError past the memory bound :data:`HARMONICS_MAX_BYTES` (:func:`check_degree`)."""
    return _degree((float(beta_max),), torch.finfo(dtype).eps * floor)[0]


@functools.lru_cache(maxsize=64)
def _coefficients(betas: tuple[float, ...], target: float) -> tuple[int, torch.Tensor]:
    """(L, c_l for l ≤ L, shape (len(betas), L + 1)): L the smallest with τ(L) ≤ target."""
    beta = torch.tensor(betas, dtype=torch.float64, device="cpu")  # host-side tables
    c = spherical_ive(beta, _recurrence_length(max(betas)))
    tails = torch.flip(torch.cumsum(torch.flip(c, [-1]), -1), [-1])  # tails[l] = τ(l − 1)
    above = (tails > target).any(0).nonzero()
    L = int(above[-1, 0]) if len(above) else 0
    return L, c[:, : L + 1]


@functools.lru_cache(maxsize=16)
def legendre_fourier(L: int) -> torch.Tensor:
    """C of shape (L + 1, L + 1, L + 1): Λ_l^m(cos θ) = Σ_k C[m, l, k] cos kθ (m even) or
    sin kθ (m odd), θ ∈ R (sin θ signed), Λ_l^m = 0 for l < m; float64."""
    points = 2 * L + 4
    theta = torch.arange(points, dtype=torch.float64, device="cpu") * (2 * math.pi / points)
    z, s = torch.cos(theta), torch.sin(theta)
    table = torch.zeros(L + 1, L + 1, points, dtype=torch.float64, device="cpu")
    diagonal = torch.full_like(theta, 1 / math.sqrt(4 * math.pi))
    for m in range(L + 1):
        if m > 0:
            diagonal = math.sqrt((2 * m + 1) / (2 * m)) * s * diagonal
        table[m, m] = diagonal
        if m < L:
            table[m, m + 1] = math.sqrt(2 * m + 3) * z * diagonal
        for l in range(m + 2, L + 1):
            a = math.sqrt((4 * l * l - 1) / (l * l - m * m))
            b = math.sqrt(((l - 1) ** 2 - m * m) / (4 * (l - 1) ** 2 - 1))
            table[m, l] = a * (z * table[m, l - 1] - b * table[m, l - 2])
    spectrum = torch.fft.rfft(table, dim=-1)[..., : L + 1] * (2 / points)
    cosines = spectrum.real.clone()
    cosines[..., 0] /= 2
    sines = -spectrum.imag
    odd = (torch.arange(L + 1, device="cpu") % 2 == 1)[:, None, None]
    return torch.where(odd, sines, cosines)


@functools.lru_cache(maxsize=64)
def _kernels(betas: tuple[float, ...], target: float, L: int | None):
    """(L, the kernel matrices K^m = ε_m C^{mᵀ} diag(a) C^m of the even orders, shape
    (B, ⌊L/2⌋ + 1, L + 1, L + 1) on cos kθ, and of the odd orders, (B, ⌈L/2⌉, L, L) on
    sin kθ, k ≥ 1) (module notes)."""
    if L is None:
        L, c = _degree(betas, target)
    else:
        check_degree(max(betas), L)
        c = spherical_ive(torch.tensor(betas, dtype=torch.float64, device="cpu"), L)
    degrees = torch.arange(L + 1, dtype=torch.float64, device="cpu")
    a = 4 * math.pi * c / (2 * degrees + 1)  # (B, L + 1)
    C = legendre_fourier(L)
    epsilon = torch.where(degrees > 0, 2.0, 1.0)  # ε_m, m = 0 … L
    kernel = epsilon[None, :, None, None] * torch.einsum("mlk,bl,mlj->bmkj", C, a, C)
    return L, kernel[:, 0::2], kernel[:, 1::2, 1:, 1:]


def sphere_sums(points: torch.Tensor, weights: torch.Tensor, beta, L: int | None = None):
    """e^{−β} Σ_j w_j e^{β⟨x_i, x_j⟩} (1, x_j) at every token x_i of the cloud.

    Parameters
    ----------
    points : (..., n, 3), unit vectors (checked by :func:`~tpde._engines.spectral.sphere_refusal`).
    weights : (..., n) or (n,), positive.
    beta : float or tensor (...,), > 0, broadcasting with the batch of the points.
    L : int, optional
        Highest degree kept; default :func:`truncation` (truncation below rounding).

    Returns
    -------
    (..., n, 4): the scaled normaliser e^{−β}D_i and numerator e^{−β}N_i (module notes).
    """
    return sums_on_workers(_sphere_sums, points, weights, beta, L)


def _sphere_sums(points, weights, beta, L: int | None, workers: int) -> torch.Tensor:
    """:func:`sphere_sums` on ``workers`` threads, torch single-threaded on this one."""
    beta = torch.as_tensor(beta, dtype=points.dtype, device=points.device)
    batch = torch.broadcast_shapes(points.shape[:-2], weights.shape[:-1], beta.shape)
    points = points.expand(*batch, *points.shape[-2:]).reshape(-1, *points.shape[-2:])
    weights = weights.to(points.dtype).expand(*batch, weights.shape[-1])
    weights = weights.reshape(-1, 1, weights.shape[-1])
    betas = tuple(beta.detach().expand(batch).reshape(-1).tolist())
    distinct = sorted(set(betas))
    floor = float((weights.detach().amin(-1) / weights.detach().sum(-1)).min())
    eps = torch.finfo(points.dtype).eps
    L, k_even, k_odd = _kernels(tuple(distinct), eps * floor, L)
    if len(distinct) > 1:
        pick = [distinct.index(b) for b in betas]
        k_even, k_odd = k_even[pick], k_odd[pick]
    k_even = k_even.to(device=points.device, dtype=points.dtype)
    k_odd = k_odd.to(device=points.device, dtype=points.dtype)

    out = _sums(points.transpose(-1, -2), weights, L, k_even, k_odd, workers)
    return out.reshape(*batch, *out.shape[-2:])


def _sums(tokens, weights, L: int, k_even, k_odd, workers: int) -> torch.Tensor:
    """The two passes of :func:`sphere_sums` over blocks of the tokens (B, 3, n), weights
    (B, 1, n), on ``workers`` threads (:mod:`tpde._engines._harmonic_passes`): (B, n, 4).

    Without autograd pass 1 writes the tables' first rows of every token into one
    (B, 2, 2, n) array, which pass 2 reads (they are computed once), and pass 2 writes its
    blocks into the (B, 4, n) output; under autograd each block makes new tensors."""
    B, n = tokens.shape[0], tokens.shape[-1]
    grad = torch.is_grad_enabled() and (tokens.requires_grad or weights.requires_grad)
    store = None if grad else passes.Buffers()
    first = () if grad else (tokens.new_empty(B, 2, 2, n),)
    out = () if grad else (tokens.new_empty(B, 4, n),)
    rows = max(BLOCK_MIN, BLOCK_TOKENS // B)  # tokens of all clouds per block
    parts = _blocks(lambda x, w, *f: passes.moments(x, w, L, store, *f), tokens, weights,
                    *first, grad=grad, rows=rows, workers=workers)  # fmt: skip
    E = pairwise_sum(torch.stack([p[0] for p in parts]))
    O = pairwise_sum(torch.stack([p[1] for p in parts]))
    me, mo = passes.channel_moments(E, O, L)  # (B, 4, 2, orders, k)
    ge = torch.einsum("bmkj,bcsmj->bcsmk", k_even, me).flatten(1, 3)  # (B, 8·orders, L + 1)
    go = torch.einsum("bmkj,bcsmj->bcsmk", k_odd, mo).flatten(1, 3)
    rows = max(BLOCK_MIN, SYNTHESIS_TOKENS // B)
    parts = _blocks(lambda x, *f: passes.synthesis(x, ge, go, L, store, *f), tokens, *first,
                    *out, grad=grad, rows=rows, workers=workers)  # fmt: skip
    return (out[0] if out else torch.cat(parts, dim=-1)).transpose(-1, -2)


def softmax_average_harmonics(points, weights, beta, L=None) -> torch.Tensor:
    """Σ_j w_j e^{β⟨x_i, x_j⟩} x_j / Σ_j w_j e^{β⟨x_i, x_j⟩} (SA), shape (..., n, 3)."""
    sums = sphere_sums(points, weights, beta, L)
    return sums[..., 1:] / sums[..., :1]


def exp_sum_harmonics(points, weights, beta, L=None) -> torch.Tensor:
    """Σ_j w_j e^{β⟨x_i, x_j⟩} x_j (USA), shape (..., n, 3); overflows where e^{β} does."""
    beta = torch.as_tensor(beta, dtype=points.dtype, device=points.device)
    sums = sphere_sums(points, weights, beta, L)
    return torch.exp(beta).unsqueeze(-1).unsqueeze(-1) * sums[..., 1:]


#: "auto" takes the harmonics engine for clouds of n ≥ HARMONICS_TOKENS_PER_TERM·(L + 1)²
#: tokens, and at least HARMONICS_MIN_TOKENS (its fixed cost of small operations).
HARMONICS_TOKENS_PER_TERM = 1
HARMONICS_MIN_TOKENS = 1000


def pick_harmonics(n: int, L: int) -> bool:
    """The ``"auto"`` rule: harmonics for clouds of n ≥ max(1000, (L + 1)²) tokens at degree L.

    Per token the engine costs ~10(L + 1)² multiply-adds (:func:`flops`) against SDPA's
    ~10n (three for each of ⟨q, k⟩ and the average, and the exponential): they break even
    near n = (L + 1)², and below ~1000 tokens the engine's fixed cost (a few hundred small
    operations) loses. Measured with ``benchmarks/sphere_harmonics.py --crossover`` (SA,
    float64, one thread, load 9–13 on 2 cores, median of 5, 7 Dec 2026; SDPA's time over
    the engine's, two runs): at β = 1 (L = 16) SDPA wins at N = 750 (×0.17, ×0.20), the
    engine from N = 1000 (×2.6, ×2.3); at β = 10 (L = 35, (L + 1)² = 1296) ×0.49, ×0.21 at
    N = 1000, ×0.98, ×1.02 at 1500, ×1.9, ×1.5 at 2000; at β = 30 (L = 55, 3136) ×0.87,
    ×1.07 at 2000, ×1.2, ×1.3 at 3000, ×2.6, ×1.9 at 4000. (The rule before, n ≥ max(1500,
    2(L + 1)²), was set when the engine cost ~16(L + 1)² multiply-adds per token.)
    """
    return n >= max(HARMONICS_MIN_TOKENS, HARMONICS_TOKENS_PER_TERM * (L + 1) ** 2)
