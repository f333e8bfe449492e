"""Dask sweeps: spec checks, per-task results, resuming after an interrupted client or a
killed worker."""

import csv
import io
import json
import os
import signal

import pytest

pytest.importorskip("dask.distributed")

from tpde.experiments import sweep

SPEC = {
    "study": "blowup",
    "grid": {"variant": ["softmax", "l2"], "value_scale": [0.5, 2.0]},
    "fixed": {"samples": 6, "horizon": 3.0},
    "seeds": 2,
}


def _spec(**changes):
    return sweep.check_spec({**SPEC, **changes})


def test_expand_is_a_fixed_grid_and_spec_errors_say_how_to_fix(tmp_path):
    tasks = sweep.expand(_spec())
    assert len(tasks) == 8 and len({tid for tid, _ in tasks}) == 8
    assert tasks[0][1] == {"samples": 6, "horizon": 3.0, "value_scale": 0.5, "variant": "softmax",
                           "seed": 0}  # fmt: skip
    with pytest.raises(sweep.SweepError, match="unknown parameter 'dim' for study 'blowup'"):
        _spec(grid={"dim": [2]})
    with pytest.raises(sweep.SweepError, match=r"value_scale expects float values; received 'x'"):
        _spec(grid={"value_scale": ["x"]})
    with pytest.raises(sweep.SweepError, match="study must be one of"):
        _spec(study="nope")
    with pytest.raises(sweep.SweepError, match="seeds must be a positive int"):
        _spec(seeds=0)
    with pytest.raises(sweep.SweepError, match="unknown keys"):
        sweep.check_spec({**SPEC, "grids": {}})
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(sweep.SweepError, match="not valid JSON"):
        sweep.load_spec(bad)


