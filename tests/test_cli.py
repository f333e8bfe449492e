"""The tpde command: run, list, sweep; bad input refused before anything runs."""

import dataclasses
import json
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest

from tpde import cli, experiments
from tpde.experiments import framework as fw

TINY = ["--set", "n=8", "--set", "geodesics=2"]  # convexity at a tiny size (about a second)


def _run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_names_every_experiment_and_its_keys(capsys):
    code, out, _ = _run(capsys, "list")
    assert code == 0
    names = [line.split()[0] for line in out.strip().splitlines()]
    assert names == experiments.names()  # the registry's order (test_experiments pins it)
    code, out, _ = _run(capsys, "list", "ranks")
    assert "refine = 5 (--quick: 0)" in out and "runs = 100" in out


def test_unknown_experiment_lists_the_known_ones(capsys, tmp_path):
    code, _, err = _run(capsys, "run", "cone", "--out", str(tmp_path / "o"))
    assert code == 2
    assert "unknown experiment(s) 'cone'; known experiments: cones, ranks, atlas" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("sets", "match"),
    [
        (["cones.nope=1"], "unknown config key 'nope' of experiment 'cones'; known keys:"),
        (["paper_starts=abc"], "cones.paper_starts expects an int; received 'abc'"),
        (["panels=zero,moon"], "cones: panels must be among zero, line, plane"),
        (["nokey=1"], "unknown config key 'nokey' for cones. Keys: cones:"),
        (["ranks.runs=5"], "names experiment 'ranks', which is not selected"),
        (["runs"], "--set expects KEY=VALUE"),
    ],
)
def test_bad_overrides_are_refused_and_nothing_runs(capsys, tmp_path, sets, match):
    argv = ["run", "cones", "--out", str(tmp_path / "o")]
    for item in sets:
        argv += ["--set", item]
    code, _, err = _run(capsys, *argv)
    assert code == 2 and match in err, err
    assert not (tmp_path / "o").exists()


def test_run_writes_data_figures_and_report_then_guards_the_folder(capsys, tmp_path):
    out = tmp_path / "run"
    code, stdout, _ = _run(capsys, "run", "convexity", "--quick", "--out", str(out), *TINY)
    assert code == 0
    assert "[convexity]" in stdout and f"report: {out / 'report.md'}" in stdout
    report = (out / "report.md").read_text()
    assert "](convexity/convexity_probe.png)" in report and "| paper's claim |" in report
    assert (out / "convexity" / "convexity_probe.png").stat().st_size > 1000
    meta = json.loads((out / "convexity" / "meta.json").read_text())
    assert meta["config"]["n"] == 8 and meta["git"]["commit"] is not None
    assert json.loads((out / "run.json").read_text())["experiments"] == ["convexity"]
    # The folder now holds a run: refused, resumed (kept), or replaced.
    code, _, err = _run(capsys, "run", "convexity", "--quick", "--out", str(out), *TINY)
    assert code == 2 and "holds another run" in err and "--resume" in err
    stamp = (out / "convexity" / "meta.json").stat().st_mtime_ns
    code, stdout, _ = _run(
        capsys, "run", "convexity", "--quick", "--out", str(out), *TINY, "--resume"
    )
    assert code == 0 and "already done with this config: kept" in stdout
    assert (out / "convexity" / "meta.json").stat().st_mtime_ns == stamp
    code, _, err = _run(
        capsys, "run", "convexity", "--quick", "--out", str(out), "--resume", "--set", "n=9"
    )
    assert code == 2 and "--set changes experiment 'convexity'" in err and "--force" not in err
    code, stdout, _ = _run(capsys, "run", "convexity", "--quick", "--out", str(out), "--force")
    assert code == 0 and (out / "convexity" / "meta.json").stat().st_mtime_ns != stamp


