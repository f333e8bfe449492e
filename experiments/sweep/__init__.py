r"""Parameter sweeps on Dask distributed: ``tpde sweep CONFIG [--scheduler ADDRESS] [--workers N]``.

A sweep is a grid of parameter sets, each run as one task (a batched Gaussian ODE over
random draws). The CONFIG file (JSON, or TOML on Python ≥ 3.11) holds::

    {
      "study": "blowup",                      # the task function (STUDIES below)
      "grid": {"variant": ["softmax", "l2"],  # every combination is one task …
               "value_scale": [0.5, 1.0, 2.0]},
      "fixed": {"d": 2, "samples": 64},       # … with these values too (study defaults
                                              #     fill the rest)
      "seeds": 2,                             # … once per seed 0 … seeds − 1
      "out": "results/sweeps/blowup"          # optional; --out overrides it
    }

Where the tasks run: in this process by default (a Dask ``LocalCluster`` with one
in-process worker), on a ``LocalCluster`` of N worker processes with ``--workers N``, or on
an existing cluster with ``--scheduler tcp://host:port`` (an unreachable scheduler is an
error within a few seconds). The client writes each task's result to ``OUT/tasks/ID.json``
as soon as it finishes (atomic rename), so an interrupted sweep — the client stopped, a
worker killed — resumes without redoing finished tasks; rerunning the same command does
it. When every task is done, ``OUT/table.csv`` merges them (one row per task, in grid
order), the same table whatever the order or the interruptions. ``OUT/sweep.json`` records
the sweep; an OUT holding a different sweep is refused unless ``--force``. A running sweep
holds OUT (``OUT/.tpde-lock.json``, :mod:`tpde.experiments.workers`): another sweep or run
on it is refused while the sweep's process lives, and the worker processes of
``--workers N`` end with it, even after a SIGKILL (a worker plugin).

Study "blowup" (the phase diagram of the paper's 2-D figures at scale): ``samples`` random
settings Q, K, V ~ N(0, 1)^{d×d} (V scaled by ``value_scale``, K shifted by ``key_shift``·Q
so that A = KᵀQ leans positive or negative), Σ₀ = ``init_scale``·GGᵀ/d, integrated with the
paper's rules (tr Σ > tol_high: blow-up; ‖Σ̇‖_F < tol_low: converged; horizon) and the
paper's scalings (:func:`tpde.experiments.common.paper.paper_field`). Result: the fractions
blown up / converged / neither, the median blow-up time, the median λ_max/tr of the
converged limits.

The spec is checked before any worker starts: every value's type and range, a parameter in
grid or fixed but not both, no repeated grid value, at most 100 000 tasks, and per task
multihead's d % heads = 0, samples · d² ≤ 2²⁷ (one batch of covariances in 1 GiB) and
tol_high above the mean initial trace init_scale · d (below it no sample can blow up).

Study "clustering" (normalised tokens, MATH.md §7): ``samples`` clouds of ``n`` tokens
uniform on S^{d−1}, softmax with Q = K = V = I and score ``beta``·⟨x, y⟩, wrapped by the
normalisation ``scheme`` (:class:`tpde.fields.Normalized`: "post-ln", "pre-ln",
"peri-ln", "mix-ln" with the hand-over at ``switch`` × horizon, "ngpt" with α =
``ngpt_alpha``, "layernorm" from the layer-normed tokens), one batched RK4 run of step
``dt`` to ``horizon`` saved at ``saves`` times. Angular clusters link tokens with
cos > 1 − ``delta`` (GLPR's 10⁻³). Result: the fraction of clouds that form one cluster and
the median time they take (at the resolution of the saves; empty when none does), the mean
and median final cluster counts, the final cluster density (GLPR's), and the fraction
stopped by a non-finite state. Per task, saves · samples · n · d and samples · n² are at
most 2²⁷ (1 GiB of float64 each), and ``delta`` is at least 4·d·eps (what float64 cosines
resolve). E.g. ``{"study": "clustering", "grid": {"scheme": ["post-ln", "pre-ln"], "beta":
[1, 4]}, "fixed": {"d": 3}, "seeds": 4}``.

The package has three parts: :mod:`.studies` (the task functions, their defaults and
value checks), :mod:`.spec` (reading and checking a sweep file, expanding it into tasks)
and :mod:`.running` (the Dask client, the output folder, the merged table, ``tpde
sweep``).
"""

from __future__ import annotations

from . import running, spec, studies  # noqa: F401  (the parts, e.g. for monkeypatching)
from .running import failures, main, merge, run_sweep
from .spec import MAX_TASKS, SweepError, check_spec, expand, load_spec
from .studies import (
    BLOWUP_DEFAULTS,
    CLUSTERING_DEFAULTS,
    STUDIES,
    TASK_MAX_ENTRIES,
    blowup,
    clustering,
    flow_status,
    run_task,
    task_status,
)

__all__ = [
    "BLOWUP_DEFAULTS",
    "CLUSTERING_DEFAULTS",
    "MAX_TASKS",
    "STUDIES",
    "TASK_MAX_ENTRIES",
    "SweepError",
    "blowup",
    "check_spec",
    "clustering",
    "expand",
    "failures",
    "flow_status",
    "load_spec",
    "main",
    "merge",
    "run_sweep",
    "run_task",
    "task_status",
]
