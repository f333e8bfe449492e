"""The sphere experiment end to end at a tiny size: its data, its claims, its bad input."""

import math

import numpy as np
import pytest
import torch
from PIL import Image

from tpde import experiments
from tpde.experiments import framework as fw
from tpde.experiments.common.sphere_diagram import (
    checkpoint_times,
    sampled_density_stats,
    systems_for,
)
from tpde.experiments.sphere.sizes import (
    crossing_time,
    delay_verdict,
    first_time_above,
    large_claim,
    law_slope,
    log_fit,
    systems_per_size,
)
from tpde.measures import Empirical, uniform_on_sphere
from tpde.metrics import cluster_density

TINY = {
    "systems": 4, "tokens": 8, "betas": 3, "t1": 8.0, "checkpoints": 9, "cluster_seeds": 3,
    "scheme_tokens": 8, "scheme_saves": 11, "scheme_t1": 10.0, "scheme_dt": 0.2,
    "blowup_tokens": 16, "blowup_t1": 8.0, "movie_frames": 4,
    "large_tokens": 48, "large_systems": 2, "large_every": 2, "large_pairs": 400,
    "size_tokens": "8,16,32", "size_betas": "1,3", "size_budget": 512,
    "size_min_systems": 2, "size_exact_tokens": 16,
    "meta_betas": "3", "meta_size": 200, "meta_seeds": 2, "meta_t1": 25.0, "meta_cells": 1024,
    "escape_sizes": "200,400", "escape_draws": "2,1", "escape_t1": 6.0, "workers": 1,
}  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    module = experiments.get("sphere")
    config = fw.apply_overrides(module.Config(), {k: str(v) for k, v in TINY.items()}, "sphere")
    out = tmp_path_factory.mktemp("sphere")
    module.run(config, out)
    figures = module.plot(out)
    return module, out, figures, module.report(out), fw.load(out)


def test_tiny_run_writes_its_data_figures_and_report(tiny):
    module, out, figures, report, (config, arrays, results) = tiny
    assert {f.name for f in figures} >= {f for f, _ in report.figures}
    assert all(f.stat().st_size > 1000 for f in figures)
    assert report.markdown("sphere", module.TITLE).startswith("## ")
    with Image.open(out / "sphere_flow.gif") as movie:
        assert movie.n_frames == TINY["movie_frames"]
    np.testing.assert_allclose(arrays["times"], checkpoint_times(8.0, 9))
    for d in config["dims"]:
        density, se = arrays[f"density_d{d}"], arrays[f"density_se_d{d}"]
        assert density.shape == se.shape == (3, 9)
        assert ((density >= 0) & (density <= 1)).all() and (se >= 0).all()
        # The first column is the initial tokens' density (the same seeded draw, GLPR's
        # share of pairs with ⟨x_i, x_j⟩ > 0.999, mean over the systems).
        mu = systems_for(3, 4, 8, d, fw.torch_generator(100 * d))
        np.testing.assert_allclose(density[:, 0], cluster_density(mu).mean(-1).numpy())
        assert results[f"diagram_d{d}"]["rhs"] == 4 * 8  # RK4, one step per interval


def test_large_diagram_is_the_diagram_of_every_other_beta_from_sampled_pairs(tiny):
    _, _, _, report, (_, arrays, results) = tiny
    large = results["large_diagram_d3"]
    np.testing.assert_allclose(large["betas"], arrays["betas"][::2])
    density, se = arrays["large_density_d3"], arrays["large_density_se_d3"]
    assert density.shape == se.shape == (2, 9) and (se >= 0).all()
    assert ((density >= 0) & (density <= 1)).all()
    assert large["rhs"] == 4 * 8
    # β = 0.1 gathers into (nearly) one cluster by t = 8, from 5e-4 linked pairs at t = 0
    assert density[0, 0] < 0.01 and density[0, -1] > 0.9
    assert any("is the 8-token diagram delayed by ln(48/8)" in c.claim for c in report.claims)


def test_sampled_pairs_estimate_the_exact_density():
    """The sampled share of linked pairs against the exact one on clustered clouds."""
    generator = torch.Generator().manual_seed(3)
    centres = uniform_on_sphere(3, 3, generator=generator).points
    noise = 1e-2 * torch.randn(2, 4, 300, 3, generator=generator, dtype=torch.float64)
    points = torch.nn.functional.normalize(centres[torch.arange(300) % 3] + noise, dim=-1)
    mu = Empirical(points)
    exact = cluster_density(mu, 2e-4).mean(-1).numpy()
    mean, se = sampled_density_stats(mu, 2e-4, 40_000, generator)
    assert (np.abs(mean - exact) < 0.02).all() and (se < 0.05).all()


