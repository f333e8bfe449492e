"""Equiangular laws: n tokens with equal pairwise inner products ρ (and radius r) under
every normalisation scheme, their scalar ODE and its solution, and frames that realise
them (MATH.md §9; the package notes of :mod:`tpde.theory`)."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from tpde._validation import (
    check_choice,
    check_float_dtype,
    check_positive,
    check_positive_int,
    check_real,
)
from tpde.fields import KERNELS, SCHEMES
from tpde.theory._stiffness import WorkBound, check_stiffness

#: The schemes of :class:`tpde.fields.Normalized` with an equiangular law, in the order of
#: the table of schemes (:data:`tpde.fields.SCHEMES`, the trait ``equiangular_law``;
#: "layernorm" has none: see :func:`equiangular_velocity`). The kernels' normalisers are
#: :data:`tpde.fields.KERNELS` ("sa", "usa").
SCHEMES_WITH_LAW = tuple(name for name, scheme in SCHEMES.items() if scheme.equiangular_law)
_LAYERNORM_WHY = (
    "the 'layernorm' scheme has no equiangular law: it applies LayerNorm after every finite "
    "step (x <- LN(x + hΓ)), LN is not idempotent for a general gain, bias or eps > 0, and no "
    "h -> 0 limit exists in general (MATH.md §7). For gain 1, bias 0 and eps -> 0 its h -> 0 "
    "limit is post-LN on the sphere of radius sqrt(d) in the centred hyperplane, i.e. the "
    "post-ln law of the unit directions with beta*d in place of beta: call it with "
    "scheme='post-ln', beta=beta*d."
)


# ---------------------------------------------------------------------- checks
def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 2:
        raise ValueError(f"n is a number of tokens, an int >= 2; received {n!r}.")
    return int(n)


def _check_kernel(kernel: str) -> str:
    return check_choice(kernel, "kernel (normaliser)", KERNELS)


def _check_beta_positive(beta, what: str) -> float:
    beta = check_real(beta, "beta")
    if beta <= 0:
        raise ValueError(
            f"{what} needs beta > 0 (the kernel e^(beta<x, y>) with a positive inverse "
            f"temperature); received beta = {beta}."
        )
    return beta


def _real_array(value, name: str) -> np.ndarray:
    """``value`` (a number, a sequence, an array or a tensor of real numbers) as a float
    array; strings, None, bools and complex numbers are refused."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    array = np.asarray(value)
    if array.dtype.kind not in "iuf":
        raise TypeError(
            f"{name} must be a real number or an array of real numbers; received {value!r}."
        )
    return array.astype(float)


def _rho_bounds(rho, n: int, name: str = "rho") -> np.ndarray:
    rho = _real_array(rho, name)
    if not np.all(np.isfinite(rho)):
        raise ValueError(f"{name} must be finite; received {rho}.")
    low, tol = -1.0 / (n - 1), 1e-12
    if np.any(rho < low - tol) or np.any(rho > 1 + tol):
        bad = rho[(rho < low - tol) | (rho > 1 + tol)].ravel()[0]
        raise ValueError(
            f"n = {n} unit vectors with equal pairwise inner products rho exist only for "
            f"rho in [-1/(n-1), 1] = [{low:.6g}, 1] (the Gram matrix (1-rho)I + rho 11ᵀ must "
            f"be positive semidefinite); received {name} = {float(bad):.6g}."
        )
    return np.clip(rho, low, 1.0)


# ---------------------------------------------------------------------- equiangular
def _weights(rho, beta: float, n: int, kernel: str):
    """(w_s, w_o): the attention weight of a token on itself and on each other token."""
    gap = beta * (1.0 - rho)  # β − βρ ≥ 0 for β ≥ 0
    with np.errstate(over="ignore"):  # e^{±gap} = inf is the limit the weights take
        if kernel == "usa":
            return np.full_like(rho, np.exp(beta) / n), np.exp(beta * rho) / n
        # softmax: w_s = e^β/Z, w_o = e^{βρ}/Z, Z = e^β + (n − 1)e^{βρ}, without overflow
        return 1.0 / (1.0 + (n - 1) * np.exp(-gap)), 1.0 / (np.exp(gap) + (n - 1))


