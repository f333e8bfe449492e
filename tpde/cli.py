"""The ``tpde`` command: run the experiments, list them, run parameter sweeps.

    tpde run [EXPERIMENT ...] [--quick] [--out DIR] [--set KEY=VALUE ...] [--resume | --force]
    tpde list [EXPERIMENT ...]
    tpde sweep CONFIG [--scheduler ADDRESS] [--workers N] [--out DIR] [--resume | --force]

``tpde run`` runs the named experiments (default: all) in order; each writes its raw data
(``DIR/NAME/data.npz`` and ``meta.json`` with the config, the package versions and the git
commit), then its PNG figures from that data, and ``DIR/report.md`` collects every
experiment's summary, its outcomes next to the paper's claims and its figures. Default
DIR: ``results/quick`` with ``--quick`` (reduced sizes, minutes on 2 cores), else
``results/full``. Config values are overridden with ``--set key=value`` (applies to every
selected experiment that has the key) or ``--set name.key=value``; ``tpde list NAME``
shows the keys. A DIR that holds another run is refused unless ``--resume`` (finish it:
experiments already done with the same config are kept) or ``--force`` (replace it).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import shutil
import sys
import time
from pathlib import Path

RUN_FILE = "run.json"


class CLIError(Exception):
    """A bad command line: printed as ``tpde: error: ...`` with exit status 2."""


# ---------------------------------------------------------------------- selection and configs
def _experiments():
    from tpde import experiments

    return experiments


def select(names: list[str]) -> list[str]:
    """Validate experiment names (default: all), keeping the registry's order."""
    registry = _experiments()
    known = registry.names()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise CLIError(
            f"unknown experiment(s) {', '.join(map(repr, unknown))}; known experiments: "
            f"{', '.join(known)} (see `tpde list`)."
        )
    return [n for n in known if n in names] if names else known


def parse_sets(items: list[str], names: list[str]) -> dict[str, dict[str, str]]:
    """``--set`` items -> {experiment: {key: text}}; bare keys go to every experiment with it."""
    registry = _experiments()
    fields = {
        n: {f.name for f in dataclasses.fields(registry.get(n).Config)} for n in names
    }  # fmt: skip
    out: dict[str, dict[str, str]] = {n: {} for n in names}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CLIError(f"--set expects KEY=VALUE or EXPERIMENT.KEY=VALUE; received {item!r}.")
        if "." in key:
            name, _, key = key.partition(".")
            if name not in names:
                raise CLIError(
                    f"--set {item!r} names experiment {name!r}, which is not selected "
                    f"(selected: {', '.join(names)})."
                )
            out[name][key] = value  # an unknown key is reported by apply_overrides
            continue
        targets = [n for n in names if key in fields[n]]
        if not targets:
            listing = "; ".join(f"{n}: {', '.join(sorted(fields[n]))}" for n in names)
            raise CLIError(f"unknown config key {key!r} for {', '.join(names)}. Keys: {listing}.")
        for name in targets:
            out[name][key] = value
    return out


def build_configs(names, quick: bool, sets: dict) -> dict:
    """Config per experiment: defaults, then QUICK (with --quick), then --set; all checked."""
    from tpde.experiments._framework import ConfigError, apply_overrides

    registry = _experiments()
    configs = {}
    for name in names:
        module = registry.get(name)
        overrides = {**(module.QUICK if quick else {}), **sets.get(name, {})}
        try:
            configs[name] = apply_overrides(module.Config(), overrides, name)
        except ConfigError as err:
            raise CLIError(str(err)) from None
    return configs


# ---------------------------------------------------------------------- the output folder
def prepare_out(out: Path, record: dict, resume: bool, force: bool) -> set[str]:
    """Check the output folder; returns the experiments already finished (to skip).

    A folder that is empty or missing is used as is. One holding a tpde run is refused
    unless ``resume`` (same settings: finished experiments are kept) or ``force`` (the
    previous run's files are deleted). One holding other files is always refused.
    """
    if resume and force:
        raise CLIError("--resume and --force exclude each other: pick one.")
    if not out.exists() or not any(out.iterdir()):
        if resume:
            raise CLIError(f"--resume: {out} holds no run to resume.")
        return set()
    previous_file = out / RUN_FILE
    if not previous_file.is_file():
        raise CLIError(
            f"{out} is not empty and holds no tpde run ({RUN_FILE} missing); refusing to write "
            "into it. Pass another --out."
        )
    previous = json.loads(previous_file.read_text())
    if force:
        for name in previous.get("experiments", []):
            shutil.rmtree(out / name, ignore_errors=True)
        for file in (RUN_FILE, "report.md"):
            (out / file).unlink(missing_ok=True)
        return set()
    if not resume:
        raise CLIError(
            f"{out} holds another run (experiments {', '.join(previous.get('experiments', []))},"
            f" started {previous.get('started', '?')}). Pass --resume to finish it, --force to "
            "replace it, or another --out."
        )
    done = set()
    for name, config in record["configs"].items():
        saved = previous.get("configs", {}).get(name)
        if saved is not None and saved != config:
            raise CLIError(
                f"cannot resume {out}: experiment {name!r} was run with another config "
                f"({saved}); pass --force to replace the run."
            )
        if saved is not None and (out / name / "meta.json").is_file():
            meta = json.loads((out / name / "meta.json").read_text())
            if meta.get("config") == config:
                done.add(name)
    return done


