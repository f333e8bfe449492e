"""Linear instability of the uniform measure on the sphere: Fourier / spherical-harmonic
growth rates and the dominant mode (MATH.md §9; the package notes of :mod:`tpde.theory`)."""

from __future__ import annotations

import math

import numpy as np

from tpde._bessel import log_ive
from tpde.theory.equiangular import _check_beta_positive, _check_kernel


# ---------------------------------------------------------------------- instability on S¹
def _check_modes(k) -> np.ndarray:
    modes = np.asarray(k)
    if modes.dtype.kind not in "iu" and not (
        modes.dtype.kind == "f" and np.all(np.isfinite(modes)) and np.all(modes == np.round(modes))
    ):
        raise ValueError(f"Fourier modes k must be integers >= 1; received {k!r}.")
    if np.any(modes < 1):
        raise ValueError(
            f"Fourier modes k must be >= 1 (k = 0 is the total mass, which does not move); "
            f"received {k!r}."
        )
    return modes.astype(float)  # exact integers up to 2^53; k(k + d − 2) in float


def _check_dim(d) -> int:
    if isinstance(d, bool) or not isinstance(d, int | np.integer) or d < 2:
        raise ValueError(f"d is the dimension of the sphere's ambient space, an int >= 2 "
                         f"(S^(d-1)); received {d!r}.")  # fmt: skip
    return int(d)


def instability_rate(k, beta: float, *, kernel: str = "sa", d: int = 2):
    r"""Growth rate λ_k of mode k of the uniform measure on S^{d−1} (post-LN, Q = K = V = I).

    On the circle (d = 2), ρ(t, θ) = 1/2π + Σ_k a_k(t)e^{ikθ} linearised (MATH.md §9;
    ∫cos(ku)e^{β cos u}du = 2πI_k(β)) gives ȧ_k = λ_k a_k with

        λ_k = k² I_k(β) / (β I_0(β))   (SA),        λ_k = k² I_k(β) / β   (USA).

    On S^{d−1} the modes are the spherical harmonics of degree k ≥ 1: the USA velocity is
    ∇_S(K∗μ)/β with K(t) = e^{βt}, so the linearised equation is ∂tδρ = −ρ₀Δ_S(K∗δρ)/β,
    Δ_S = −k(k + d − 2) on degree k and, by Funk–Hecke, E_{y∼unif}[e^{β⟨x,y⟩}P_k(⟨x,y⟩)] =
    Γ(d/2)(2/β)^ν I_{k+ν}(β), ν = d/2 − 1 [ours, MATH.md §9]:

        λ_k = k(k + d − 2) I_{k+ν}(β) / (β I_ν(β))                  (SA),
        λ_k = k(k + d − 2) Γ(d/2) (2/β)^ν I_{k+ν}(β) / β             (USA);

    d = 2 gives the circle's formulas, d = 3: λ_k = k(k + 1) i_k(β)/(β i_0(β)) with the
    modified spherical Bessel functions i_k. (At uniform the SA numerator vanishes, so
    the normaliser enters at its uniform value only.) Computed with the exponentially
    scaled Bessel functions in log space (scipy.special.ive, and its large-argument, Debye
    and power-series expansions where ive underflows or is NaN: β → 0, β past ~1e9, d in
    the hundreds): SA is finite for any β, k and d; USA grows as e^β and raises
    ValueError where it overflows float64 (β ≈ 709 at d = 2). Every λ_k is positive (it
    underflows to 0 for k ≫ β). For N tokens drawn uniformly on S¹,
    E|(1/N)Σ_j e^{−ikθ_j}|² ≈ e^{2λ_k t}/N while the modes stay small. The regime of
    Bruno, Pasqualotto, Agazzi, arXiv:2410.23228 (their fastest mode maximises a rescaled
    Gegenbauer coefficient, the same index as :func:`dominant_mode`).

    Parameters
    ----------
    k : int or array of int ≥ 1 (Fourier mode on S¹, harmonic degree on S^{d−1})
    beta : float > 0 (the formula divides by β; β ≤ 0 raises)
    kernel : {"sa", "usa"}
    d : int ≥ 2, the ambient dimension (tokens on S^{d−1}); default 2 (the circle).

    Returns
    -------
    float or array of the shape of k.
    """
    from scipy.special import gammaln

    kernel = _check_kernel(kernel)
    beta = _check_beta_positive(beta, "the instability rate k^2 I_k(beta)/beta")
    modes = _check_modes(k)
    d = _check_dim(d)
    nu = d / 2 - 1
    laplacian = modes * (modes + d - 2.0)  # float: k(k + d − 2) overflows int64 past 3e9
    log_ratio = log_ive(modes + nu, beta) - math.log(beta)
    if kernel == "sa":
        log_ratio = log_ratio - log_ive(nu, beta)
    else:
        log_ratio = log_ratio + gammaln(d / 2) + nu * math.log(2 / beta) + beta
    with np.errstate(over="ignore"):
        rate = laplacian * np.exp(log_ratio)
    if not np.all(np.isfinite(rate)):
        raise ValueError(
            f"the USA instability rate grows as e^beta and overflows float64 here (beta = "
            f"{beta:.6g}, d = {d}); the SA rate (kernel='sa') is finite at every beta."
        )
    return float(rate) if np.ndim(rate) == 0 else rate


#: The largest β of :func:`dominant_mode` (its search holds 4√β + 20 modes: 4e6 at 1e12).
MAX_DOMINANT_BETA = 1e12


def dominant_mode(beta: float, *, d: int = 2) -> int:
    r"""k*(β) = argmax_{k ≥ 1} k(k + d − 2) I_{k+d/2−1}(β): the fastest-growing mode.

    The same for SA and USA (they differ by a factor free of k). On the circle (d = 2)
    k* = argmax k²I_k(β): k*(1) = 1, k*(5) = 3, k*(10) = 4. I_k(β) ≈ e^β e^{−k²/2β}/√(2πβ)
    for large β, so k* ≈ √(2β); the search runs over k ≤ 4√β + 20 with the log of
    I_k(β)e^{−β} (scipy.special.ive, and its expansions where that underflows or is NaN;
    the factor e^{−β} does not change the argmax). Raises ValueError for β ≤ 0 and for
    β > 1e12 (:data:`MAX_DOMINANT_BETA`: 4e6 modes).
    """
    beta = _check_beta_positive(beta, "the dominant mode argmax_k k^2 I_k(beta)")
    d = _check_dim(d)
    if beta > MAX_DOMINANT_BETA:
        raise ValueError(
            f"dominant_mode searches k <= 4 sqrt(beta) + 20 and takes beta <= "
            f"{MAX_DOMINANT_BETA:.0e}; received beta = {beta:.6g}. There k* ≈ sqrt(2 beta) "
            "(the Gaussian profile I_k(beta) ∝ e^(-k^2/(2 beta)))."
        )
    modes = np.arange(1, int(4 * math.sqrt(beta)) + 21, dtype=float)
    score = np.log(modes) + np.log(modes + d - 2) + log_ive(modes + d / 2 - 1, beta)
    return int(modes[np.argmax(score)])
