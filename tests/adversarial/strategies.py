"""Hostile inputs for the adversarial suite: hypothesis strategies and fixed catalogues.

Every case of ``tests/adversarial`` hands tpde's public boundary one bad or edge input and
asserts either a clear error (type and the informative part of the message: what was
received, how to fix it) or a finite, documented result. The strategies below generate the
bad values; :data:`ADVERSARIAL` keeps hypothesis small and reproducible (derandomised: the
same examples on every run and machine, no deadline: the first call of a torch kernel is
slow).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

F64 = torch.float64

#: Hypothesis settings of the suite: a few examples, the same ones on every run.
ADVERSARIAL = settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

#: Scalars that a parameter "finite and > 0" must refuse.
NOT_POSITIVE = (0.0, -1.0, -1e-300, math.nan, math.inf, -math.inf)
#: Their ids in parametrised tests.
NOT_POSITIVE_IDS = ("zero", "negative", "tiny-negative", "nan", "inf", "-inf")

#: Non-finite entries a tensor input must refuse.
NON_FINITE = (math.nan, math.inf, -math.inf)

#: Dtypes with no meaning for tokens: complex numbers (refused), and half precision, which
#: particles accept but covariances refuse (no half-precision linear algebra in torch).
COMPLEX = (torch.complex64, torch.complex128)
HALF = (torch.float16, torch.bfloat16)

#: Things that are not a measure (where a measure is required).
NOT_A_MEASURE = (None, 3, "points", [[0.0, 1.0]], {"points": 1})
NOT_A_MEASURE_IDS = ("None", "int", "str", "list", "dict")


def eye(d: int = 2) -> torch.Tensor:
    return torch.eye(d, dtype=F64)


def cloud(n: int = 6, d: int = 2, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    """A reproducible (n, d) float64 point cloud."""
    gen = torch.Generator().manual_seed(seed)
    return scale * torch.randn(n, d, generator=gen, dtype=F64)


def scales(dtype: torch.dtype) -> list[float]:
    """Every power of ten inside the normal range of ``dtype`` (1e-306 … 1e307 in float64,
    1e-36 … 1e37 in float32)."""
    info = torch.finfo(dtype)
    low, high = math.ceil(math.log10(info.tiny)), math.floor(math.log10(info.max))
    return [10.0**e for e in range(low + 1, high)]


@st.composite
def poisoned(draw, max_n: int = 6, max_d: int = 3, dtype=F64):
    """(tensor (n, d), index) with one NaN, +Inf or −Inf planted at ``index``."""
    n = draw(st.integers(1, max_n))
    d = draw(st.integers(1, max_d))
    values = draw(
        st.lists(
            st.floats(-10, 10, allow_nan=False, allow_infinity=False),
            min_size=n * d,
            max_size=n * d,
        )
    )
    tensor = torch.tensor(values, dtype=dtype).reshape(n, d)
    i, j = draw(st.integers(0, n - 1)), draw(st.integers(0, d - 1))
    tensor[i, j] = draw(st.sampled_from(NON_FINITE))
    return tensor, (i, j)


@st.composite
def finite_clouds(draw, max_n: int = 6, max_d: int = 3, low_exp: int = -6, high_exp: int = 6):
    """A float64 cloud (n, d) at a scale 10^e, e in [low_exp, high_exp]: every scale tpde
    must handle without overflow in float64."""
    n = draw(st.integers(1, max_n))
    d = draw(st.integers(1, max_d))
    seed = draw(st.integers(0, 2**16))
    exponent = draw(st.integers(low_exp, high_exp))
    return cloud(n, d, seed, 10.0**exponent)


@st.composite
def wrong_shapes(draw, good: tuple[int, ...]):
    """A shape that differs from ``good`` (another length, or one size changed)."""
    if draw(st.booleans()) or len(good) == 0:
        ndim = draw(st.integers(0, 3).filter(lambda k: k != len(good)))
        return tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    axis = draw(st.integers(0, len(good) - 1))
    size = draw(st.integers(1, 5).filter(lambda s: s != good[axis]))
    return tuple(size if k == axis else g for k, g in enumerate(good))


def not_positive():
    """Scalars refused by every "finite and > 0" parameter."""
    return st.sampled_from(NOT_POSITIVE)


def non_int_counts():
    """Values refused by every positive-int count (bools, floats, zero, negatives)."""
    return st.sampled_from((0, -1, -(2**40), 1.5, 2.0, True, False, "3", None))


def error_table_test(cases: dict):
    """The test over a table ``{id: (build, error type, message regex)}``: each ``build()``
    raises that error with a message matching the regex (assign it to a ``test_`` name)."""

    @pytest.mark.parametrize("case", cases.values(), ids=cases.keys())
    def test_bad_input_raises_a_clear_error(case):
        build, error, match = case
        with pytest.raises(error, match=match):
            build()

    return test_bad_input_raises_a_clear_error
