"""Adversarial command lines: every option of ``tpde run``, ``tpde list`` and ``tpde sweep``,
and every experiment config key with a value of the right type but out of range.

Bad input must end with exit status 2 and one ``tpde: error: ...`` line that says what was
received, before anything runs or is written (the output folder is never created). Cases
marked "fixed" failed before this suite's fixes (tracebacks, a false Ctrl-C message,
values accepted and used).
"""

import dataclasses
import json
import os
import typing

import pytest

from tpde import cli, experiments
from tpde.experiments import framework as fw


def _run(capsys, *argv):
    code = cli.main(list(argv))
    _, err = capsys.readouterr()
    return code, err


CPUS = os.cpu_count() or 1

RUN_ERRORS = {
    "unknown-experiment": (["cone"], "unknown experiment(s) 'cone'; known experiments: cones"),
    "threads-zero": (["convexity", "--threads", "0"], "--threads must be >= 1; received 0"),
    "threads-negative": (["convexity", "--threads", "-4"], "received -4"),
    "threads-beyond-cpus": (
        ["convexity", "--threads", str(100 * CPUS)],
        f"at most the {CPUS} CPUs",
    ),  # fixed: a false Ctrl-C
    "resume-and-force": (
        ["convexity", "--resume", "--force"],
        "--resume and --force exclude each other",
    ),
    "resume-nothing": (["--resume"], "holds no run to resume"),
    "set-no-equals": (
        ["convexity", "--set", "n"],
        "--set expects KEY=VALUE or EXPERIMENT.KEY=VALUE; received 'n'",
    ),
    "set-no-key": (["convexity", "--set", "=3"], "received '=3'"),
    "set-empty-value": (["convexity", "--set", "n="], "convexity.n expects an int; received ''"),
    "set-unknown-key": (
        ["convexity", "--set", "nokey=1"],
        "unknown config key 'nokey' for convexity. Keys: convexity:",
    ),
    "set-unknown-dotted-key": (
        ["convexity", "--set", "convexity.nokey=1"],
        "unknown config key 'nokey' of experiment 'convexity'",
    ),
    "set-unselected": (
        ["convexity", "--set", "ranks.runs=5"],
        "names experiment 'ranks', which is not selected",
    ),
    "set-float-for-int": (
        ["convexity", "--set", "n=8.5"],
        "convexity.n expects an int; received '8.5'",
    ),
    "set-word-for-float": (
        ["convexity", "--set", "radius=half"],
        "convexity.radius expects a float; received 'half'",
    ),
    "set-bool": (
        ["ranks", "--set", "paper_full=maybe"],
        "ranks.paper_full expects a bool (true/false); received 'maybe'",
    ),
    "set-huge-int": (
        ["convexity", "--set", "n=99999999999999999999999"],
        "expects an int of at most 19 digits",
    ),  # fixed: a torch TypeError with C++ frames
    "set-nan": (
        ["convexity", "--set", "radius=nan"],
        "convexity.radius expects a finite float; received 'nan'",
    ),  # fixed
    "set-overflowing-float": (
        ["convexity", "--set", "shift=1e400"],
        "expects a finite float; received '1e400'",
    ),  # fixed
}


@pytest.mark.parametrize("case", RUN_ERRORS.values(), ids=RUN_ERRORS.keys())
def test_bad_run_command_lines(capsys, tmp_path, case):
    argv, message = case
    out = tmp_path / "out"
    code, err = _run(capsys, "run", *argv, "--out", str(out))
    assert code == 2 and message in err, err
    assert err.startswith("tpde: error: ") and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_a_non_integer_thread_count_is_refused_by_argparse(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", "convexity", "--threads", "x", "--out", str(tmp_path / "o")])
    assert exit_.value.code == 2 and "invalid int value: 'x'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv", [[], ["frobnicate"], ["run", "--bogus"]], ids=["none", "unknown", "flag"]
)
def test_unknown_commands_and_flags(capsys, argv):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2 and "usage: tpde" in capsys.readouterr().err


def test_list_refuses_unknown_names(capsys):
    code, err = _run(capsys, "list", "nope")
    assert code == 2 and "unknown experiment(s) 'nope'" in err


