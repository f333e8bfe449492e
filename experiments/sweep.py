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
the sweep; an OUT holding a different sweep is refused unless ``--force``.

Study "blowup" (the phase diagram of the paper's 2-D figures at scale): ``samples`` random
settings Q, K, V ~ N(0, 1)^{d×d} (V scaled by ``value_scale``, K shifted by ``key_shift``·Q
so that A = KᵀQ leans positive or negative), Σ₀ = ``init_scale``·GGᵀ/d, integrated with the
paper's rules (tr Σ > tol_high: blow-up; ‖Σ̇‖_F < tol_low: converged; horizon) and the
paper's scalings (:func:`tpde.experiments._paper.paper_field`). Result: the fractions
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
most 2²⁷ (1 GiB of float64 each). E.g. ``{"study": "clustering", "grid": {"scheme":
["post-ln", "pre-ln"], "beta": [1, 4]}, "fixed": {"d": 3}, "seeds": 4}``.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import itertools
import json
import math
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._framework import atomic_write, exit_on_ctrl_c

__all__ = ["STUDIES", "SweepError", "expand", "load_spec", "main", "merge", "run_sweep"]

CONNECT_TIMEOUT_S = 5
MAX_TASKS = 100_000  # tasks of one sweep (one JSON result file each)


class SweepError(Exception):
    """A bad sweep file, an unreachable scheduler or an output folder holding another sweep."""


# ---------------------------------------------------------------------- the study
BLOWUP_DEFAULTS = {
    "variant": "softmax",
    "d": 2,
    "heads": 1,
    "samples": 64,
    "value_scale": 1.0,
    "key_shift": 0.0,
    "init_scale": 1.0,
    "horizon": 20.0,
    "tol_low": 1e-5,
    "tol_high": 1e3,
}


def blowup(params: dict) -> dict:
    """Fractions of random (Q, K, V, Σ₀) that blow up, converge or neither (one task)."""
    import torch

    from ._paper import flow, paper_field

    torch.set_num_threads(1)
    p = {**BLOWUP_DEFAULTS, **params}
    d, s = int(p["d"]), int(p["samples"])
    gen = torch.Generator().manual_seed(int(p["seed"]))
    Q = torch.randn(s, d, d, generator=gen, dtype=torch.float64)
    K = torch.randn(s, d, d, generator=gen, dtype=torch.float64) + p["key_shift"] * Q
    V = p["value_scale"] * torch.randn(s, d, d, generator=gen, dtype=torch.float64)
    G = torch.randn(s, d, d, generator=gen, dtype=torch.float64)
    S0 = p["init_scale"] * G @ G.mT / d
    field = paper_field(p["variant"], Q.numpy(), K.numpy(), V.numpy(), heads=int(p["heads"]))
    res = flow(
        field,
        S0.numpy(),
        horizon=float(p["horizon"]),
        tol_low=float(p["tol_low"]),
        tol_high=float(p["tol_high"]),
        first_step=0.01,
    )
    status = np.asarray(res.status).astype(str)
    blown, conv = status == "blow_up", status == "converged"
    evals = np.linalg.eigvalsh(res.final[conv]) if conv.any() else np.zeros((0, d))
    return {
        "blow_up_fraction": float(blown.mean()),
        "converged_fraction": float(conv.mean()),
        "neither_fraction": float(1 - blown.mean() - conv.mean()),
        "median_blow_up_time": float(np.median(res.event_time[blown])) if blown.any() else None,
        "median_anisotropy": float(np.median(evals[:, -1] / evals.sum(-1))) if conv.any() else None,
        "flow_status": flow_status(status, ("blow_up", "converged", "completed")),
    }


CLUSTERING_DEFAULTS = {
    "scheme": "post-ln",
    "beta": 1.0,
    "d": 3,
    "n": 32,
    "samples": 16,
    "horizon": 30.0,
    "dt": 0.05,
    "saves": 301,
    "delta": 1e-3,
    "ngpt_alpha": 1.0,
    "switch": 0.5,
    "max_steps": 100_000,
}


def flow_status(status: np.ndarray, finished: tuple[str, ...] = ("completed",)) -> str:
    """The statuses of a task's runs that mean it did not finish, as "max_steps: 3/16"
    (status: count/runs, joined by "; "), or "completed" when every run finished."""
    status = np.asarray(status).astype(str).ravel()
    names, counts = np.unique(status[~np.isin(status, finished)], return_counts=True)
    parts = [f"{n}: {c}/{status.size}" for n, c in zip(names, counts, strict=True)]
    return "; ".join(parts) or "completed"


def clustering(params: dict) -> dict:
    """Angular clustering of ``samples`` uniform clouds under one normalisation (one task)."""
    import torch

    from tpde.flows import integrate
    from tpde.measures import uniform_on_sphere
    from tpde.metrics import angular_cluster_count, cluster_density, time_to_single_cluster

    from .sphere import scheme_field, scheme_start

    torch.set_num_threads(1)
    p = {**CLUSTERING_DEFAULTS, **params}
    d, horizon = int(p["d"]), float(p["horizon"])
    field = scheme_field(p["scheme"], p["beta"], d, horizon, switch=p["switch"],
                         alpha=float(p["ngpt_alpha"]))  # fmt: skip
    gen = torch.Generator().manual_seed(int(p["seed"]))
    mu = scheme_start(field, uniform_on_sphere(int(p["n"]), d, batch=(int(p["samples"]),),
                                               generator=gen))  # fmt: skip
    traj = integrate(field, mu, horizon, dt=float(p["dt"]), method="rk4", save=int(p["saves"]),
                     events=(), max_steps=int(p["max_steps"]))  # fmt: skip
    delta = float(p["delta"])
    times = time_to_single_cluster(traj, delta).numpy()
    reached = np.isfinite(times)
    final = angular_cluster_count(traj.final, delta).numpy()
    return {
        "one_cluster_fraction": float(reached.mean()),
        "median_time_to_one_cluster": float(np.median(times[reached])) if reached.any() else None,
        "mean_final_clusters": float(final.mean()),
        "median_final_clusters": float(np.median(final)),
        "final_density": float(cluster_density(traj.final, delta).mean()),
        "blow_up_fraction": float((np.asarray(traj.status) == "blow_up").mean()),
        "flow_status": flow_status(traj.status),
    }


STUDIES = {
    "blowup": (blowup, BLOWUP_DEFAULTS),
    "clustering": (clustering, CLUSTERING_DEFAULTS),
}


@dataclass(frozen=True)
class Allowed:
    """The values a study accepts for one parameter: a type and a lower bound, or choices."""

    kind: type
    low: float | None = None
    strict: bool = False  # the bound itself is excluded
    choices: tuple = ()

    def describe(self) -> str:
        if self.choices:
            return "one of " + ", ".join(map(repr, self.choices))
        kind = "an int" if self.kind is int else "a finite number"
        if self.low is None:
            return kind
        return f"{kind} {'>' if self.strict else '>='} {self.low:g}"

    def type_ok(self, value) -> bool:
        if isinstance(value, bool):
            return False
        return (
            isinstance(value, int | float) if self.kind is float else isinstance(value, self.kind)
        )

    def value_ok(self, value) -> bool:
        if self.choices:
            return value in self.choices
        if not math.isfinite(value):
            return False
        return self.low is None or (value > self.low if self.strict else value >= self.low)


def _blowup_allowed() -> dict[str, Allowed]:
    from ._paper import VARIANTS

    return {
        "variant": Allowed(str, choices=VARIANTS),
        "d": Allowed(int, 1),
        "heads": Allowed(int, 1),
        "samples": Allowed(int, 1),
        "value_scale": Allowed(float),
        "key_shift": Allowed(float),
        "init_scale": Allowed(float, 0, strict=True),
        "horizon": Allowed(float, 0, strict=True),
        "tol_low": Allowed(float, 0, strict=True),
        "tol_high": Allowed(float, 0, strict=True),
    }


#: The studies' memory cap: entries of one float64 array of one task (1 GiB), e.g. a
#: blowup task's batch of covariances, samples · d² (its Dormand–Prince stages hold about
#: ten such tensors), or a clustering task's saved states or scores.
TASK_MAX_ENTRIES = 2**27


def _blowup_combined(params: dict) -> str | None:
    """What is wrong with one task's parameters taken together (None: nothing)."""
    p = {**BLOWUP_DEFAULTS, **params}
    if p["variant"] == "multihead" and p["d"] % p["heads"]:
        return (
            f"variant 'multihead' splits d into heads blocks of equal size; d = {p['d']} is "
            f"not a multiple of heads = {p['heads']}"
        )
    entries = p["samples"] * p["d"] ** 2
    if entries > TASK_MAX_ENTRIES:
        return (
            f"samples · d² = {entries:.3g} covariance entries per task exceed "
            f"{TASK_MAX_ENTRIES} (1 GiB of float64, about ten times that while integrating); "
            "use fewer samples per task and more seeds"
        )
    start = p["init_scale"] * p["d"]  # E tr Σ₀ = init_scale · E tr(GGᵀ)/d = init_scale · d
    if p["tol_high"] <= start:
        return (
            f"tol_high = {p['tol_high']:g} is not above the mean initial trace "
            f"init_scale · d = {start:g}: the samples start above the blow-up threshold (the "
            "event fires on upward crossings only), so none can blow up; raise tol_high or "
            "lower init_scale"
        )
    return None


def _clustering_allowed() -> dict[str, Allowed]:
    from tpde.fields.norms.schemes import SCHEMES

    return {
        "scheme": Allowed(str, choices=tuple(SCHEMES)),
        "beta": Allowed(float, 0),
        "d": Allowed(int, 2),
        "n": Allowed(int, 2),
        "samples": Allowed(int, 1),
        "horizon": Allowed(float, 0, strict=True),
        "dt": Allowed(float, 0, strict=True),
        "saves": Allowed(int, 2),
        "delta": Allowed(float, 0, strict=True),
        "ngpt_alpha": Allowed(float, 0, strict=True),
        "switch": Allowed(float, 0, strict=True),
        "max_steps": Allowed(int, 1),
    }


def _clustering_combined(params: dict) -> str | None:
    """Upper bounds of the clustering study (memory: the saved states and one step's scores
    each within 2²⁷ float64; δ < 2: cos > 1 − δ > −1; the Mix-LN switch inside the horizon,
    as a fraction of it)."""
    p = {**CLUSTERING_DEFAULTS, **params}
    saved = p["saves"] * p["samples"] * p["n"] * p["d"]
    scores = p["samples"] * p["n"] ** 2
    if max(saved, scores) > TASK_MAX_ENTRIES:
        return (
            f"saves · samples · n · d = {saved:.3g} saved coordinates and samples · n² = "
            f"{scores:.3g} scores per task may not exceed {TASK_MAX_ENTRIES} (1 GiB of "
            "float64 each); use fewer samples per task and more seeds, or fewer saves"
        )
    if p["saves"] > p["max_steps"] + 1:
        return (
            f"saves = {p['saves']} may not exceed max_steps + 1 = {p['max_steps'] + 1} (every "
            "saved time ends a step)"
        )
    if p["delta"] >= 2:
        return f"delta must lie in (0, 2) (links need cos > 1 − δ > −1); received {p['delta']}"
    if p["scheme"] == "mix-ln" and p["switch"] >= 1:
        return (
            f"switch is the fraction of the horizon where Mix-LN hands over to Pre-LN and "
            f"must lie in (0, 1); received {p['switch']}"
        )
    return None


#: study -> (allowed values per parameter (a function: it may import the study's code),
#: check of one task's parameters together).
CHECKS = {
    "blowup": (_blowup_allowed, _blowup_combined),
    "clustering": (_clustering_allowed, _clustering_combined),
}


def task_status(result: dict) -> str:
    """ "ok"; the runs that did not finish (the result's ``flow_status``, e.g. "max_steps:
    2/16": the values are those of unfinished runs); or "non_finite: KEYS" naming the
    result values that are NaN or ±Inf."""
    unfinished = result.get("flow_status", "completed")
    if unfinished != "completed":
        return unfinished
    bad = [k for k, v in sorted(result.items()) if isinstance(v, float) and not math.isfinite(v)]
    return "non_finite: " + ", ".join(bad) if bad else "ok"


def run_task(study: str, params: dict) -> dict:
    """Run one task (module-level, so Dask pickles it by reference)."""
    return STUDIES[study][0](params)


# ---------------------------------------------------------------------- the spec
def load_spec(path: Path) -> dict:
    """Read and check a sweep file (.json, or .toml with Python ≥ 3.11)."""
    path = Path(path)
    if not path.is_file():
        raise SweepError(f"sweep file {path} not found.")
    text = path.read_text()
    if path.suffix == ".toml":
        try:
            import tomllib
        except ModuleNotFoundError:
            raise SweepError("TOML sweep files need Python ≥ 3.11; use JSON.") from None
        try:
            spec = tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise SweepError(f"{path} is not valid TOML: {err}") from None
    else:
        try:
            spec = json.loads(text)
        except json.JSONDecodeError as err:
            raise SweepError(f"{path} is not valid JSON: {err}") from None
    return check_spec(spec, str(path))


def check_spec(spec, where: str = "sweep") -> dict:
    if not isinstance(spec, dict):
        raise SweepError(f"{where}: the sweep must be a mapping; received {type(spec).__name__}.")
    unknown = set(spec) - {"study", "grid", "fixed", "seeds", "out"}
    if unknown:
        raise SweepError(
            f"{where}: unknown keys {sorted(unknown)}; known: study, grid, fixed, seeds, out."
        )
    study = spec.get("study")
    if study not in STUDIES:
        raise SweepError(f"{where}: study must be one of {sorted(STUDIES)}; received {study!r}.")
    defaults = STUDIES[study][1]
    grid, fixed = spec.get("grid", {}), spec.get("fixed", {})
    if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
        raise SweepError(f"{where}: grid must map parameter names to non-empty lists.")
    if not isinstance(fixed, dict):
        raise SweepError(f"{where}: fixed must map parameter names to values.")
    both = sorted(set(grid) & set(fixed))
    if both:
        raise SweepError(
            f"{where}: {', '.join(both)} is both in grid and in fixed; keep it in one of them."
        )
    for name, values in grid.items():
        repeated = sorted({repr(v) for v in values if values.count(v) > 1})
        if repeated:
            raise SweepError(
                f"{where}: grid values of {name} repeat ({', '.join(repeated)}): each would run "
                "the same tasks again; list every value once."
            )
    allowed_of, combined = CHECKS[study]
    allowed = allowed_of()
    for name, value in [*grid.items(), *fixed.items()]:
        if name not in defaults:
            raise SweepError(
                f"{where}: unknown parameter {name!r} for study {study!r}; known: "
                f"{', '.join(defaults)}."
            )
        rule = allowed[name]
        for v in value if name in grid and isinstance(value, list) else [value]:
            if not rule.type_ok(v):
                raise SweepError(
                    f"{where}: {name} expects {type(defaults[name]).__name__} values; "
                    f"received {v!r} (allowed: {rule.describe()})."
                )
            if not rule.value_ok(v):
                place = "grid" if name in grid else "fixed"
                raise SweepError(
                    f"{where}: {place} value {name} = {v!r} is out of range; {name} must be "
                    f"{rule.describe()}."
                )
    seeds = spec.get("seeds", 1)
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise SweepError(f"{where}: seeds must be a positive int; received {seeds!r}.")
    count = math.prod(len(v) for v in grid.values()) * seeds
    if count > MAX_TASKS:
        raise SweepError(
            f"{where}: the grid and seeds make {count} tasks, more than {MAX_TASKS} (each writes "
            "its own result file); batch more samples per task, or split the sweep."
        )
    out = spec.get("out")
    if out is not None and not isinstance(out, str):
        raise SweepError(f"{where}: out must be a folder name (a string); received {out!r}.")
    checked = {"study": study, "grid": grid, "fixed": fixed, "seeds": seeds, "out": out}
    for tid, params in expand(checked):
        problem = combined(params)
        if problem:
            shown = {k: v for k, v in params.items() if k != "seed"}
            raise SweepError(f"{where}: task {tid} {shown}: {problem}.")
    return checked


def expand(spec: dict) -> list[tuple[str, dict]]:
    """(task id, params) for every grid point × seed, in a fixed order."""
    names = sorted(spec["grid"])
    tasks = []
    for values in itertools.product(*(spec["grid"][n] for n in names)):
        for seed in range(spec["seeds"]):
            params = {**spec["fixed"], **dict(zip(names, values, strict=True)), "seed": seed}
            digest = hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:10]
            tasks.append((f"{len(tasks):05d}-{digest}", params))
    return tasks


