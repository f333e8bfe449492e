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
shows the keys. A DIR that holds another run is refused unless ``--resume`` (finish it)
or ``--force`` (replace it).

``--resume`` finishes what was started: without experiment names, ``--quick`` or ``--set``
it takes the selection, the size and the configs recorded in ``DIR/run.json``; experiments
already done with their recorded config are kept. Names given with ``--resume`` run (or
are kept) inside the same run: the record and the report keep every experiment of it.
A size or a ``--set`` value that differs from the recorded one is refused (the message
says what was recorded); nothing finished is ever deleted by ``--resume``. Ctrl-C ends
``tpde run`` and ``tpde sweep`` with one line and exit status 130; what finished is kept.

A run, a resume or a sweep holds its folder (``DIR/.tpde-lock.json``: its pid and start
time): another one on the same folder is refused, naming that process, while it lives; a
lock left by a process that is gone is taken over with a note. The worker processes of
``--jobs N`` end with their parent, even after a SIGKILL of it
(:mod:`tpde.experiments.workers`).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import shutil
import sys
import time
from pathlib import Path

RUN_FILE = "run.json"
#: Written in an experiment's folder when its figures failed: the failure, one line.
PLOT_FAILED = "figures_failed.txt"
INTERRUPTED = 130  # exit status after Ctrl-C (128 + SIGINT), as shells report it


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
    from tpde.experiments import framework as fw

    registry = _experiments()
    configs = {}
    for name in names:
        module = registry.get(name)
        overrides = {**(module.QUICK if quick else {}), **sets.get(name, {})}
        try:
            configs[name] = fw.apply_overrides(module.Config(), overrides, name)
        except fw.ConfigError as err:
            raise CLIError(str(err)) from None
    return configs


# ---------------------------------------------------------------------- the output folder
def check_out(out: Path) -> None:
    """An output folder must be a folder (or not exist yet)."""
    if out.exists() and not out.is_dir():
        raise CLIError(f"--out {out} is a file, not a folder; pass a folder for the results.")


def _empty(out: Path) -> bool:
    """A missing folder, or one holding nothing but a lock file."""
    from tpde.experiments.workers import LOCK_FILE

    return not out.exists() or all(p.name == LOCK_FILE for p in out.iterdir())


def _folder_lock(out: Path, command: str = ""):
    """The lock of ``out`` (:class:`tpde.experiments.workers.FolderLock`), its refusal as a
    CLIError: a folder in use by a live process is refused, naming it."""
    from tpde.experiments import workers

    class Lock(workers.FolderLock):
        def check(self):
            try:
                super().check()
            except workers.FolderInUse as err:
                raise CLIError(str(err)) from None

        def __enter__(self):
            try:
                return super().__enter__()
            except OSError as err:
                raise CLIError(f"--out {out}: cannot create the folder ({err.strerror}).") from None

    return Lock(out, command)


def prepare_out(out: Path, force: bool) -> None:
    """Check the output folder of a new run (``--resume`` goes through :func:`resume_plan`).

    A folder that is empty or missing is used as is. One holding a tpde run is refused
    unless ``force`` (the previous run's files are deleted). One holding other files is
    always refused.
    """
    if _empty(out):
        return
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
        return
    raise CLIError(
        f"{out} holds another run (experiments {', '.join(previous.get('experiments', []))},"
        f" started {previous.get('started', '?')}). Pass --resume to finish it, --force to "
        "replace it, or another --out."
    )


def _recorded_config(name: str, saved: dict):
    """The Config of ``name`` rebuilt from its dict in run.json (lists back to tuples)."""
    module = _experiments().get(name)
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in saved.items()}
    try:
        return dataclasses.replace(module.Config(), **values)
    except TypeError as err:
        raise CLIError(
            f"cannot resume: the config of {name!r} recorded in {RUN_FILE} does not fit this "
            f"version of tpde ({err}); run it into another --out."
        ) from None


