"""The observed order of retried steps (tpde.flows.smoothness): a jump reads p = 1, a smooth
flow p = q + 1, a stiff transient p ≈ 0; only runs of p ≈ 1 make an element non-smooth."""

import numpy as np
import pytest

from tpde.flows.smoothness import LOW_PAIRS, ObservedOrder

EXPONENT = 0.2  # dopri5: errors ∝ h⁵ on a smooth flow


def _retries(order: float, pairs: int, batch=()) -> ObservedOrder:
    """``pairs`` rejected steps, each retried at half the step from the same time, with
    errors e ∝ h^order."""
    watch = ObservedOrder(batch)
    moving, t = np.ones(batch, dtype=bool), np.zeros(batch)
    for k in range(pairs):
        t = np.full(batch, float(k))
        h = np.full(batch, 1e-2)
        watch.update(t, h, np.full(batch, 4.0), moving, np.zeros(batch, dtype=bool), EXPONENT)
        retry = h / 2
        error = 4.0 * 0.5**order
        watch.update(t, retry, np.full(batch, error), moving, np.ones(batch, dtype=bool),
                     EXPONENT)  # fmt: skip
    return watch


@pytest.mark.parametrize(("order", "nonsmooth"), [(1.0, True), (5.0, False), (0.0, False)])
def test_only_first_order_retries_mark_a_jump(order, nonsmooth):
    watch = _retries(order, LOW_PAIRS)
    assert bool(watch.nonsmooth) is nonsmooth
    assert float(watch.order) == pytest.approx(order)
    assert (watch.detected_at is not None) is nonsmooth


def test_fewer_pairs_than_the_run_length_are_not_enough():
    assert not bool(_retries(1.0, LOW_PAIRS - 1).nonsmooth)


def test_elements_of_a_batch_are_judged_each_on_its_own():
    watch = ObservedOrder((2,))
    moving = np.ones(2, dtype=bool)
    for k in range(LOW_PAIRS):
        t = np.full(2, float(k))
        watch.update(t, np.full(2, 1e-2), np.full(2, 4.0), moving, ~moving, EXPONENT)
        errors = np.array([2.0, 4.0 * 0.5**5])  # element 0: e ∝ h; element 1: e ∝ h⁵
        watch.update(t, np.full(2, 5e-3), errors, moving, moving, EXPONENT)
    assert watch.nonsmooth.tolist() == [True, False]
