"""The orthonormal associated Legendre functions of the sphere S², by their stable recurrence.

Y_l^m(x) = Λ̄_l^m(x₃)·(x₁ + ix₂)^m / (1 − x₃²)^{m/2}·… is computed without the division as
Λ̄_l^m(z)·(x₁ + ix₂)^m, where Λ̄ absorbs (1 − z²)^{m/2}: the diagonal Λ̄_m^m =
√((2m+1)/(2m)) Λ̄_{m−1}^{m−1} (Λ̄_0^0 = 1/√(4π)), Λ̄_{m+1}^m = √(2m+3) z Λ̄_m^m, and for
k > m + 1 Λ̄_k^m = a_k (z Λ̄_{k−1}^m − b_k Λ̄_{k−2}^m), a_k = √((4k²−1)/(k²−m²)),
b_k = √(((k−1)²−m²)/(4(k−1)²−1)) (the standard normalised recurrence; e.g. Holmes &
Featherstone 2002). The complex harmonic of degree k and order m ≥ 0 is then
Λ̄_k^m(z)(x₁ + ix₂)^m, with ∫|·|² dA = 1. One generator for the theory study's harmonic
energies, its second-order forcing's real harmonics and the sphere study's cluster profiles;
it works on numpy arrays and torch tensors alike (the same operations, in the same order).
"""

from __future__ import annotations

import math


def legendre_terms(z, xy, top: int):
    """Yield (k, m, Λ̄_k^m(z), (x₁ + ix₂)^m) for m = 0 … top and, within each m, k = m … top.

    Parameters
    ----------
    z : array or tensor (...,), x₃ of unit vectors.
    xy : complex array or tensor (...,), x₁ + ix₂ of the same vectors.
    top : the highest degree.
    """
    diagonal = z * 0 + 1 / math.sqrt(4 * math.pi)  # Λ̄_m^m
    power = xy * 0 + 1  # (x₁ + ix₂)^m
    for m in range(top + 1):
        if m > 0:
            diagonal = math.sqrt((2 * m + 1) / (2 * m)) * diagonal
            power = power * xy
        previous, current = z * 0, diagonal
        for k in range(m, top + 1):
            if k == m + 1:
                previous, current = current, math.sqrt(2 * m + 3) * z * current
            elif k > m + 1:
                a = math.sqrt((4 * k * k - 1) / (k * k - m * m))
                b = math.sqrt(((k - 1) ** 2 - m * m) / (4 * (k - 1) ** 2 - 1))
                previous, current = current, a * (z * current - b * previous)
            yield k, m, current, power
