"""The circle-pde study: the cluster counter (tokens and densities), the plateau extractor,
the configuration's refusals and the report of a tiny run."""

import math
import re

import numpy as np
import pytest
import torch

from tpde import experiments
from tpde.experiments import framework as fw
from tpde.experiments.circle_pde.config import Config, save_times
from tpde.experiments.circle_pde.report import (
    first_cluster_fit,
    first_clusters,
    pde_claim,
    plateau_claims,
)
from tpde.experiments.common.circle_clusters import (
    Merge,
    Plateau,
    cell_masses,
    cluster_masses,
    clusters,
    density_masses,
    first_plateau,
    lifetimes,
    merges,
    plateaus,
    points_masses,
)
from tpde.measures import CircleDensity

COUNTER = {"window": 17, "level": 2.0, "min_share": 0.05}  # the study's defaults


def on_circle(angles):
    angles = torch.as_tensor(angles, dtype=torch.float64)
    return torch.stack([angles.cos(), angles.sin()], -1)


def groups(centres, sizes, spread, seed=0):
    """Tokens in groups of the given sizes, Gaussian angles of sd ``spread`` about centres."""
    g = torch.Generator().manual_seed(seed)
    centre = torch.tensor(centres, dtype=torch.float64).repeat_interleave(torch.tensor(sizes))
    return on_circle(centre + spread * torch.randn(len(centre), generator=g, dtype=torch.float64))


def count_points(points, cells=512, **options):
    return cluster_masses(points_masses(points, cells), **{**COUNTER, **options})


def test_groups_of_known_sizes_give_their_masses():
    points = groups([0.5, 2.0, 4.0], [500, 300, 200], 0.01)
    assert count_points(points) == pytest.approx([0.5, 0.3, 0.2], abs=1e-12)


def test_a_group_across_the_seam_is_one_cluster():
    # Centred on 0 = 2π: half its tokens at angles just below 2π, half just above 0.
    points = groups([0.0, 2.5], [600, 400], 0.02)
    # In the order of their first cell from angle 0: the seam's group starts near 2π.
    assert count_points(points) == pytest.approx([0.4, 0.6], abs=1e-12)
    rotated = groups([math.pi, 2.5 + math.pi], [600, 400], 0.02)
    assert count_points(rotated) == pytest.approx([0.6, 0.4], abs=1e-12)


def test_clusters_give_masses_and_centres():
    """Groups at 0.5, 2.0 and (across the seam) 0 = 2π: their circular means to within the
    cells' resolution (2π/512 = 0.012) and the sampling (sd 0.01/√n)."""
    points = groups([0.5, 2.0, 0.0], [500, 300, 200], 0.01)
    found = clusters(points_masses(points, 512), **COUNTER)
    assert [m for m, _ in found] == pytest.approx([0.5, 0.3, 0.2], abs=1e-12)
    centres = [c for _, c in found]  # the seam's group starts near 2π: last
    assert centres[:2] == pytest.approx([0.5, 2.0], abs=6e-3)
    assert min(centres[2], 2 * math.pi - centres[2]) < 6e-3
    assert [m for m, _ in found] == cluster_masses(points_masses(points, 512), **COUNTER)


def test_a_single_cluster_and_the_uniform_law():
    assert count_points(groups([1.0], [1000], 0.05)) == pytest.approx([1.0])
    g = torch.Generator().manual_seed(1)
    for n in (1_000, 100_000):  # uniform tokens: no window reaches twice the uniform density
        angles = 2 * math.pi * torch.rand(n, generator=g, dtype=torch.float64)
        assert count_points(on_circle(angles)) == []


def test_groups_closer_than_a_window_are_one_cluster_and_small_groups_are_dropped():
    window = 17 * 2 * math.pi / 512  # 0.209 rad
    near = groups([1.0, 1.0 + 0.5 * window], [500, 500], 0.002)
    assert count_points(near) == pytest.approx([1.0])
    far = groups([1.0, 1.0 + 2 * window], [500, 500], 0.002)
    assert count_points(far) == pytest.approx([0.5, 0.5])
    # A tight group is seen when its mass exceeds level·w/G = 2·17/512 = 6.6%; then kept
    # when its run holds ≥ min_share.
    small = groups([1.0, 3.0], [940, 60], 0.002)
    assert count_points(small, min_share=0.01) == pytest.approx([0.94])
    seen = groups([1.0, 3.0], [920, 80], 0.002)
    assert count_points(seen) == pytest.approx([0.92, 0.08])
    assert count_points(seen, min_share=0.1) == pytest.approx([0.92])


