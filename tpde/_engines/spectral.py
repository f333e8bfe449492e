r"""Spectral engine: the isotropic exponential kernel on the circle as a Fourier series.

For tokens on the unit circle S¹ ⊂ R², x = (cos θ, sin θ), and the kernel e^{β⟨x, y⟩}
(β > 0: A = βI), the Bessel generating function (Abramowitz & Stegun 9.6.34)

    e^{β cos u} = I_0(β) + 2 Σ_{k≥1} I_k(β) cos(ku)

turns the pairwise sums of one token cloud {x_j = (cos φ_j, sin φ_j)}, weights w_j, into
truncated Fourier sums built from the moments of the cloud:

    S^{(r)}(θ) := e^{−β} Σ_j w_j^{(r)} e^{β cos(θ − φ_j)}
               = Σ_{k=0}^{K} c_k(β) (a_k^{(r)} cos kθ + b_k^{(r)} sin kθ) + (truncation),
    a_k^{(r)} = Σ_j w_j^{(r)} cos kφ_j,   b_k^{(r)} = Σ_j w_j^{(r)} sin kφ_j,
    c_0 = e^{−β}I_0(β),   c_k = 2e^{−β}I_k(β),

for the three weight vectors w^{(0)} = w (the softmax normaliser D) and w^{(1, 2)} = w ⊙ x
(the numerator N, a vector). The softmax (SA) average is N/D and the unnormalised (USA)
sum is e^{β}N: O(n·K) operations instead of O(n²), done as matrix products over the
tokens with the powers e^{ikθ} = e^{ihRθ}e^{irθ} (k = hR + r, R ≈ √K; :func:`circle_sums`)
built by complex products from e^{iθ} = x itself — no trigonometric function. The scaled
coefficients e^{−β}I_k(β) ≤ 1 never overflow, and SA never forms e^{β}. Bruno,
Pasqualotto, Agazzi ("Emergence of meta-stable clustering in mean-field transformer
models", arXiv:2410.23228) study the circle dynamics in the same Fourier picture.

Truncation. With Σ_{k∈Z} e^{−β}I_{|k|}(β) = 1 and |a_k|, |b_k| ≤ W = Σ_j |w_j|, dropping the
modes k > K changes S by at most W·τ(K), τ(K) = 2 Σ_{k>K} e^{−β}I_k(β). The sums are taken
at the cloud's own tokens (queries = keys, self-interaction included), so
D_i ≥ w_i e^{β}: the error relative to the kernel mass at token i is at most
τ(K)·W/w_i. :func:`truncation` takes the smallest K with τ(K) ≤ eps·min_i w_i/W (eps of
the dtype): truncation never exceeds rounding. τ(K) falls like e^{−K²/2β} while K < β
and faster beyond: K = 37 at β = 10, n = 10⁶ in float64 (18 at β = 1, 101 at β = 100).

Rounding: the Fourier sums are exact to rounding relative to e^{β}W, i.e. relative to
the kernel mass D_i to about eps·(e^{β}W/D_i): near eps·√(2πβ) in a spread-out cloud
(D_i ≈ I_0(β)·W), and at worst eps·W/w_i for a token far from every other (e.g.
eps·n for a lone token of weight 1/n). SDPA and the dense engine are relative to D_i.

Gradients: torch operations only, checkpointed per block of tokens; in the tokens and
weights, not in β (the coefficients are computed from its value). The sums are
polynomials in the coordinates of the tokens that equal the kernel sums on the circle, so
derivatives along the circle are exact; radial ones are those of this extension (a field
wrapped in ``Normalized`` sees normalised tokens, so all of its derivatives are exact).

Coefficients: the ratios r_k = I_k/I_{k−1} by the backward recurrence
r_k = β/(2k + β r_{k+1}) (Miller's algorithm, stable for the minimal solution I_k),
normalised by Σ_{k∈Z} e^{−β}I_{|k|}(β) = 1; torch only, one β per batch element.
"""

from __future__ import annotations

import functools
import math

import torch
from torch.utils.checkpoint import checkpoint

from tpde._engines._harmonic_passes import Buffers
from tpde._engines.tiled import run_threads, sums_on_workers

