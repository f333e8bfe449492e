"""A sweep file: reading it, checking every value before any work, expanding it into tasks."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from pathlib import Path

from .studies import CHECKS, STUDIES

__all__ = ["MAX_TASKS", "SweepError", "check_spec", "expand", "load_spec"]

MAX_TASKS = 100_000  # tasks of one sweep (one JSON result file each)


class SweepError(Exception):
    """A bad sweep file, an unreachable scheduler or an output folder holding another sweep."""


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
