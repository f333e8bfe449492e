"""Input checks at the public boundary.

Every public constructor and function of tpde converts and checks its inputs here, once,
with messages that say what was received and how to fix it. Code behind the boundary
trusts its inputs.
"""

from __future__ import annotations

import cmath
import contextvars
import functools
import math
import numbers
from collections.abc import Callable, Sequence

import numpy as np
import torch

__all__ = [
    "ValuesCheckedOnce",
    "all_finite",
    "as_tensor",
    "check_choice",
    "check_finite",
    "check_float_dtype",
    "check_linalg_dtype",
    "check_positive",
    "check_psd",
    "check_real",
    "check_symmetric",
    "checked_integer",
    "checked_positive",
    "require_package",
]


def as_tensor(
    value,
    name: str,
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Convert ``value`` (tensor, numpy array, list, number) to a floating torch tensor.

    Tensors keep their dtype and device (and autograd history) unless asked otherwise;
    numpy arrays keep float64; integer and Python inputs take torch's default dtype.
    """
    if isinstance(value, torch.Tensor):
        tensor = value
    elif isinstance(value, np.ndarray | numbers.Number | Sequence):
        try:
            tensor = torch.as_tensor(np.asarray(value), device=device)
        except (TypeError, ValueError) as err:
            raise TypeError(
                f"{name} must be an array of numbers; received {type(value).__name__} that "
                f"numpy cannot convert ({err}). Pass a torch tensor or a numeric numpy array."
            ) from None
    else:
        raise TypeError(
            f"{name} must be a torch tensor or a numpy array; received "
            f"{type(value).__name__}. Convert it with torch.as_tensor first."
        )
    if tensor.device.type == "meta":
        raise ValueError(
            f"{name} is a 'meta' tensor, which has a shape but no values; tpde checks values "
            "(finiteness, weights, covariances) at the boundary. Pass a tensor on a device that "
            "holds data (cpu, cuda, …)."
        )
    if tensor.dtype == torch.bool or not (tensor.is_floating_point() or tensor.is_complex()):
        tensor = tensor.to(torch.get_default_dtype())
    if tensor.is_complex():
        raise TypeError(f"{name} must be real; received a complex tensor ({tensor.dtype}).")
    if dtype is not None or device is not None:
        tensor = tensor.to(dtype=dtype or tensor.dtype, device=device or tensor.device)
    return tensor


def all_finite(tensor: torch.Tensor) -> bool:
    """Whether every entry of ``tensor`` is finite. The sum is checked first (NaN and Inf
    propagate into it, Inf − Inf is NaN; 30× cheaper than the elementwise test on the
    CPU), the entries only when the sum is not finite (it may overflow on finite entries)."""
    tensor = tensor.detach() if tensor.requires_grad else tensor  # detach: one more op
    if tensor.numel() == 0 or finite_sum(tensor):
        return True
    return bool(torch.isfinite(tensor).all())


def finite_sum(tensor: torch.Tensor) -> bool:
    """Whether the sum of ``tensor``'s entries is finite (then so is every entry: NaN and
    ±Inf propagate into a sum; a sum that is not finite may still be an overflow of finite
    entries). One reduction and one host read: ``torch.isfinite`` on the 0-d sum would add
    four kernels (==, abs, !=, ·), 10 µs of a 1 ms tiny model's forward per call."""
    tensor = tensor.detach() if tensor.requires_grad else tensor  # detach: one more op
    return cmath.isfinite(tensor.sum().item())


def check_finite(tensor: torch.Tensor, name: str) -> None:
    """Raise if ``tensor`` holds NaN or Inf, naming how many entries and where."""
    if all_finite(tensor):
        return
    bad = ~torch.isfinite(tensor.detach())
    if bad.any():
        count = int(bad.sum())
        first = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"{name} contains {count} non-finite value(s) (NaN or Inf), the first at index "
            f"{first}. Remove or replace them before building the measure or field."
        )


#: The tensors found finite inside a :class:`ValuesCheckedOnce` block (id → tensor), or None.
_FINITE_SEEN: contextvars.ContextVar[dict | None] = contextvars.ContextVar(
    "tpde_finite_seen", default=None
)


