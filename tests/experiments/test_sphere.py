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
from tpde.measures import Empirical, uniform_on_sphere
from tpde.metrics import cluster_density

TINY = {
    "systems": 4, "tokens": 8, "betas": 3, "t1": 8.0, "checkpoints": 9, "cluster_seeds": 3,
    "scheme_tokens": 8, "scheme_saves": 11, "scheme_t1": 10.0, "scheme_dt": 0.2,
    "blowup_tokens": 16, "blowup_t1": 8.0, "movie_frames": 4,
    "large_tokens": 48, "large_systems": 2, "large_every": 2, "large_pairs": 400,
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
    assert any("tokens per cloud is the mean-field one" in c.claim for c in report.claims)


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
    ],
)  # fmt: skip
def test_bad_configs_are_refused_before_running(overrides, match):
    module = experiments.get("sphere")
    with pytest.raises(fw.ConfigError, match=match):
        fw.apply_overrides(module.Config(), overrides, "sphere")
