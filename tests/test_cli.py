"""The tpde command: run, list, sweep; bad input refused before anything runs."""

import json

import pytest

from tpde import cli, experiments

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
    code, _, err = _run(capsys, "run", "convexity", "--quick", "--out", str(out), "--resume")
    assert code == 2 and "was run with another config" in err
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