class ValuesCheckedOnce:
    """A block in which :func:`check_measure_finite` reads each tensor once: a field tree's
    ``check_measure`` checks one measure at every node (a Transformer's schedule: each
    layer, sum, norm scheme and part), and nothing edits it in between. Re-entrant: an inner
    block joins the outer one. The tensors found finite are held until the block ends (so
    their ids are not reused inside it)."""

    __slots__ = ("_token",)

    def __enter__(self):
        self._token = _FINITE_SEEN.set({}) if _FINITE_SEEN.get() is None else None
        return self

    def __exit__(self, *exc) -> None:
        if self._token is not None:
            _FINITE_SEEN.reset(self._token)


def check_measure_finite(mu, who: str = "mu") -> None:
    """Raise where a measure's values (``mu.values()``: an Empirical's points and weights, a
    Gaussian's mean and covariance, a grid's density) hold NaN or Inf — checked when the
    measure was built, then changed in place or rebuilt by ``with_points``: what a field or
    a flow would otherwise report as an overflow, or carry as a NaN state ("blow_up").
    Inside a :class:`ValuesCheckedOnce` block a tensor found finite is not read again."""
    seen = _FINITE_SEEN.get()
    for name, tensor in mu.values().items():
        if seen is not None and seen.get(id(tensor)) is tensor:
            continue
        if all_finite(tensor):
            if seen is not None:
                seen[id(tensor)] = tensor
        else:
            bad = ~torch.isfinite(tensor.detach())
            first = tuple(int(i) for i in bad.nonzero()[0])
            raise ValueError(
                f"{who}'s {name} has {int(bad.sum())} non-finite value(s) (NaN or Inf), the "
                f"first at index {first} (changed in place after the measure checked it, or "
                "rebuilt without checks, e.g. by Empirical.with_points). Remove or replace them."
            )


def check_positive(value, name: str, *, strict: bool = True) -> float:
    """Return ``value`` as a float after checking that it is (strictly) positive: a Python
    or numpy number, or a one-element tensor; bools, strings and None are refused
    (``eps="1e-6"`` or ``eps=True`` is a mistake, not a number)."""
    if isinstance(value, bool | str | bytes):
        raise TypeError(f"{name} must be a number; received {value!r}.")
    try:
        number = float(value)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{name} must be a number; received {value!r}.") from None
    ok = number > 0 if strict else number >= 0
    if not ok or not np.isfinite(number):
        bound = "> 0" if strict else ">= 0"
        raise ValueError(f"{name} must be finite and {bound}; received {number!r}.")
    return number


def check_real(value, name: str, *, finite: bool = True) -> float:
    """``value`` as a float (finite unless ``finite=False``): a Python or numpy number, or a
    one-element tensor; bools, strings and None are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real | np.ndarray | torch.Tensor):
        raise TypeError(f"{name} must be a real number; received {value!r}.")
    try:
        number = float(value)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{name} must be a real number; received {value!r}.") from None
    if finite and not np.isfinite(number):
        raise ValueError(f"{name} must be finite; received {number!r}.")
    return number


def check_float_dtype(dtype, name: str = "dtype") -> torch.dtype:
    """A floating torch dtype (torch.float32, torch.float64, …); anything else raises."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(
            f"{name} must be a floating torch dtype such as torch.float32 or torch.float64; "
            f"received {dtype!r}."
        )
    return dtype


def check_linalg_dtype(dtype: torch.dtype, name: str) -> None:
    """Raise for half precision: eigendecompositions and Cholesky have no float16 or
    bfloat16 kernels, so covariances (Gaussians, spectra) need float32 or float64."""
    if dtype in (torch.float16, torch.bfloat16):
        raise TypeError(
            f"{name} is {dtype}: covariances need linear algebra (eigenvalues, "
            "Cholesky), which torch has no half-precision kernels for. Pass float32 or float64 "
            "(tensor.float() or tensor.double())."
        )


