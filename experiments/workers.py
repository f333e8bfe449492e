"""Worker processes that end with their parent, and the lock of an output folder.

``tpde run --jobs N`` and ``tpde sweep --workers N`` compute in worker processes that write
into the output folder. Two rules keep a folder consistent:

- **Workers end with their parent.** A SIGINT already ends them (:func:`.framework.exit_on_ctrl_c`
  kills them), but a SIGKILL of the parent (an out-of-memory kill, a closed terminal) runs
  no handler. A worker of ``tpde run --jobs N`` arms itself on its first import of tpde,
  before torch (:mod:`tpde._lifetime`: the parent's pid in ``TPDE_END_WITH_PARENT``, set
  while the pool lives); :func:`end_with_parent`, the pool's initializer (and the sweep's
  Dask plugin), arms any worker not armed yet. Arming asks Linux to send the worker SIGKILL
  when its parent dies (``prctl(PR_SET_PDEATHSIG)``, through ctypes) and, everywhere,
  starts a daemon thread that polls the parent's pid every :data:`POLL_S` seconds and ends
  the worker once the parent is gone (it was re-parented).
  Every result is renamed into place atomically, so a worker killed mid-task leaves no
  partial file.
- **One owner per folder.** :class:`FolderLock` writes ``OUT/.tpde-lock.json`` (the owner's
  pid, its start time, the command) and removes it on exit. A second run, resume or sweep
  on the same folder is refused while that process lives (the start time guards against a
  reused pid); a lock whose process is gone (a SIGKILL leaves it behind) is taken over with
  a note on stderr.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
from pathlib import Path

from tpde import _lifetime

__all__ = ["LOCK_FILE", "POLL_S", "FolderInUse", "FolderLock", "end_with_parent", "process_alive"]

#: The lock file of an output folder (ignored by the checks of an empty folder).
LOCK_FILE = ".tpde-lock.json"
#: The watching thread's poll and name (:mod:`tpde._lifetime`, shared with the early arming).
POLL_S, WATCHER = _lifetime.POLL_S, _lifetime.WATCHER


class FolderInUse(RuntimeError):
    """The output folder belongs to another live process (``tpde: error`` on the command line)."""


# ---------------------------------------------------------------------- workers
#: Ask the kernel for SIGKILL when the parent dies (Linux; False elsewhere).
_linux_death_signal = _lifetime.linux_death_signal


def end_with_parent(parent: int | None = None) -> None:
    """Make this (worker) process end when ``parent`` (default: its current parent) ends.

    Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``; everywhere: a daemon thread polling the
    parent every :data:`POLL_S` s. A parent that died before this call ends the worker at
    once. A worker of ``tpde run`` is armed already, before its imports
    (:mod:`tpde._lifetime`); then this call does nothing.
    Used as the ``initializer`` of ``tpde run``'s process pool (with the parent's pid) and by
    a Dask worker plugin in ``tpde sweep --workers N``.
    """
    parent = os.getppid() if parent is None else int(parent)
    if _lifetime.armed(parent):  # armed on its first import of tpde (:mod:`tpde._lifetime`)
        return
    _linux_death_signal()
    if os.getppid() != parent:  # the parent died before the death signal was armed
        os._exit(1)
    _lifetime.watch(parent, process_alive)


# ---------------------------------------------------------------------- processes
def _linux_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (None: no such process or no /proc)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def process_start(pid: int) -> str | None:
    """An identifier of the process's start (Linux: boot ticks; else psutil), None if unknown."""
    fields = _linux_stat(pid)
    if fields is not None:
        return f"ticks:{fields[19]}"  # field 22 of stat, starttime
    try:
        import psutil

        return f"psutil:{psutil.Process(pid).create_time():.3f}"
    except Exception:  # no psutil, no such process, no access: unknown
        return None