def equiangular_velocity(rho, r=1.0, *, beta: float, n: int, scheme: str = "post-ln",
                         kernel: str = "sa", alpha: float = 1.0):  # fmt: skip
    r"""(ρ̇, ṙ) of n equiangular tokens x_i = rθ_i, ⟨θ_i, θ_j⟩ = ρ (i ≠ j), |θ_i| = 1.

    Q = K = V = I and score β⟨θ_i, θ_j⟩; w_s and w_o the weights of a token on itself and on
    each other one (SA: w_s = e^β/Z, w_o = e^{βρ}/Z, Z = e^β + (n − 1)e^{βρ}; USA:
    w_s = e^β/n, w_o = e^{βρ}/n); Γ_i = Σ_j w_j θ_j the attention of θ_i, with

        g = ⟨θ_i, Γ_i⟩ = w_s + (n − 1)w_o ρ,
        |Γ_i|² = w_s² + (n − 1)w_o² + (n − 1)ρ(2w_s w_o + (n − 2)w_o²),
        c = 2 w_o (1 − ρ)(1 + (n − 1)ρ)   (= 2(⟨Γ_i, θ_j⟩ − gρ), the post-LN rate).

    - post-ln: ρ̇ = c, ṙ = 0;
    - pre-ln: ρ̇ = c/r, ṙ = g;
    - peri-ln: ρ̇ = c/(r|Γ|), ṙ = g/|Γ|;
    - ngpt: ρ̇ = αc/|Γ|, ṙ = 0.

    "mix-ln" is post-ln before its switch and pre-ln after (:func:`equiangular_solution`;
    here it raises, having no single velocity). Post-LN SA/USA and pre-LN SA are MATH.md
    §9; pre-LN USA, peri-LN and nGPT are derived the same way [ours]: the symmetric
    configuration stays symmetric, so ρ̇ = 2⟨θ̇_i, θ_j⟩ and ṙ = ⟨θ_i, ẋ_i⟩. In peri-LN and
    nGPT the normaliser cancels (w_o/|Γ| does not depend on it): their SA and USA laws are
    the same. n = 2 gives the two-token laws of MATH.md §7 (ρ = cos θ). The laws hold for
    any real β (β ≤ 0 included).

    Parameters
    ----------
    rho : float or array
        Common inner product, in [−1/(n − 1), 1].
    r : float or array
        Common radius (> 0); only pre-ln and peri-ln read it (1 on the sphere).
    beta : float
        Inverse temperature.
    n : int
        Number of tokens (≥ 2).
    scheme : {"post-ln", "pre-ln", "peri-ln", "ngpt"}
        "layernorm" raises ValueError saying why it has no law and what its limit is.
    kernel : {"sa", "usa"}
    alpha : float
        nGPT's step α > 0.

    Returns
    -------
    (drho, dr) : arrays of the broadcast shape of rho and r.
    """
    n = _check_n(n)
    if scheme == "layernorm":
        raise ValueError(_LAYERNORM_WHY)
    if scheme == "mix-ln":
        raise ValueError(
            "mix-ln is post-ln before its switch and pre-ln after: it has no single "
            "velocity. Call with scheme='post-ln' or 'pre-ln', or use equiangular_solution("
            "..., scheme='mix-ln', switch=t)."
        )
    check_choice(scheme, "scheme", SCHEMES_WITH_LAW)
    kernel = _check_kernel(kernel)
    beta = check_real(beta, "beta")
    alpha = _check_alpha(alpha)
    rho = _rho_bounds(rho, n)
    r = _real_array(r, "the radius r")
    if not np.all(np.isfinite(r) & (r > 0)):
        raise ValueError(f"the radius r must be finite and > 0; received {r}.")
    try:
        np.broadcast(rho, r)
    except ValueError:
        raise ValueError(
            f"rho and r must broadcast to one shape; received shapes {rho.shape} and {r.shape}."
        ) from None
    return _rates(rho, r, beta, n, scheme, kernel, alpha)