def test_cell_masses_and_weights():
    masses = cell_masses(torch.tensor([0.0, -0.1, 2 * math.pi + 0.1]), torch.ones(3), 4)
    assert masses == pytest.approx([2 / 3, 0, 0, 1 / 3])  # −0.1 ≡ 2π − 0.1, in the last arc
    weighted = points_masses(on_circle([0.1, 2.0]), 4, weights=torch.tensor([3.0, 1.0]))
    assert weighted == pytest.approx([0.75, 0.25, 0, 0])


def test_a_density_is_counted_like_tokens():
    M = 4096
    theta = torch.arange(M, dtype=torch.float64) * 2 * math.pi / M
    bumps = sum(w * torch.exp(400 * (torch.cos(theta - c) - 1)) for c, w in ((1, 2), (4, 1)))
    rho = CircleDensity(bumps + 1e-4)
    masses = cluster_masses(density_masses(rho, 512), **COUNTER)
    assert masses == pytest.approx(
        [2 / 3, 1 / 3], abs=0.01
    )  # sd 0.05: the runs hold all but the floor
    tokens = rho.sample(200_000, generator=torch.Generator().manual_seed(0))
    assert count_points(tokens) == pytest.approx(masses, abs=0.01)
    flat = CircleDensity(1 + 0.1 * torch.cos(3 * theta))  # below twice the mean everywhere
    assert cluster_masses(density_masses(flat, 512), **COUNTER) == []
    with pytest.raises(
        ValueError, match="needs a density on at least as many angles; received M = 256"
    ):
        density_masses(CircleDensity(torch.ones(256, dtype=torch.float64)), 512)


def test_plateaus_of_a_count_series():
    times = np.arange(0.0, 20.0)
    counts = np.array([0, 0, 1, 3, 3, 3, 4, 4, 4, 4, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2])
    assert plateaus(times, counts, 2.0) == [
        Plateau(3, 3.0, 2.0, False, 4),
        Plateau(4, 6.0, 3.0, False, 3),
        Plateau(3, 10.0, 4.0, False, 2),
        Plateau(2, 15.0, 4.0, True, None),
    ]
    # The 3 followed by a 4 is a stage of the formation: the first plateau is the 4.
    assert first_plateau(times, counts, 2.0) == Plateau(4, 6.0, 3.0, False, 3)
    assert first_plateau(times, counts, 5.0) is None
    assert first_plateau(times, np.zeros(20, dtype=int), 0.0) is None  # uniform: no plateau
    assert first_plateau(times[:3], [2, 2, 2], 1.0) == Plateau(2, 0.0, 2.0, True, None)
    with pytest.raises(ValueError, match="received 20 times and 3 counts"):
        plateaus(times, [1, 2, 3], 1.0)


def test_lifetimes_and_merges_of_a_flickering_count():
    """0 until t = 5, three clusters to t = 43 with one save at 2 (t = 41, a flicker), two
    to t = 79, one from t = 80 on: the three-cluster state lives 38 (joined across the
    flicker), merges 3 → 2 in [43, 44] and 2 → 1 in [79, 80]; the last state is censored."""
    times = np.arange(0.0, 101.0)
    counts = np.zeros(101, dtype=int)
    counts[5:44], counts[41], counts[44:80], counts[80:] = 3, 2, 2, 1
    assert lifetimes(times, counts, 2.0) == [
        Plateau(0, 0.0, 4.0, False, 3),
        Plateau(3, 5.0, 38.0, False, 2),
        Plateau(2, 44.0, 35.0, False, 1),
        Plateau(1, 80.0, 20.0, True, None),
    ]
    found = merges(times, counts, 2.0)
    assert found == [Merge(3, 2, 43.0, 44.0), Merge(2, 1, 79.0, 80.0)]
    assert (found[0].time, found[0].error) == (43.5, 0.5)
    # Sparser saves: the merge is known only within the gap between them.
    sparse = merges(times[::10], counts[::10], 2.0)
    assert [(m.before, m.after, m.time, m.error) for m in sparse] == [
        (3, 2, 45.0, 5.0),
        (2, 1, 75.0, 5.0),
    ]
    assert merges(times, np.full(101, 3), 2.0) == []  # one state to the end: no merge
    with pytest.raises(ValueError, match="received 101 times and 3 counts"):
        lifetimes(times, [1, 2, 3], 1.0)


