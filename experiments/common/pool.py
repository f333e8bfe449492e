"""Independent tasks of one study on worker processes, with the results of a serial run.

A study whose runs are independent (each particle draw from its own initial cloud, drawn
beforehand in the serial order from the study's generators) submits them as tasks:
``Workers(1)`` runs them here, one after another in the order submitted; ``Workers(w)``,
w ≥ 2, on w spawned worker processes (each imports torch afresh and uses the calling
process's number of torch threads), the largest ``cost`` first among those submitted, at
most w at a time. A task's result depends only on its arguments, so both give the same
results bit for bit (tested); only the order in which they complete differs.

Tasks may be submitted while others run (a task whose arguments need another's result is
submitted once that result is in). Each result comes with the CPU seconds of its task
(``time.process_time`` in the process that ran it), so the study's cost is the sum over
its tasks whichever process ran them. The workers end with this process, a SIGKILL of it
included (:func:`experiments.workers.end_with_parent`). A study's ``workers`` times the
run's ``--jobs`` (each job on ``--threads``) is the number of busy cores to plan for.
"""

from __future__ import annotations

import heapq
import itertools
import os
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import NamedTuple

import torch

__all__ = ["Done", "Workers", "check_workers", "cpu_per_part", "longest_first"]


class Done(NamedTuple):
    """One finished task: its key, its value, its CPU and wall seconds."""

    key: Hashable
    value: object
    cpu: float
    wall: float


def _start(parent: int) -> None:
    """A worker's start: end with ``parent``; large tensors reuse the heap, as in the
    ``tpde`` command's process (:func:`experiments.framework.reuse_large_allocations`)."""
    from .. import framework as fw
    from ..workers import end_with_parent

    end_with_parent(parent)
    fw.reuse_large_allocations()


def _timed(function: Callable, args: tuple, threads: int | None):
    """function(*args) with its CPU and wall seconds (in the process that runs it)."""
    if threads is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    wall, clock = time.time(), time.process_time()
    value = function(*args)
    return value, time.process_time() - clock, time.time() - wall


def check_workers(workers) -> None:
    """Raise ValueError unless ``workers`` is an integer >= 1 (a study's ``workers``)."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(
            f"workers must be an integer >= 1 (1: every task in this process); "
            f"received {workers!r}."
        )


def cpu_per_part(
    done: Mapping[Hashable, Done], parts: Iterable[str], workers: int
) -> tuple[dict, float]:
    """The CPU seconds of the finished tasks ``done`` {key: Done} (tuple keys) per part (a
    key's first entry), and those spent in worker processes: their sum with ``workers`` >
    1, else 0 (one worker runs the tasks in the calling process, whose own clock counts
    them), to add to the calling process's CPU seconds for the study's total.

    Returns
    -------
    ({part: seconds}, seconds on the workers).
    """
    cpu = {part: sum(d.cpu for key, d in done.items() if key[0] == part) for part in parts}
    return cpu, (sum(d.cpu for d in done.values()) if workers > 1 else 0.0)


def longest_first(seconds: Iterable[float], workers: int) -> float:
    """The wall time of tasks lasting ``seconds`` each on ``workers`` processes when every
    worker that frees up takes the longest task left (Graham's LPT rule, at most 4/3 of
    the best schedule's; :class:`Workers` starts the largest ``cost`` first, the same
    order where costs order the tasks as their durations do): the last finish time, 0
    for no task."""
    check_workers(workers)
    free = [0.0] * workers
    for s in sorted(seconds, reverse=True):
        heapq.heapreplace(free, free[0] + s)
    return max(free)


class Workers:
    """Run tasks here (``workers`` = 1) or on ``workers`` spawned processes (module notes).

    Parameters
    ----------
    workers : number of processes, ≥ 1.

    Use as a context manager: :meth:`submit` tasks, then iterate :meth:`completed` (tasks
    may be submitted inside the loop); leaving the block ends the workers.
    """

    def __init__(self, workers: int):
        check_workers(workers)
        self.workers, self.threads = workers, torch.get_num_threads()
        self._queue: list = []  # (−cost, order, key, function, args)
        self._order = itertools.count()
        self._running: dict = {}  # future -> key
        self._pool = None

    def __enter__(self) -> Workers:
        if self.workers > 1:
            import concurrent.futures
            import multiprocessing

            self._pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start,
                initargs=(os.getpid(),),
            )
        return self

    def __exit__(self, *exc) -> bool:
        if self._pool is not None:
            self._pool.shutdown(wait=exc[0] is None, cancel_futures=True)
            self._pool = None
        return False

    def submit(self, key: Hashable, function: Callable, *args, cost: float = 0.0) -> None:
        """Queue ``function(*args)`` (a module-level function: it is pickled to a worker)
        under ``key``; with several workers, larger ``cost`` starts first."""
        priority = -cost if self.workers > 1 else 0.0  # one worker: the order submitted
        heapq.heappush(self._queue, (priority, next(self._order), key, function, args))

    def pending(self) -> int:
        """Tasks queued or running."""
        return len(self._queue) + len(self._running)

    def completed(self) -> Iterator[Done]:
        """The tasks as they finish, until none is queued or running."""
        if self._pool is None:
            while self._queue:
                _, _, key, function, args = heapq.heappop(self._queue)
                yield Done(key, *_timed(function, args, None))
            return
        import concurrent.futures

        while self._queue or self._running:
            while self._queue and len(self._running) < self.workers:
                _, _, key, function, args = heapq.heappop(self._queue)
                future = self._pool.submit(_timed, function, args, self.threads)
                self._running[future] = key
            finished, _ = concurrent.futures.wait(
                self._running, return_when=concurrent.futures.FIRST_COMPLETED
            )
            for future in finished:
                key = self._running.pop(future)
                yield Done(key, *future.result())