def test_tiny_run_shows_what_the_papers_claim(tiny):
    _, _, _, report, (config, arrays, results) = tiny
    one = results["one_cluster"]
    assert one["status"] == {"clustered": 3} and one["final_clusters"] == [1, 1, 1]
    schemes = results["schemes"]
    assert set(schemes) == set(config["schemes"])
    assert (
        schemes["post-ln"]["max_norm_error"] < 1e-12 and schemes["ngpt"]["max_norm_error"] < 1e-12
    )
    assert schemes["pre-ln"]["final_radius"] > 1  # ṙ = ⟨θ, Γ⟩ > 0: the radii grow
    speed = arrays["scheme__peri-ln__speed"]
    radius = arrays["scheme__peri-ln__radius"]
    assert (speed <= 1 / radius[:-1].min() + 1e-9).all()  # unit speed: |θ̇| ≤ 1/r
    blowup = results["blowup"]
    # Σ(t) = (I − 2βtI)⁻¹ from Σ₀ = I (d = 3): tr Σ = 3/(1 − 2t) reaches 10³ at t = 0.4985.
    assert blowup["ode_status"] == "blow_up"
    assert blowup["ode_event_time"] == pytest.approx((1 - 3 / 1e3) / 2, abs=1e-4)
    assert math.isfinite(blowup["sphere_time_to_one_cluster"])
    verdicts = {c.claim.split(",")[0][:30]: c.verdict for c in report.claims}
    assert [c.verdict for c in report.claims if "one cluster in long time" in c.claim] == ["agrees"]
    assert [c.verdict for c in report.claims if "unit sphere" in c.claim] == ["agrees"]
    assert [c.verdict for c in report.claims if "blow-up into clustering" in c.claim] == ["agrees"]
    assert len(verdicts) == len(report.claims)
    s2 = [c.verdict for c in report.claims if c.claim.startswith("S²")]  # a tiny run: indicative
    assert s2 and all(v.endswith("(indicative)") for v in s2)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"systems": "0"}, r"at least one value of β and one system per β; received betas = 90, "
                           r"systems = 0"),
        ({"betas": "0"}, r"received betas = 0, systems = 2048"),
        ({"tokens": "1"}, r"at least 2 tokens per system .*received tokens = 1"),
        ({"dims": "1"}, r"dims must be dimensions d >= 2"),
        ({"cluster_dim": "2"}, r"cluster_dim must be >= 3"),
        ({"schemes": "post-ln,rms"}, r"schemes must be among post-ln, .*; received rms"),
        ({"ngpt_alpha": "0"}, r"these must be > 0: ngpt_alpha = 0\.0"),
        ({"large_tokens": "1"}, r"large_tokens >= 2; received 4, 6, 20000, 1"),
        ({"size_tokens": "64,32"}, r"size_tokens must be increasing sizes >= 2 .*\(64, 32\)"),
        ({"size_tokens": "1,8"}, r"size_tokens must be increasing sizes >= 2"),
        ({"size_betas": "1,0"}, r"size_betas must be values of beta > 0 .*; received "
                                r"\(1\.0, 0\.0\)"),
        ({"size_min_systems": "1"}, r"size_min_systems >= 2 \(a standard error needs two "
                                    r"systems\); received 4194304, 1"),
        ({"size_level": "1"}, r"size_level is a cluster density, in \(0, 1\); received 1\.0"),
        ({"workers": "0"}, r"workers must be an integer >= 1 \(1: every task in this "
                           r"process\); received 0"),
    ],
)  # fmt: skip
def test_bad_configs_are_refused_before_running(overrides, match):
    module = experiments.get("sphere")
    with pytest.raises(fw.ConfigError, match=match):
        fw.apply_overrides(module.Config(), overrides, "sphere")


def test_sampled_pairs_on_a_small_cloud_against_its_exact_share():
    """Two tokens at each pole: 4 of the 12 ordered pairs i ≠ j are linked (density 1/3);
    one cloud of one cluster: every sampled pair is linked."""
    generator = torch.Generator().manual_seed(5)
    poles = torch.tensor([[0, 0, 1], [0, 0, 1], [0, 0, -1], [0, 0, -1]], dtype=torch.float64)
    assert float(cluster_density(Empirical(poles))) == pytest.approx(1 / 3, abs=1e-15)
    mean, se = sampled_density_stats(Empirical(poles[None, None]), 1e-3, 90_000, generator)
    binomial = math.sqrt(1 / 3 * 2 / 3 / 90_000)
    assert abs(mean[0] - 1 / 3) < 5 * binomial  # the sampled share is unbiased
    assert se[0] == pytest.approx(math.sqrt(mean[0] * (1 - mean[0]) / 90_000), rel=1e-12)
    mean, se = sampled_density_stats(Empirical(poles[None, None, :2]), 1e-3, 100, generator)
    assert mean[0] == 1.0 and se[0] == 0.0


