"""Experiment framework: typed config overrides, run records, the ranks protocol."""

import json
from dataclasses import dataclass

import numpy as np
import pytest

from tpde.experiments import framework as fw
from tpde.experiments.common import rank_protocol as ranks


@dataclass(frozen=True)
class _Config:
    n: int = 3
    tol: float = 1e-3
    flag: bool = False
    name: str = "a"
    sizes: tuple[int, ...] = (1, 2)

    def check(self):
        if self.n < 1:
            raise ValueError(f"n must be >= 1; received {self.n}.")


def test_overrides_convert_to_the_field_types():
    cfg = fw.apply_overrides(
        _Config(), {"n": "7", "tol": "1e-5", "flag": "yes", "name": "b", "sizes": "4, 5,6"}
    )
    assert cfg == _Config(n=7, tol=1e-5, flag=True, name="b", sizes=(4, 5, 6))
    assert fw.apply_overrides(_Config(), {}) == _Config()


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"m": "1"}, r"unknown config key 'm' of experiment 'x'; known keys: flag, n, name"),
        ({"n": "1.5"}, r"x\.n expects an int; received '1\.5'"),
        ({"tol": "small"}, r"x\.tol expects a float; received 'small'"),
        ({"flag": "maybe"}, r"x\.flag expects a bool \(true/false\); received 'maybe'"),
        ({"sizes": "1,a"}, r"x\.sizes expects an int; received 'a'"),
        ({"n": "0"}, r"x: n must be >= 1; received 0"),
    ],
)
def test_bad_overrides_raise_before_anything_runs(overrides, match):
    with pytest.raises(fw.ConfigError, match=match):
        fw.apply_overrides(_Config(), overrides, "x")


def test_save_writes_data_then_meta_with_versions_and_commit(tmp_path):
    fw.save(
        tmp_path, _Config(), {"a": np.arange(3)}, {"x": np.float64(1.5), "y": [np.int64(2)]}, 0.0
    )
    config, arrays, results = fw.load(tmp_path)
    assert config == {"n": 3, "tol": 1e-3, "flag": False, "name": "a", "sizes": [1, 2]}
    np.testing.assert_array_equal(arrays["a"], [0, 1, 2])
    assert results == {"x": 1.5, "y": [2]}
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["versions"]["torch"] and meta["versions"]["numpy"]
    assert set(meta["git"]) == {"commit", "dirty"}
    assert not list(tmp_path.glob(".*tmp"))  # atomic writes leave no temporary file


def _authors_loop(outcome, runs, n_max):
    """The authors' create_histograms loop, sequential: Q index advances on convergence."""
    records, i = [], 0
    for k in range(n_max):
        records.append((i, k))
        if outcome(i, k):
            i += 1
        if i == runs:
            break
    return records


@pytest.mark.parametrize("seed", range(4))
def test_speculative_protocol_visits_the_pairs_of_the_authors_loop(seed):
    # Random failure patterns (rate 0 … 40 %): the round-based resolution must visit exactly
    # the (Q index, draw) pairs of the sequential loop, in order.
    rng = np.random.RandomState(seed)
    fails = rng.rand(40, 400) < 0.1 * seed

    def outcome(i, k):
        return not fails[i, k]

    protocol, cache, rounds = ranks.Protocol(runs=40, n_max=400), {}, 0
    while not protocol.done():
        for i, k in protocol.request(cache):
            cache[(i, k)] = ("converged" if outcome(i, k) else "completed", None)
        protocol.advance(cache)
        rounds += 1
    assert protocol.records == _authors_loop(outcome, 40, 400)
    # The speculative window grows ×4 per round: a total shift of s needs ~log4(s) rounds.
    assert rounds <= 6


@pytest.mark.parametrize(
    ("name", "overrides", "match"),
    [
        ("cones", {"paper_starts": "-2"}, "paper_starts must be >= -1"),
        ("cones", {"blowup_grid": "1"}, "grid sizes must be >= 2"),
        ("ranks", {"dims": "6"}, r"dims must be among \(3, 4, 5\)"),
        ("ranks", {"values": "spd"}, "values must be among identity, random; received spd"),
        ("ranks", {"refine": "-1"}, "refine must be >= 0"),
        ("atlas", {"n": "1"}, "must be >= 2"),
        ("atlas", {"t1": "0"}, "t1, box and blowup_trace must be > 0"),
        ("meanfield", {"sizes": "10"}, "sizes needs two values"),
        ("jko", {"geometries": "w3"}, "geometries must be among w2"),
        ("jko", {"taus": "0.1"}, "taus needs two values"),
        ("convexity", {"radius": "1.5"}, "0 < radius < 1"),
        ("convexity", {"shift": "0"}, "cloud_scale, gaussian_var and shift must be > 0"),
    ],
)
def test_every_experiment_checks_its_config(name, overrides, match):
    from tpde import experiments

    with pytest.raises(fw.ConfigError, match=match):
        fw.apply_overrides(experiments.get(name).Config(), overrides, name)


def test_large_allocations_are_reused_from_glibcs_heap():
    # tpde run and the benchmarks raise glibc's mmap threshold (tensors above 32 MB were
    # mapped afresh at every allocation); without glibc there is nothing to set.
    import platform

    assert fw.reuse_large_allocations() is (platform.libc_ver()[0] == "glibc")
