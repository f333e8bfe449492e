"""all_finite / check_finite: the sum-first test agrees with the elementwise one."""

import pytest
import torch

from tpde._validation import all_finite, check_finite, finite_sum


@pytest.mark.parametrize(
    ("values", "finite"),
    [
        ([1.0, 2.0], True),
        ([3e38, 3e38], True),  # finite entries whose float32 sum overflows: checked entrywise
        ([float("inf"), 1.0], False),
        ([float("inf"), float("-inf")], False),  # the sum is NaN
        ([float("nan"), 0.0], False),
        ([], True),
    ],
)
def test_all_finite_matches_the_elementwise_test(values, finite):
    tensor = torch.tensor(values, dtype=torch.float32)
    assert all_finite(tensor) is finite
    assert bool(torch.isfinite(tensor).all()) is finite


@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.bfloat16, torch.float64, torch.complex64, torch.int64]
)
def test_finite_sum_reads_the_sum_in_every_dtype(dtype):
    # one host read of the sum (no torch.isfinite kernels); NaN and ±Inf propagate into it
    finite = torch.tensor([1, 2, 3]).to(dtype)
    assert finite_sum(finite) is True and finite_sum(finite[:0]) is True
    if dtype.is_floating_point or dtype.is_complex:
        for bad in (float("nan"), float("inf"), float("-inf")):
            edited = finite.clone()
            edited[1] = bad
            assert finite_sum(edited) is False
    if dtype == torch.float16:  # finite entries whose sum overflows: not finite by the sum
        big = torch.tensor([6e4, 6e4], dtype=dtype)
        assert finite_sum(big) is False and all_finite(big) is True


def test_check_finite_names_the_count_and_the_first_index():
    check_finite(torch.tensor([3e38, 3e38]), "x")
    with pytest.raises(ValueError, match=r"x contains 2 non-finite value\(s\).*index \(1,\)"):
        check_finite(torch.tensor([1.0, float("inf"), float("-inf")]), "x")


def _counted_sums(monkeypatch):
    """Count the finiteness reads of check_measure_finite (its all_finite calls)."""
    import tpde._validation as validation

    calls = []

    def counting(tensor):
        calls.append(tensor)
        return all_finite(tensor)

    monkeypatch.setattr(validation, "all_finite", counting)
    return calls


def test_a_field_tree_reads_each_tensor_once_per_check(monkeypatch, generator):
    """A nested field (a sum of two normalised parts) checks μ at every node, reading its
    points and weights once per check_measure; a check after the block reads them again and
    sees an in-place edit."""
    from tpde.fields import GroupedQueryAttention, Normalized, RMSNorm, Sum
    from tpde.measures import Empirical

    d = 4
    W = [torch.randn(d, d, generator=generator, dtype=torch.float64) for _ in range(4)]
    part = Normalized(GroupedQueryAttention(*W, 1, 1, causal=False), RMSNorm(eps=1e-6))
    field = Sum([part, part])
    mu = Empirical(torch.randn(5, d, generator=generator, dtype=torch.float64))
    calls = _counted_sums(monkeypatch)
    field.check_measure(mu)
    assert len(calls) == 2  # points and weights, once for the 5 nodes
    field.check_measure(mu)
    assert len(calls) == 4  # a new check reads them again
    mu.points[2, 1] = float("nan")  # edited in place after the measure was built
    with pytest.raises(ValueError, match=r"mu's points has 1 non-finite value\(s\)"):
        field.check_measure(mu)
