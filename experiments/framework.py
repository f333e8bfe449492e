"""The small framework every experiment uses: configs, run records, progress, reports.

An experiment is a module with

- ``NAME``, ``TITLE``: its command-line name and its title in the report;
- ``Config``: a dataclass of simple fields (int, float, bool, str, tuples of them), every
  field with a default (the full-size run) and ``QUICK``: the overrides of ``--quick``;
  ``check()`` refuses values out of range and ``memory_bytes()`` estimates the memory of
  the largest arrays (both run before any work: :func:`apply_overrides`);
- ``run(config, out)``: computes and writes the raw data with :func:`save` (``data.npz``
  holds the arrays, ``meta.json`` the config, the results, the package versions and the git
  commit);
- ``plot(out)``: draws PNG figures from the saved data only (:func:`load`);
- ``report(out) -> Report``: the one-line summary, each outcome next to the paper's claim,
  the figures, from the saved data only.

Configs are overridden from the command line as text (``--set key=value``);
:func:`apply_overrides` converts each value to the field's type and refuses unknown keys
and values of the wrong type before anything runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = [
    "Claim",
    "ConfigError",
    "Report",
    "apply_overrides",
    "config_dict",
    "exit_on_ctrl_c",
    "load",
    "memory_estimate",
    "metadata",
    "progress",
    "reuse_large_allocations",
    "save",
    "torch_generator",
]


class ConfigError(ValueError):
    """A configuration override names an unknown key or has a value of the wrong type."""


# ---------------------------------------------------------------------- configs
def _field_types(config) -> dict[str, object]:
    hints = typing.get_type_hints(type(config))
    return {f.name: hints[f.name] for f in dataclasses.fields(config)}


def _parse_scalar(text: str, kind, key: str):
    text = text.strip()
    if kind is bool:
        lowered = text.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{key} expects a bool (true/false); received {text!r}.")
    if kind is int:
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(f"{key} expects an int; received {text!r}.") from None
        if not -(2**63) <= value < 2**63:
            raise ConfigError(f"{key} expects an int of at most 19 digits; received {text!r}.")
        return value
    if kind is float:
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"{key} expects a float; received {text!r}.") from None
        if not math.isfinite(value):
            raise ConfigError(f"{key} expects a finite float; received {text!r}.")
        return value
    if kind is str:
        return text
    raise ConfigError(f"{key} has a type ({kind}) that cannot be set from the command line.")


def parse_value(text: str, annotation, key: str):
    """Convert command-line text to ``annotation``: scalars, or comma-separated tuples."""
    origin = typing.get_origin(annotation)
    if origin is tuple:
        args = typing.get_args(annotation)
        kind = args[0]
        parts = [p for p in text.split(",") if p.strip()] if text.strip() else []
        values = tuple(_parse_scalar(p, kind, key) for p in parts)
        if not (len(args) == 2 and args[1] is Ellipsis) and len(values) != len(args):
            raise ConfigError(f"{key} expects {len(args)} comma-separated values; got {text!r}.")
        return values
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if text.strip().lower() == "none":
            return None
        return parse_value(text, args[0], key)
    return _parse_scalar(text, annotation, key)


def apply_overrides(config, overrides: dict[str, str], experiment: str = ""):
    """A copy of ``config`` with ``overrides`` (key -> text) converted and applied.

    Raises :class:`ConfigError` naming the known keys for an unknown key, and the
    expected type for a value that does not convert; the config's own ``check()`` (if
    any) then validates the values together.
    """
    types_ = _field_types(config)
    changes = {}
    for key, text in overrides.items():
        if key not in types_:
            known = ", ".join(sorted(types_))
            where = f" of experiment {experiment!r}" if experiment else ""
            raise ConfigError(f"unknown config key {key!r}{where}; known keys: {known}.")
        label = f"{experiment}.{key}" if experiment else key
        changes[key] = parse_value(text, types_[key], label)
        if _is_seed(key):
            _check_seed(changes[key], label)
    new = dataclasses.replace(config, **changes)
    check = getattr(new, "check", None)
    given = ", ".join(f"{k}={v!r}" for k, v in changes.items())
    received = f" (received {given})" if given else ""
    if check is not None:
        try:
            check()
        except ValueError as err:
            raise ConfigError(f"{experiment or 'config'}: {err}{received}") from None
    try:
        problem = memory_problem(new)
    except (ValueError, ArithmeticError) as err:  # e.g. max() of an empty tuple of sizes
        raise ConfigError(
            f"{experiment or 'config'}: the memory estimate (Config.memory_bytes) cannot be "
            f"made from these values ({type(err).__name__}: {err}); a size key is empty or "
            f"out of range{received}"
        ) from None
    if problem is not None:
        raise ConfigError(f"{experiment or 'config'}: {problem}{received}")
    return new


def memory_estimate(config) -> int:
    """Bytes the experiment's largest arrays need together (``Config.memory_bytes()``; an
    order of magnitude from its sizes, checked before any work starts), 0 if not declared."""
    estimate = getattr(config, "memory_bytes", None)
    return int(estimate()) if estimate is not None else 0


def memory_limit() -> int:
    """This machine's physical memory in bytes (64 GiB where the system does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return 64 * 2**30