def test_long_pde_counts_the_clusters_past_the_finest_grid():
    """a = 0.05 (clusters by t ≈ 4.5), grids 256 → 1024, then the nodes to t = 8 (their
    quadrature gap reaches 1.9e-4 at 1024 nodes, 2.9e-3 at 512, as the gaps between
    clusters empty: the tolerance is loosened to 1e-3 here): three clusters from t = 4.5
    to the end, the heavier one where the cos θ mode adds mass, and the mass conserved."""
    from tpde.experiments.circle_pde.long import long_pde

    config = Config(amplitude=0.05, cells=256, window=9)
    out = long_pde(config, 8.0, start_grid=256, max_grid=1024, quadrature=1e-3)
    assert out["status"] == "completed" and out["end"] == 8.0
    assert [M for _, M in out["refinements"]] == [512, 1024] and 6 < out["switch"] < 6.2
    assert out["counts"][-1] == 3 and out["mass_error"] < 1e-14
    assert out["lifetimes"][-1].count == 3 and out["lifetimes"][-1].censored
    light, _, heavy = sorted(out["masses"][-1])
    assert 0.25 < light < heavy < 0.4 and sum(out["masses"][-1]) > 0.85


def test_clusters_paired_by_nearest_centre():
    from tpde.experiments.circle_pde.long import _paired

    ours = [(0.3, 0.1), (0.7, 3.0)]
    theirs = [(0.69, 3.05), (0.31, 2 * math.pi - 0.05)]  # the first across the seam
    pairs = _paired(ours, theirs)
    assert [m for m, _ in pairs] == pytest.approx([0.01, -0.01], abs=1e-12)
    assert [a for _, a in pairs] == pytest.approx([0.15, 0.05], abs=1e-12)
    assert _paired(ours, theirs[:1]) is None and _paired([], []) is None


@pytest.mark.slow
def test_pde_clusters_against_particles():
    """a = 0.05 (N_eff = 4/a² = 1600) against 10⁵ particles from the same ρ₀ (their noise
    1/√n = 0.003 against the PDE's modes a/2 = 0.025): at t = 8 the same three clusters,
    masses within 5e-3, centres within 0.06 rad (measured 2e-3 and 0.012–0.038: the
    phases carry the particles' noise, ~0.13/k* rad)."""
    from tpde.experiments.circle_pde.long import pde_against_particles

    config = Config(amplitude=0.05, cells=256, window=9)
    out = pde_against_particles(config, 100_000, 8.0, max_grid=1024, quadrature=1e-3)
    assert out["pde_status"] == "completed" and len(out["pde"][-1]) == 3
    assert max(abs(m) for m, _ in out["pairs"][-1]) < 5e-3
    assert max(a for _, a in out["pairs"][-1]) < 0.06


def test_save_times_are_dense_then_sparse():
    config = Config(t1=40.0, dense_until=10.0, dense_step=0.5, sparse_step=5.0)
    times = save_times(config)
    assert times[:3] == pytest.approx([0, 0.5, 1.0]) and len(times) == 21 + 6
    assert times[20:] == pytest.approx([10, 15, 20, 25, 30, 35, 40])


CONFIGS = {
    "window even": ({"window": "16"}, "window must be an odd number of cells in [1, cells = 512]"),
    "level 1": ({"level": "1"}, "level must be > 1 (times the uniform density"),
    "share": ({"min_share": "1.5"}, "min_share in [0, 1]"),
    "cells past a grid": ({"grids": "256"}, "cells must lie in [1, min(grids)]"),
    "dense past t1": ({"dense_until": "400"}, "dense_until must lie in (0, t1]; received 400.0"),
    "more betas": ({"more_betas": "0"}, "beta and more_betas must be > 0"),
    "beta huge": ({"beta": "1e300"}, "beta <= 1e12"),
    "steps": ({"sparse_step": "0"}, "dense_step, sparse_step, rtol and atol must be > 0"),
    "long grid": ({"long_grid": "512"}, "long_grid >= min(grids) = 1024 (the grid the PDE"),
    "long t1": ({"long_t1": "0"}, "long_t1 > 0 (the gap runs to min(long_t1, t1))"),
}