def test_crossing_time_and_its_delta_method_error():
    times = np.linspace(0, 10, 11)
    ramp = np.stack([times / 10, times / 40])  # reaches 0.5 at t = 5; never
    t, se = crossing_time(times, ramp, np.full_like(ramp, 0.01), 0.5)
    assert t[0] == pytest.approx(5.0, abs=1e-12) and se[0] == pytest.approx(0.1, rel=1e-12)
    assert np.isnan(t[1]) and np.isnan(se[1])
    t, _ = crossing_time(times, times / 10, np.zeros(11), 0.33)  # between checkpoints
    assert t == pytest.approx(3.3, abs=1e-12)
    # without interpolation: the first checkpoint at or above the level, t = times[0]
    # included, no error (the diagram's t_half and t_99)
    table = np.stack([times / 10, times / 40, 0.6 + times / 100])
    t = first_time_above(times, table, 0.33)
    assert t[0] == 4.0 and np.isnan(t[1]) and t[2] == 0.0
    t, _ = crossing_time(times, table, np.zeros_like(table), 0.33)  # interpolated: NaN at t0
    assert t[0] == pytest.approx(3.3, abs=1e-12) and np.isnan(t[2])


def test_log_fit_recovers_an_exact_law_and_the_law_is_the_s2_rate():
    from scipy.special import spherical_in

    tokens = [32, 64, 128, 256]
    se = np.array([0.01, 0.02, 0.05, 0.1])
    fit = log_fit(tokens, 2.0 + 0.7 * np.log(tokens), se)
    assert fit["slope"] == pytest.approx(0.7, abs=1e-12) and fit["chi2_dof"] < 1e-20
    assert fit["intercept"] == pytest.approx(2.0, abs=1e-12) and fit["sizes"] == 4
    # χ² ≤ 1: the slope's error is the weighted fit's, 1/√(Σ w (ln N − centre)²)
    x, w = np.log(tokens), 1 / se**2
    centre = (w * x).sum() / w.sum()
    assert fit["slope_se"] == pytest.approx(1 / math.sqrt((w * (x - centre) ** 2).sum()))
    # one size off by 10 standard errors: the slope's error grows by √(χ²/dof) > 1
    off = log_fit(tokens, 2.0 + 0.7 * np.log(tokens) + [0, 0, 0.5, 0], se)
    assert off["chi2_dof"] > 1 and off["slope_se"] == pytest.approx(
        fit["slope_se"] * math.sqrt(off["chi2_dof"])
    )
    two = log_fit(tokens, [np.nan, 0.3, 1.0, 2.0], [0.1, 0.0, 0.1, 0.1])  # se = 0 is dropped
    assert two["sizes"] == 2 and math.isnan(two["slope_se"])
    # λ_k = k(k + 1) i_k(β) / (β i_0(β)) on S² (MATH.md §9); k* = 2 at β = 3
    k, slope = law_slope(3.0)
    rates = [j * (j + 1) * spherical_in(j, 3.0) / (3.0 * spherical_in(0, 3.0)) for j in (1, 2, 3)]
    assert k == 2 and slope == pytest.approx(1 / (2 * max(rates)), rel=1e-12)
    assert systems_per_size(32, 2**22, 2) == 4096 and systems_per_size(4096, 2**22, 2) == 2


def test_large_claim_agrees_with_the_law_shift_only():
    """A ramp delayed by ln(N/n)/(2λ*) agrees; the same ramp undelayed differs."""
    times = np.linspace(0, 30, 301)
    betas = [1.0, 6.0]
    config = {"large_every": 1, "size_level": 0.1, "large_tokens": 4096, "tokens": 32}
    delay = np.array([law_slope(b)[1] * math.log(128) for b in betas])
    small = np.clip(0.05 * (times[None] - 2.0), 0, 1).repeat(2, 0)
    results = {"large_diagram_d3": {"betas": betas, "seconds": 1.0, "rhs": 4}}
    for shift, verdict in ((delay, "agrees"), (np.zeros(2), "differs")):
        large = np.clip(0.05 * (times[None] - 2.0 - shift[:, None]), 0, 1)
        arrays = {"times": times, "density_d3": small, "density_se_d3": small * 0 + 1e-4,
                  "large_density_d3": large, "large_density_se_d3": large * 0 + 1e-4}  # fmt: skip
        (claim,) = large_claim(config, arrays, results)
        assert claim.verdict == verdict, claim.outcome


