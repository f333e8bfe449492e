r"""Second order about the uniform measure on S² (MATH.md §9): the quadratic forcing of the
degree-k harmonics and the expected degree-k energy of N random tokens including it.

Write μ = σ + ν (σ the uniform probability measure) and ν̂_a = ∫Y_a dν for the real
orthonormal harmonics Y_a = Y_lm (∫Y_aY_b dA = δ_ab). Post-LN, Q = K = V = I, score β⟨x, y⟩:
v = β⁻¹∇(K∗μ) (USA), β⁻¹∇log(K∗μ) (SA), K∗ν = 4πΣ_a i_{l_a}(β)ν̂_aY_a. The weak form
d/dt ν̂_a = ∫∇Y_a·v dμ, expanded to second order in ν, is

    d/dt ν̂_a = λ_a ν̂_a + Σ_{bc} Q_a^{bc} ν̂_b ν̂_c,
    Q_a^{bc} = (2π/β) G_abc [g_b (k(k+1) + l_b(l_b+1) − l_c(l_c+1)) − s·k(k+1) g_b g_c],     (1)

k = l_a, G_abc = ∫Y_aY_bY_c dA the (real) Gaunt coefficients (zero unless |l_b − l_c| ≤ k ≤
l_b + l_c and k + l_b + l_c is even), g_l = i_l/i_0 and s = 1 (SA; the second term is the
expansion of the normaliser log(i_0 + K∗ν)), g_l = i_l and s = 0 (USA); λ_a = k(k+1)g_k/β.
Iterating once, with ν̂(s) ≈ e^{Λs}ν̂(0) in the quadratic term,

    ν̂_a(t) = e^{λ_a t}ν̂_a(0) + Σ_{bc} Q_a^{bc} ν̂_b(0) ν̂_c(0) φ(λ_b + λ_c, λ_a, t),
    φ(μ, λ, t) = (e^{μt} − e^{λt})/(μ − λ)  (t e^{λt} at μ = λ).                           (2)

For N i.i.d. uniform tokens E[ν̂_aν̂_b] = δ_ab/(4πN), E[ν̂_aν̂_bν̂_c] = G_abc/(4πN²) and, to
leading order, fourth moments by pairings; by isotropy every m-sum of Gaunt products is
W(k, l1, l2) = Σ_{m's} G² = (2k+1)(2l1+1)(2l2+1)/(4π)·(k l1 l2; 0 0 0)², so the degree-k
energy E_k = 4π/(2k+1)Σ_m ν̂_km² (E[E_k(0)] = 1/N) has, to order 1/N² in E_k,

    N·E[E_k(t)] = e^{2λ_k t} + ((2k+1)N)⁻¹ [2e^{λ_k t}Σ cWφ + (2/4π)Σ W(cφ)² + C(t)],      (3)

sums over degrees l1, l2 ≥ 1, c = (2π/β)·the bracket of (1) symmetrised in (l1, l2) (Q̄ by
degrees), φ = φ(λ_l1 + λ_l2, λ_k, t). The third term, the mean squared forcing, has a
partner of the same order: the linear part against the third-order term (4), whose
pairings with ν̂_a leave

    C(t) = (2/4π)e^{λ_k t}[4Σ W c(k; l1, l2) c(l2; k, l1) ∫_0^t e^{λ_k(t−s)}e^{λ_l1 s}
           φ(λ_k + λ_l1, λ_l2, s) ds + (2k+1)4πλ_k Σ_l (2l+1)(g_l² − g_l)
           ∫_0^t e^{λ_k(t−s)}e^{(λ_k+2λ_l)s} ds],                                            (4)

the noise of degree k carried away by the growing degrees (it cancels most of the noise
carried in, in the squared term) and, for SA only, the normaliser's cubic term. The
measured rate is half the slope of log(Σ_s E_k(t)/Σ_s E_k(0)) over S seeds; its linear
part is exact seed by seed; the squared forcing, nearly independent of the denominator
(a χ² with n = S(2k+1) degrees of freedom), is multiplied by E[n/χ²_n] = n/(n − 2). The
mean prediction (:func:`corrected_rates`) is that fit applied to (3) on the run's saved
times and window; the per-draw one (:func:`conditional_rates`) applies (2) to the draw's
own initial moments (+ (4) in its mean). At the end of a window where the fastest degree's
energy reaches ``level`` (e^{2λ*T} = level·N), the forcing of a slow degree k by two fast
ones is ~ level²·N·e^{−2λ_kT} of its linear part: it grows with N.
All rates and times here are those of the run (USA: the rescaled time, V = e^{−β}I).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy.special import gammaln, ive, roots_legendre

from ..common.kernels import time_scale
from ..common.legendre import legendre_terms

__all__ = [
    "corrected_rates",
    "energy_ratio",
    "forcing_tensor",
    "gaunt",
    "kernel_weights",
    "real_harmonics",
    "second_order",
    "second_order_grid",
]


def real_harmonics(points: np.ndarray, degree: int) -> np.ndarray:
    """Real orthonormal spherical harmonics (∫Y_aY_b dA = δ_ab) of degree ≤ ``degree``.

    Y_l0 = Λ_l^0(z), Y_l,±m = √2 Λ_l^m(z)·(cos mφ, sin mφ) (Λ the fully normalised associated
    Legendre functions, by the recurrence of :func:`.sphere.harmonic_energy`), at column
    l² + l + m.

    Parameters
    ----------
    points : (..., 3) unit vectors.
    degree : L ≥ 0.

    Returns
    -------
    (..., (L + 1)²) float64.
    """
    x = np.asarray(points, dtype=float)
    z, xy = x[..., 2], x[..., 0] + 1j * x[..., 1]
    out = np.zeros((*z.shape, (degree + 1) ** 2))
    for k, m, current, power in legendre_terms(z, xy, degree):
        value = current * power
        if m == 0:
            out[..., k * k + k] = value.real
        else:
            out[..., k * k + k + m] = math.sqrt(2) * value.real
            out[..., k * k + k - m] = math.sqrt(2) * value.imag
    return out


def degrees_of(modes: int) -> np.ndarray:
    """The degree l of each of the first ``modes`` columns of :func:`real_harmonics`."""
    return np.floor(np.sqrt(np.arange(modes))).astype(int)


@functools.lru_cache(maxsize=16)
def gaunt(k: int, degree: int) -> np.ndarray:
    """G_abc = ∫Y_aY_bY_c dA for a = (k, m), m = −k … k, and b, c every mode of degree ≤
    ``degree``: (2k + 1, M, M), M = (degree + 1)². Exact to rounding: Gauss–Legendre in z ×
    equal azimuths integrates every polynomial of degree ≤ k + 2·degree."""
    top = k + 2 * degree
    nodes, wz = roots_legendre(top // 2 + 1)
    phi = 2 * math.pi * (np.arange(top + 1) + 0.5) / (top + 1)
    s = np.sqrt(1 - nodes**2)
    points = np.stack([np.outer(s, np.cos(phi)), np.outer(s, np.sin(phi)),
                       np.outer(nodes, np.ones_like(phi))], -1).reshape(-1, 3)  # fmt: skip
    weights = np.repeat(wz * (2 * math.pi / (top + 1)), top + 1)  # Σ = 4π
    y = real_harmonics(points, degree)
    target = real_harmonics(points, k)[:, k * k : (k + 1) ** 2]
    return np.stack([(y * (weights * target[:, m])[:, None]).T @ y for m in range(2 * k + 1)])


def kernel_weights(kernel: str, beta: float, degree: int) -> np.ndarray:
    """g_l of (1), l = 0 … ``degree``, in the run's time: i_l/i_0 (SA), e^{−β}i_l (USA, the
    rescaled time); i_l(β) = √(π/2β) I_{l+1/2}(β), from the scaled ive."""
    scaled = math.sqrt(math.pi / (2 * beta)) * ive(np.arange(degree + 1) + 0.5, beta)
    return scaled / scaled[0] if kernel == "sa" else scaled


def forcing_tensor(kernel: str, beta: float, k: int, degree: int) -> np.ndarray:
    """Q_a^{bc} of (1) for a = (k, m), b and c of degree ≤ ``degree``: (2k + 1, M, M)."""
    g = kernel_weights(kernel, beta, degree)
    ls = degrees_of((degree + 1) ** 2)
    gb, lb = g[ls][:, None], (ls * (ls + 1))[:, None]
    lc = (ls * (ls + 1))[None, :]
    coefficient = gb * (k * (k + 1) + lb - lc)
    if kernel == "sa":
        coefficient = coefficient - k * (k + 1) * gb * g[ls][None, :]
    return (2 * math.pi / beta) * gaunt(k, degree) * coefficient[None]


def _phi(mu, lam, t):
    """φ(μ, λ, t) = (e^{μt} − e^{λt})/(μ − λ), t e^{λt} where μ = λ (broadcast)."""
    gap = mu - lam
    small = np.abs(gap * t) < 1e-8
    safe = np.where(small, 1.0, gap)
    return np.where(small, t * np.exp(lam * t) * (1 + gap * t / 2),
                    np.exp(lam * t) * np.expm1(gap * t) / safe)  # fmt: skip


def mode_rates(kernel: str, beta: float, degree: int) -> np.ndarray:
    """λ_l = l(l + 1)g_l/β for every mode of degree ≤ ``degree`` ((degree + 1)²,), run time."""
    ls = degrees_of((degree + 1) ** 2)
    return ls * (ls + 1) * kernel_weights(kernel, beta, degree)[ls] / beta


def second_order(nu0: np.ndarray, times, kernel: str, beta: float, k: int) -> np.ndarray:
    """ν̂_{k,m}(t) by (2) from the moments ``nu0`` ((L + 1)², every mode of degree ≤ L, as
    in :func:`real_harmonics`), through the Gaunt tensor (:func:`forcing_tensor`): (T, 2k + 1),
    run time. Exact for the linear part; the neglected terms are cubic in ν̂(0). The
    reference for :func:`second_order_grid`, which is fast at large L."""
    nu0 = np.asarray(nu0, dtype=float)
    degree = math.isqrt(len(nu0)) - 1
    rates = mode_rates(kernel, beta, degree)
    lam = rates[k * k]
    q = forcing_tensor(kernel, beta, k, degree)
    out = []
    for t in np.asarray(times, dtype=float):
        phi = _phi(rates[:, None] + rates[None, :], lam, t)
        quad = np.einsum("mbc,b,c,bc->m", q, nu0, nu0, phi)
        out.append(np.exp(lam * t) * nu0[k * k : (k + 1) ** 2] + quad)
    return np.array(out)


@functools.lru_cache(maxsize=8)
def _product_grid(top: int, degree: int) -> tuple[np.ndarray, np.ndarray]:
    """(weights (Q,) with Σ = 4π, Y (Q, (degree + 1)²)) on Gauss–Legendre × equal azimuths
    exact for every polynomial of degree ≤ ``top``."""
    nodes, wz = roots_legendre(top // 2 + 1)
    phi = 2 * math.pi * (np.arange(top + 1) + 0.5) / (top + 1)
    s = np.sqrt(1 - nodes**2)
    points = np.stack([np.outer(s, np.cos(phi)), np.outer(s, np.sin(phi)),
                       np.outer(nodes, np.ones_like(phi))], -1).reshape(-1, 3)  # fmt: skip
    return np.repeat(wz * (2 * math.pi / (top + 1)), top + 1), real_harmonics(points, degree)


def second_order_grid(moments, times, kernel: str, beta: float, modes: int,
                      nodes: int = 48) -> np.ndarray:  # fmt: skip
    r"""(2) for every mode of degree ≤ ``modes`` at once, without the Gaunt tensor: with
    φ = ∫_0^t e^{λ_a(t−s)}e^{(λ_b+λ_c)s}ds, the forcing is ∫_0^t e^{λ_a(t−s)}F_a(y(s))ds,
    y_b(s) = e^{λ_bs}ν̂_b(0), and by (1)

        F_a(y) = (2π/β)∫Y_a [k(k+1)(UV − sU²) + U₁V − UV₁] dA,

    U = Σ g_by_bY_b, U₁ = Σ g_bl_b(l_b+1)y_bY_b, V = Σ y_cY_c, V₁ = Σ l_c(l_c+1)y_cY_c: four
    syntheses and a projection on a grid exact to degree ``modes`` + 2L; the s-integral by
    Gauss–Legendre (``nodes``; the integrand is a sum of exponentials with rate·t ≲ 25).

    Parameters
    ----------
    moments : (S, (L + 1)²) initial moments per draw.
    times : (T,) run times.
    modes : K, the largest degree returned.

    Returns
    -------
    (S, T, (K + 1)²): ν̂_a(t), a over every mode of degree ≤ K (the constant's column 0).
    """
    x = np.asarray(moments, dtype=float)
    degree = math.isqrt(x.shape[-1]) - 1
    ls = degrees_of((degree + 1) ** 2)
    g = kernel_weights(kernel, beta, degree)[ls]
    rates = ls * (ls + 1) * g / beta
    weights, y = _product_grid(modes + 2 * degree, degree)
    target = y[:, : (modes + 1) ** 2] * weights[:, None]  # (Q, A)
    lam = rates[: (modes + 1) ** 2]
    kk = (ls * (ls + 1))[: (modes + 1) ** 2]
    sa = kernel == "sa"
    root, wq = roots_legendre(nodes)
    out = []
    for t in np.asarray(times, dtype=float):
        s = t * (root + 1) / 2  # (n,)
        grown = x[:, None, :] * np.exp(np.outer(s, rates))[None]  # (S, n, M)
        u = (grown * g) @ y.T
        u1 = (grown * (g * ls * (ls + 1))) @ y.T
        v = grown @ y.T
        v1 = (grown * (ls * (ls + 1))) @ y.T
        p1 = (u * v - (u * u if sa else 0.0)) @ target  # (S, n, A)
        p2 = (u1 * v - u * v1) @ target
        force = (2 * math.pi / beta) * (kk * p1 + p2)
        decay = np.exp(np.outer(t - s, lam)) * (wq * t / 2)[:, None]  # (n, A)
        out.append(np.exp(lam * t) * x[:, : (modes + 1) ** 2] + (force * decay).sum(1))
    return np.stack(out, 1)


def kernel_degree(beta: float, tol: float = 1e-12) -> int:
    """The smallest l ≥ 2 with i_l(β) < tol·i_1(β): the kernel's degrees that force."""
    ls = np.arange(1, int(4 * beta + 4 * math.sqrt(beta) + 60))
    i = ive(ls + 0.5, beta)
    below = i < tol * i[0]
    if not below.any():  # the range is wide enough for every β > 0 and tol ≥ 1e-300
        raise ValueError(f"no degree below {ls[-1]} has i_l(β) < {tol}·i_1(β) at β = {beta}.")
    return int(ls[np.argmax(below)])


def gaunt_weight(k: int, l1, l2) -> np.ndarray:
    """W(k, l1, l2) = Σ_{m, m1, m2} G_{(k,m)(l1,m1)(l2,m2)}² = (2k+1)(2l1+1)(2l2+1)/(4π) ·
    (k l1 l2; 0 0 0)² (DLMF 34.3.7 for the 3j symbol; zero off the triangle or for an odd
    k + l1 + l2). Broadcasts over l1, l2."""
    l1, l2 = np.broadcast_arrays(np.asarray(l1, dtype=int), np.asarray(l2, dtype=int))
    total = k + l1 + l2
    half = total // 2
    ok = (total % 2 == 0) & (np.abs(l1 - l2) <= k) & (k <= l1 + l2)
    # safe values off the support (a zero 3j symbol there): the triangle (k, k, 0)
    j, h = np.where(ok, total, 2 * k), np.where(ok, half, k)
    l1, l2 = np.where(ok, l1, k), np.where(ok, l2, 0)
    lf = lambda n: gammaln(np.asarray(n, dtype=float) + 1)  # noqa: E731
    log3j = (lf(j - 2 * k) + lf(j - 2 * l1) + lf(j - 2 * l2) - lf(j + 1)
             + 2 * (lf(h) - lf(h - k) - lf(h - l1) - lf(h - l2)))  # fmt: skip
    value = (2 * k + 1) * (2 * l1 + 1) * (2 * l2 + 1) / (4 * math.pi) * np.exp(log3j)
    return np.where(ok, value, 0.0)


def _coefficient(kernel: str, g, target, l1, l2):
    """The bracket of (1) symmetrised in (l1, l2), for the target degree ``target``."""
    t = target * (target + 1)
    a, b = l1 * (l1 + 1), l2 * (l2 + 1)
    out = (g[l1] * (t + a - b) + g[l2] * (t + b - a)) / 2
    return out - t * g[l1] * g[l2] if kernel == "sa" else out


def _integral(f, t: float, nodes: int = 48) -> float:
    """∫_0^t f(s) ds by Gauss–Legendre (the integrands are sums of a few exponentials with
    rates·t ≲ 30: 48 nodes reach rounding); f maps (nodes,) to (..., nodes)."""
    x, w = roots_legendre(nodes)
    s = t * (x + 1) / 2
    return (f(s) * w).sum(-1) * t / 2


def energy_ratio(times, kernel: str, beta: float, k: int, *, tokens: int, seeds: int,
                 tol: float = 1e-12) -> dict:  # fmt: skip
    r"""The expected measured ratio Σ_s E_k(t)/Σ_s E_k(0) of ``seeds`` clouds of ``tokens``
    uniform tokens, to order 1/N² in E_k (module notes, (3)–(4)): ``linear`` e^{2λ_k t};
    ``third`` (the third moment E[ν̂_aν̂_bν̂_c]); ``fourth`` (the squared forcing, with
    the ratio factor n/(n − 2)); ``cubic`` (the linear part against the third-order
    term: the noise that the growing modes carry away from degree k, and for SA the
    normaliser's cubic term); ``total``; each (T,). Degrees up to k + :func:`kernel_degree`.
    Every sum is over degrees: the m-sums of products of Gaunt coefficients are W(k, l1, l2)
    (:func:`gaunt_weight`) by isotropy."""
    top = k + kernel_degree(beta, tol)
    g = kernel_weights(kernel, beta, top)
    ls = np.arange(top + 1)
    lam = ls * (ls + 1) * g / beta
    l1, l2 = np.meshgrid(ls[1:], ls[1:], indexing="ij")
    w = gaunt_weight(k, l1, l2)
    c = (2 * math.pi / beta) * _coefficient(kernel, g, k, l1, l2)  # Q̄ by degrees
    back = (2 * math.pi / beta) * _coefficient(kernel, g, l2, np.full_like(l1, k), l1)
    rate, pair = lam[k], lam[l1] + lam[l2]
    n = seeds * (2 * k + 1)
    inflate = n / (n - 2) if n > 2 else math.nan
    third, fourth, cubic = [], [], []
    for t in np.asarray(times, dtype=float):
        phi = _phi(pair, rate, t)
        third.append(2 * math.exp(rate * t) * float((c * w * phi).sum()))
        fourth.append(2 * float((w * (c * phi) ** 2).sum()) / (4 * math.pi))
        inner = _integral(lambda s, t=t: np.exp(rate * (t - s) + lam[l1][..., None] * s)
                          * _phi(rate + lam[l1][..., None], lam[l2][..., None], s), t)  # fmt: skip
        loss = 4 * float((w * c * back * inner).sum())
        if kernel == "sa":
            kk = _integral(
                lambda s, t=t: np.exp(rate * (t - s) + (rate + 2 * lam[1:, None]) * s), t
            )
            shift = (
                (2 * k + 1)
                * 4
                * math.pi
                * rate
                * float(((2 * ls[1:] + 1) * (g[1:] ** 2 - g[1:]) * kk).sum())
            )
            loss += shift
        cubic.append(2 * math.exp(rate * t) * loss / (4 * math.pi))
    scale = 1 / ((2 * k + 1) * tokens)
    linear = np.exp(2 * rate * np.asarray(times, dtype=float))
    third, cubic = scale * np.array(third), scale * np.array(cubic)
    fourth = inflate * scale * np.array(fourth)
    return {"linear": linear, "third": third, "fourth": fourth, "cubic": cubic,
            "total": linear + third + fourth + cubic, "degree": top}  # fmt: skip


def corrected_rates(run: dict, kernel: str, beta: float, *, tokens: int, seeds: int,
                    used: int) -> np.ndarray:  # fmt: skip
    """Half the slope of log of :func:`energy_ratio`'s total over the first ``used`` saved
    times of ``run`` (the measured fit's window), per degree k = 1 … K, in the original
    time (K,); NaN where the window holds fewer than 3 times or the ratio turns ≤ 0."""
    times = np.asarray(run["times"], dtype=float)
    modes = len(run["predicted"])
    if used < 3:
        return np.full(modes, np.nan)
    window = times[:used]
    out = []
    for k in range(1, modes + 1):
        ratio = energy_ratio(window, kernel, beta, k, tokens=tokens, seeds=seeds)["total"]
        if not (ratio > 0).all():  # the expansion has broken down (a small N)
            out.append(math.nan)
            continue
        out.append(np.polyfit(window, np.log(ratio), 1)[0] / 2)
    return np.array(out) / time_scale(kernel, beta)


#: Degrees whose kernel weight is below FORCING_TOL·g_1 are left out of the per-draw model.
FORCING_TOL = 1e-6


def initial_moments(points, degree: int, chunk: int = 4096) -> np.ndarray:
    """ν̂_a(0) = (1/N)Σ_j Y_a(x_j) for every mode of degree ≤ ``degree``, the constant left
    out (ν has no mass): points (S, N, 3) → (S, (degree + 1)²), in chunks of tokens."""
    points = np.asarray(points, dtype=float)
    total = np.zeros((points.shape[0], (degree + 1) ** 2))
    for start in range(0, points.shape[1], chunk):
        total += real_harmonics(points[:, start : start + chunk], degree).sum(1)
    total /= points.shape[1]
    total[:, 0] = 0.0
    return total


def model_degree(beta: float, modes: int) -> int:
    """The degree of the per-draw model: the measured degrees plus the kernel's."""
    return modes + kernel_degree(beta, FORCING_TOL)


def conditional_rates(run: dict, moments: np.ndarray, kernel: str, beta: float,
                      used: int, *, tokens: int, cubic: bool = True) -> np.ndarray:  # fmt: skip
    """Per draw, (2) from the draw's own initial moments ``moments`` (S, (L + 1)²): each
    seed's E_k(t) = 4π/(2k+1)Σ_m ν̂_km(t)², then half the slope of log(Σ_s E_k(t)/Σ_s E_k(0))
    over the first ``used`` saved times, as the measured fit; (K,), original time. The
    sampling noise of the forcing is the draw's own, so measured − this is the error of the
    model, not Monte-Carlo noise. ``cubic``: add the third-order term of (4) in its mean,
    scaled by the seed's own E_k(0)·N (it is ∝ ν̂_a(0)²). NaN for a degree whose modelled
    energy turns ≤ 0 in the window (the expansion no longer holds there)."""
    times = np.asarray(run["times"], dtype=float)[:used]
    modes = len(run["predicted"])
    if used < 3:
        return np.full(modes, np.nan)
    every = second_order_grid(moments, times, kernel, beta, modes)  # (S, T, (K + 1)²)
    out = []
    for k in range(1, modes + 1):
        nu = every[..., k * k : (k + 1) ** 2]  # (S, T, 2k + 1)
        energy = (nu**2).sum((0, 2))
        if cubic:  # c(t)/N relative to each seed's own E_k(0) (c: energy_ratio at N = 1)
            extra = energy_ratio(times, kernel, beta, k, tokens=1, seeds=3)["cubic"]
            energy = energy + extra * energy[0] / tokens
        if not (energy > 0).all():  # the expansion has broken down (a small N, a long window)
            out.append(math.nan)
            continue
        out.append(np.polyfit(times, np.log(energy / energy[0]), 1)[0] / 2)
    return np.array(out) / time_scale(kernel, beta)