@pytest.mark.parametrize("case", CONFIGS.values(), ids=CONFIGS.keys())
def test_config_refusals(case):
    overrides, match = case
    with pytest.raises(fw.ConfigError, match=re.escape(match)):
        fw.apply_overrides(Config(), overrides, "circle-pde")


def test_report_of_a_tiny_run(tmp_path):
    module = experiments.get("circle-pde")
    overrides = {
        "sizes": "500,1000", "seeds": "2", "more_betas": "10", "grids": "512", "t1": "20",
        "dense_until": "10", "dense_step": "1", "sparse_step": "5", "amplitude": "0.02",
        "escape_seeds": "3", "meta_betas": "2", "meta_size": "300", "meta_seeds": "2",
        "meta_t1": "40", "long_grid": "1024", "long_quadrature": "1e-3", "workers": "1",
    }  # fmt: skip
    config = fw.apply_overrides(module.Config(), overrides, "circle-pde")
    out = tmp_path / "circle-pde"
    module.run(config, out)
    figures = module.plot(out)
    assert [f.name for f in figures] == [
        "circle_pde.png",
        "circle_pde_plateaus.png",
        "circle_pde_metastable.png",
    ]
    _, arrays, results = fw.load(out)
    counts = arrays["counts"]
    assert counts.shape == (2, 2, 2, len(save_times(config)))
    assert (counts[1, 1] == -1).all()  # the more_betas skip the largest N
    drawn = counts[:, :, :, 0] >= 0
    assert (counts[:, :, :, 0][drawn] == 0).all()  # near-uniform draws: no cluster at t = 0
    assert (counts[:, :, :, -1][drawn] >= 2).all()  # every cloud has clustered by t = 20
    pde = results["pde"][0]  # a = 0.02: three clusters by t ≈ 6, past the grid soon after
    assert pde["status"] == "unresolved" and pde["count_at_end"] == 3  # k*(5) = 3
    assert 0 < pde["first_cluster"] < pde["end"] < 10
    report = module.report(out)
    text = report.markdown("circle-pde", module.TITLE)
    assert "| 5.0 | 500 |" in text and "| 5.0 | 1000 |" in text and "| 10.0 | 500 |" in text
    assert "| 10.0 | 1000 |" not in text  # not drawn: no row
    verdicts = {c.claim.split(":")[0]: c.verdict for c in report.claims}
    words = {"agrees", "differs", "partly", "n/a"}  # a tiny run's metastability: indicative
    assert set(verdicts.values()) <= words | {f"{w} (indicative)" for w in words}
    assert any(v.endswith("(indicative)") for v in verdicts.values())
    assert "ran below its full size" in text
    for b, table in enumerate(results["plateaus"].values()):  # a plateau starts clustered
        for i, rows in enumerate(table.values()):
            first = first_clusters(arrays, b, i)
            assert len(first) == len(rows) and all(
                f <= row[1] for f, row in zip(first, rows, strict=True) if row
            )
    law = results["laws"]["5.0"]
    assert law["k_star"] == 3 and law["law_slope"] == pytest.approx(1 / (2 * 0.6826783336167468))
    # The escape: the two drawn clouds per N and one escape-only draw (every other save; its
    # six saves are one call, so nothing stops it early), a crossing for each.
    modes = arrays["modes"]
    assert modes.shape == (2, 3, len(save_times(config)), 8)
    assert np.isfinite(modes[:, :, 0]).all() and np.isnan(modes[:, 2, 1]).all()
    extra = [x for x in results["runs"] if x.get("escape_only")]
    assert [x["n"] for x in extra] == [500, 1000] and all(x["until"] == 10 for x in extra)
    escape = next(c for c in report.claims if "escape from uniform" in c.claim)
    assert "6 draws, 0 without a crossing" in escape.outcome
    # The β sweep: two draws at β = 2, each a count series to t = 40 or absorbed in one
    # cluster (then filled with 1), and its table row.
    meta = results["metastable"]["2.0"]
    assert arrays["meta_counts"].shape == (1, 2, len(arrays["meta_times"]))
    assert (arrays["meta_counts"] >= 0).all() and meta["k_star"] == 2
    assert len(meta["leading"]) == 2 and all(1 <= m <= 8 for m in meta["leading"])
    for run, series in zip(meta["runs"], arrays["meta_counts"][0], strict=True):
        assert run["status"] in ("completed", "stopped")
        assert run["status"] == "completed" or (series[-4:] == 1).all()
    assert "| 2.0 | 2 |" in text
    lifetime = next(c for c in report.claims if "lifetime T grows exponentially" in c.claim)
    assert "Settled states only; the rule as first stated" in lifetime.outcome
    # CPU seconds per run and per part (the cost the issue asks for), each part within the whole.
    cpu = results["cpu_seconds"]
    assert set(cpu) == {"pde", "particles", "escape", "sweep", "total"}
    assert 0 < sum(cpu[k] for k in ("pde", "particles", "escape", "sweep")) <= cpu["total"]
    assert all(x["cpu_seconds"] > 0 for x in [*results["runs"], *meta["runs"]])
    cost = next(n for n in report.notes if n.startswith("cost: "))
    assert f"{cpu['total']:.0f} s CPU in all" in cost and "on 1 worker process(es)" in cost
    # The gap of the largest cloud against the refined / node PDE: at t = 0 the linear
    # prediction is the exact W1 (to its midpoint rule, 2π·2/2²⁰ = 1.2e-5), both above the
    # MC level's tenth; a claim and a table.
    gap, level, linear = arrays["gap"], arrays["gap_level"], arrays["gap_linear"]
    assert arrays["gap_times"][-1] == 20 and np.isfinite(level[0]) and gap[0] > 0.1 * level[0]
    assert linear[0] == pytest.approx(gap[0], abs=1.2e-5)
    assert results["gap"]["n"] == 1000 and results["gap"]["pde"]["mass_error"] < 1e-13
    assert any("the particles' W1 to the PDE" in c.claim for c in report.claims)
    assert "| t | g = W1(particles, PDE) |" in text