__all__ = [
    "SPECTRAL_MIN_SCORES",
    "SPECTRAL_TOKENS_PER_MODE",
    "bessel_ive",
    "circle_sums",
    "dimension_refusal",
    "exp_sum_spectral",
    "pick_spectral",
    "softmax_average_spectral",
    "sphere_refusal",
    "truncation",
]

# Tokens per block: 2¹³, so that a block's tables stay in the cache (1e6 tokens, β = 10:
# 0.73 s against 0.89 s with 2¹⁶ and 0.75 s with 2¹², one core). Both passes rebuild them:
# keeping the first pass's tables (224 MB at 10⁶ tokens) was no faster.
BLOCK_ROWS = 2**13


def _recurrence_length(beta_max: float) -> int:
    """Terms of the backward recurrence: far beyond every K that :func:`truncation` takes
    (e^{−β}I_k(β) < 1e-300 there), so the start r_{M+1} = 0 leaves no trace.

    M = min(β + 40√β + 60, 60√β + 200): for large β, I_k/I_0 ≈ e^{−k²/2β} < e^{−1800} at
    k = 60√β, and the start's error is damped by the ratio of I_k to the dominant solution
    K_k over the same span. The √β bound keeps huge β tractable (β = 1e6: 6·10⁴ terms, not
    10⁶, 0.6 s instead of 13 s), with e^{−β}I_k(β) within 1e-12 of scipy's ``ive`` for
    β = 1e3 … 1e6 (and unchanged below β ≈ 1700, where the first bound is the smaller)."""
    root = math.sqrt(beta_max)
    return int(min(beta_max + 40 * root + 60, 60 * root + 200))


def bessel_ive(beta: torch.Tensor, kmax: int) -> torch.Tensor:
    """e^{−β}I_k(β) for k = 0 … kmax, shape (..., kmax + 1), in float64; β > 0, shape (...).

    Miller's backward recurrence on the ratios r_k = I_k/I_{k−1} from k = M ≫ β,
    normalised by e^{−β}(I_0 + 2 Σ_{k≥1} I_k) = 1 (the generating function at u = 0).
    """
    beta = torch.as_tensor(beta, dtype=torch.float64, device=getattr(beta, "device", "cpu"))
    length = max(kmax, _recurrence_length(float(beta.max())))
    ratios = []
    r = torch.zeros_like(beta)
    for k in range(length, 0, -1):
        r = beta / (2 * k + beta * r)
        ratios.append(r)
    products = torch.cumprod(torch.stack(ratios[::-1], dim=-1), dim=-1)  # I_k/I_0, k ≥ 1
    ive0 = 1 / (1 + 2 * products.sum(-1, keepdim=True))
    return torch.cat([ive0, ive0 * products[..., :kmax]], dim=-1)


#: The most modes the spectral engine takes (β up to about 4·10⁷ in float64): its
#: coefficients' recurrence costs 60√β terms, and beyond this the dense engines win anyway.
SPECTRAL_MAX_MODES = 2**16


def degree_estimate(beta_max: float, target: float, engine: str, limit: int) -> float:
    """√(2β ln(1/target)), the truncation's order of size for large β (the coefficients fall
    like e^{−k²/2β}), checked before any coefficient is computed: ValueError for β not finite
    and > 0, or an estimate past twice ``limit`` (the exact count is then surely past it)."""
    if not (math.isfinite(beta_max) and beta_max > 0):
        raise ValueError(
            f"the {engine} engine needs a finite beta > 0 (A = beta·I); received beta = "
            f"{beta_max:.6g} (a scale past the range of the tokens' dtype is inf)."
        )
    estimate = math.sqrt(2 * beta_max * math.log(1 / target))
    if estimate > 2 * limit:
        raise ValueError(
            f"the {engine} engine at beta = {beta_max:.6g} needs about {estimate:.3g} terms, "
            f"past its bound of {limit}: use engine='sdpa' or 'dense' (their cost does not "
            "grow with beta)."
        )
    return estimate


def truncation(beta_max: float, dtype: torch.dtype, floor: float) -> int:
    """The number of modes K: the smallest with τ(K) = 2 Σ_{k>K} e^{−β}I_k(β) ≤ eps·floor.

    ``floor`` is a lower bound of D_i/(e^{β}W), here min_i w_i/W (module notes); eps is the
    machine epsilon of ``dtype``. The largest β of a batch decides (τ grows with β).
    ValueError past :data:`SPECTRAL_MAX_MODES` (:func:`degree_estimate`).
    """
    target = torch.finfo(dtype).eps * floor
    degree_estimate(float(beta_max), target, "spectral", SPECTRAL_MAX_MODES)
    return _coefficients((float(beta_max),), target)[0]