def test_a_folder_that_is_not_a_run_is_refused(capsys, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    for flag in ([], ["--force"]):
        code, _, err = _run(capsys, "run", "convexity", "--out", str(tmp_path), *flag)
        assert code == 2 and "holds no tpde run" in err
    code, _, err = _run(capsys, "run", "convexity", "--out", str(tmp_path / "new"), "--resume")
    assert code == 2 and "holds no run to resume" in err
    code, _, err = _run(capsys, "run", "convexity", "--out", str(tmp_path), "--resume", "--force")
    assert code == 2 and "exclude each other" in err
    code, _, err = _run(capsys, "run", "convexity", "--out", str(tmp_path / "t"), "--threads", "0")
    assert code == 2 and "--threads must be >= 1; received 0" in err


def test_sweep_command_runs_and_reports_errors(capsys, tmp_path):
    pytest.importorskip("dask.distributed")
    spec = {
        "study": "blowup",
        "grid": {"value_scale": [1.0]},
        "fixed": {"samples": 4, "horizon": 1.0},
    }
    path = tmp_path / "s.json"
    path.write_text(json.dumps(spec))
    code, stdout, _ = _run(capsys, "sweep", str(path), "--out", str(tmp_path / "s"))
    assert code == 0 and "sweep done: 1 tasks" in stdout
    assert (tmp_path / "s" / "table.csv").read_text().startswith("task,horizon,samples,seed")
    code, _, err = _run(capsys, "sweep", str(tmp_path / "missing.json"))
    assert code == 2 and "not found" in err


# ---------------------------------------------------------------------- resume and Ctrl-C
@dataclasses.dataclass(frozen=True)
class TickConfig:
    n: int = 5
    seed: int = 0

    def check(self):
        if self.n < 1:
            raise ValueError("n must be >= 1.")


@pytest.fixture
def tick(monkeypatch):
    """A tiny experiment 'tick' after the real ones; ``tick.interrupt = True`` makes its run
    raise KeyboardInterrupt (what Ctrl-C does), as if the run was stopped there."""
    module = types.SimpleNamespace(NAME="tick", TITLE="A tick", ORDER=99, Config=TickConfig,
                                   QUICK={"n": "3"}, interrupt=False)  # fmt: skip

    def run(config, out):
        if module.interrupt:
            raise KeyboardInterrupt
        fw.save(out, config, {"x": np.arange(config.n)}, {"n": config.n}, time.perf_counter())

    module.run = run
    module.plot = lambda out: []
    module.report = lambda out: fw.Report(f"tick of size {fw.load(out)[0]['n']}")
    names, get = experiments.names(), experiments.get
    monkeypatch.setattr(experiments, "names", lambda: [*names, "tick"])
    monkeypatch.setattr(experiments, "get", lambda name: module if name == "tick" else get(name))
    return module


def _record(out):
    return json.loads((out / "run.json").read_text())


def test_resume_finishes_the_recorded_selection_and_size(capsys, tmp_path, tick):
    # Started with a selection and --quick, stopped during the second experiment: the
    # README's `tpde run --out DIR --resume` finishes that run (today: it refused, asking
    # for --force, which would delete the finished convexity results).
    out = tmp_path / "run"
    tick.interrupt = True
    code, _, err = _run(capsys, "run", "convexity", "tick", "--quick", "--out", str(out), *TINY)
    assert code == 130
    assert err.strip().splitlines() == [
        f"tpde: interrupted (Ctrl-C); finished experiments are kept in {out}; "
        f"`tpde run --out {out} --resume` finishes the run."
    ]
    assert (out / "convexity" / "meta.json").is_file() and not (out / "tick").exists()
    stamp = (out / "convexity" / "meta.json").stat().st_mtime_ns
    tick.interrupt = False
    code, stdout, err = _run(capsys, "run", "--out", str(out), "--resume")
    assert code == 0, err
    assert "[convexity] already done with this config: kept" in stdout and "[tick]" in stdout
    assert (out / "convexity" / "meta.json").stat().st_mtime_ns == stamp
    record = _record(out)
    assert record["experiments"] == ["convexity", "tick"] and record["quick"] is True
    assert record["configs"]["tick"]["n"] == 8  # the recorded --set n=8, not the default
    assert json.loads((out / "tick" / "meta.json").read_text())["config"]["n"] == 8
    assert [r["experiments"] for r in record["resumed"]] == [["tick"]]
    report = (out / "report.md").read_text()
    assert "(`convexity`)" in report and "tick of size 8" in report


def test_resume_with_a_narrower_selection_keeps_the_whole_run(capsys, tmp_path, tick):
    out = tmp_path / "run"
    tick.interrupt = True
    assert _run(capsys, "run", "convexity", "tick", "--quick", "--out", str(out), *TINY)[0] == 130
    tick.interrupt = False
    code, stdout, err = _run(capsys, "run", "tick", "--out", str(out), "--resume")
    assert code == 0, err
    assert "[convexity]" not in stdout  # not selected now: neither run nor reported on stdout
    record = _record(out)  # ... but still part of the run (today: dropped from run.json)
    assert record["experiments"] == ["convexity", "tick"]
    assert set(record["configs"]) == {"convexity", "tick"} and "convexity" in record["seconds"]
    report = (out / "report.md").read_text()
    assert "(`convexity`)" in report and "(`tick`)" in report


def test_resume_refuses_a_conflicting_size_or_config_and_never_suggests_force(
    capsys, tmp_path, tick
):
    out = tmp_path / "run"
    tick.interrupt = True
    assert _run(capsys, "run", "tick", "--out", str(out), "--set", "n=5")[0] == 130  # full size
    tick.interrupt = False
    code, _, err = _run(capsys, "run", "--out", str(out), "--resume", "--quick")
    assert code == 2 and "holds a full-size run and --quick was given" in err
    assert "--force" not in err
    code, _, err = _run(capsys, "run", "--out", str(out), "--resume", "--set", "tick.n=6")
    assert code == 2 and "changes experiment 'tick' of the recorded run (n=6 (recorded 5))" in err
    assert "--force" not in err
    assert not (out / "tick").exists()  # nothing ran
    code, _, err = _run(capsys, "run", "--out", str(out), "--resume", "--set", "n=5")  # same value
    assert code == 0, err
    assert _record(out)["quick"] is False
    assert json.loads((out / "tick" / "meta.json").read_text())["config"]["n"] == 5
    # A later experiment added to the run takes the run's size.
    code, _, err = _run(capsys, "run", "convexity", "--out", str(out), "--resume", *TINY)
    assert code == 0, err
    assert _record(out)["experiments"] == ["convexity", "tick"]


def _interrupt(argv, ready: Path, cwd: Path):
    """Start ``python -m tpde.cli argv``, send SIGINT once ``ready`` exists; (code, stderr)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tpde.cli", *argv], cwd=cwd, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # inside the computation
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = [line for line in err.splitlines() if not line.startswith("[KeOps]")]
    return proc.returncode, lines


def test_ctrl_c_during_run_ends_with_one_line(tmp_path):
    out = tmp_path / "run"
    argv = ["run", "convexity", "--out", str(out), "--set", "n=3000", "--set", "geodesics=400"]
    code, lines = _interrupt(argv, out / "run.json", tmp_path)
    assert code == 130 and len(lines) == 1, lines
    assert lines[0].startswith("tpde: interrupted (Ctrl-C); finished experiments are kept in")
    assert not (out / ".tpde-lock.json").exists()  # the folder is free for the --resume


def test_ctrl_c_during_sweep_ends_with_one_line(tmp_path):
    # The in-process Dask worker cannot be stopped; unwinding through Dask waited for the
    # running task, printed Dask's warnings and a C++ abort message. Now: one line, 130.
    pytest.importorskip("dask.distributed")
    spec = {"study": "blowup", "grid": {"value_scale": [1.0, 2.0]},
            "fixed": {"samples": 30, "horizon": 20.0, "d": 3}}  # fmt: skip
    path = tmp_path / "s.json"
    path.write_text(json.dumps(spec))
    out = tmp_path / "sweep"
    code, lines = _interrupt(["sweep", str(path), "--out", str(out)], out / "sweep.json", tmp_path)
    assert code == 130 and len(lines) == 1, lines
    assert lines[0] == (
        f"tpde: interrupted (Ctrl-C); finished tasks are kept in {out / 'tasks'}; rerun the "
        "same command to finish."
    )
    assert not (out / ".tpde-lock.json").exists()  # free for the rerun


def test_jobs_run_experiments_in_worker_processes_with_identical_results(capsys, tmp_path):
    # An experiment on a spawned worker against the same run in this process: the same saved
    # arrays (each experiment seeds its own generators) and the same summary line.
    outputs, lines = {}, {}
    for jobs in ("1", "2"):
        out = tmp_path / f"jobs{jobs}"
        code, stdout, _ = _run(
            capsys, "run", "convexity", "--quick", "--out", str(out), "--jobs", jobs, *TINY
        )
        assert code == 0
        outputs[jobs], lines[jobs] = out, stdout.splitlines()[0].rsplit("(", 1)[0]
    assert lines["1"] == lines["2"] and lines["1"].startswith("[convexity]")
    first, second = (fw.load(outputs[j] / "convexity")[0] for j in ("1", "2"))
    assert first.keys() == second.keys()
    for key in first:
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)
    code, _, err = _run(capsys, "run", "convexity", "--jobs", "0", "--out", str(tmp_path / "x"))
    assert code == 2 and "--jobs must be >= 1 and jobs × threads at most" in err
