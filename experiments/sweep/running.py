"""Running a sweep on Dask: the client, the output folder, each result as it finishes, the
table (module notes of :mod:`tpde.experiments.sweep`)."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import sys
from pathlib import Path

from tpde._lifetime import export_parent

from ..framework import atomic_write, exit_on_ctrl_c
from ..workers import LOCK_FILE, FolderInUse, FolderLock
from .spec import SweepError, expand, load_spec
from .studies import run_task, task_status

__all__ = ["failures", "main", "merge", "run_sweep"]

CONNECT_TIMEOUT_S = 5


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
    with _workers_end_with_this_process(workers is not None) as preload:
        cluster = LocalCluster(
            n_workers=workers or 1,
            threads_per_worker=1,
            processes=workers is not None,  # default: one worker thread in this process
            dashboard_address=":0",  # a free port: no clash with another cluster's 8787
            preload=preload,
        )
        with cluster, Client(cluster) as client:
            if workers is not None:  # and a worker the nanny restarts, once it is up
                from ._plugin import EndWithParent

                client.register_plugin(EndWithParent(os.getpid()))
            yield client


@contextlib.contextmanager
def _workers_end_with_this_process(processes: bool):
    """Worker processes arm on their first import, before torch: this process's pid in
    :data:`tpde._lifetime.PARENT_ENV` (inherited by the workers the nanny spawns) and the
    package ``tpde`` as their Dask preload, imported as each worker starts, so a SIGKILL of
    ``tpde sweep`` during the workers' start-up ends them too (the plugin alone armed them
    only once they had connected). Yields the ``preload`` list of the LocalCluster."""
    if not processes:
        yield []
        return
    restore = export_parent()
    try:
        yield ["tpde"]
    finally:
        restore()


def _prepare(out: Path, spec: dict, force: bool) -> None:
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
    elif out.exists() and any(p.name != LOCK_FILE for p in out.iterdir()):
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
    kill a worker or interrupt the client). The sweep holds ``out`` while it runs
    (:class:`tpde.experiments.workers.FolderLock`): a sweep or run on the same folder is
    refused while this process lives.
    """
    out = Path(out)
    _check_client_options(scheduler, workers)
    if out.exists() and not out.is_dir():
        raise SweepError(f"{out} is a file, not a folder; pass another --out.")
    try:
        with FolderLock(out, "tpde sweep"):
            return _run_held(spec, out, scheduler, workers, force, on_result, progress)
    except FolderInUse as err:
        raise SweepError(str(err)) from None


def _run_held(spec, out, scheduler, workers, force, on_result, progress) -> Path:
    """:func:`run_sweep` in a folder this process holds."""
    _prepare(out, spec, force)
    tasks = expand(spec)
    todo = [(tid, p) for tid, p in tasks if not (out / "tasks" / f"{tid}.json").is_file()]
    if todo:
        from ..framework import progress as bar

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