def memory_problem(config) -> str | None:
    """A sentence when the estimate exceeds the machine's memory (None: it fits)."""
    need, have = memory_estimate(config), memory_limit()
    if need <= have:
        return None
    return (
        f"this configuration needs about {need / 2**30:.3g} GiB of memory (estimate of its "
        f"largest arrays, Config.memory_bytes), more than this machine's {have / 2**30:.3g} "
        "GiB; lower the sizes (systems, tokens, samples, …)"
    )


def _is_seed(key: str) -> bool:
    return key == "seed" or key.endswith("_seed")


def _check_seed(value, label: str) -> None:
    """Seeds seed torch and numpy generators alike: numpy takes 0 … 2³² − 1."""
    if not 0 <= value < 2**32:
        raise ConfigError(f"{label} is a generator seed in 0 … 2**32 - 1; received {value}.")


def check_choices(name: str, values, choices) -> None:
    """Raise ValueError when ``values`` (a str or tuple of str) holds an unknown choice."""
    values = (values,) if isinstance(values, str) else tuple(values)
    if not values:
        raise ValueError(f"{name} must name at least one of {', '.join(choices)}; received none.")
    bad = [v for v in values if v not in choices]
    if bad:
        raise ValueError(f"{name} must be among {', '.join(choices)}; received {', '.join(bad)}.")


def config_dict(config) -> dict:
    """The config as a JSON-ready dict (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(config)))


def reuse_large_allocations() -> bool:
    """Let glibc serve large tensors from its heap instead of fresh memory maps.

    glibc maps every allocation above its mmap threshold (adaptive, at most 32 MB) afresh
    and unmaps it when freed, so every new tensor above it pays a page fault per 4 kB page
    on first touch: the sum of two 94 MB tensors (a phase diagram's 90 × 2048 clouds of 32
    tokens in d = 2, float64) took 0.24 s instead of 0.026 s, and a step of that diagram
    spent more time in page faults than in its arithmetic. Raising the threshold to 1 GB
    and switching off trimming lets freed blocks be reused (the peak memory stays
    resident). Process-wide, so the ``tpde`` command and the benchmarks call it, never the
    library. Returns whether it took effect (False without glibc).
    """
    import ctypes
    import ctypes.util

    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's malloc.h
    return bool(libc.mallopt(m_mmap_threshold, 2**30)) and bool(
        libc.mallopt(m_trim_threshold, 2**31 - 1)
    )


def torch_generator(seed: int):
    """A seeded CPU torch generator (every random draw of an experiment goes through one)."""
    import torch

    return torch.Generator().manual_seed(int(seed))


# ---------------------------------------------------------------------- records
_VERSIONED = ("tpde", "torch", "numpy", "scipy", "pot", "geomloss", "matplotlib", "dask")


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def git_commit(path: Path | None = None) -> dict:
    """{"commit": sha or None, "dirty": bool or None} of the repository holding tpde."""
    import tpde

    where = path or Path(tpde.__file__).resolve().parents[1]
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10
        )
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    if sha.returncode != 0:
        return {"commit": None, "dirty": None}
    return {"commit": sha.stdout.strip(), "dirty": bool(status.stdout.strip())}


def metadata() -> dict:
    """Package versions, git commit, Python, platform and thread settings of this run."""
    import torch

    return {
        "versions": {name: _version(name) for name in _VERSIONED},
        "git": git_commit(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


@contextlib.contextmanager
def exit_on_ctrl_c(message: str, status: int = 130):
    """While inside: Ctrl-C (SIGINT) prints ``tpde: interrupted (Ctrl-C); MESSAGE`` and exits.

    A KeyboardInterrupt can land anywhere, a finaliser or a Dask thread included (Python
    then prints "Exception ignored …" and goes on), and unwinding through Dask waits for
    the running tasks. Every result tpde writes is renamed into place atomically, so the
    handler ends the process at once instead: it kills this process's own worker processes
    (``multiprocessing`` children, e.g. a sweep's ``--workers N``), removes the output
    folder's lock (:mod:`.workers`), prints one line on stderr and exits with ``status``
    (128 + SIGINT, as shells report it).
    """
    import multiprocessing
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread: leave Ctrl-C as it is
        return

    def handler(signum, frame):
        from .workers import release_all

        for child in multiprocessing.active_children():
            child.kill()
        release_all()  # the output folder's lock: free for the --resume
        print(f"tpde: interrupted (Ctrl-C); {message}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(status)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write a file atomically (temporary file in the same folder, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "w" if isinstance(data, str) else "wb"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, float) and not np.isfinite(value):
        return None if np.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def save(out: Path, config, arrays: dict[str, np.ndarray], results: dict, started: float) -> None:
    """Write ``data.npz`` (arrays) then ``meta.json`` (config, results, versions, commit).

    ``meta.json`` is written last and atomically: its presence marks a finished run.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out, prefix=".data.", suffix=".npz")
    os.close(fd)
    try:
        np.savez_compressed(tmp, **{k: np.asarray(v) for k, v in arrays.items()})
        os.replace(tmp, out / "data.npz")
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    meta = {
        "config": config_dict(config),
        "results": _jsonable(results),
        "wall_time_s": time.perf_counter() - started,
        **metadata(),
    }
    atomic_write(out / "meta.json", json.dumps(meta, indent=1))