def resume_plan(out: Path, args) -> tuple[list[str], dict, dict]:
    """(names to run, configs of those names, previous record) for ``--resume``.

    The recorded selection, size and configs are used where the command line gives none;
    a size or a config value that differs from the recorded one raises, naming both.
    """
    from tpde.experiments import framework as fw

    previous_file = out / RUN_FILE
    if not previous_file.is_file():
        what = "holds no run to resume" if _empty(out) else (
            f"is not empty and holds no tpde run ({RUN_FILE} missing)"
        )  # fmt: skip
        raise CLIError(f"--resume: {out} {what}.")
    previous = json.loads(previous_file.read_text())
    recorded_quick = bool(previous.get("quick", False))
    if args.quick and not recorded_quick:
        raise CLIError(
            f"cannot resume {out}: it holds a full-size run and --quick was given. Resume it "
            "without --quick (its recorded size is used), or start a quick run in another --out."
        )
    names = select(args.experiments) if args.experiments else list(previous["experiments"])
    sets = parse_sets(args.set, names)
    recorded = previous.get("configs", {})
    fresh = build_configs([n for n in names if n not in recorded], recorded_quick, sets)
    configs = {}
    for name in names:
        if name not in recorded:
            configs[name] = fresh[name]
            continue
        base = _recorded_config(name, recorded[name])
        try:
            config = fw.apply_overrides(base, sets.get(name, {}), name)
        except fw.ConfigError as err:
            raise CLIError(str(err)) from None
        changed = {
            k: (v, recorded[name].get(k))
            for k, v in fw.config_dict(config).items()
            if v != recorded[name].get(k)
        }
        if changed:
            listing = ", ".join(
                f"{k}={new!r} (recorded {old!r})" for k, (new, old) in changed.items()
            )
            raise CLIError(
                f"cannot resume {out}: --set changes experiment {name!r} of the recorded run "
                f"({listing}). Resume without those --set values (the recorded config is "
                "used), or run the new config into another --out."
            )
        configs[name] = config
    return names, configs, previous


def merged_record(previous: dict, names: list[str], configs: dict, done: set[str]) -> dict:
    """The run record after a resume: every experiment of the previous run and the new ones."""
    from tpde.experiments import framework as fw

    known = _experiments().names()
    selection = set(previous["experiments"]) | set(names)
    record = dict(previous)
    record["experiments"] = [n for n in known if n in selection]
    record["configs"] = {**previous.get("configs", {}),
                         **{n: fw.config_dict(c) for n, c in configs.items()}}  # fmt: skip
    rerun = [n for n in names if n not in done]
    record["seconds"] = {k: v for k, v in previous.get("seconds", {}).items() if k not in rerun}
    record["resumed"] = [*previous.get("resumed", []), {
        "at": datetime.datetime.now().isoformat(timespec="seconds"),
        "experiments": rerun,
        "git": fw.metadata()["git"],
    }]  # fmt: skip
    return record


def finished(out: Path, configs: dict) -> set[str]:
    """Experiments whose meta.json holds exactly their config (their results are kept)."""
    from tpde.experiments import framework as fw

    done = set()
    for name, config in configs.items():
        meta = out / name / "meta.json"
        if meta.is_file() and json.loads(meta.read_text()).get("config") == fw.config_dict(config):
            done.add(name)
    return done


def report_failure(err: BaseException) -> str:
    """One line naming what failed while a report was built: the error and where."""
    import traceback

    frames = traceback.extract_tb(err.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(err).__name__}: {err}{where}"


def write_report(out: Path, record: dict, built: dict | None = None) -> Path:
    """report.md: header, then each finished experiment's section (from saved data only).

    ``built``: sections already made by ``module.report`` (name -> Report), reused.
    """
    from tpde.experiments import framework as fw

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
        seconds = record.get("seconds", {}).get(name)
        shown = "—" if seconds is None else f"{seconds:.0f}"
        section = (built or {}).get(name)
        try:
            section = section or module.report(out / name)
        except Exception as err:  # a broken section must not lose the others
            failure = report_failure(err)
            rows.append([f"`{name}`", f"report failed: {failure}", shown])
            heading = registry.title(name)
            sections.append(f"## {heading}\n\nThe report of `{name}` failed: {failure}. "
                            f"Its data are in `{name}/`.\n")  # fmt: skip
            continue
        figures = figures_failure(out, name)
        if figures is not None:  # the numbers stand; say which figures are missing and why
            rows.append([f"`{name}`", f"{section.summary} Figures failed: {figures}.", shown])
            heading = registry.title(name)
            sections.append(f"## {heading}\n\nThe figures of `{name}` failed: {figures}. "
                            "The numbers below are from the saved data.\n")  # fmt: skip
            sections.append(section.markdown(name, registry.title(name)))
            continue
        rows.append([f"`{name}`", section.summary, shown])
        sections.append(section.markdown(name, registry.title(name)))
    lines += [fw.markdown_table(["experiment", "summary", "seconds"], rows), ""]
    lines += sections
    path = out / "report.md"
    fw.atomic_write(path, "\n".join(lines))
    return path


