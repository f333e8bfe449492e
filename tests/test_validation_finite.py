"""all_finite / check_finite: the sum-first test agrees with the elementwise one."""

import pytest
import torch

from tpde._validation import all_finite, check_finite


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


def test_check_finite_names_the_count_and_the_first_index():
    check_finite(torch.tensor([3e38, 3e38]), "x")
    with pytest.raises(ValueError, match=r"x contains 2 non-finite value\(s\).*index \(1,\)"):
        check_finite(torch.tensor([1.0, float("inf"), float("-inf")]), "x")