def load(out: Path) -> tuple[dict, dict, dict]:
    """(config dict, arrays dict, results dict) of a saved run."""
    out = Path(out)
    meta = json.loads((out / "meta.json").read_text())
    with np.load(out / "data.npz", allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    return meta["config"], arrays, meta["results"]


def progress(iterable, desc: str, total: int | None = None):
    """A tqdm progress bar on stderr (hidden when stderr is not a terminal)."""
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, leave=False, disable=None, file=sys.stderr)


# ---------------------------------------------------------------------- reports
@dataclass(frozen=True)
class Claim:
    """One line of a report: what the paper (or MATH.md) says, what we measured, verdict.

    verdict: "agrees", "differs" or "n/a" (nothing to compare), or "partly".
    """

    claim: str
    outcome: str
    verdict: str


def indicative(claims: list[Claim]) -> list[Claim]:
    """The claims with "(indicative)" after each verdict: measured below the study's full
    size (a quick run), so the verdict may change at full size."""
    return [dataclasses.replace(c, verdict=f"{c.verdict} (indicative)") for c in claims]


def below_full_size(part: str) -> str:
    """The report's note for :func:`indicative` claims of ``part``."""
    return (
        f"The {part} ran below its full size (fewer sizes, tokens or draws): its verdicts are "
        "marked indicative and may change at full size."
    )


@dataclass(frozen=True)
class Report:
    """What an experiment contributes to report.md (built from saved data only)."""

    summary: str
    claims: list[Claim] = field(default_factory=list)
    figures: list[tuple[str, str]] = field(default_factory=list)  # (file name, caption)
    tables: list[str] = field(default_factory=list)  # markdown blocks
    notes: list[str] = field(default_factory=list)

    def markdown(self, name: str, title: str) -> str:
        lines = [f"## {title} (`{name}`)", "", f"**Summary.** {self.summary}", ""]
        if self.claims:
            lines += ["| paper's claim | outcome here | verdict |", "| --- | --- | --- |"]
            for c in self.claims:
                cells = (c.claim, c.outcome, c.verdict)
                lines.append("| " + " | ".join(s.replace("|", "\\|") for s in cells) + " |")
            lines.append("")
        for table in self.tables:
            lines += [table, ""]
        for file, caption in self.figures:
            lines += [f"![{caption}]({name}/{file})", "", f"*{caption}*", ""]
        for note in self.notes:
            lines += [f"- {note}"]
        if self.notes:
            lines.append("")
        return "\n".join(lines)


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A small markdown table."""
    out = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def savefig(fig, path: Path) -> Path:
    """Save a matplotlib figure as PNG and close it."""
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg canvas."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
