"""Worker processes that end with their parent, armed before their first heavy import.

Standard library only, and imported by ``tpde/__init__.py`` before torch: a worker that
``tpde run --jobs N`` spawns (``multiprocessing`` "spawn": a fresh interpreter that imports
tpde, hence torch, for seconds before the pool's initializer runs) finds its parent's pid in
the environment variable :data:`PARENT_ENV` and arms itself on its very first import of
tpde, so a SIGKILL of the parent while the worker still imports torch ends it at once
(issue 36: it lived 4 s more). Arming is Linux's ``prctl(PR_SET_PDEATHSIG, SIGKILL)``
(through ctypes) and, everywhere, a daemon thread named :data:`WATCHER` that polls the
parent every :data:`POLL_S` seconds and ends the process once the parent is gone (it was
re-parented). :mod:`tpde.experiments.workers` builds ``end_with_parent`` (the pool's
initializer, and the sweep's Dask plugin) on the same pieces.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

__all__ = [
    "PARENT_ENV",
    "POLL_S",
    "WATCHER",
    "arm_from_environment",
    "armed",
    "export_parent",
    "watch",
]

#: The environment variable holding the pid of the process whose workers end with it.
PARENT_ENV = "TPDE_END_WITH_PARENT"
#: Seconds between two looks at the parent's pid (the portable fallback).
POLL_S = 0.25
#: The name of the watching thread of an armed worker (Linux: /proc/PID/task/*/comm).
WATCHER = "tpde-watch"
_PR_SET_PDEATHSIG, _PR_SET_NAME = 1, 15  # <linux/prctl.h>
_ARMED: set[int] = set()  # the parents this process watches already


def linux_death_signal() -> bool:
    """Ask the kernel for SIGKILL when the parent (the thread that spawned us) dies."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def parent_alive(pid: int) -> bool:
    """Whether process ``pid`` runs and is not a zombie (/proc; else ``kill(pid, 0)``)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        return text[text.rfind(")") + 2 :].split()[0] != "Z"
    except OSError:
        if sys.platform.startswith("linux") and Path("/proc/self/stat").exists():
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def _watch_parent(parent: int, alive) -> None:
    """The daemon thread's loop: end this process once ``parent`` is no longer its parent."""
    import time

    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None).prctl(_PR_SET_NAME, WATCHER.encode(), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    while True:
        if os.getppid() != parent or not alive(parent):
            os._exit(1)  # the results written so far were renamed into place: nothing to undo
        time.sleep(POLL_S)


def watch(parent: int, alive=parent_alive) -> None:
    """Start the watcher thread on ``parent`` (once per parent and process)."""
    if parent in _ARMED:
        return
    _ARMED.add(parent)
    threading.Thread(target=_watch_parent, args=(parent, alive), daemon=True,
                     name="tpde-end-with-parent").start()  # fmt: skip


def armed(parent: int) -> bool:
    """Whether this process watches ``parent`` already."""
    return parent in _ARMED


def export_parent():
    """Name this process in :data:`PARENT_ENV`, so that the workers it spawns from now on arm
    on their first import of tpde; returns the function that puts the variable back."""
    previous = os.environ.get(PARENT_ENV)
    os.environ[PARENT_ENV] = str(os.getpid())

    def restore() -> None:
        if previous is None:
            os.environ.pop(PARENT_ENV, None)
        else:
            os.environ[PARENT_ENV] = previous

    return restore


def arm_from_environment() -> None:
    """Arm this process when :data:`PARENT_ENV` names its parent (module notes).

    The parent died already (its pid is gone): end at once. Another live process (a
    grandchild that inherited the variable): nothing to do, its own parent is not the one
    named. A malformed value is ignored (the pool's initializer still arms the worker).
    """
    value = os.environ.get(PARENT_ENV, "")
    if not value.isdigit():
        return
    parent = int(value)
    if os.getppid() != parent:
        if not parent_alive(parent):
            os._exit(1)  # the parent died before this worker started importing
        return
    linux_death_signal()
    if os.getppid() != parent:  # the parent died before the death signal was armed
        os._exit(1)
    watch(parent)