# ---------------------------------------------------------------------- commands
def cmd_run(args) -> int:
    import torch

    from tpde.experiments import framework as fw

    cpus = os.cpu_count() or 1
    if args.threads < 1:
        raise CLIError(f"--threads must be >= 1; received {args.threads}.")
    if args.threads > cpus:
        raise CLIError(
            f"--threads must be at most the {cpus} CPUs of this machine (more threads only "
            f"contend for them); received {args.threads}."
        )
    if args.jobs < 1 or args.jobs * args.threads > cpus:
        raise CLIError(
            f"--jobs must be >= 1 and jobs × threads at most the {cpus} CPUs of this machine; "
            f"received --jobs {args.jobs} with --threads {args.threads}."
        )
    if args.resume and args.force:
        raise CLIError("--resume and --force exclude each other: pick one.")
    # The experiments are dominated by small tensor operations, which slow down 10–40× with
    # two threads when the other core is busy (docs/DESIGN.md): one thread by default.
    torch.set_num_threads(args.threads)
    fw.reuse_large_allocations()  # tensors above 32 MB: no page faults at every allocation
    out = args.out or Path("results") / ("quick" if args.quick else "full")
    check_out(out)
    _folder_lock(out).check()  # before reading what the folder holds
    if args.resume:
        names, configs, previous = resume_plan(out, args)
        done = finished(out, configs)
        record = merged_record(previous, names, configs, done)
    else:
        names = select(args.experiments)
        configs = build_configs(names, bool(args.quick), parse_sets(args.set, names))
        record = {
            "experiments": names,
            "quick": bool(args.quick),
            "configs": {n: fw.config_dict(c) for n, c in configs.items()},
            "started": datetime.datetime.now().isoformat(timespec="seconds"),
            "metadata": fw.metadata(),
            "seconds": {},
        }
        done = set()
    args.interrupted = (
        f"finished experiments are kept in {out}; `tpde run --out {out} --resume` finishes the run."
    )
    with _folder_lock(out, "tpde run --resume" if args.resume else "tpde run"):
        if not args.resume:
            prepare_out(out, args.force)
        fw.atomic_write(out / RUN_FILE, json.dumps(record, indent=1))
        return _run_selection(args, out, names, configs, record, done)