def process_alive(pid: int, start: str | None = None) -> bool:
    """Whether process ``pid`` runs (a zombie does not; nor a pid reused since ``start``).

    Unknown (no /proc, no psutil, not POSIX) counts as alive: a folder is refused rather
    than shared.
    """
    fields = _linux_stat(pid)
    if fields is not None:
        alive = fields[0] != "Z"
    elif sys.platform.startswith("linux") and Path("/proc/self/stat").exists():
        return False  # /proc works and has no such pid
    elif os.name == "posix":
        try:
            os.kill(pid, 0)  # signal 0: only checks that the process exists
            alive = True
        except ProcessLookupError:
            alive = False
        except PermissionError:
            alive = True
    else:
        try:
            import psutil

            alive = psutil.pid_exists(pid)
        except ImportError:
            return True
    if alive and start is not None:
        now = process_start(pid)
        alive = now is None or now == start
    return alive


# ---------------------------------------------------------------------- the folder lock
class FolderLock:
    """The lock of an output folder while ``command`` writes into it (a context manager).

    Entering creates the folder if needed and writes ``OUT/.tpde-lock.json`` atomically
    (created whole or not at all, by a hard link). It raises :class:`FolderInUse`, naming the
    pid, when a live process holds the folder; a lock left by a dead process is taken over
    with a note on stderr. Leaving removes the lock (only if it is still this process's).
    """

    def __init__(self, out: Path, command: str):
        self.out, self.command = Path(out), command
        self.path = self.out / LOCK_FILE

    def record(self) -> dict:
        return {
            "pid": os.getpid(),
            "start": process_start(os.getpid()),
            "command": self.command,
            "host": socket.gethostname(),
            "since": datetime.datetime.now().isoformat(timespec="seconds"),
        }

    def holder(self) -> dict | None:
        """The record of a live owner of the folder (None: free, or the lock is stale)."""
        try:
            held = json.loads(self.path.read_text())
        except (FileNotFoundError, NotADirectoryError):  # no lock (or no folder) yet
            return None
        except (OSError, ValueError):
            return {"pid": "?", "command": "an unreadable lock", "since": "?"}
        if held.get("host") not in (None, socket.gethostname()):
            return held  # another machine's process: it cannot be checked from here
        pid = held.get("pid")
        if isinstance(pid, int) and pid == os.getpid():
            return None
        if isinstance(pid, int) and pid > 0 and not process_alive(pid, held.get("start")):
            return None
        return held

    def check(self) -> None:
        """Raise :class:`FolderInUse` when a live process holds the folder."""
        held = self.holder()
        if held is not None:
            raise FolderInUse(
                f"{self.out} is in use by process {held.get('pid')} ({held.get('command')}, "
                f"since {held.get('since')}, host {held.get('host', '?')}); wait for it to end or "
                f"stop it (kill {held.get('pid')}), or pass another --out. If that process is "
                f"gone, delete {self.path}."
            )

    def __enter__(self) -> FolderLock:
        self.out.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.record(), indent=1)
        tmp = self.out / f".tpde-lock.{os.getpid()}.tmp"
        tmp.write_text(text)
        try:
            for _ in range(3):
                try:
                    os.link(tmp, self.path)  # fails if a lock exists: created whole or not at all
                    _HELD.add(self.path)
                    return self
                except FileExistsError:
                    self._take_over_if_stale()
            self.check()
            raise FolderInUse(f"{self.out}: could not take its lock {self.path}; retry.")
        finally:
            tmp.unlink(missing_ok=True)

    def _take_over_if_stale(self) -> None:
        self.check()  # raises for a live owner
        try:
            stale = self.path.read_text()
        except FileNotFoundError:
            return
        pid = json.loads(stale).get("pid") if stale.strip() else "?"
        print(f"tpde: note: {self.out} was locked by process {pid}, which is no longer "
              "running; taking the lock over.", file=sys.stderr, flush=True)  # fmt: skip
        if self.path.read_text() == stale:  # not replaced meanwhile by another taker
            self.path.unlink(missing_ok=True)

    def __exit__(self, *exc) -> bool:
        release(self.path)
        return False


_HELD: set[Path] = set()  # this process's locks (released by exit_on_ctrl_c too)


def release(path: Path) -> None:
    """Remove the lock at ``path`` if this process holds it."""
    _HELD.discard(path)
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink(missing_ok=True)
    except (OSError, ValueError):
        pass


def release_all() -> None:
    """Remove every lock this process holds (before an immediate exit)."""
    for path in list(_HELD):
        release(path)