# ---------------------------------------------------------------------- running
def _check_client_options(scheduler: str | None, workers: int | None) -> None:
    """--scheduler and --workers, checked before anything is written."""
    if scheduler is not None and workers is not None:
        raise SweepError("--scheduler and --workers exclude each other: pick one.")
    if workers is not None and workers < 1:
        raise SweepError(f"--workers must be >= 1; received {workers}.")


@contextlib.contextmanager
def _client(scheduler: str | None, workers: int | None):
    """A Dask client (closed on exit, with the LocalCluster it started, if any); the
    options were checked by :func:`run_sweep` before the output folder was prepared."""
    try:
        from dask.distributed import Client, LocalCluster
    except ModuleNotFoundError:
        raise SweepError("tpde sweep needs Dask distributed: pip install 'tpde[dask]'.") from None
    if scheduler is not None:
        try:
            client = Client(scheduler, timeout=f"{CONNECT_TIMEOUT_S}s")
        except (OSError, TimeoutError, ValueError) as err:  # ValueError: a malformed address
            raise SweepError(
                f"cannot reach the Dask scheduler at {scheduler} within {CONNECT_TIMEOUT_S} s "
                f"({type(err).__name__}: {err}). Start it (dask scheduler) or check the address."
            ) from None
        with client:
            yield client
        return
    cluster = LocalCluster(
        n_workers=workers or 1,
        threads_per_worker=1,
        processes=workers is not None,  # default: one worker thread in this process
        dashboard_address=":0",  # a free port: no clash with another cluster's 8787
    )
    with cluster, Client(cluster) as client:
        yield client