def _run_selection(args, out: Path, names: list[str], configs: dict, record: dict,
                   done: set[str]) -> int:  # fmt: skip
    """Run, plot and report the selection in ``out`` (held by this process); exit status."""
    from tpde.experiments import framework as fw

    with fw.exit_on_ctrl_c(args.interrupted):  # Ctrl-C: one line, exit status 130
        registry = _experiments()
        total = time.perf_counter()
        built = {}  # report sections, each built once from the saved data
        failed = []  # experiments whose report section could not be built
        todo = [name for name in names if name not in done]
        with _Runner(args.jobs, args.threads, todo, configs, out) as runner:
            for name in names:
                module = registry.get(name)
                if name in done:
                    print(f"[{name}] already done with this config: kept ({out / name})")
                else:
                    record["seconds"][name] = runner.result(name)
                    fw.atomic_write(out / RUN_FILE, json.dumps(record, indent=1))
                seconds = record["seconds"].get(name, float("nan"))
                try:
                    built[name] = section = module.report(out / name)
                except Exception as err:  # reported, and the run goes on
                    failed.append(name)
                    print(f"[{name}] report failed: {report_failure(err)}", file=sys.stderr)
                else:
                    print(f"[{name}] {section.summary} ({seconds:.0f} s)", flush=True)
                    if figures_failure(out, name) is not None:
                        failed.append(name)
                path = write_report(out, record, built)  # after each: a readable report
        print(f"done in {time.perf_counter() - total:.0f} s; report: {path}")
    if failed:
        print(f"tpde: the report or figures of {', '.join(failed)} failed (see {path}).",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


def _run_experiment(name: str, config, out: Path, threads: int) -> float:
    """Run and plot one experiment (in this process or a worker); its wall time in s."""
    import torch

    from tpde.experiments import framework as fw

    torch.set_num_threads(threads)
    fw.reuse_large_allocations()
    module = _experiments().get(name)
    start = time.perf_counter()
    module.run(config, out / name)
    failed = out / name / PLOT_FAILED
    failed.unlink(missing_ok=True)
    try:
        module.plot(out / name)
    except Exception as err:  # the data are saved: the report says the figures failed
        failure = report_failure(err)
        fw.atomic_write(failed, failure)
        print(f"[{name}] figures failed: {failure}", file=sys.stderr)
    return time.perf_counter() - start


def figures_failure(out: Path, name: str) -> str | None:
    """The line saying why an experiment's figures failed (None: they did not)."""
    path = out / name / PLOT_FAILED
    return path.read_text() if path.is_file() else None


class _Runner:
    """Runs the experiments of a ``tpde run``: in order in this process (``--jobs 1``), or
    on ``jobs`` worker processes (spawned: each imports torch afresh), the summaries still
    printed in the selection's order. Results are identical: every experiment seeds its
    own generators and writes its own folder. The workers end with this process, a SIGKILL
    included (:func:`tpde.experiments.workers.end_with_parent`)."""

    def __init__(self, jobs: int, threads: int, names: list[str], configs: dict, out: Path):
        self.jobs, self.threads, self.configs, self.out = jobs, threads, configs, out
        self.pool, self.futures = None, {}
        if jobs > 1 and names:
            import concurrent.futures
            import multiprocessing

            from tpde._lifetime import export_parent
            from tpde.experiments.workers import end_with_parent

            self._restore = export_parent()  # workers arm before their imports (tpde._lifetime)
            self.pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=jobs,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=end_with_parent,  # a SIGKILL of this process ends them too
                initargs=(os.getpid(),),
            )
            for name in names:
                self.futures[name] = self.pool.submit(
                    _run_experiment, name, configs[name], out, threads
                )

    def result(self, name: str) -> float:
        if name in self.futures:
            return self.futures[name].result()
        return _run_experiment(name, self.configs[name], self.out, self.threads)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.pool is not None:
            self.pool.shutdown(wait=exc[0] is None, cancel_futures=True)
            self._restore()
        return False


def cmd_list(args) -> int:
    names = select(args.experiments)
    registry = _experiments()
    for name in names:
        module = registry.get(name)
        print(f"{name:10s} {registry.title(name)}")
        if args.experiments:
            quick = module.QUICK
            for f in dataclasses.fields(module.Config):
                default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
                hint = f" (--quick: {quick[f.name]})" if f.name in quick else ""
                print(f"    {f.name} = {default!r}{hint}")
    return 0


def cmd_sweep(args) -> int:
    from tpde.experiments import sweep

    if args.resume and args.force:
        raise CLIError(
            "--resume and --force exclude each other: --resume (the default) keeps finished "
            "tasks, --force deletes them. Pick one."
        )
    if args.out is not None:
        check_out(args.out)
    return sweep.main(args)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="tpde", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = top.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run experiments and write data, figures and report.md")
    run.add_argument("experiments", nargs="*", metavar="EXPERIMENT", help="default: all")
    run.add_argument("--out", type=Path, default=None, help="output folder")
    run.add_argument(
        "--quick",
        action="store_true",
        default=None,
        help="reduced sizes (minutes on 2 cores); with --resume: the recorded size by default",
    )
    run.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config value"
    )
    run.add_argument(
        "--resume",
        action="store_true",
        help="finish the run held by --out (its recorded selection, size and configs)",
    )
    run.add_argument("--force", action="store_true", help="replace the run held by --out")
    run.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    run.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="experiments run at once, each in its own process (default 1; jobs × threads "
        "at most the CPUs)",
    )
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
    except KeyboardInterrupt:
        hint = getattr(args, "interrupted", None) or "nothing was written yet."
        print(f"tpde: interrupted (Ctrl-C); {hint}", file=sys.stderr)
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