def test_output_folders_that_cannot_hold_a_run(capsys, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    code, err = _run(capsys, "run", "convexity", "--out", str(afile))  # fixed: NotADirectoryError
    assert code == 2 and "is a file, not a folder" in err
    code, err = _run(
        capsys,
        "run",
        "convexity",
        "--quick",
        "--set",
        "n=8",
        "--set",
        "geodesics=2",
        "--out",
        str(afile / "below"),
    )
    assert code == 2 and "cannot create the folder" in err  # fixed: FileNotFoundError traceback
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    code, err = _run(capsys, "run", "convexity", "--out", str(tmp_path / "notes"), "--force")
    assert code == 2 and "holds no tpde run" in err
    assert afile.read_text() == "mine" and (tmp_path / "notes" / "todo.txt").exists()


# ---------------------------------------------------------------------- experiment configs
#: (experiment, key, value, message): a value of the right type, out of range.
CONFIG_RANGES = [
    ("cones", "panels", "", "panels must name at least one of"),  # fixed
    ("cones", "panels", "zero,moon", "panels must be among zero, line, plane"),
    ("cones", "rtol", "0", "rtol, atol > 0"),
    ("cones", "atol", "-1e-9", "rtol, atol > 0"),
    ("cones", "path_points", "1", "path_points must be >= 2"),
    ("cones", "two_lines_grid", "1", "grid sizes must be >= 2"),
    ("cones", "blowup_grid", "0", "grid sizes must be >= 2"),
    ("cones", "initial_grid", "-3", "grid sizes must be >= 2"),
    ("cones", "paper_starts", "-2", "paper_starts must be >= -1; received -2"),
    ("cones", "finite_time_factor", "1", "finite_time_factor must be > 1"),  # fixed
    ("cones", "finite_time_starts", "-1", "finite_time_starts >= 0"),  # fixed
    ("ranks", "variants", "sinkhorn", "variants must be among softmax, l2; received sinkhorn"),
    ("ranks", "variants", "", "variants must name at least one of"),  # fixed
    ("ranks", "values", "other", "values must be among identity, random"),
    ("ranks", "dims", "7", "dims must be among"),
    ("ranks", "runs", "0", "runs must be >= 1"),
    (
        "ranks",
        "q_seed",
        "-1",
        "ranks.q_seed is a generator seed in 0 … 2**32 - 1; received -1",
    ),  # fixed
    ("ranks", "init_seed", str(2**32), "received 4294967296"),  # fixed
    ("ranks", "rank_tol", "0", "rank_tol > 0"),
    ("ranks", "rtol", "-1", "rtol and rank_tol > 0"),
    ("ranks", "paper_runs", "-1", "paper_runs >= 0"),
    ("ranks", "refine", "-1", "refine must be >= 0"),
    ("ranks", "refine_dims", "7", "refine_dims among (3, 4, 5)"),
    ("atlas", "variants", "nope", "variants must be among softmax"),
    ("atlas", "n", "1", "n, cells, saves, particle_steps and w2_points must be >= 2"),
    ("atlas", "cells", "1", "must be >= 2"),
    ("atlas", "saves", "1", "must be >= 2"),
    ("atlas", "particle_steps", "0", "must be >= 2"),
    ("atlas", "w2_points", "1", "must be >= 2"),
    ("atlas", "sinkhorn_cells", "1", "sinkhorn_cells must be >= 2"),  # fixed
    ("atlas", "box", "0", "t1, box and blowup_trace must be > 0"),
    ("atlas", "t1", "-1", "t1, box and blowup_trace must be > 0"),
    ("atlas", "blowup_trace", "-20", "must be > 0"),
    ("atlas", "cluster_resolution", "0", "cluster_resolution > 0"),  # fixed
    ("atlas", "seed", "-1", "atlas.seed is a generator seed"),  # fixed
    ("meanfield", "variants", "", "variants must name at least one of"),  # fixed
    ("meanfield", "sizes", "100", "sizes needs two values >= 2"),
    ("meanfield", "sizes", "1,2", "sizes needs two values >= 2"),
    (
        "meanfield",
        "sinkhorn_max_n",
        "10",
        "sinkhorn_max_n must admit at least two of the sizes",
    ),  # fixed
    ("meanfield", "seeds", "0", "seeds >= 1"),
    ("meanfield", "t1", "0", "t1 > 0"),
    ("meanfield", "particle_steps", "0", "particle_steps must be >= 1"),  # fixed
    ("jko", "geometries", "w3", "geometries must be among w2"),
    ("jko", "geometries", "", "geometries must name at least one of"),  # fixed
    ("jko", "taus", "0.1", "taus needs two values > 0"),
    ("jko", "taus", "0.1,-0.1", "taus needs two values > 0"),
    ("jko", "t1", "0", "t1 > 0"),
    ("jko", "n", "1", "n >= 2"),
    ("jko", "reference_dt", "0", r"reference_dt must lie in (0, t1]"),  # fixed
    ("jko", "reference_dt", "2", r"reference_dt must lie in (0, t1]"),  # fixed
    ("jko", "seed", "-5", "jko.seed is a generator seed"),  # fixed
    ("convexity", "n", "1", "n >= 2, geodesics >= 1 and 0 < radius < 1 are required"),
    ("convexity", "geodesics", "0", "geodesics >= 1"),
    ("convexity", "radius", "1", "0 < radius < 1"),
    ("convexity", "cloud_scale", "0", "cloud_scale, gaussian_var and shift must be > 0"),
    ("convexity", "gaussian_var", "-1", "must be > 0"),
    ("convexity", "shift", "0", "must be > 0"),
    ("convexity", "seed", "-1", "convexity.seed is a generator seed"),  # fixed
    ("real-attention", "sentences", "0", "sentences must be in 1 … 238"),
    ("real-attention", "sentences", "239", "sentences must be in 1 … 238"),
    ("real-attention", "particle_dt", "0", r"particle_dt must be in (0, 1]"),
    ("real-attention", "particle_dt", "2", r"particle_dt must be in (0, 1]"),
    ("real-attention", "ode_rtol", "0", "ode_rtol > 0"),
    ("real-attention", "blowup_trace", "-1", "blowup_trace must be > 0"),
    ("real-attention", "closure_saves", "1", "closure_saves >= 2"),
    ("real-attention", "gaussian_samples", "1", "gaussian_samples must be >= 2"),
    ("real-attention", "floor_draws", "0", "floor_draws >= 1"),
    ("real-attention", "sample_sizes", "1", "sample_sizes must be >= 2"),
    ("real-attention", "sample_t1", "0", r"sample_t1 in (0, 1]"),
    ("real-attention", "seed", "-1", "real-attention.seed is a generator seed"),  # fixed
]


@pytest.mark.parametrize(
    ("name", "key", "value", "message"),
    CONFIG_RANGES,
    ids=[f"{n}.{k}={v or 'empty'}" for n, k, v, _ in CONFIG_RANGES],
)
def test_out_of_range_config_values_are_refused_before_running(
    capsys, tmp_path, name, key, value, message
):
    out = tmp_path / "out"
    code, err = _run(capsys, "run", name, "--set", f"{key}={value}", "--out", str(out))
    assert code == 2 and message in err, err
    assert not out.exists()


def _fields(kind):
    """(experiment, key) of every config field of type ``kind`` (scalar or tuple of it)."""
    pairs = []
    for name in experiments.names():
        config = experiments.get(name).Config
        hints = typing.get_type_hints(config)
        for field in dataclasses.fields(config):
            hint = hints[field.name]
            if hint is kind or typing.get_args(hint)[:1] == (kind,):
                pairs.append((name, field.name))
    return pairs


@pytest.mark.parametrize(("name", "key"), _fields(float), ids=lambda v: str(v))
def test_every_float_key_refuses_non_finite_values(name, key):
    # fixed: nan passed every check() (nan <= 0 is False) and inf most of them.
    module = experiments.get(name)
    with pytest.raises(
        fw.ConfigError, match=rf"{name}.{key} expects a finite float; received 'nan'"
    ):
        fw.apply_overrides(module.Config(), {key: "nan"}, name)


@pytest.mark.parametrize(("name", "key"), _fields(int), ids=lambda v: str(v))
def test_every_int_key_refuses_values_beyond_int64(name, key):
    module = experiments.get(name)
    with pytest.raises(fw.ConfigError, match=rf"{name}.{key} expects an int of at most 19 digits"):
        fw.apply_overrides(module.Config(), {key: str(10**30)}, name)


def test_a_failed_check_names_the_values_received():
    # fixed: "convexity: n >= 2, geodesics >= 1 and 0 < radius < 1 are required." said nothing
    # of what was passed.
    with pytest.raises(fw.ConfigError, match=r"\(received radius=1.5\)"):
        fw.apply_overrides(experiments.get("convexity").Config(), {"radius": "1.5"}, "convexity")


def test_quick_and_default_configs_pass_their_own_checks():
    for name in experiments.names():
        module = experiments.get(name)
        fw.apply_overrides(module.Config(), {}, name)
        fw.apply_overrides(module.Config(), module.QUICK, name)


# ---------------------------------------------------------------------- tpde sweep
SWEEP = {"study": "blowup", "fixed": {"samples": 2, "horizon": 0.5}}


def _sweep(capsys, tmp_path, spec, *flags, suffix=".json", text=None):
    path = tmp_path / f"spec{suffix}"
    path.write_text(json.dumps(spec) if text is None else text)
    out = tmp_path / "sweep-out"
    code, err = _run(capsys, "sweep", str(path), "--out", str(out), *flags)
    return code, err, out


SWEEP_COMMAND_ERRORS = {
    "workers-zero": (SWEEP, ["--workers", "0"], "--workers must be >= 1; received 0"),
    "workers-negative": (SWEEP, ["--workers", "-2"], "received -2"),
    "scheduler-and-workers": (
        SWEEP,
        ["--workers", "1", "--scheduler", "tcp://127.0.0.1:9"],
        "exclude each other",
    ),
    "scheduler-malformed": (
        SWEEP,
        ["--scheduler", "nonsense"],
        "cannot reach the Dask scheduler at nonsense",
    ),  # fixed: ValueError traceback
    "resume-and-force": (
        SWEEP,
        ["--resume", "--force"],
        "--resume and --force exclude each other",
    ),  # fixed: force won
}


@pytest.mark.parametrize("case", SWEEP_COMMAND_ERRORS.values(), ids=SWEEP_COMMAND_ERRORS.keys())
def test_bad_sweep_command_lines(capsys, tmp_path, case):
    pytest.importorskip("dask.distributed")
    spec, flags, message = case
    code, err, out = _sweep(capsys, tmp_path, spec, *flags)
    assert code == 2 and message in err, err
    if "--scheduler" not in flags or "--workers" in flags:  # an address is tried on connect
        assert not out.exists()  # fixed: --workers 0 wrote the sweep's folder first


@pytest.mark.parametrize(
    ("suffix", "text", "message"),
    [
        (".json", "{", "is not valid JSON"),
        (".yaml", "study: blowup", "is not valid JSON"),
        (".json", "[1, 2]", "the sweep must be a mapping; received list"),
        (".toml", "study = ", "is not valid TOML"),
    ],
    ids=["broken-json", "yaml", "list", "broken-toml"],
)
def test_unreadable_sweep_files(capsys, tmp_path, suffix, text, message):
    code, err, _ = _sweep(capsys, tmp_path, None, suffix=suffix, text=text)
    assert code == 2 and message in err, err


def test_sweep_output_that_is_a_file(capsys, tmp_path):
    (tmp_path / "afile").write_text("mine")
    path = tmp_path / "s.json"
    path.write_text(json.dumps(SWEEP))
    code, err = _run(capsys, "sweep", str(path), "--out", str(tmp_path / "afile"))
    assert code == 2 and "is a file, not a folder" in err  # fixed: NotADirectoryError


def test_missing_sweep_file(capsys, tmp_path):
    code, err = _run(capsys, "sweep", str(tmp_path / "missing.json"))
    assert code == 2 and "not found" in err