def check_choice(value: str, name: str, choices: Sequence[str]) -> str:
    """Return ``value`` if it is one of ``choices``; otherwise list the known ones."""
    if value not in choices:
        known = ", ".join(repr(c) for c in choices)
        raise ValueError(f"unknown {name} {value!r}; choose one of {known}.")
    return value


def _matrix_scale(matrix: torch.Tensor) -> torch.Tensor:
    """Per-matrix size used for relative tolerances: max(1, max |entry|), shape (...)."""
    return matrix.detach().abs().amax(dim=(-2, -1)).clamp_min(1.0)


def symmetry_tolerance(dtype: torch.dtype) -> float:
    """Relative asymmetry tolerated in a covariance: 1e3 machine epsilons."""
    return 1e3 * torch.finfo(dtype).eps


def check_symmetric(matrix: torch.Tensor, name: str) -> None:
    """Raise unless ``matrix`` (..., d, d) is symmetric up to 1e3 machine epsilons (relative)."""
    if matrix.shape[-1] != matrix.shape[-2]:
        raise ValueError(
            f"{name} must be square (..., d, d); received shape {tuple(matrix.shape)}."
        )
    gap = (matrix - matrix.transpose(-1, -2)).detach().abs().amax(dim=(-2, -1))
    rel = gap / _matrix_scale(matrix)
    tol = symmetry_tolerance(matrix.dtype)
    if (rel > tol).any():
        raise ValueError(
            f"{name} must be symmetric; received a matrix with relative asymmetry "
            f"{float(rel.max()):.3g} > {tol:.1g}. Symmetrise it with (S + S.mT) / 2 if the "
            "asymmetry is rounding."
        )


def check_psd(matrix: torch.Tensor, name: str) -> None:
    """Raise unless the symmetric ``matrix`` (..., d, d) is positive semidefinite.

    Eigenvalues down to ``-d * 1e3 * eps * scale`` are accepted as rounding of zero.
    """
    sym = 0.5 * (matrix + matrix.transpose(-1, -2)).detach()
    low = torch.linalg.eigvalsh(sym).amin(dim=-1)
    tol = matrix.shape[-1] * symmetry_tolerance(matrix.dtype) * _matrix_scale(matrix)
    if (low < -tol).any():
        raise ValueError(
            f"{name} must be positive semidefinite; received a matrix with smallest eigenvalue "
            f"{float(low.min()):.3g}. Pass a covariance such as S @ S.mT."
        )


