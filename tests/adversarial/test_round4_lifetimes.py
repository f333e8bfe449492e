"""Worker processes that outlived their run, and two runs in one folder (issue 28).

``tpde run --jobs 2`` killed with SIGKILL (an out-of-memory kill, a closed terminal) left its
workers running and writing into the folder that a ``--resume`` then wrote too. Now the
workers end with their parent and a folder is held by one live process at a time
(:mod:`tpde.experiments.workers`). The processes here are real: a parent started with
subprocess, killed, and its descendants watched with psutil.
"""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tpde import cli
from tpde.experiments import workers

psutil = pytest.importorskip("psutil")

LONG = ["--set", "convexity.n=3000", "--set", "convexity.geodesics=400"]  # minutes: killed first


def _start(argv, cwd):
    return subprocess.Popen(
        [sys.executable, "-m", "tpde.cli", *argv], cwd=cwd, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


def _wait_for(predicate, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


def _alive(pids):
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _describe(pids) -> str:
    """The command lines of the processes still alive (for a failure's message)."""
    lines = []
    for pid in _alive(pids):
        try:
            lines.append(f"{pid}: {' '.join(psutil.Process(pid).cmdline())[-90:]}")
        except psutil.NoSuchProcess:
            pass
    return "; ".join(lines)


def _kill_group(proc):
    # Whatever is left (a failed test): the session started for the parent, by its id.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def _armed(pid: int) -> bool:
    """Whether worker ``pid`` runs its watcher thread (named on Linux)."""
    try:
        return any(
            (task / "comm").read_text().strip() == workers.WATCHER
            for task in Path(f"/proc/{pid}/task").iterdir()
        )
    except OSError:
        return False


def _cmdline(process) -> str:
    """A process's command line, or "" for one that ended or became a zombie meanwhile (a
    busy machine reaps a short-lived child between the listing and this read)."""
    try:
        return " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):  # ZombieProcess is a NoSuchProcess
        return ""


def _workers_of(pid: int, count: int, armed: bool):
    """The pids of the descendants of ``pid`` once ``count`` workers have started (and,
    with ``armed``, run their watcher thread)."""

    def found():
        try:
            kids = psutil.Process(pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return None
        spawned = [k.pid for k in kids if "spawn_main" in _cmdline(k)]
        ready = [p for p in spawned if not armed or _armed(p)]
        return [k.pid for k in kids] if len(ready) >= count else None

    return _wait_for(found, 60, f"{count} worker processes of {pid}")


@pytest.mark.timeout(120)
def test_workers_end_when_their_parent_is_killed_and_the_folder_is_held_till_then(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["run", "convexity", "cones", "--quick", "--jobs", "2", "--out", str(out), *LONG]
    proc = _start(argv, tmp_path)
    try:
        descendants = _workers_of(proc.pid, 2, armed=sys.platform.startswith("linux"))
        # While the parent lives, a resume (or any run) on its folder is refused, naming it.
        code = cli.main(["run", "--out", str(out), "--resume"])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith(f"tpde: error: {out} is in use by process {proc.pid}")
        assert "tpde run" in err and f"kill {proc.pid}" in err
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        # The kernel's death signal (Linux) or the watcher's poll ends them within
        # milliseconds; 60 s only bounds a hang on a loaded machine (no wall-clock claim).
        try:
            _wait_for(lambda: not _alive(descendants), 60, f"the end of {descendants}")
        except AssertionError as err:
            raise AssertionError(f"{err}; alive: {_describe(descendants)}") from None
        # The lock stays behind (SIGKILL runs no handler); its owner is gone: stale.
        held = json.loads((out / workers.LOCK_FILE).read_text())
        assert held["pid"] == proc.pid and workers.FolderLock(out, "x").holder() is None
    finally:
        _kill_group(proc)


@pytest.mark.timeout(120)
def test_workers_killed_while_starting_end_before_taking_a_task(tmp_path):
    # Killed at once: the workers are still importing torch; they end as soon as they have
    # started (end_with_parent sees the parent gone), and nothing is written for them.
    out = tmp_path / "run"
    argv = ["run", "convexity", "cones", "--quick", "--jobs", "2", "--out", str(out), *LONG]
    proc = _start(argv, tmp_path)
    try:
        descendants = _workers_of(proc.pid, 2, armed=False)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        _wait_for(lambda: not _alive(descendants), 60, f"the end of {descendants}")
        assert not (out / "convexity").exists() and not (out / "cones").exists()
    finally:
        _kill_group(proc)


def test_a_live_owner_refuses_a_second_run_and_a_stale_lock_is_taken_over(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record = {"pid": owner.pid, "start": workers.process_start(owner.pid),
                  "command": "tpde run", "since": "now"}  # fmt: skip
        (out / workers.LOCK_FILE).write_text(json.dumps(record))
        argv = ["run", "convexity", "--quick", "--out", str(out), "--set", "n=8",
                "--set", "geodesics=2"]  # fmt: skip
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"tpde: error: {out} is in use by process {owner.pid} (tpde run")
        assert sorted(p.name for p in out.iterdir()) == [workers.LOCK_FILE]  # untouched
    finally:
        owner.kill()
        owner.wait()
    # The same lock, its process gone: taken over with a note, the run done, the lock freed.
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert f"tpde: note: {out} was locked by process {owner.pid}, which is no longer running" in err
    assert (out / "report.md").is_file() and not (out / workers.LOCK_FILE).exists()


def test_a_reused_pid_does_not_hold_the_folder(tmp_path):
    # A lock whose pid now belongs to another process (another start time) is stale.
    out = tmp_path / "run"
    out.mkdir()
    record = {"pid": os.getppid(), "start": "ticks:1", "command": "tpde run"}
    (out / workers.LOCK_FILE).write_text(json.dumps(record))
    with workers.FolderLock(out, "tpde run") as lock:
        assert json.loads(lock.path.read_text())["pid"] == os.getpid()
    assert not lock.path.exists()


LOCKS = {
    "live-other-process": (lambda out: {"pid": os.getppid(),
                                        "start": workers.process_start(os.getppid())},
                           "is in use by process"),
    "unreadable": (lambda out: "{not json", "is in use by process ? (an unreadable lock"),
    "no-pid": (lambda out: {"command": "tpde run"}, "is in use by process None"),
    "another-host": (lambda out: {"pid": 1, "host": "elsewhere.invalid"}, "host elsewhere.invalid"),
}  # fmt: skip


@pytest.mark.parametrize("case", LOCKS.values(), ids=LOCKS.keys())
def test_locks_that_cannot_be_shown_stale_are_refused(tmp_path, case):
    make, match = case
    out = tmp_path / "run"
    out.mkdir()
    content = make(out)
    (out / workers.LOCK_FILE).write_text(
        content if isinstance(content, str) else json.dumps(content)
    )
    with pytest.raises(workers.FolderInUse, match=re.escape(match)):
        workers.FolderLock(out, "tpde run").__enter__()
    assert (out / workers.LOCK_FILE).read_text().startswith("{")  # left as it was


def test_end_with_parent_ends_a_worker_whose_parent_is_gone(tmp_path):
    # A grandchild calls end_with_parent(its parent); the parent exits at once (no signal
    # handler runs): the grandchild ends within a second instead of sleeping a minute.
    script = (
        "import os, subprocess, sys\n"
        "code = ('import os, sys, time; from tpde.experiments import workers; '\n"
        "        'workers.end_with_parent(int(sys.argv[1])); print(os.getpid(), flush=True); '\n"
        "        'time.sleep(600)')\n"
        "child = subprocess.Popen([sys.executable, '-c', code, str(os.getpid())],\n"
        "                         stdout=subprocess.PIPE, text=True)\n"
        "print(child.stdout.readline().strip(), flush=True)\n"
        "os._exit(0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    worker = int(proc.stdout.strip())
    try:  # a hang guard (it ends within a poll, 0.25 s); the worker would sleep 600 s
        _wait_for(lambda: not _alive([worker]), 60, f"the end of worker {worker}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGKILL)


def test_the_portable_fallback_alone_ends_the_worker(tmp_path):
    # Without prctl (not Linux): the polling thread notices the re-parenting.
    script = (
        "import os, subprocess, sys\n"
        "code = ('import os, sys, time; from tpde.experiments import workers; '\n"
        "        'workers._linux_death_signal = lambda: False; '\n"
        "        'workers.end_with_parent(int(sys.argv[1])); print(os.getpid(), flush=True); '\n"
        "        'time.sleep(600)')\n"
        "child = subprocess.Popen([sys.executable, '-c', code, str(os.getpid())],\n"
        "                         stdout=subprocess.PIPE, text=True)\n"
        "print(child.stdout.readline().strip(), flush=True)\n"
        "os._exit(0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    worker = int(proc.stdout.strip())
    try:  # a hang guard (it ends within a poll, 0.25 s); the worker would sleep 600 s
        _wait_for(lambda: not _alive([worker]), 60, f"the end of worker {worker}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGKILL)


SWEEP = {"study": "blowup", "grid": {"value_scale": [1.0, 2.0, 3.0, 4.0]},
         "fixed": {"samples": 30, "horizon": 20.0, "d": 3}}  # fmt: skip


@pytest.mark.timeout(180)
def test_dask_workers_of_a_sweep_end_when_it_is_killed(tmp_path):
    pytest.importorskip("dask.distributed")
    if not sys.platform.startswith("linux"):
        pytest.skip("the armed workers are recognised by their thread name (Linux)")
    path = tmp_path / "s.json"
    path.write_text(json.dumps(SWEEP))
    proc = _start(["sweep", str(path), "--out", str(tmp_path / "sw"), "--workers", "2"], tmp_path)
    try:
        descendants = _workers_of(proc.pid, 2, armed=True)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        try:  # a hang guard, as above: no wall-clock claim
            _wait_for(lambda: not _alive(descendants), 60, f"the end of {descendants}")
        except AssertionError as err:
            raise AssertionError(f"{err}; alive: {_describe(descendants)}") from None
    finally:
        _kill_group(proc)


def test_a_sweep_refuses_a_folder_held_by_a_live_process(tmp_path, capsys):
    out = tmp_path / "sw"
    out.mkdir()
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record = {"pid": owner.pid, "start": workers.process_start(owner.pid),
                  "command": "tpde sweep", "since": "now"}  # fmt: skip
        (out / workers.LOCK_FILE).write_text(json.dumps(record))
        path = tmp_path / "s.json"
        path.write_text(json.dumps({**SWEEP, "grid": {"value_scale": [1.0]}}))
        assert cli.main(["sweep", str(path), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"tpde: error: {out} is in use by process {owner.pid} (tpde sweep")
        assert sorted(p.name for p in out.iterdir()) == [workers.LOCK_FILE]
    finally:
        owner.kill()
        owner.wait()


def test_an_in_process_sweep_starts_no_process_and_holds_its_folder(tmp_path):
    # The default sweep runs its tasks on a worker thread of this process: nothing can
    # outlive it. While it runs, its folder's lock names this process; afterwards it is gone.
    pytest.importorskip("dask.distributed")
    from tpde.experiments import sweep

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    seen = []

    def on_result(tid, client):
        now = {p.pid for p in psutil.Process().children(recursive=True)}
        seen.append((now - before, json.loads((out / workers.LOCK_FILE).read_text())["pid"]))

    out = tmp_path / "sw"
    spec = sweep.check_spec({**SWEEP, "grid": {"value_scale": [1.0, 2.0]},
                             "fixed": {"samples": 2, "horizon": 0.5}})  # fmt: skip
    sweep.run_sweep(spec, out, on_result=on_result, progress=False)
    assert seen == [(set(), os.getpid())] * 2
    assert not (out / workers.LOCK_FILE).exists()
