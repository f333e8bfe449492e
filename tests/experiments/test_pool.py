"""experiments.common.pool: tasks on one process or several, the same results."""

import pytest

from tpde.experiments.common.pool import Workers, longest_first


def _square(x):
    return x * x


def _fail(x):
    raise ArithmeticError(f"task {x} failed")


def test_one_worker_runs_in_submit_order_and_later_submissions_join():
    with Workers(1) as pool:
        for x in (3, 1, 2):
            pool.submit(x, _square, x, cost=x)
        seen = []
        for done in pool.completed():
            seen.append((done.key, done.value))
            if done.key == 3:
                pool.submit(4, _square, 4)
            assert done.cpu >= 0 and done.wall >= 0
    assert seen == [(3, 9), (1, 1), (2, 4), (4, 16)]  # the order submitted, costs ignored


def test_two_workers_give_the_same_values_and_raise_a_task_error():
    """One pool of two spawned workers (each imports torch: seconds on a busy machine)."""
    with Workers(2) as pool:
        for x in range(5):
            pool.submit(x, _square, x, cost=x)
        assert pool.pending() == 5
        found = {done.key: done.value for done in pool.completed()}
        assert found == {x: x * x for x in range(5)} and pool.pending() == 0
        pool.submit(7, _fail, 7)
        with pytest.raises(ArithmeticError, match="task 7 failed"):
            list(pool.completed())


@pytest.mark.parametrize("workers", [0, 1.5, "2"])
def test_workers_refuse_a_bad_count(workers):
    with pytest.raises(ValueError, match=f"workers must be an integer >= 1.*received {workers!r}"):
        Workers(workers)


def test_longest_first_schedules_the_largest_task_first():
    assert longest_first([], 2) == 0.0
    assert longest_first([1.0, 2.0, 3.0], 1) == 6.0  # one worker: the sum
    assert longest_first([1.0, 2.0, 3.0], 5) == 3.0  # enough workers: the longest
    # 3 | 3, then 2, 2, 2 alternate: 7 (the best split, 3 + 3 | 2 + 2 + 2, takes 6)
    assert longest_first([2.0, 3.0, 2.0, 3.0, 2.0], 2) == 7.0
    assert longest_first([10.0, 1.0, 1.0, 1.0], 2) == 10.0  # the longest bounds the rest
    with pytest.raises(ValueError, match=r"workers must be an integer >= 1.*received 0"):
        longest_first([1.0], 0)