LAW = {"k_star": 3, "rate": 0.5, "law_slope": 1.0, "fit": {"slope": 1.0, "offset": 0.0}}


def _table(rows_per_n):
    """A plateau table {N: [[count, start, duration, censored, after], …]} at start =
    log N (the law with c = 0)."""
    return {str(n): [[k, math.log(n), d, False, k - 1] for k, d in rows]
            for n, rows in rows_per_n.items()}  # fmt: skip


def test_plateau_claims_agree_and_differ_on_synthetic_results():
    good = _table({1000: [(3, 30.0), (3, 30.0)], 10_000: [(3, 40.0), (2, 40.0)]})
    assert [c.verdict for c in plateau_claims("5.0", good, LAW)] == ["agrees"] * 3
    # k* = 3 is not the most common first count, but it is seen: partly; never seen: differs
    some = _table({1000: [(2, 30.0), (2, 30.0)], 10_000: [(3, 40.0)]})
    assert plateau_claims("5.0", some, LAW)[0].verdict == "partly"
    wrong = _table({1000: [(2, 30.0)], 10_000: [(4, 40.0)]})
    assert plateau_claims("5.0", wrong, LAW)[0].verdict == "differs"
    # a fitted slope twice the law's: differs; within 25%: agrees
    steep = {**LAW, "fit": {"slope": 2.0, "offset": -5.0}}
    assert plateau_claims("5.0", good, steep)[1].verdict == "differs"
    near = {**LAW, "fit": {"slope": 1.2, "offset": -1.0}}
    assert plateau_claims("5.0", good, near)[1].verdict == "agrees"
    # plateaus shorter than twice their start: not metastable
    short = _table({1000: [(3, 5.0)], 10_000: [(3, 5.0)]})
    assert plateau_claims("5.0", short, LAW)[2].verdict == "differs"
    assert plateau_claims("5.0", {"1000": [None]}, LAW)[0].verdict == "n/a"
    assert plateau_claims("5.0", good, {**LAW, "fit": None})[1].verdict == "n/a"


