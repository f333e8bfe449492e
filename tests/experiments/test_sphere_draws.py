"""experiments.sphere.draws: the S² metastability runs as tasks, one process or two."""

import dataclasses

import numpy as np
import pytest
import torch

from tests.experiments.test_circle_pde_study import _untimed  # timings dropped from results
from tpde.experiments.sphere.config import Config
from tpde.experiments.sphere.draws import draw_clouds, run_metastable
from tpde.experiments.sphere.meta_report import cost_note
from tpde.measures import uniform_on_sphere


def _tiny(workers: int) -> Config:
    """Escape draws on both engines (300 tokens: dense; 2000: harmonics, from ~1500) and
    a sweep of two runs: about a second of CPU per run."""
    return Config(escape_sizes=(300, 2000), escape_draws=(2, 1), escape_t1=2.0,
                  meta_betas=(3.0,), meta_size=200, meta_seeds=2, meta_t1=8.0,
                  meta_dense_until=2.0, meta_dense_step=0.5, meta_step=2.0, meta_cells=512,
                  workers=workers)  # fmt: skip


def test_two_workers_give_the_serial_run_bit_for_bit():
    """Every array equal (NaN where NaN), every result equal but the timings; the CPU
    seconds add up per part (spawning two workers that import torch: seconds)."""
    (serial, first), (pooled, second) = (run_metastable(_tiny(w)) for w in (1, 2))
    names = {"meta_escape_times", "meta_escape_modes", "meta_escape_counts", "meta_times",
             "meta_counts", "meta_modes"}  # fmt: skip
    assert set(serial) == set(pooled) == names
    for name in serial:
        assert np.array_equal(serial[name], pooled[name], equal_nan=True), name
    assert _untimed(first) == _untimed(second)
    assert len(second["escape"]["runs"]) == 3 and len(second["sweep"]["3.0"]["runs"]) == 2
    cpu = second["cpu_seconds"]
    runs = [x["cpu_seconds"] for x in second["escape"]["runs"]]
    assert cpu["escape"] == pytest.approx(sum(runs), rel=1e-12)
    assert cpu["total"] >= cpu["escape"] + cpu["sweep"] > 0
    assert second["workers"] == 2 and first["workers"] == 1
    note = cost_note({"metastable": second})
    assert note.startswith("S² metastability cost: ") and "N = 2000: " in note
    assert "on 2 worker process(es)" in note and "longest first on 2 workers: " in note


def test_clouds_are_drawn_in_the_serial_order():
    """The escape clouds come one after another from seed + 900 (sizes, then draws); the
    sweep's from seed + 901: a cloud does not depend on the other part's sizes."""
    config = _tiny(1)
    clouds = draw_clouds(config)
    assert list(clouds["escape"]) == [(0, 0), (0, 1), (1, 0)]
    assert [c.shape for c in clouds["escape"].values()] == [(300, 3), (300, 3), (2000, 3)]
    other = draw_clouds(dataclasses.replace(config, escape_sizes=(50,), escape_draws=(1,)))
    for key, points in clouds["sweep"].items():
        assert np.array_equal(points, other["sweep"][key])
    g = torch.Generator().manual_seed(config.seed + 900)
    for points in clouds["escape"].values():
        assert torch.equal(points, uniform_on_sphere(len(points), 3, generator=g).points)
    assert cost_note({}) is None


@pytest.mark.parametrize("workers", [0, 1.5, True])
def test_a_bad_worker_count_is_refused(workers):
    with pytest.raises(ValueError, match=f"workers must be an integer >= 1.*received {workers!r}"):
        Config(workers=workers).check()
