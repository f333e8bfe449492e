"""Workers at start-up, fifth round (issue 36): armed before their imports.

After a SIGKILL of ``tpde run --jobs 2``, workers still importing torch lived 4 s more: they
armed their watcher in the pool's initializer, after the imports. A worker now arms on its
first import of tpde, before torch (:mod:`tpde._lifetime`, from the parent's pid in
``TPDE_END_WITH_PARENT``). Each case starts a fresh interpreter that records, at the moment
torch is first imported, whether the watcher thread runs: an order of events, not a time.
(7 cases, 3 failed before: the armed case, the dead parent, which ran on, and the kill.)
"""

import os
import subprocess
import sys

import pytest

from tpde._lifetime import PARENT_ENV

# A finder that sees the first import of torch and notes whether the watcher already runs.
PROBE = """
import sys, threading
seen = []
class Probe:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not seen:
            seen.append(any(t.name == "tpde-end-with-parent" for t in threading.enumerate()))
        return None
sys.meta_path.insert(0, Probe())
import tpde
print("armed-before-torch" if seen and seen[0] else "not-armed", flush=True)
"""


def _probe(value: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != PARENT_ENV}
    if value is not None:
        env[PARENT_ENV] = value
    return subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


CASES = {  # (value of the variable, expected first line, expected return code)
    "parent-is-this-test": (lambda: str(os.getpid()), "armed-before-torch", 0),  # fixed
    "parent-is-dead": (lambda: str(_dead_pid()), "", 1),  # fixed: imported torch, then ran
    "no-variable": (lambda: None, "not-armed", 0),
    "another-live-process": (lambda: "1", "not-armed", 0),  # a grandchild: not its parent
    "malformed": (lambda: "12ab", "not-armed", 0),
    "empty": (lambda: "", "not-armed", 0),
}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_worker_arms_before_it_imports_torch(case):
    value, expected, code = case
    done = _probe(value())
    assert done.returncode == code, done.stderr[-2000:]
    assert done.stdout.strip() == expected


@pytest.mark.timeout(240)
def test_an_armed_worker_ends_when_its_parent_is_killed():
    # parent (sleeps) -> child armed through the variable -> the parent is killed; the child
    # ends (the kernel's death signal or the watcher's poll) instead of living on.
    script = (
        "import os, subprocess, sys, time\n"
        f"env = dict(os.environ, {PARENT_ENV}=str(os.getpid()))\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import tpde, time; time.sleep(600)'],"
        " env=env)\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        parent.kill()
        parent.wait(timeout=30)
        import psutil

        try:
            psutil.Process(child).wait(timeout=90)  # a hang guard, not a timing claim
        except psutil.NoSuchProcess:
            pass
        assert not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie"
    finally:
        parent.kill()


def _worker_view(dask_worker):
    """What a Dask worker process knows of its arming (run on each worker)."""
    from tpde import _lifetime

    return (
        os.environ.get(PARENT_ENV),
        [p.name for p in dask_worker.preloads],
        os.getppid(),
        sorted(_lifetime._ARMED),
    )


@pytest.mark.timeout(180)
def test_the_dask_workers_of_a_sweep_arm_on_their_first_import():
    # Fixed: `tpde sweep --workers N`'s workers armed only in a plugin, once connected; a
    # SIGKILL during their start-up left them on. They now inherit this process's pid in the
    # variable and preload tpde as they start, so they arm as the workers of `tpde run` do
    # (test_a_worker_arms_before_it_imports_torch). The variable is put back afterwards.
    pytest.importorskip("dask.distributed")
    from tpde.experiments.sweep.running import _client

    before = os.environ.get(PARENT_ENV)
    with _client(None, 2) as client:
        views = client.run(_worker_view)
    me = os.getpid()
    assert list(views.values()) == [(str(me), ["tpde"], me, [me])] * 2
    assert os.environ.get(PARENT_ENV) == before