def _rates(rho, r, beta: float, n: int, scheme: str, kernel: str, alpha: float):
    """(ρ̇, ṙ) of :func:`equiangular_velocity` for checked arguments (the right-hand side of
    :func:`equiangular_solution` calls it at every solver stage without re-checking)."""
    if scheme in ("peri-ln", "ngpt"):
        kernel = "sa"  # the normaliser cancels (docstring): the SA weights cannot overflow
    w_s, w_o = _weights(rho, beta, n, kernel)
    c = 2 * w_o * (1 - rho) * (1 + (n - 1) * rho)
    g = w_s + (n - 1) * w_o * rho
    zero = np.zeros(np.broadcast(rho, r).shape)
    if scheme in ("post-ln", "pre-ln"):
        read = (c,) if scheme == "post-ln" else (c, g)  # post-ln reads w_o only
        if not all(np.all(np.isfinite(v)) for v in read):
            raise ValueError(
                f"the USA velocity overflows float64 at beta = {beta:.6g}: its weights "
                "e^(beta rho)/n and e^beta/n pass 1.8e308 past beta ≈ 709.78. Use "
                "kernel='sa' (the softmax normaliser), or a smaller beta."
            )
        if scheme == "post-ln":
            return c + zero, zero
        return c / r, g + zero
    norm2 = w_s**2 + (n - 1) * w_o**2 + (n - 1) * rho * (2 * w_s * w_o + (n - 2) * w_o**2)
    norm = np.sqrt(np.maximum(norm2, 0.0))
    safe = np.where(norm > 0, norm, 1.0)  # Γ = 0: N(0) = 0, no motion (tpde's normalize)
    if scheme == "peri-ln":
        return np.where(norm > 0, c / (r * safe), 0.0), np.where(norm > 0, g / safe, 0.0) + zero
    return np.where(norm > 0, alpha * c / safe, 0.0) + zero, zero


def _check_usa_reach(beta: float, n: int, schemes, kernel: str) -> None:
    """Refuse a USA solve whose weights overflow on its way: the flow moves ρ towards 1, where
    the weight on another token is e^β/n (the start's weights are checked by
    :func:`equiangular_velocity`; peri-ln and ngpt do not read the normaliser)."""
    reads_usa = kernel == "usa" and any(s in ("post-ln", "pre-ln") for s in schemes)
    with np.errstate(over="ignore"):
        if reads_usa and not math.isfinite(float(np.exp(beta) / n)):
            raise ValueError(
                f"the USA velocity overflows float64 at beta = {beta:.6g}: the flow moves rho "
                "towards 1, where its weights e^(beta rho)/n reach e^beta/n, past 1.8e308 "
                "beyond beta ≈ 709.78 + log n. Use kernel='sa' (the softmax normaliser), or "
                "a smaller beta."
            )


def _check_alpha(alpha) -> float:
    alpha = check_real(alpha, "alpha")
    if alpha <= 0:
        raise ValueError(f"nGPT's step alpha must be > 0; received alpha = {alpha}.")
    return alpha


class EquiangularSolution(NamedTuple):
    """The equiangular law solved: ``rho`` and ``r`` at ``times`` (arrays (T,))."""

    times: np.ndarray
    rho: np.ndarray
    r: np.ndarray


