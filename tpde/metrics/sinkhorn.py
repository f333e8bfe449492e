"""Debiased Sinkhorn divergence, on GeomLoss for particles and in closed form for Gaussians.

GeomLoss's convention, kept exactly so that values equal ``geomloss.SamplesLoss``:

    S_ε(μ, ν) = OT_ε(μ, ν) − ½ OT_ε(μ, μ) − ½ OT_ε(ν, ν),
    OT_ε(μ, ν) = min_π ∫ ½|x − y|² dπ + ε KL(π | μ⊗ν),   ε = blur²  (p = 2: ε = blur^p).

So S_ε → ½ W2² as blur → 0 and √(2 S_ε) is on the scale of W2; S_ε ≥ 0 with equality iff
μ = ν (Feydy et al. 2019). GeomLoss reaches ε = blur² by ε-scaling (ε annealed from the
diameter² by factors scaling²); its default scaling 0.5 stops short of the converged value
(5–8 % low at blur 0.05, n = 10⁴, DESIGN.md) and can give negative divergences between
close measures (GeomLoss issue #25). tpde's default is 0.9. Measured against POT's
converged log-domain Sinkhorn (three solves, d = 2, 2 × N(0, I)-like clouds):

    blur 0.5, n = 200:  scaling 0.5 −0.26 %,  0.9 −0.02 %,  0.95 −0.005 %
    blur 0.2, n = 200:  scaling 0.5 −4.0 %,   0.9 −0.20 %,  0.95 −0.06 %
    blur 0.1, n = 500:  scaling 0.5 −1.2 %,   0.9 −0.13 %,  0.95 −0.04 %

One solve's schedule has a fixed length, so it has no convergence status, and its error
grows as blur shrinks and as the divergence gets small against the OT terms (measured
against a converged reference, n = 200, scaling 0.9: −0.02 to −0.34 % at blur 0.5, −0.3
to −3.2 % at blur 0.2, −0.2 to −3.7 % at blur 0.05–0.1, d = 2–5; the large errors are
between two samples of one distribution). The cost grows like 1/log(1/scaling).

Accuracy contract, the default of both :func:`sinkhorn_divergence` and
:func:`sinkhorn_solve` (``rtol = 1e-3``; ``sinkhorn_divergence(..., rtol=None)`` is one
GeomLoss solve at ``scaling``, no contract, the default before issue 28): ε is annealed from
the diameter² to blur² by factors 0.97² (GeomLoss's symmetric updates), and the updates go
on at ε = blur² until the estimate 3 |ΔS|/(1 − κ) is ≤ rtol · |S| + atol, κ the contraction
rate measured over the last five updates once it is steady (:mod:`tpde.metrics._sinkhorn_loop`).
Until issue 36 the contract was met by repeated GeomLoss solves at scalings 0.9, 0.95,
0.975, … (n = 400, d = 5, blur 0.1, random weights: 13.4 s, 64× one solve); one annealing
and the updates at ε take 1.5 s there, 0.77× GeomLoss at scaling 0.99 (1.9 s, 0.45 % off),
and 0.37–1.6× it over d = 2 and 5, blur 0.05–0.5, with errors 3e-11 to 4.6e-4, each below
its estimate (benchmarks/sinkhorn_accuracy.py, a loaded 2-core machine). This is an
empirical estimate, not a theorem: κ measured over a few updates can underestimate the
slowest rate (by up to 2.6× measured at blur 0.05, hence the factor 3); for blur much
below 0.05 × the diameter, check against a reference. For blur far above the diameter D the
log-sum-exp loses the cost's digits (C/ε below the dtype's resolution): the estimate is at
least eps·(blur² + D²), and sinkhorn_divergence warns when blur > D and that bound exceeds
0.1 % of the value (:func:`rounding_bound`).
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass

import torch

from tpde._engines.keops import keops_status, quiet_keops_import, require_keops
from tpde._status import Status
from tpde._validation import check_choice, check_positive, check_positive_int
from tpde.metrics._common import check_pair_kinds, gaussian_pair, particle_pair, raise_mixed
from tpde.metrics._sinkhorn_loop import converge_divergence
from tpde.metrics.entropic_gaussian import entropic_terms

__all__ = [
    "DEFAULT_RTOL",
    "SINKHORN_ENGINES",
    "SinkhornResult",
    "sinkhorn_divergence",
    "sinkhorn_solve",
]

# engine -> GeomLoss backend. "dense": full cost matrix (tensorized, O(n m) memory);
# "keops": online KeOps reductions (O(n + m) memory); "multiscale": KeOps with coarse-to-
# fine kernel truncation, d ≤ 3 only (0.48 s vs POT's 19 s at n = 10⁴, d = 2, DESIGN.md).
SINKHORN_ENGINES = ("auto", "dense", "keops", "multiscale")
_BACKEND = {"dense": "tensorized", "keops": "online", "multiscale": "multiscale"}

# "auto": dense up to GeomLoss's own threshold of 5000² pairs (≈ 200 MB per float64 matrix).
DENSE_LIMIT = 5000**2


@functools.cache
def _warn_fallback(reason: str) -> None:
    warnings.warn(
        f"sinkhorn_divergence: engine='auto' would use KeOps for this size, but KeOps is not "
        f"usable ({reason}); falling back to 'dense' (memory O(n m)). This warning is shown "
        "once.",
        RuntimeWarning,
        stacklevel=4,
    )


def pick_sinkhorn_engine(n: int, m: int, d: int) -> str:
    """The "auto" rule: dense up to 5000² pairs; beyond, multiscale (d ≤ 3) or keops."""
    if n * m <= DENSE_LIMIT:
        return "dense"
    ok, reason = keops_status()
    if not ok:
        _warn_fallback(reason)
        return "dense"
    return "multiscale" if d <= 3 else "keops"


def _check_scaling(scaling) -> float:
    value = check_positive(scaling, "scaling")
    if value >= 1:
        raise ValueError(
            f"scaling must lie in (0, 1) (ε is multiplied by scaling² per ε-scaling step); "
            f"received {value!r}. 0.9 is accurate, 0.5 is GeomLoss's faster default."
        )
    return value


def _check_blur_range(blur: float, dtype: torch.dtype, factor: float, power: float) -> None:
    """ε = factor · blur² must be a normal number of ``dtype`` and ε^power must not overflow.

    Beyond, the entropic problem is not representable: ε underflows to 0 (the divergence is
    then ½ W2², NaN from the solver) or overflows (Inf)."""
    info = torch.finfo(dtype)
    low, high = (info.tiny / factor) ** 0.5, (info.max ** (1 / power) / factor) ** 0.5
    wider = " or compute in float64," if dtype != torch.float64 else ""
    if blur < low:
        raise ValueError(
            f"blur = {blur:g} is too small for {dtype}: ε = blur² underflows (the smallest "
            f"normal {dtype} is {info.tiny:.3g}). As blur → 0 the divergence tends to "
            f"½ W2²: use tpde.metrics.w2(mu, nu) ** 2 / 2,{wider} or pass blur >= {low:.3g}."
        )
    if blur > high:
        raise ValueError(
            f"blur = {blur:g} is too large for {dtype}: the entropic terms in ε = blur² "
            f"overflow. A blur far beyond the measures' diameter only sees their means; pass "
            f"blur <= {high:.3g}."
        )


def _gaussian_divergence(mu, nu, blur: float) -> torch.Tensor:
    """Closed form: ½[OT_{2b²} − ½OT_{2b²}(μ,μ) − ½OT_{2b²}(ν,ν)], OT for the cost |x − y|²."""
    m0, S0, m1, S1 = gaussian_pair(mu, nu, "sinkhorn_divergence")
    _check_blur_range(blur, m0.dtype, 2.0, 2.0)  # ε = 2 blur², squared in the closed form
    eps = 2 * blur**2
    P = 2 * torch.eye(m0.shape[-1], dtype=m0.dtype, device=m0.device)

    def ot(ma, Sa, mb, Sb):
        return entropic_terms(ma, Sa, mb, Sb, P, eps, quadratic=True, with_cross=False)[0]

    return 0.5 * (ot(m0, S0, m1, S1) - 0.5 * ot(m0, S0, m0, S0) - 0.5 * ot(m1, S1, m1, S1))


def _particle_inputs(mu, nu, blur: float, engine: str):
    """(x, a, y, b, engine) of two particle measures, checked; "auto" resolved."""
    x, a, y, b = particle_pair(mu, nu, "sinkhorn_divergence")
    _check_blur_range(blur, x.dtype, 1.0, 1.0)
    span = x.detach().abs().max() + y.detach().abs().max()
    if not bool(torch.isfinite(span * span)):
        raise OverflowError(
            f"sinkhorn_divergence: the squared distances between these points overflow "
            f"{x.dtype} (largest |coordinate| {float(x.detach().abs().max()):.3g} and "
            f"{float(y.detach().abs().max()):.3g}). Compute in float64 "
            "(mu.to(dtype=torch.float64)), or rescale both measures."
        )
    d = x.shape[1]
    if engine == "auto":
        engine = pick_sinkhorn_engine(x.shape[0], y.shape[0], d)
    if engine == "multiscale" and d > 3:
        raise ValueError(
            f"sinkhorn_divergence: engine='multiscale' exists for d ≤ 3 only; the measures "
            f"have d = {d}. Use engine='keops' or 'dense'."
        )
    if engine in ("keops", "multiscale"):
        require_keops()
    return x, a, y, b, engine


def _particle_divergence(mu, nu, blur: float, scaling: float, engine: str) -> torch.Tensor:
    """One GeomLoss solve at ``scaling`` (``rtol=None``: no accuracy contract)."""
    with quiet_keops_import():  # GeomLoss imports pykeops, which prints a CUDA banner
        from geomloss import SamplesLoss

    x, a, y, b, engine = _particle_inputs(mu, nu, blur, engine)
    loss = SamplesLoss(
        "sinkhorn", p=2, blur=blur, scaling=scaling, debias=True, backend=_BACKEND[engine]
    )
    return loss(a, x.contiguous(), b, y.contiguous()).reshape(())


#: A value whose rounding bound (:func:`rounding_bound`) exceeds this fraction of |S| warns.
ROUNDING_WARN = 1e-3


def rounding_bound(mu, nu, blur: float) -> float:
    """Bound on the rounding error of a log-domain Sinkhorn value: eps·(blur² + D²).

    D is the diagonal of the box holding both clouds. The cost enters the log-sum-exp as
    C/ε, so its digits fall below the dtype's resolution as ε = blur² outgrows D². Measured
    against a 60-digit Sinkhorn (n = 6 and 5 points, D = 3.15, S = 0.4866): GeomLoss errs by
    1.2e-6 at blur 1e5, 5.3e-5 at 1e6, 8.5e-3 at 1e7 and returns 0 from 1e9 on in float64,
    by 3.7e-4 at blur 100 and 0.062 at 1e3 in float32; the bound exceeds every one of those
    errors, by factors 1.8–4.2 up to blur 3e7 (float64) and 1.9–6.8 up to 3e3 (float32).
    """
    x, _, y, _ = particle_pair(mu, nu, "sinkhorn_divergence")
    return _bound(x.dtype, blur, _span2(x, y))


def _bound(dtype: torch.dtype, blur: float, span2: float) -> float:
    return torch.finfo(dtype).eps * (blur * blur + span2)


def _span2(x: torch.Tensor, y: torch.Tensor) -> float:
    """D², D the diagonal of the box holding both point sets (n, d), (m, d)."""
    both = torch.cat([x.detach(), y.detach()])
    return float(((both.amax(0) - both.amin(0)) ** 2).sum())


def _warn_rounding(mu, nu, value: torch.Tensor, blur: float) -> bool:
    """Warn where the blur outgrows the clouds and the rounding bound outgrows 0.1 % of S
    (returns whether it warned)."""
    x, _, y, _ = particle_pair(mu, nu, "sinkhorn_divergence")
    span2 = _span2(x, y)
    if blur * blur <= span2:
        return False
    bound = _bound(x.dtype, blur, span2)
    warned = bound > ROUNDING_WARN * abs(float(value.detach()))
    if warned:
        warnings.warn(
            f"sinkhorn_divergence: at blur = {blur:g} the value {float(value.detach()):.6g} "
            f"may be off by up to {bound:.3g} ({value.dtype} rounding of ε = blur² against the "
            "squared distances): the blur is far beyond the clouds' size. Use a smaller blur, "
            "float64, or the large-blur limit ½|mean(mu) − mean(nu)|².",
            RuntimeWarning,
            stacklevel=3,
        )
    return warned


#: The relative accuracy of sinkhorn_divergence's and sinkhorn_solve's default call.
DEFAULT_RTOL = 1e-3

#: Updates at the target ε allowed by the default call (sinkhorn_solve's ``max_iter``).
MAX_ITER = 1_000
#: The ε-scaling of the annealing before the updates at the target ε (the contract's
#: default): slower annealing converges the slow modes more cheaply than updates at ε
#: (measured, n = 400, blur 0.05: error 1.9e-4 after GeomLoss's 0.99 schedule, 3e-3 after
#: 0.9 and 1500 updates at ε: the slowest rate there is κ ≈ 0.999).
CONTRACT_SCALING = 0.97
#: The ε-scaling of one solve without a contract (``rtol=None``).
SOLVE_SCALING = 0.9


@dataclass(frozen=True)
class SinkhornResult:
    """Result of :func:`sinkhorn_solve`.

    Attributes
    ----------
    value : tensor
        The divergence (as :func:`sinkhorn_divergence` returns it: 0-d for particles, the
        batch shape for Gaussians); differentiable.
    error_estimate : tensor, same shape
        Estimated |value − converged value|: |ΔS|/(1 − κ) at the last update for particles
        (:mod:`tpde.metrics._sinkhorn_loop`), at least the rounding bound eps·(blur² + D²)
        (:func:`rounding_bound`); 0 for Gaussians (closed form).
    scaling : float or None
        The ε-scaling factor of the annealing (None for Gaussians).
    iterations : int
        Sinkhorn updates made at the target ε after the annealing (0 for Gaussians).
    status : :class:`~tpde._status.Status`
        "converged" (error_estimate ≤ rtol · |value| + atol) or "not_converged"
        (``max_iter`` reached; the last value and its estimate are returned).
    """

    value: torch.Tensor
    error_estimate: torch.Tensor
    scaling: float | None
    iterations: int
    status: Status

    @property
    def relative_error_estimate(self) -> torch.Tensor:
        """error_estimate / |value| (inf where the value is 0)."""
        return self.error_estimate / self.value.detach().abs()


def _default_atol(mu, nu) -> float:
    """Rounding level of S: 100 eps × (½ spread of both clouds + ½ |mean gap|²)."""
    x, a, y, b = particle_pair(mu, nu, "sinkhorn_solve")
    mx, my = a @ x, b @ y
    spread = a @ ((x - mx) ** 2).sum(1) + b @ ((y - my) ** 2).sum(1) + ((mx - my) ** 2).sum()
    return 100 * torch.finfo(x.dtype).eps * 0.5 * float(spread.detach())


def sinkhorn_solve(
    mu,
    nu,
    blur: float = 0.05,
    *,
    rtol: float = DEFAULT_RTOL,
    atol: float | None = None,
    scaling: float = CONTRACT_SCALING,
    max_iter: int = MAX_ITER,
    engine: str = "auto",
) -> SinkhornResult:
    """Sinkhorn divergence to a requested accuracy, with the achieved error estimate.

    ε-scaling from the diameter² down to ε = blur² by factors ``scaling``², then symmetric
    Sinkhorn updates at ε until the estimate |ΔS|/(1 − κ) ≤ rtol · |S| + atol
    (:mod:`tpde.metrics._sinkhorn_loop`: the rule, the measured rate κ, the gradients), at
    most ``max_iter`` updates.

    Parameters
    ----------
    mu, nu, blur, engine
        As in :func:`sinkhorn_divergence`. Two Gaussians: the closed form (error 0).
        engine "multiscale" runs the online KeOps engine here (GeomLoss truncates its kernel
        inside its own fixed schedule).
    rtol : float > 0
        Relative accuracy asked for (default 1e-3).
    atol : float ≥ 0, optional
        Absolute floor, for divergences near 0 (μ ≈ ν). Default: 100 eps × the clouds'
        ½ spread plus ½ |mean gap|² (the rounding level of S).
    scaling : float in (0, 1)
        ε-scaling factor of the annealing (default 0.97, :data:`CONTRACT_SCALING`).
    max_iter : int ≥ 1
        Cap on the updates at the target ε (default 1000, :data:`MAX_ITER`).

    Returns
    -------
    SinkhornResult
        ``.value`` (a tensor as sinkhorn_divergence returns), ``.error_estimate``,
        ``.scaling``, ``.iterations``, ``.status`` ("converged" / "not_converged": never
        silent).
    """
    blur = check_positive(blur, "blur")
    rtol = check_positive(rtol, "rtol")
    scaling = _check_scaling(scaling)
    max_iter = check_positive_int(max_iter, "max_iter")
    engine = _check_engine(engine)
    pair = check_pair_kinds(mu, nu, "sinkhorn_solve")
    if pair == "gaussian":
        value = _gaussian_divergence(mu, nu, blur)
        return SinkhornResult(value, torch.zeros_like(value.detach()), None, 0, Status.CONVERGED)
    if pair != "particles":
        _raise_mixed(mu, nu, "sinkhorn_solve")
    atol = _default_atol(mu, nu) if atol is None else check_positive(atol, "atol", strict=False)
    x, a, y, b, engine = _particle_inputs(mu, nu, blur, engine)
    floor = _bound(x.dtype, blur, _span2(x, y))  # no iteration gets below the rounding error
    with quiet_keops_import():
        value, estimate, iterations, converged = converge_divergence(
            x, a, y, b, blur, scaling=scaling, engine="dense" if engine == "dense" else "keops",
            rtol=rtol, atol=atol, max_iter=max_iter, floor=floor,
        )  # fmt: skip
    estimate = torch.as_tensor(max(estimate, floor), dtype=value.dtype, device=value.device)
    met = converged and float(estimate) <= rtol * abs(float(value.detach())) + atol
    status = Status.CONVERGED if met else Status.NOT_CONVERGED
    return SinkhornResult(value, estimate, scaling, iterations, status)


def _check_engine(engine) -> str:
    if not isinstance(engine, str):
        raise TypeError(f"engine must be a string; received {type(engine).__name__}.")
    return check_choice(engine, "engine", SINKHORN_ENGINES)


def _raise_mixed(mu, nu, fname: str) -> None:
    raise_mixed(
        mu,
        nu,
        fname,
        "Compare two particle clouds (sample the Gaussian explicitly with "
        "Empirical.from_gaussian(g, n, generator=...)) or two Gaussians (closed form).",
    )


def sinkhorn_divergence(
    mu,
    nu,
    blur: float = 0.05,
    *,
    scaling: float | None = None,
    engine: str = "auto",
    rtol: float | None = DEFAULT_RTOL,
) -> torch.Tensor:
    """Debiased Sinkhorn divergence S_ε(μ, ν), ε = blur², cost |x − y|²/2 (GeomLoss's).

    Parameters
    ----------
    mu, nu : Empirical (or a Grid, via cell centres) — computed by GeomLoss; or two
        Gaussians — computed in closed form (:mod:`tpde.metrics.entropic_gaussian`), batched.
        A Gaussian against particles raises.
    blur : float > 0
        Length scale of the entropic blur; ε = blur². Default 0.05 (GeomLoss's).
    scaling : float in (0, 1), optional
        ε-scaling factor of the annealing. Default: 0.97 with an ``rtol`` (the annealing
        before the updates at the target ε, :data:`CONTRACT_SCALING`), 0.9 for one solve
        (``rtol=None``; not GeomLoss's 0.5, whose truncated annealing is 5–8 % low and can
        be negative, GeomLoss issue #25).
    engine : {"auto", "dense", "keops", "multiscale"}
        GeomLoss backend: "dense" = tensorized (O(nm) memory), "keops" = online,
        "multiscale" = KeOps with kernel truncation (d ≤ 3). "auto": dense up to 5000²
        pairs, then multiscale (d ≤ 3) or keops; if KeOps cannot compile, dense with a
        one-time warning. Ignored for Gaussians.
    rtol : float > 0 or None
        The relative accuracy of the value (default 1e-3, :data:`DEFAULT_RTOL`): the value
        of :func:`sinkhorn_solve` (ε-scaling to blur², then Sinkhorn updates at blur²
        until the error estimate is below rtol · |S| + atol), with a RuntimeWarning naming
        the estimate reached if it is not met. Cost and error: benchmarks/sinkhorn_accuracy.py
        (against GeomLoss at scaling 0.99 in the same run). ``None``: one GeomLoss solve at
        ``scaling``, no accuracy contract (see the module docstring for its error), the
        default before issue 28.

    Returns
    -------
    tensor
        0-d for particles (batch shape for Gaussians). Not a distance: it tends to ½ W2²
        as blur → 0. Differentiable w.r.t. points and weights (GeomLoss's autograd).
        :func:`sinkhorn_solve` returns the same value with its error estimate.
    """
    blur = check_positive(blur, "blur")
    if rtol is not None:
        rtol = check_positive(rtol, "rtol")
    if scaling is None:
        scaling = SOLVE_SCALING if rtol is None else CONTRACT_SCALING
    scaling = _check_scaling(scaling)
    engine = _check_engine(engine)
    pair = check_pair_kinds(mu, nu, "sinkhorn_divergence")
    if pair == "gaussian":
        return _gaussian_divergence(mu, nu, blur)
    if pair != "particles":
        _raise_mixed(mu, nu, "sinkhorn_divergence")
    if rtol is None:
        value = _particle_divergence(mu, nu, blur, scaling, engine)
        _warn_rounding(mu, nu, value, blur)
        return value
    result = sinkhorn_solve(
        mu, nu, blur, rtol=rtol, scaling=scaling, max_iter=MAX_ITER, engine=engine
    )
    if result.status != "converged" and not _warn_rounding(mu, nu, result.value, blur):
        warnings.warn(
            f"sinkhorn_divergence: rtol={rtol:g} not reached after {result.iterations} "
            f"iterations at the target ε; the estimated relative error is "
            f"{float(result.relative_error_estimate):.3g}. Call sinkhorn_solve with a "
            "larger max_iter, or a larger blur.",
            RuntimeWarning,
            stacklevel=2,
        )
    return result.value