def test_delay_verdict_needs_every_crossing_beta_and_half_of_them():
    law, error = np.array([2.0, 2.0, 2.0, 2.0]), np.full(4, 0.01)
    nan = math.nan
    cases = {
        "every β crosses, within": ([2.1, 1.9, 2.0, 2.3], "agrees", 4, 4),
        "one β of four outside": ([2.1, 1.9, 2.0, 4.0], "differs", 4, 3),
        "the only outside β": ([2.0, nan, nan, 0.5], "differs", 2, 1),
        "half cross, within": ([2.0, nan, 2.1, nan], "agrees", 2, 2),
        "one of four crosses": ([2.0, nan, nan, nan], "partly", 1, 1),
        "none crosses": ([nan] * 4, "n/a", 0, 0),
    }
    for name, (shift, verdict, crossing, within) in cases.items():
        got, ok, inside = delay_verdict(np.array(shift), error, law)
        assert (got, int(ok.sum()), int(inside.sum())) == (verdict, crossing, within), name
    # the Monte-Carlo error widens the tolerance: 25% + 3 errors/law
    assert delay_verdict([2.6], [0.01], [2.0])[0] == "differs"
    assert delay_verdict([2.6], [0.05], [2.0])[0] == "agrees"


def test_large_claim_counts_the_betas_that_never_cross():
    """Two β of three never reach the level in the large diagram: not "agrees" although
    the one that crosses is delayed by the law; with a wrong delay it differs."""
    times = np.linspace(0, 30, 301)
    betas = [1.0, 3.0, 6.0]
    config = {"large_every": 1, "size_level": 0.1, "large_tokens": 4096, "tokens": 32}
    delay = np.array([law_slope(b)[1] * math.log(128) for b in betas])
    small = np.clip(0.05 * (times[None] - 2.0), 0, 1).repeat(3, 0)
    results = {"large_diagram_d3": {"betas": betas, "seconds": 1.0, "rhs": 4}}
    for factor, verdict in ((1.0, "partly"), (2.0, "differs")):
        large = np.clip(0.05 * (times[None] - 2.0 - factor * delay[:, None]), 0, 1)
        large[1:] = 0.0  # β = 3, 6 never cluster in the large diagram
        arrays = {"times": times, "density_d3": small, "density_se_d3": small * 0 + 1e-4,
                  "large_density_d3": large, "large_density_se_d3": large * 0 + 1e-4}  # fmt: skip
        (claim,) = large_claim(config, arrays, results)
        assert claim.verdict == verdict, claim.outcome
        assert "1 of 3 β cross in both" in claim.outcome


def test_size_scan_of_the_tiny_run(tiny):
    _, out, figures, report, (config, arrays, results) = tiny
    scan = results["size_scan"]
    assert [s["systems"] for s in scan["sizes"]] == [8, 2, 2]  # 512 // N², at least 2
    assert [s["sampled"] for s in scan["sizes"]] == [False, False, True]  # above 16 tokens
    density, se = arrays["size_density"], arrays["size_density_se"]
    assert density.shape == se.shape == (3, 2, 9) and (se >= 0).all()
    for i, n in enumerate((8, 16, 32)):  # the first column: the seeded initial clouds
        gen = fw.torch_generator(500 + n)
        mu = systems_for(2, [8, 2, 2][i], n, 3, gen)
        exact = cluster_density(mu).mean(-1).numpy()
        first = sampled_density_stats(mu, 1e-3, 400, gen)[0] if n == 32 else exact
        np.testing.assert_allclose(density[i, :, 0], first)
    t, t_se = crossing_time(arrays["times"], density, se, config["size_level"])
    np.testing.assert_allclose(np.asarray(scan["t_level"], dtype=float), t)
    np.testing.assert_allclose(np.asarray(scan["t_level_se"], dtype=float), t_se)
    for b, fit in enumerate(scan["fits"]):
        assert fit["beta"] == [1.0, 3.0][b] and fit["law"] == law_slope(fit["beta"])[1]
        refit = log_fit([8, 16, 32], t[:, b], t_se[:, b])
        assert fit["slope"] == pytest.approx(refit["slope"], nan_ok=True)
    assert (out / "sphere_sizes.png") in figures
    assert any("cluster later by ln N/(2λ_k*)" in c.claim for c in report.claims)
    assert any("no mean-field diagram at fixed t" in c.claim for c in report.claims)
    assert any("by the number N of tokens per cloud" in table for table in report.tables)