def test_task_results_are_deterministic():
    params = {**SPEC["fixed"], "variant": "softmax", "value_scale": 2.0, "seed": 1}
    first, second = sweep.run_task("blowup", params), sweep.run_task("blowup", params)
    assert first == second
    total = first["blow_up_fraction"] + first["converged_fraction"] + first["neither_fraction"]
    assert total == pytest.approx(1.0)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The table of an uninterrupted in-process sweep (Dask LocalCluster, one thread)."""
    out = tmp_path_factory.mktemp("reference")
    table = sweep.run_sweep(_spec(), out, progress=False)
    return table.read_text()


def test_table_has_one_row_per_task_in_grid_order_with_exact_numbers(reference):
    rows = list(csv.DictReader(io.StringIO(reference)))
    assert [r["task"] for r in rows] == [tid for tid, _ in sweep.expand(_spec())]
    assert rows[0]["variant"] == "softmax" and float(rows[0]["value_scale"]) == 0.5
    for row in rows:  # numbers round-trip exactly (repr), fractions add up to one
        parts = ("blow_up_fraction", "converged_fraction", "neither_fraction")
        assert sum(float(row[k]) for k in parts) == pytest.approx(1.0, abs=1e-12)


def test_interrupted_client_resumes_to_the_same_table(tmp_path, reference):
    # The client stops (KeyboardInterrupt) after 3 results: those stay on disk, the rest is
    # missing; rerunning does only the missing tasks and merges the same table.
    calls = []

    def interrupt(tid, client):
        calls.append(tid)
        if len(calls) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep.run_sweep(_spec(), tmp_path, on_result=interrupt, progress=False)
    done = sorted(p.name for p in (tmp_path / "tasks").glob("*.json"))
    assert len(done) == 3 and not (tmp_path / "table.csv").exists()
    stamps = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "tasks").glob("*.json")}
    redone = []
    table = sweep.run_sweep(
        _spec(), tmp_path, on_result=lambda t, c: redone.append(t), progress=False
    )
    assert table.read_text() == reference
    assert len(redone) == 5 and not set(redone) & {d[:-5] for d in done}
    for name, stamp in stamps.items():  # finished tasks were not rewritten
        assert (tmp_path / "tasks" / name).stat().st_mtime_ns == stamp


def test_killed_worker_loses_nothing(tmp_path, reference):
    # Two worker processes; after the first result one worker is killed (SIGKILL): Dask
    # reschedules its task, the nanny restarts it, and the table is the uninterrupted one.
    killed = []

    def kill(tid, client):
        if not killed:
            pids = client.run(os.getpid)
            victim = sorted(pids.values())[0]
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)

    table = sweep.run_sweep(_spec(), tmp_path, workers=2, on_result=kill, progress=False)
    assert killed and table.read_text() == reference


def test_unreachable_scheduler_is_a_clear_error_within_seconds(tmp_path):
    # the library's own connection timeout (5 s) is in the message; no wall-clock assertion
    with pytest.raises(
        sweep.SweepError,
        match=r"cannot reach the Dask scheduler at tcp://127\.0\.0\.1:9 within 5 s",
    ):
        sweep.run_sweep(_spec(), tmp_path, scheduler="tcp://127.0.0.1:9", progress=False)


def test_an_output_folder_holding_another_sweep_is_refused(tmp_path, reference):
    sweep.run_sweep(_spec(seeds=1), tmp_path, progress=False)
    with pytest.raises(sweep.SweepError, match="holds another sweep"):
        sweep.run_sweep(_spec(), tmp_path, progress=False)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("x")
    with pytest.raises(sweep.SweepError, match="is not empty and holds no sweep"):
        sweep.run_sweep(_spec(), tmp_path / "other", progress=False)
    table = sweep.run_sweep(_spec(), tmp_path, force=True, progress=False)
    assert table.read_text() == reference
    assert json.loads((tmp_path / "sweep.json").read_text())["seeds"] == 2


def test_more_bad_input(tmp_path, monkeypatch):
    with pytest.raises(sweep.SweepError, match="must be a mapping"):
        sweep.check_spec([1])
    with pytest.raises(sweep.SweepError, match="grid must map parameter names to non-empty lists"):
        _spec(grid={"d": []})
    with pytest.raises(sweep.SweepError, match="--scheduler and --workers exclude each other"):
        sweep.run_sweep(_spec(), tmp_path / "a", scheduler="tcp://127.0.0.1:9", workers=2)
    with pytest.raises(sweep.SweepError, match="--workers must be >= 1; received 0"):
        sweep.run_sweep(_spec(), tmp_path / "b", workers=0)
    with pytest.raises(sweep.SweepError, match="8 tasks have no result yet"):
        sweep.merge(tmp_path / "b", sweep.expand(_spec()))
    monkeypatch.setitem(__import__("sys").modules, "dask.distributed", None)
    with pytest.raises(
        sweep.SweepError, match=r"needs Dask distributed: pip install 'tpde\[dask\]'"
    ):
        sweep.run_sweep(_spec(), tmp_path / "c")


# ---------------------------------------------------------------------- values checked up front
INT1 = "must be an int >= 1"
POSITIVE = "must be a finite number > 0"


@pytest.mark.parametrize(
    ("grid", "fixed", "match"),
    [
        ({"d": [2, 0]}, {}, f"grid value d = 0 is out of range; d {INT1}"),
        ({}, {"samples": 0}, f"fixed value samples = 0 is out of range; samples {INT1}"),
        ({"tol_low": [1e-5, 0.0]}, {}, rf"tol_low = 0\.0 is out of range; tol_low {POSITIVE}"),
        ({}, {"tol_high": -1.0}, rf"tol_high = -1\.0 is out of range; tol_high {POSITIVE}"),
        ({}, {"horizon": 0}, f"horizon = 0 is out of range; horizon {POSITIVE}"),
        ({}, {"init_scale": 0.0}, rf"init_scale = 0\.0 is out of range; init_scale {POSITIVE}"),
        ({"value_scale": [float("nan")]}, {}, "value_scale = nan is out of range; value_scale "
         "must be a finite number"),
        ({}, {"heads": 0}, f"heads = 0 is out of range; heads {INT1}"),
        ({"variant": ["softmax", "sigmoid"]}, {}, "variant = 'sigmoid' is out of range; variant "
         "must be one of 'softmax', 'l2', 'multihead', 'sinkhorn'"),
        ({}, {"d": True}, r"d expects int values; received True \(allowed: an int >= 1\)"),
        ({}, {"samples": 2.5}, r"samples expects int values; received 2\.5 \(allowed: an int"),
        ({"variant": ["multihead"], "heads": [2]}, {"d": 3}, r"task 00000-\w+ .*: variant "
         "'multihead' splits d into heads blocks of equal size; d = 3 is not a multiple of "
         "heads = 2"),
    ],
)  # fmt: skip
def test_every_value_is_checked_before_any_worker_starts(grid, fixed, match, tmp_path, monkeypatch):
    # Today these reach the tasks: a ZeroDivisionError traceback from a worker (d = 0,
    # heads = 0, init_scale = 0), an error from deep inside (tol_low = 0, a NaN scale), or a
    # NaN row and exit status 0 (samples = 0).
    def no_cluster(*args, **kwargs):
        raise AssertionError("a Dask client was started")

    monkeypatch.setattr(sweep.running, "_client", no_cluster)
    spec = {"study": "blowup", "grid": grid or {"value_scale": [1.0]}, "fixed": fixed}
    with pytest.raises(sweep.SweepError, match=match):
        sweep.run_sweep(sweep.check_spec(spec), tmp_path / "out", progress=False)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(spec))
    with pytest.raises(sweep.SweepError, match=match):
        sweep.load_spec(path)
    assert not (tmp_path / "out").exists()


def test_the_command_refuses_a_bad_value_in_one_line(tmp_path, capsys):
    from tpde import cli

    path = tmp_path / "s.json"
    path.write_text(json.dumps({"study": "blowup", "grid": {"d": [0]}}))
    assert cli.main(["sweep", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "d = 0 is out of range; d must be an int >= 1" in err
    assert not (tmp_path / "o").exists()


def test_a_non_finite_result_is_recorded_and_the_command_fails(tmp_path, capsys, monkeypatch):
    # A study that still returns NaN for some parameters: the task keeps its row, with a
    # status naming the non-finite values, and `tpde sweep` exits 1 with one line.
    from tpde import cli

    def flaky(params):
        value = float("nan") if params["value_scale"] > 1 else 0.5
        return {"fraction": value, "median": None}

    monkeypatch.setitem(sweep.STUDIES, "blowup", (flaky, sweep.BLOWUP_DEFAULTS))
    spec = {"study": "blowup", "grid": {"value_scale": [0.5, 2.0]}, "seeds": 1}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(spec))
    code = cli.main(["sweep", str(path), "--out", str(tmp_path / "o")])
    out, err = capsys.readouterr()
    assert code == 1 and "sweep done" not in out
    assert (
        err.strip().splitlines() == [err.strip()]
        and "1 of 2 tasks did not finish or have non-finite results (first: task 00001-" in err
    )
    assert "non_finite: fraction" in err
    rows = list(csv.DictReader(io.StringIO((tmp_path / "o" / "table.csv").read_text())))
    assert [r["status"] for r in rows] == ["ok", "non_finite: fraction"]
    assert rows[1]["fraction"] == "nan"


# ---------------------------------------------------------------------- the clustering study
CLUSTERING = {"d": 3, "n": 8, "samples": 3, "horizon": 20.0, "dt": 0.1, "saves": 41}


def test_clustering_tasks_cluster_on_the_sphere_and_are_deterministic():
    # d = 3, β = 1, post-LN: every cloud forms one cluster (GLPR; 8 tokens take t ≈ 5–10);
    # pre-LN slows the angles down by 1/r: later, or not within the horizon.
    params = {**CLUSTERING, "scheme": "post-ln", "seed": 0}
    first, second = sweep.run_task("clustering", params), sweep.run_task("clustering", params)
    assert first == second
    assert first["one_cluster_fraction"] == 1.0 and first["median_final_clusters"] == 1.0
    assert 0 < first["median_time_to_one_cluster"] < 20 and first["final_density"] == 1.0
    pre = sweep.run_task("clustering", {**params, "scheme": "pre-ln"})
    later = pre["median_time_to_one_cluster"]
    assert later is None or later > first["median_time_to_one_cluster"]
    assert sweep.task_status(pre) == "ok" and pre["blow_up_fraction"] == 0.0
    for scheme in ("mix-ln", "ngpt", "layernorm", "peri-ln"):
        result = sweep.run_task("clustering", {**params, "scheme": scheme, "horizon": 4.0})
        assert sweep.task_status(result) == "ok" and 1 <= result["mean_final_clusters"] <= 8


@pytest.mark.parametrize(
    ("grid", "fixed", "match"),
    [
        ({"scheme": ["post-ln", "rms"]}, {}, "scheme = 'rms' is out of range; scheme must be one "
         "of 'post-ln', 'pre-ln', 'peri-ln', 'mix-ln', 'ngpt', 'layernorm'"),
        ({}, {"d": 1}, "fixed value d = 1 is out of range; d must be an int >= 2"),
        ({}, {"n": 1}, "n = 1 is out of range; n must be an int >= 2"),
        ({"beta": [1.0, -1.0]}, {}, r"beta = -1\.0 is out of range; beta must be a finite "
         "number >= 0"),
        ({}, {"samples": 0}, "samples = 0 is out of range; samples must be an int >= 1"),
        ({}, {"dt": 0.0}, rf"dt = 0\.0 is out of range; dt {POSITIVE}"),
        ({"d": [2]}, {"beta": "big"}, r"beta expects float values; received 'big'"),
        ({}, {"delta": 2.5}, r"delta must lie in \(0, 2\)"),
        ({}, {"samples": 4096, "n": 4096}, r"samples · n² = 6\.87e\+10 scores per task may not "
         r"exceed 134217728"),
        ({}, {"samples": 2**20}, r"saves · samples · n · d = 3\.03e\+10 saved coordinates"),
        ({"scheme": ["mix-ln"]}, {"switch": 1.5}, r"switch is the fraction of the horizon .* "
         r"\(0, 1\); received 1\.5"),
    ],
)  # fmt: skip
def test_clustering_values_are_checked_before_any_worker_starts(grid, fixed, match, tmp_path,
                                                                monkeypatch):  # fmt: skip
    def no_cluster(*args, **kwargs):
        raise AssertionError("a Dask client was started")

    monkeypatch.setattr(sweep.running, "_client", no_cluster)
    spec = {"study": "clustering", "grid": grid or {"beta": [1.0]}, "fixed": fixed}
    with pytest.raises(sweep.SweepError, match=match):
        sweep.run_sweep(sweep.check_spec(spec), tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()
