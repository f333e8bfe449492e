"""Adversarial sweep specs for the ``blowup`` study: every key with a value of the wrong type
or of the right type but out of range, refused by ``check_spec`` before any worker starts
(``tpde sweep`` then exits 2 without creating its output folder). "fixed" marks specs that
ran before this suite's fixes.
"""

import json
import math
import re

import pytest

from tpde import cli
from tpde.experiments import sweep

BASE = {"study": "blowup", "fixed": {"samples": 2, "horizon": 0.5}}


def _with(**changes):
    return {**BASE, **changes}


def _fixed(**values):
    return _with(fixed={**BASE["fixed"], **values})


SPECS = {
    # the spec's own keys
    "not-a-mapping": ([1, 2], "the sweep must be a mapping; received list"),
    "unknown-key": (
        _with(grids={}),
        "unknown keys ['grids']; known: study, grid, fixed, seeds, out",
    ),
    "unknown-study": (
        _with(study="clusters"),
        "study must be one of ['blowup', 'clustering']; received 'clusters'",
    ),
    "no-study": ({"fixed": {}}, "study must be one of ['blowup', 'clustering']; received None"),
    "grid-not-mapping": (_with(grid=[1]), "grid must map parameter names to non-empty lists"),
    "grid-empty-list": (_with(grid={"d": []}), "grid must map parameter names to non-empty lists"),
    "grid-scalar": (_with(grid={"d": 2}), "non-empty lists"),
    "fixed-not-mapping": (_with(fixed=[1]), "fixed must map parameter names to values"),
    "unknown-parameter": (
        _fixed(dim=2),
        "unknown parameter 'dim' for study 'blowup'; known: variant, d",
    ),
    "seeds-zero": (_with(seeds=0), "seeds must be a positive int; received 0"),
    "seeds-str": (_with(seeds="2"), "seeds must be a positive int; received '2'"),
    "seeds-bool": (_with(seeds=True), "received True"),
    "out-int": (_with(out=3), "out must be a folder name (a string); received 3"),
    "in-grid-and-fixed": (
        _with(grid={"d": [2, 3]}, fixed={"d": 2}),
        "d is both in grid and in fixed",
    ),  # fixed
    "repeated-grid-value": (_with(grid={"d": [2, 2]}), "grid values of d repeat (2)"),  # fixed
    "too-many-tasks": (
        _with(grid={"value_scale": [k / 1000 for k in range(1000)]}, seeds=101),
        "make 101000 tasks, more than 100000",
    ),  # fixed
    # wrong types
    "d-float": (_fixed(d=2.0), "d expects int values; received 2.0 (allowed: an int >= 1)"),
    "d-bool": (_fixed(d=True), "d expects int values; received True"),
    "d-list-in-fixed": (_fixed(d=[2]), "received [2]"),
    "variant-int": (_fixed(variant=3), "variant expects str values; received 3"),
    "value-scale-str": (_fixed(value_scale="x"), "value_scale expects float values; received 'x'"),
    "horizon-bool": (_fixed(horizon=True), "horizon expects float values; received True"),
    # right type, out of range
    "variant-unknown": (
        _with(grid={"variant": ["softmax", "sigmoid"]}),
        "grid value variant = 'sigmoid' is out of range; variant must be one of 'softmax'",
    ),
    "d-zero": (_fixed(d=0), "fixed value d = 0 is out of range; d must be an int >= 1"),
    "heads-zero": (_fixed(heads=0), "heads must be an int >= 1"),
    "samples-negative": (_fixed(samples=-3), "samples must be an int >= 1"),
    "init-scale-zero": (_fixed(init_scale=0.0), "init_scale must be a finite number > 0"),
    "horizon-zero": (_fixed(horizon=0), "horizon must be a finite number > 0"),
    "horizon-nan": (_fixed(horizon=math.nan), "horizon = nan is out of range"),
    "tol-low-negative": (_fixed(tol_low=-1e-5), "tol_low must be a finite number > 0"),
    "tol-high-inf": (_fixed(tol_high=math.inf), "tol_high = inf is out of range"),
    "value-scale-inf": (_fixed(value_scale=math.inf), "value_scale must be a finite number"),
    "key-shift-nan": (_fixed(key_shift=math.nan), "key_shift must be a finite number"),
    # each task's parameters together
    "multihead-uneven": (
        _fixed(variant="multihead", d=3, heads=2),
        "d = 3 is not a multiple of heads = 2",
    ),
    "too-large-a-task": (
        _fixed(d=10**5),
        "samples · d² = 2e+10 covariance entries per task exceed 134217728",
    ),  # fixed
    "threshold-below-start": (
        _fixed(tol_high=1e-300),
        "tol_high = 1e-300 is not above the mean initial trace init_scale · d = 2",
    ),  # fixed
    "threshold-below-wide-start": (
        _fixed(init_scale=1e4),
        "init_scale · d = 20000: the samples start above the blow-up threshold",
    ),  # fixed
}


@pytest.mark.parametrize("case", SPECS.values(), ids=SPECS.keys())
def test_bad_specs_are_refused_by_check_spec(case):
    spec, message = case
    with pytest.raises(sweep.SweepError, match=re.escape(message)):
        sweep.check_spec(spec)


@pytest.mark.parametrize(
    "name", ["repeated-grid-value", "too-large-a-task", "threshold-below-start", "horizon-nan"]
)
def test_the_command_refuses_them_before_any_worker_starts(capsys, tmp_path, name):
    spec, message = SPECS[name]
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))  # NaN is written as JSON's NaN, which Python reads back
    out = tmp_path / "out"
    code = cli.main(["sweep", str(path), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.startswith("tpde: error: ")
    assert not out.exists()


def test_the_task_count_is_checked_without_expanding_the_grid():
    # 10^7 seeds: refused at once (the check multiplies sizes; it does not list the tasks).
    with pytest.raises(sweep.SweepError, match="make 10000000 tasks"):
        sweep.check_spec(_with(seeds=10**7))


def test_valid_edge_specs_pass():
    # d = 1, a single sample, one seed and a tiny horizon are valid (a short, small sweep).
    checked = sweep.check_spec(_fixed(d=1, samples=1, horizon=1e-6, tol_high=10.0))
    assert len(sweep.expand(checked)) == 1