def check_positive_int(value, name: str) -> int:
    """An integer ≥ 1 as a Python int: a count, a size or an iteration cap.

    Any integral type is accepted (``numpy.int64`` from an array's shape or ``arange``);
    bools, floats and 0-dim tensors are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive int; received {value!r}.")
    return int(value)


def resolve(param, t) -> torch.Tensor:
    """Evaluate a parameter that is either a tensor or a callable ``t -> tensor``."""
    return param(t) if callable(param) else param


def as_parameter(value, name: str) -> torch.Tensor | Callable:
    """Accept a tensor-like parameter or a callable of time (checked when first evaluated)."""
    if callable(value) and not isinstance(value, torch.Tensor):
        return value
    tensor = as_tensor(value, name)
    check_finite(tensor, name)
    return tensor


def as_positions(value, name: str, *, dtype: torch.dtype, device=None) -> torch.Tensor:
    """Token positions as a tensor of the tokens' ``dtype``: integers are cast once (not
    through the default float dtype, which merges integers above 2^24), and a cast that
    merges distinct positions raises (the causal mask would tie ordered tokens)."""
    return _cast_positions(value, name, dtype, device)[0]


def _cast_positions(value, name: str, dtype: torch.dtype, device) -> tuple:
    """(positions in ``dtype``, their least value when they were integers that ``dtype``
    holds exactly — then finite and distinct, nothing more to read — else None)."""
    given = _integer_tensor(value)
    if given is None:
        given = as_tensor(value, name, device=device)
    given = given.to(device) if device is not None else given
    cast = given.to(dtype)
    low = _exact_low(given, dtype)
    if given.dtype != dtype and given.ndim == 1 and low is None:
        order = torch.argsort(given)
        before, after = given[order], cast[order]
        merged = (before[1:] != before[:-1]) & (after[1:] == after[:-1])
        if bool(merged.any()):
            i = int(merged.nonzero()[0, 0])
            raise ValueError(
                f"{name} {before[i].item()!r} and {before[i + 1].item()!r} are not distinct in "
                f"{dtype} (the tokens' dtype, in which positions are kept): the causal mask and "
                "positional encodings would tie them. Use tokens in float64, or positions that "
                "the dtype resolves (integers below 2^24 in float32)."
            )
    return cast, low


def _exact_low(given: torch.Tensor, dtype: torch.dtype) -> int | None:
    """The least of integers ``given`` that a floating ``dtype`` represents exactly (every
    |v| ≤ 2^p, p the dtype's significand bits: 2^24 in float32, 2^53 in float64, so that
    distinct positions stay distinct: no sort needed to tell); None otherwise."""
    if given.is_floating_point() or not dtype.is_floating_point or given.numel() == 0:
        return None
    low, high = (int(v) for v in torch.aminmax(given))
    bound = _exact_bound(dtype)
    return low if -bound <= low and high <= bound else None


@functools.cache
def _exact_bound(dtype: torch.dtype) -> int:
    """2^p, p the significand bits of a floating dtype (1 − log2 eps)."""
    return 2 ** (1 - int(math.log2(torch.finfo(dtype).eps)))


def check_positions(positions, n: int, like: torch.Tensor, mismatch: str) -> torch.Tensor:
    """Token positions (n,) in ``like``'s dtype and device, finite and ≥ 0, detached.

    ``mismatch`` is the shape error's text with ``{got}`` for the received shape (the
    callers name what the positions must match: a measure's points, query points x)."""
    positions, low = _cast_positions(positions, "positions", like.dtype, like.device)
    if positions.shape != (n,):
        raise ValueError(mismatch.format(got=tuple(positions.shape)))
    if low is None:  # integers held exactly are finite, and their least is known
        check_finite(positions, "positions")
    if (low < 0) if low is not None else bool((positions < 0).any()):
        raise ValueError(
            f"positions must be ≥ 0 (integer token indices, or s ∈ [0, 1] for a mean-field "
            f"limit); received a minimum of {float(positions.min()):.4g}."
        )
    return positions.detach()


def _integer_tensor(value) -> torch.Tensor | None:
    """An integer tensor, array or list as an integer tensor; None for anything else."""
    if isinstance(value, torch.Tensor):
        integer = not (value.is_floating_point() or value.is_complex())
        return value if integer and value.dtype != torch.bool else None
    if isinstance(value, np.ndarray | list | tuple):
        try:
            array = np.asarray(value)
        except (TypeError, ValueError):
            return None
        # numpy data live on the CPU; as_positions moves them to the tokens' device
        return torch.as_tensor(array, device="cpu") if array.dtype.kind in "iu" else None
    return None


def checked_integer(value, where: str, error: type, *, low: int = 1, said="received") -> int:
    """``value`` as an int ≥ ``low``, else ``error`` naming ``where`` (the file and key) and
    what it holds (``said``: "received", "the file holds"); a bool is not an integer."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise error(f"{where} must be an integer; {said} {value!r} ({type(value).__name__}).")
    if value < low:
        raise error(f"{where} must be an integer >= {low}; {said} {value}.")
    return int(value)


def checked_positive(value, where: str, error: type, *, said="received") -> float:
    """``value`` as a finite float > 0, else ``error`` naming ``where`` and the value."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise error(f"{where} must be a number; {said} {value!r} ({type(value).__name__}).")
    if not (math.isfinite(value) and value > 0):
        raise error(f"{where} must be finite and > 0; {said} {value!r}.")
    return float(value)


def require_package(module: str, who: str = "tpde.pretrained", extra: str = "real"):
    """Import the optional dependency ``module``, or an ImportError naming the package and
    the extra that installs it (no silent fallback)."""
    try:
        return __import__(module)
    except ImportError as err:
        raise ImportError(
            f"{who} needs the package {module!r} ({err}); install the optional extra with "
            f"`pip install 'tpde[{extra}]'`."
        ) from None