def equiangular_solution(times, rho0: float, *, beta: float, n: int, scheme: str = "post-ln",
                         kernel: str = "sa", r0: float = 1.0, alpha: float = 1.0,
                         switch: float | None = None, rtol: float = 1e-13,
                         atol: float = 1e-15,
                         max_evals: int = 200_000) -> EquiangularSolution:  # fmt: skip
    """ρ(t) and r(t) of :func:`equiangular_velocity` from (ρ0, r0) at t = 0 (scipy DOP853).

    Parameters
    ----------
    times : array (T,)
        Increasing times ≥ 0 at which to report the solution.
    rho0 : float
        The common inner product at t = 0, in [−1/(n − 1), 1].
    beta, n, scheme, kernel, alpha
        As in :func:`equiangular_velocity` ("mix-ln" allowed here).
    r0 : float
        The common radius at t = 0 (read by pre-ln, peri-ln and mix-ln after its switch).
    switch : float, optional
        "mix-ln" only: post-ln on [0, switch), pre-ln after (with r = r0 at the switch).
    rtol, atol : float
        DOP853's tolerances (the defaults resolve ρ to about 1e-13).
    max_evals : int
        Bound on the right-hand side's evaluations over the whole solve (DOP853 spends 12
        per step; the default, 200,000, is 3–5 s). A solve that would need more stops
        with an error that names the inputs instead of running on.

    Returns
    -------
    EquiangularSolution
        ``times``, ``rho`` and ``r``, arrays (T,).

    Raises
    ------
    ValueError
        Before solving, where the ODE is too stiff for the work bound: the Jacobian's
        largest eigenvalue λ at the start (finite differences) makes an explicit solver take
        at least λT/6 steps on [0, T] (6: DOP853's stability interval on the negative real
        axis, about [−6, 0]). Rates far from 1 cause it: pre-ln and peri-ln move ρ at rate
        1/r (ρ(t; r0) = ρ(t/r0; 1)), nGPT at rate α (ρ(t; α) = ρ(αt; 1)).
    RuntimeError
        Where the solve fails or reaches ``max_evals`` anyway (the stiffness grew on the way).
    """
    from scipy.integrate import solve_ivp

    n = _check_n(n)
    times = _real_array(times, "times")
    if times.ndim > 1:
        raise ValueError(f"times must be a 1-d array (T,); received shape {times.shape}.")
    times = times.ravel()
    if times.size == 0 or not np.all(np.isfinite(times)) or times[0] < 0:
        raise ValueError(f"times must be finite and >= 0; received {times}.")
    if np.any(np.diff(times) < 0):
        raise ValueError("times must be increasing.")
    rho0 = _rho_bounds(check_real(rho0, "rho0"), n, "rho0")
    rho0 = float(rho0)
    r0 = check_real(r0, "r0")
    rtol, atol = check_positive(rtol, "rtol"), check_positive(atol, "atol")
    if scheme == "mix-ln":
        switch = None if switch is None else check_real(switch, "switch")
        if switch is None or not switch > 0:
            raise ValueError(
                f"mix-ln needs switch > 0, the time where post-ln hands over to pre-ln; "
                f"received switch = {switch}."
            )
        pieces = [("post-ln", 0.0, switch), ("pre-ln", switch, math.inf)]
    else:
        if switch is not None:
            raise ValueError(f"switch applies to scheme 'mix-ln' only; received scheme {scheme!r}.")
        pieces = [(scheme, 0.0, math.inf)]
    # every argument checked now, not at mix-ln's switch (pre-ln reads r0, every piece beta)
    first = "pre-ln" if scheme == "mix-ln" else scheme
    equiangular_velocity(rho0, r0, beta=beta, n=n, scheme=first, kernel=kernel, alpha=alpha)
    beta, kernel, alpha = check_real(beta, "beta"), _check_kernel(kernel), _check_alpha(alpha)
    max_evals = check_positive_int(max_evals, "max_evals")
    _check_usa_reach(beta, n, [piece for piece, _, _ in pieces], kernel)
    state = np.array([rho0, float(r0)])
    rho, r = np.empty_like(times), np.empty_like(times)
    evals = [0]
    for piece, start, end in pieces:

        def rhs(_t, y, piece=piece):
            evals[0] += 1
            if evals[0] > max_evals:
                raise WorkBound
            rho_t = np.clip(y[0], -1 / (n - 1), 1.0)
            drho, dr = _rates(np.asarray(rho_t), np.asarray(y[1]), beta, n, piece, kernel, alpha)
            return [float(drho), float(dr)]

        inside = (times >= start) & (times < end)
        stop = min(end, float(times[-1])) if math.isfinite(end) else float(times[-1])
        if stop > start:
            why = f"({piece}) on [{start:g}, {stop:g}] from (rho, r) = ({state[0]:.6g}, "
            why += f"{state[1]:.6g}); received r0 = {r0:g}, alpha = {alpha:g}, beta = {beta:g}"
            check_stiffness(rhs, state, stop - start, max_evals - evals[0], why, n)
            at = times[inside] if inside.any() else None
            try:
                with np.errstate(all="ignore"):  # a failed solve raises below, naming the rates
                    sol = solve_ivp(rhs, (start, stop), state, method="DOP853", rtol=rtol,
                                    atol=atol, dense_output=True, t_eval=at)  # fmt: skip
            except WorkBound:
                raise RuntimeError(
                    f"the equiangular ODE solve {why} stopped at max_evals = {max_evals} "
                    "right-hand side evaluations (its stiffness grew on the way). Give "
                    "rates of order 1 (pre-ln, peri-ln: rho(t; r0) = rho(t/r0; 1); ngpt: "
                    "rho(t; alpha) = rho(alpha t; 1)), or a larger max_evals."
                ) from None
            if not sol.success:
                raise RuntimeError(f"the equiangular ODE solve {why} failed: {sol.message}")
            if inside.any():
                rho[inside], r[inside] = sol.y[0], sol.y[1]
            state = sol.sol(stop)
        elif inside.any():
            rho[inside], r[inside] = state
    return EquiangularSolution(times, rho, r)