@functools.lru_cache(maxsize=64)
def _coefficients(betas: tuple[float, ...], target: float) -> tuple[int, torch.Tensor]:
    """(K, e^{−β}I_k(β) for k ≤ K, shape (len(betas), K + 1)): K the smallest with
    τ(K) ≤ target for every β. Cached: a flow asks for the same β at every step."""
    beta = torch.tensor(betas, dtype=torch.float64, device="cpu")  # a host table, cached
    ive = bessel_ive(beta, _recurrence_length(max(betas)))
    tails = 2 * torch.flip(torch.cumsum(torch.flip(ive, [-1]), -1), [-1])  # τ(K − 1)
    above = (tails > target).any(0).nonzero()
    K = int(above[-1, 0]) if len(above) else 0  # τ(K) ≤ target from here on
    return K, ive[:, : K + 1]


def _tables_into(points, R: int, H: int, store) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_tables` written into this thread's arrays of ``store`` (a
    :class:`~tpde._engines._harmonic_passes.Buffers`; no autograd), the same operations
    in the same order (bit-identical): fresh tables cost a page fault per 4 KiB in the
    blocks' Python threads, whose freed memory glibc hands back to the system."""
    n, batch = points.shape[-1], points.shape[:-2]
    low = store.get("low", (*batch, 2 * R, n), points)
    high = store.get("high", (*batch, 2 * H, n), points)
    top = store.get("top", (*batch, 2, n), points)  # cos Rθ, sin Rθ

    def powers(c1, s1, count, cos, sin):  # cos(k), sin(k): the k-th rows, k < count
        cos(0).fill_(1), sin(0).zero_()
        if count > 1:
            cos(1).copy_(c1), sin(1).copy_(s1)
        for k in range(2, count):
            torch.mul(cos(k - 1), c1, out=cos(k)).addcmul_(sin(k - 1), s1, value=-1)
            torch.mul(sin(k - 1), c1, out=sin(k)).addcmul_(cos(k - 1), s1)

    def row(array, offset, limit):
        return lambda k: array[..., offset + k, :] if k < limit else top[..., offset and 1, :]

    powers(points[..., 0, :], points[..., 1, :], R + 1, row(low, 0, R), row(low, R, R))
    powers(top[..., 0, :], top[..., 1, :], H, row(high, 0, H), row(high, H, H))
    return low, high


def _tables(points: torch.Tensor, R: int, H: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Real tables of the baby and giant steps at x = (cos θ, sin θ), token by token:
    L = (cos rθ; sin rθ)_{r<R}, shape (..., 2R, n), and G = (cos hRθ; sin hRθ)_{h<H},
    shape (..., 2H, n); points given as (..., 2, n). No trigonometric function: e^{iθ} is
    the token itself, and e^{i(r+1)θ} = e^{irθ}e^{iθ} (error ≈ r ulp at |x| = 1)."""

    def powers(c1, s1, count):
        cos, sin = [torch.ones_like(c1), c1], [torch.zeros_like(s1), s1]
        while len(cos) < count:
            cos.append(torch.addcmul(cos[-1] * c1, sin[-1], s1, value=-1))
            sin.append(torch.addcmul(sin[-1] * c1, cos[-2], s1))
        return cos[:count], sin[:count]

    cos, sin = powers(points[..., 0, :], points[..., 1, :], R + 1)
    cos_high, sin_high = powers(cos[R], sin[R], H)
    low = torch.stack(cos[:R] + sin[:R], dim=-2)
    return low, torch.stack(cos_high + sin_high, dim=-2)


def _blocks(function, *tensors, grad: bool, rows: int = BLOCK_ROWS, workers=None) -> list:
    """[function(*column blocks)] over ``rows``-token blocks of the (..., ·, n) tensors.

    With ``grad`` (autograd records the sums): one block after the other, each
    checkpointed (its tables recomputed in the backward pass, not stored). Else the blocks
    spread over ``workers`` threads (default torch's thread count) as one parallel region
    (:func:`~tpde._engines.tiled.run_threads`: Python threads, torch single-threaded in
    each), since torch's own threading pays a barrier per small operation — with 2 threads
    on a busy 2-core machine, 7–10 s instead of 0.9 s at 10⁶ tokens.
    """
    starts = range(0, tensors[0].shape[-1], rows)
    blocks = [[t[..., s : s + rows] for t in tensors] for s in starts]
    if grad:
        return [checkpoint(function, *block, use_reentrant=False) for block in blocks]
    out = [None] * len(blocks)

    def work(jobs):
        for job in jobs:
            out[job] = function(*blocks[job])

    cpu = tensors[0].device.type == "cpu"
    workers = torch.get_num_threads() if workers is None else workers
    run_threads(work, len(blocks), min(workers, len(blocks)) if cpu else 1)
    return out


def _sizes(K: int) -> tuple[int, int]:
    """(R, H) with R·H ≥ K + 2 (modes 0 … K + 1) and R + H small: e^{ikθ} = e^{ihRθ}e^{irθ}."""
    R = math.isqrt(K + 1) + 1
    return R, -(-(K + 2) // R)


def _bilinear(a: torch.Tensor, R: int, H: int, part: str) -> torch.Tensor:
    """The real (2R, 2H) matrix B with Re or Im of Σ_{h,r} a_{hR+r} e^{irθ}e^{ihRθ} = Lᵀ B G
    (L, G the real tables of :func:`_tables`, one token); a: (B, K + 1) complex."""
    a = torch.nn.functional.pad(a, (0, R * H - a.shape[-1])).reshape(-1, H, R).transpose(-1, -2)
    re, im = a.real, a.imag
    if part == "real":  # Re(a L G) = α(lg − l'g') − α'(lg' + l'g)
        rows = (torch.cat([re, -im], -1), torch.cat([-im, -re], -1))
    else:  # Im(a L G) = α'(lg − l'g') + α(lg' + l'g)
        rows = (torch.cat([im, re], -1), torch.cat([re, -im], -1))
    return torch.cat(rows, dim=-2)


def circle_sums(points: torch.Tensor, weights: torch.Tensor, beta, K: int | None = None):
    """e^{−β} Σ_j w_j e^{β⟨x_i, x_j⟩} (1, x_j) at every token x_i of the cloud.

    Parameters
    ----------
    points : (..., n, 2), unit vectors (checked by :func:`sphere_refusal`).
    weights : (..., n) or (n,), positive.
    beta : float or tensor (...,), > 0, broadcasting with the batch of the points.
    K : int, optional
        Modes kept; default :func:`truncation` (truncation below rounding).

    Returns
    -------
    (..., n, 3): the scaled normaliser e^{−β}D_i and numerator e^{−β}N_i (module notes).

    Threads: without autograd on the CPU the blocks of both passes go to torch's thread
    count of Python threads, and the calling thread runs torch on one thread meanwhile
    (:func:`~tpde._engines.tiled.calling_thread_alone`): else the OpenMP threads that its
    small operations between the passes wake spin on the cores the blocks need. Each
    thread writes its blocks' tables and products into its own arrays, reused from block
    to block (:func:`_tables_into`): fresh ones paid a page fault per 4 KiB in the Python
    threads (10⁴ faults per evaluation of 10⁵ tokens). 2 threads on a busy 2-core machine
    took 2.5–4.1× the CPU time of one at 10⁵ tokens and 1.15–1.84× at 10⁶ before, 1.18–1.43×
    and 0.93–1.23× with both (benchmarks/spectral.py ``--threads``). Under autograd or on a
    device torch keeps its threads and every table is a new tensor.

    Notes
    -----
    With the moments m_k = Σ_j w_j e^{ikφ_j} and c_0 = e^{−β}I_0, c_k = 2e^{−β}I_k:
    e^{−β}D = Re Σ_{k=0}^{K} c_k m̄_k e^{ikθ} and
    e^{−β}N = Σ_{k=0}^{K} e^{−β}I_k m̄_{k−1} e^{ikθ} + conj(Σ_{k=1}^{K} e^{−β}I_k m̄_{k+1} e^{ikθ})
    (m_{−1} = m̄_1), N read as a complex number. Powers e^{ikθ} = e^{ihRθ}e^{irθ}
    (k = hR + r, baby-step giant-step, R ≈ H ≈ √K): the moments are one real matrix product
    over the tokens, (w ⊙ G)ᵀL, and the three sums one product L·B followed by a row-wise
    product with G — O(n·K) multiply-adds in matrix products, O(n√K) elsewhere.
    """
    return sums_on_workers(_circle_sums, points, weights, beta, K)


def _circle_sums(points, weights, beta, K: int | None, workers: int) -> torch.Tensor:
    """:func:`circle_sums` with its blocks on ``workers`` threads (CPU, no autograd)."""
    beta = torch.as_tensor(beta, dtype=points.dtype, device=points.device)
    batch = torch.broadcast_shapes(points.shape[:-2], weights.shape[:-1], beta.shape)
    points = points.expand(*batch, *points.shape[-2:]).reshape(-1, *points.shape[-2:])
    weights = weights.to(points.dtype).expand(*batch, weights.shape[-1])
    weights = weights.reshape(-1, weights.shape[-1], 1)
    betas = tuple(beta.detach().expand(batch).reshape(-1).tolist())
    floor = float((weights.detach().amin(-2) / weights.detach().sum(-2)).min())
    distinct = sorted(set(betas))
    if K is None:
        target = torch.finfo(points.dtype).eps * floor
        degree_estimate(max(distinct), target, "spectral", SPECTRAL_MAX_MODES)
        K, ive = _coefficients(tuple(distinct), target)
        ive = ive[[distinct.index(b) for b in betas]] if len(distinct) > 1 else ive
    else:
        ive = bessel_ive(torch.tensor(betas, dtype=torch.float64, device="cpu"), K)
    R, H = _sizes(K)

    tokens = points.transpose(-1, -2)  # (B, 2, n): one row per coordinate
    grad = torch.is_grad_enabled() and (points.requires_grad or weights.requires_grad)

    store = None if grad else Buffers()  # each thread's arrays, reused from block to block

    def tables(x):
        return _tables(x, R, H) if store is None else _tables_into(x, R, H, store)

    def scratch(name, shape, like):  # this thread's array, or None: a new tensor
        return None if store is None else store.get(name, shape, like)

    def moments(x, w):
        low, high = tables(x)
        weighted = torch.mul(w, high, out=scratch("weighted", high.shape, high))
        return weighted @ low.transpose(-1, -2)  # (B, 2H, 2R)

    X = sum(_blocks(moments, tokens, weights.transpose(-1, -2), grad=grad, workers=workers))
    g, gi, l, li = slice(0, H), slice(H, 2 * H), slice(0, R), slice(R, 2 * R)
    m = torch.complex(X[:, g, l] - X[:, gi, li], X[:, g, li] + X[:, gi, l])  # m_{hR + r}
    m_bar = m.reshape(-1, H * R)[:, : K + 2].conj()
    c = ive.to(device=points.device, dtype=m.dtype).expand(m_bar.shape[0], -1)
    d = c * m_bar[:, : K + 1] * torch.where(torch.arange(K + 1, device=c.device) > 0, 2, 1)
    u = c * torch.cat([m_bar[:, 1:2].conj(), m_bar[:, :K]], dim=-1)  # m̄_{k−1}, m̄_{−1} = m_1
    v = torch.cat([torch.zeros_like(c[:, :1]), c[:, 1:] * m_bar[:, 2 : K + 2]], dim=-1)
    forms = torch.cat(
        [
            _bilinear(d, R, H, "real"),
            _bilinear(u, R, H, "real") + _bilinear(v, R, H, "real"),
            _bilinear(u, R, H, "imag") - _bilinear(v, R, H, "imag"),
        ],
        dim=-1,
    )  # (B, 2R, 3·2H)

    forms = forms.transpose(-1, -2)  # (B, 3·2H, 2R)

    def combine(low, high):
        shape = (*low.shape[:-2], 6 * H, low.shape[-1])
        products = torch.matmul(forms, low, out=scratch("products", shape, low))
        products, factors = products.unflatten(-2, (3, 2 * H)), high.unsqueeze(-3)
        return (products * factors if store is None else products.mul_(factors)).sum(-2)

    parts = _blocks(lambda x: combine(*tables(x)), tokens, grad=grad, workers=workers)
    out = torch.cat(parts, dim=-1).transpose(-1, -2)  # (B, n, 3)
    return out.reshape(*batch, *out.shape[-2:])


def softmax_average_spectral(points, weights, beta, K=None) -> torch.Tensor:
    """Σ_j w_j e^{β⟨x_i, x_j⟩} x_j / Σ_j w_j e^{β⟨x_i, x_j⟩} (SA), shape (..., n, 2)."""
    sums = circle_sums(points, weights, beta, K)
    return sums[..., 1:] / sums[..., :1]


def exp_sum_spectral(points, weights, beta, K=None) -> torch.Tensor:
    """Σ_j w_j e^{β⟨x_i, x_j⟩} x_j (USA), shape (..., n, 2); overflows where e^{β} does."""
    beta = torch.as_tensor(beta, dtype=points.dtype, device=points.device)
    sums = circle_sums(points, weights, beta, K)
    return torch.exp(beta).unsqueeze(-1).unsqueeze(-1) * sums[..., 1:]


#: The unit sphere of each sphere engine, by the tokens' dimension d (named in refusals).
SPHERE_OF_DIM = {2: ("the circle S¹", "circle"), 3: ("the sphere S²", "sphere")}


def dimension_refusal(d: int, dim: int) -> str:
    """Why a sphere engine of dimension ``dim`` does not take tokens in R^d (d ≠ dim)."""
    return f"it needs tokens in d = {dim} ({SPHERE_OF_DIM[dim][0]}); these have d = {d}"


def sphere_refusal(points, weights, beta, dim: int = 2) -> str | None:
    """Why a sphere engine of dimension ``dim`` does not apply to this cloud, or None.

    The spectral engine (``dim = 2``) and the harmonics engine
    (:mod:`tpde._engines.harmonics`, ``dim = 3``) both need tokens in d = dim, float32 or
    float64, β > 0, every token on the unit sphere (| |x| − 1 | ≤ 16 eps: the kernel is a
    function of ⟨x, y⟩ = cos(angle) only there) and every weight > 0 (the truncation's
    bound uses each token's own weight).
    """
    if points.shape[-1] != dim:
        return dimension_refusal(points.shape[-1], dim)
    if points.dtype not in (torch.float32, torch.float64):
        return f"it computes in float32 or float64; the tokens are {points.dtype}"
    beta = torch.as_tensor(beta, device=points.device)
    if not bool((beta > 0).all()):
        return f"it needs β > 0 (A = βI); received β = {float(beta.min()):.4g}"
    if not bool((weights > 0).all()):
        return "it needs every token's weight > 0 (its truncation bound uses them)"
    if not bool(torch.isfinite(beta).all()):
        return f"it needs a finite β; received β = {float(beta.max()):.4g}"
    worst = float((points.detach().norm(dim=-1) - 1).abs().max())
    tolerance = 16 * torch.finfo(points.dtype).eps
    if not worst <= tolerance:  # NaN-safe
        return (
            f"it needs every token on the unit {SPHERE_OF_DIM[dim][1]}; the norms are up to "
            f"{worst:.3g} away from 1 (tolerance {tolerance:.3g}): normalise them (wrap the "
            "field in Normalized(field, 'post-ln'))"
        )
    return None


#: "auto" takes the spectral engine for clouds of n ≥ SPECTRAL_TOKENS_PER_MODE·(K + 1) tokens
#: (per token it costs ~40 ns per mode against SDPA's ~7 ns per key, float64, one core)
#: whose batch has at least SPECTRAL_MIN_SCORES pairs (its fixed cost, ~3 ms of small
#: operations, against SDPA's whole sum): measured in benchmarks/spectral.py.
SPECTRAL_TOKENS_PER_MODE = 8
SPECTRAL_MIN_SCORES = 2**19


def pick_spectral(n: int, K: int, batch: int = 1) -> bool:
    """The ``"auto"`` rule: spectral for a batch of ``batch`` clouds of n tokens, K modes.

    Wins once n ≥ 8(K + 1) and batch·n² ≥ 2¹⁹ (2-core CPU, float64; the single-cloud
    crossover against SDPA lies at n ≈ 500–1000 for β from 1 to 100).
    """
    return n >= SPECTRAL_TOKENS_PER_MODE * (K + 1) and batch * n * n >= SPECTRAL_MIN_SCORES