def write_report(out: Path, record: dict, built: dict | None = None) -> Path:
    """report.md: header, then each finished experiment's section (from saved data only).

    ``built``: sections already made by ``module.report`` (name -> Report), reused.
    """
    from tpde.experiments._framework import atomic_write, markdown_table

    registry = _experiments()
    meta = record.get("metadata", {})
    git = meta.get("git", {})
    lines = [
        "# tpde — the paper's figures and an attention atlas",
        "",
        f"Run {record['started']} ({'quick' if record['quick'] else 'full'} sizes); git commit "
        f"`{git.get('commit')}`{' (uncommitted changes)' if git.get('dirty') else ''}; "
        f"load average at start {meta.get('load_average')} on {meta.get('cpu_count')} CPUs.",
        "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in meta.get("versions", {}).items() if v),
        "",
    ]
    rows, sections = [], []
    for name in record["experiments"]:
        module = registry.get(name)
        if not (out / name / "meta.json").is_file():
            rows.append([f"`{name}`", "not run (interrupted or failed)", "—"])
            continue
        section = (built or {}).get(name) or module.report(out / name)
        seconds = record.get("seconds", {}).get(name)
        rows.append([f"`{name}`", section.summary, "—" if seconds is None else f"{seconds:.0f}"])
        sections.append(section.markdown(name, module.TITLE))
    lines += [markdown_table(["experiment", "summary", "seconds"], rows), ""]
    lines += sections
    path = out / "report.md"
    atomic_write(path, "\n".join(lines))
    return path


# ---------------------------------------------------------------------- commands
def cmd_run(args) -> int:
    import torch

    from tpde.experiments._framework import atomic_write, config_dict, metadata

    if args.threads < 1:
        raise CLIError(f"--threads must be >= 1; received {args.threads}.")
    # The experiments are dominated by small tensor operations, which slow down 10–40× with
    # two threads when the other core is busy (docs/DESIGN.md): one thread by default.
    torch.set_num_threads(args.threads)
    names = select(args.experiments)
    configs = build_configs(names, args.quick, parse_sets(args.set, names))
    out = args.out or Path("results") / ("quick" if args.quick else "full")
    record = {
        "experiments": names,
        "quick": args.quick,
        "configs": {n: config_dict(c) for n, c in configs.items()},
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
        "metadata": metadata(),
        "seconds": {},
    }
    done = prepare_out(out, record, args.resume, args.force)
    if args.resume:
        previous = json.loads((out / RUN_FILE).read_text())
        record["seconds"] = {k: v for k, v in previous.get("seconds", {}).items() if k in done}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / RUN_FILE, json.dumps(record, indent=1))
    registry = _experiments()
    total = time.perf_counter()
    built = {}  # report sections, each built once from the saved data
    for name in names:
        module = registry.get(name)
        if name in done:
            print(f"[{name}] already done with this config: kept ({out / name})")
        else:
            start = time.perf_counter()
            module.run(configs[name], out / name)
            module.plot(out / name)
            record["seconds"][name] = time.perf_counter() - start
            atomic_write(out / RUN_FILE, json.dumps(record, indent=1))
        built[name] = section = module.report(out / name)
        seconds = record["seconds"].get(name, float("nan"))
        print(f"[{name}] {section.summary} ({seconds:.0f} s)", flush=True)
        path = write_report(out, record, built)  # after each experiment: a readable report
    print(f"done in {time.perf_counter() - total:.0f} s; report: {path}")
    return 0


def cmd_list(args) -> int:
    names = select(args.experiments)
    registry = _experiments()
    for name in names:
        module = registry.get(name)
        print(f"{name:10s} {module.TITLE}")
        if args.experiments:
            quick = module.QUICK
            for f in dataclasses.fields(module.Config):
                default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
                hint = f" (--quick: {quick[f.name]})" if f.name in quick else ""
                print(f"    {f.name} = {default!r}{hint}")
    return 0


def cmd_sweep(args) -> int:
    from tpde.experiments import sweep

    return sweep.main(args)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="tpde", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = top.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run experiments and write data, figures and report.md")
    run.add_argument("experiments", nargs="*", metavar="EXPERIMENT", help="default: all")
    run.add_argument("--out", type=Path, default=None, help="output folder")
    run.add_argument("--quick", action="store_true", help="reduced sizes (minutes on 2 cores)")
    run.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config value"
    )
    run.add_argument("--resume", action="store_true", help="finish the run held by --out")
    run.add_argument("--force", action="store_true", help="replace the run held by --out")
    run.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    run.set_defaults(handler=cmd_run)
    lst = sub.add_parser("list", help="list experiments (with names: their config keys)")
    lst.add_argument("experiments", nargs="*", metavar="EXPERIMENT")
    lst.set_defaults(handler=cmd_list)
    sw = sub.add_parser("sweep", help="run a parameter grid on Dask (see tpde.experiments.sweep)")
    sw.add_argument("config", type=Path, help="sweep file (.json or .toml)")
    sw.add_argument(
        "--scheduler", default=None, help="address of a Dask scheduler, tcp://host:port"
    )
    sw.add_argument("--workers", type=int, default=None, help="start a LocalCluster of N workers")
    sw.add_argument("--out", type=Path, default=None, help="output folder (default: from CONFIG)")
    sw.add_argument("--resume", action="store_true", help="(default) keep finished tasks")
    sw.add_argument("--force", action="store_true", help="delete previous task results first")
    sw.set_defaults(handler=cmd_sweep)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.handler(args)
    except CLIError as err:
        print(f"tpde: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