def _first_arrays(sizes, firsts, length=200):
    """counts (1, sizes, draws, T) of draws that reach one cluster at the given times (NaN:
    never) on saves every 0.1."""
    times = np.arange(length) * 0.1
    counts = np.zeros((1, len(sizes), len(firsts[0]), length), dtype=np.int64)
    for i, row in enumerate(firsts):
        for s, t in enumerate(row):
            counts[0, i, s] = np.where(times >= t, 1, 0) if np.isfinite(t) else 0
    return {"times": times, "counts": counts}


def test_first_cluster_fit_recovers_the_particles_line():
    sizes = [100, 1000, 10_000]
    spread = (0.5, 0.0, 1.0)  # the two draws of each N on either side of 2 + log N
    firsts = [
        [2 + math.log(n) + e, 2 + math.log(n) - e] for n, e in zip(sizes, spread, strict=True)
    ]
    arrays = _first_arrays(sizes, np.round(firsts, 1))
    fit = first_cluster_fit(sizes, arrays, law_slope=1.0)
    assert fit["slope"] == pytest.approx(1.0, abs=0.02)
    assert fit["offset"] == pytest.approx(2.0, abs=0.1)
    assert fit["law_offset"] == pytest.approx(2.0, abs=0.05)
    never = _first_arrays(sizes, [[1.0, np.nan], [np.nan, np.nan], [np.nan, np.nan]])
    assert first_cluster_fit(sizes, never, law_slope=1.0) is None  # one size clusters


def _pde_results(first):
    pde = {"grid": 512, "end": 9.0, "status": "unresolved", "count_at_end": 3,
           "first_cluster": first}  # fmt: skip
    return {"pde": [pde], "laws": {"5.0": LAW}, "n_eff": math.e**10}


def test_pde_claim_compares_first_clusters_with_first_clusters():
    fit = {"slope": 0.5, "offset": 1.0, "law_offset": -4.0}  # 6.0 at log N_eff = 10
    assert pde_claim(_pde_results(6.5), fit).verdict == "agrees"  # within 15%
    assert pde_claim(_pde_results(5.0), fit).verdict == "differs"  # 17% early
    claim = pde_claim(_pde_results(12.0), fit)
    assert claim.verdict == "differs" and "against 6.00 on the particles' first-cluster" in (
        claim.outcome
    )
    assert "6.00 on log N/(2λ_k*) + c" in claim.outcome  # c = −4 with the law's slope 1
    assert "first cluster (first save with a count ≥ 1)" in claim.claim
    assert pde_claim(_pde_results(None), fit).verdict == "n/a"
    assert pde_claim(_pde_results(6.0), None).verdict == "n/a"


#: Results that are timings: they differ between any two runs.
TIMINGS = {"seconds", "cpu_seconds", "cpu", "pde_cpu", "workers"}


def _untimed(value):
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k not in TIMINGS}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def test_two_workers_give_the_serial_run_bit_for_bit(tmp_path):
    """A small full-path run (every kind of task: PDE, draws at β with W1 and the gap, at
    another β, escape-only, sweep) on one process and on two: every saved array equal
    (NaN where NaN), every result equal but the timings."""
    module = experiments.get("circle-pde")
    overrides = {
        "sizes": "100,200", "seeds": "1", "more_betas": "10", "grids": "512", "t1": "8",
        "dense_until": "6", "dense_step": "1", "sparse_step": "2", "amplitude": "0.02",
        "escape_seeds": "2", "meta_betas": "2", "meta_size": "100", "meta_seeds": "2",
        "meta_t1": "20", "long_t1": "6", "long_grid": "512", "long_quadrature": "1e-3",
    }  # fmt: skip
    found = []
    for workers in ("1", "2"):
        config = fw.apply_overrides(module.Config(), {**overrides, "workers": workers}, "c")
        module.run(config, tmp_path / workers)
        found.append(fw.load(tmp_path / workers))
    (_, serial, first), (_, pooled, second) = found
    assert serial.keys() == pooled.keys()
    for name in serial:
        assert np.array_equal(serial[name], pooled[name], equal_nan=True), name
    assert _untimed(first) == _untimed(second)
    assert second["workers"] == 2 and len(second["runs"]) == 3 + 2  # main, escape-only
    assert len(second["metastable"]["2.0"]["runs"]) == 2
    assert second["cpu_seconds"]["total"] >= sum(x["cpu_seconds"] for x in second["runs"])