def _prepare(out: Path, spec: dict, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise SweepError(f"{out} is a file, not a folder; pass another --out.")
    manifest = out / "sweep.json"
    record = {k: spec[k] for k in ("study", "grid", "fixed", "seeds")}
    if force:
        shutil.rmtree(out / "tasks", ignore_errors=True)
        for name in ("sweep.json", "table.csv"):
            (out / name).unlink(missing_ok=True)
    elif manifest.is_file():
        if json.loads(manifest.read_text()) != record:
            raise SweepError(
                f"{out} holds another sweep ({manifest}); pass --force to replace it or "
                "another --out."
            )
    elif out.exists() and any(out.iterdir()):
        raise SweepError(f"{out} is not empty and holds no sweep; pass another --out.")
    (out / "tasks").mkdir(parents=True, exist_ok=True)
    atomic_write(manifest, json.dumps(record, indent=1))


def run_sweep(
    spec: dict,
    out: Path,
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    force: bool = False,
    on_result=None,
    progress: bool = True,
) -> Path:
    """Run the tasks not done yet, write each result as it finishes, merge; returns the table.

    ``on_result(task_id, client)`` is called after each result is written (tests use it to
    kill a worker or interrupt the client).
    """
    out = Path(out)
    _check_client_options(scheduler, workers)
    _prepare(out, spec, force)
    tasks = expand(spec)
    todo = [(tid, p) for tid, p in tasks if not (out / "tasks" / f"{tid}.json").is_file()]
    if todo:
        from ._framework import progress as bar

        with _client(scheduler, workers) as client:  # raises SweepError without Dask
            from dask.distributed import as_completed

            futures = {
                client.submit(run_task, spec["study"], p, key=f"tpde-sweep-{tid}", pure=False): (
                    tid,
                    p,
                )
                for tid, p in todo
            }
            done = as_completed(futures)
            for future in bar(done, "sweep", total=len(futures)) if progress else done:
                tid, params = futures[future]
                result = future.result()
                record = {"id": tid, "params": params, "result": result,
                          "status": task_status(result)}  # fmt: skip
                atomic_write(out / "tasks" / f"{tid}.json", json.dumps(record, sort_keys=True))
                if on_result is not None:
                    on_result(tid, client)
    return merge(out, tasks)


def _cell(value) -> str:
    """A table cell: text as is, numbers by repr (shortest exact round trip), None empty."""
    if value is None:
        return ""
    return value if isinstance(value, str) else repr(value)


def merge(out: Path, tasks) -> Path:
    """Write OUT/table.csv: one row per task in grid order (every task must be done).

    The last column is the task's status: "ok", or "non_finite: KEYS" (see
    :func:`task_status`).
    """
    rows, missing = [], []
    for tid, _ in tasks:
        path = out / "tasks" / f"{tid}.json"
        if not path.is_file():
            missing.append(tid)
            continue
        rows.append(json.loads(path.read_text()))
    if missing:
        raise SweepError(f"{len(missing)} tasks have no result yet; rerun the sweep to finish.")
    params = sorted({k for r in rows for k in r["params"]})
    results = sorted({k for r in rows for k in r["result"]})
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["task", *params, *results, "status"])
    for r in rows:
        cells = [r["params"].get(k, "") for k in params] + [r["result"].get(k) for k in results]
        status = r.get("status") or task_status(r["result"])
        writer.writerow([r["id"], *map(_cell, cells), status])
    path = out / "table.csv"
    atomic_write(path, buffer.getvalue())
    return path