def equiangular_frame(n: int, d: int, rho: float, *, generator: torch.Generator | None = None,
                      dtype: torch.dtype = torch.float64) -> torch.Tensor:  # fmt: skip
    r"""n unit vectors of R^d with pairwise inner products ρ: a tensor (n, d).

    The Gram matrix G = (1 − ρ)I + ρ11ᵀ has eigenvalues 1 + (n − 1)ρ (once) and 1 − ρ
    (n − 1 times), so the frame exists iff ρ ∈ [−1/(n − 1), 1], and its rank (the least
    dimension d) is n inside that range, n − 1 at the regular simplex ρ = −1/(n − 1) and
    1 at ρ = 1. Built as X = U Λ^{1/2} from G = UΛUᵀ (the zero eigenvalues dropped), padded
    with zeros to d columns; ``generator`` then rotates it by a Haar-random orthogonal
    matrix (so that it is not aligned with the axes). Rows are renormalised to unit length
    (the Gram matrix is then exact to rounding).

    Raises
    ------
    ValueError
        For ρ outside [−1/(n − 1), 1], or d below the bound (naming it).
    """
    n = _check_n(n)
    if isinstance(d, bool) or not isinstance(d, int | np.integer) or d < 1:
        raise ValueError(f"d is a dimension, an int >= 1; received {d!r}.")
    check_float_dtype(dtype)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator (or None: no rotation); received "
            f"{type(generator).__name__}. Pass torch.Generator().manual_seed(seed)."
        )
    rho = float(_rho_bounds(check_real(rho, "rho"), n))
    low = -1.0 / (n - 1)
    simplex, collinear = abs(rho - low) <= 1e-12, abs(rho - 1) <= 1e-12
    need = 1 if collinear else (n - 1 if simplex else n)
    if d < need:
        what = (
            "the regular simplex rho = -1/(n-1) spans n - 1 dimensions: it needs d >= n - 1"
            if simplex
            else "an equiangular frame with -1/(n-1) < rho < 1 has a Gram matrix of full "
            "rank n: it needs d >= n"
        )
        raise ValueError(f"{what}; received n = {n}, d = {d}, rho = {rho:.6g}.")
    gram = (1 - rho) * np.eye(n) + rho * np.ones((n, n))
    values, vectors = np.linalg.eigh(gram)
    keep = values > 1e-12
    frame = vectors[:, keep] * np.sqrt(values[keep])
    points = np.zeros((n, d))
    points[:, : frame.shape[1]] = frame
    device = generator.device if generator is not None else "cpu"  # built from numpy: host
    out = torch.as_tensor(points, dtype=torch.float64, device=device)
    if generator is not None:
        z = torch.randn(d, d, generator=generator, dtype=torch.float64, device=device)
        q, upper = torch.linalg.qr(z)
        out = out @ (q * torch.sign(torch.diagonal(upper))).T  # Haar (Mezzadri's sign fix)
    return torch.nn.functional.normalize(out, dim=-1).to(dtype)