def failures(out: Path, tasks) -> list[tuple[str, str]]:
    """(task id, status) of the finished tasks whose status is not "ok"."""
    bad = []
    for tid, _ in tasks:
        path = out / "tasks" / f"{tid}.json"
        if path.is_file():
            record = json.loads(path.read_text())
            status = record.get("status") or task_status(record["result"])
            if status != "ok":
                bad.append((tid, status))
    return bad


def main(args) -> int:
    """``tpde sweep`` (argparse namespace from :mod:`tpde.cli`).

    Exit status 0 when every task finished with finite results, 1 when some did not (one
    line names how many and the first; the table's status column has each), 2 for a bad
    sweep, 130 after Ctrl-C.
    """
    import logging

    logging.getLogger("distributed").setLevel(logging.WARNING)  # Dask's INFO lines: noise here
    try:
        spec = load_spec(args.config)
        out = Path(args.out or spec["out"] or Path("results") / "sweeps" / Path(args.config).stem)
        message = f"finished tasks are kept in {out / 'tasks'}; rerun the same command to finish."
        with exit_on_ctrl_c(message):
            table = run_sweep(
                spec, out, scheduler=args.scheduler, workers=args.workers, force=args.force
            )
    except SweepError as err:
        print(f"tpde: error: {err}", file=sys.stderr)
        return 2
    tasks = expand(spec)
    bad = failures(out, tasks)
    if bad:
        tid, status = bad[0]
        print(
            f"sweep done with problems: {len(bad)} of {len(tasks)} tasks did not finish or "
            f"have non-finite results (first: task {tid}, {status}); see the status column "
            f"of {table}",
            file=sys.stderr,
        )
        return 1
    print(f"sweep done: {len(tasks)} tasks; table: {table}")
    return 0
