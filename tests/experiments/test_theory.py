"""The theory experiment end to end at a tiny size: its data, its verdicts, its bad input."""

import pytest

from tpde import experiments
from tpde.experiments import framework as fw
from tpde.theory import dominant_mode

TINY = {
    "kernels": "sa", "inst_kernels": "sa,usa", "eq_ns": "3", "eq_t1": "1", "eq_saves": "3",
    "eq_rtol": "1e-10", "ln_dt": "0.05", "inst_betas": "1,5", "inst_tokens": "128",
    "inst_seeds": "3", "inst_level": "0.1", "inst_saves": "6", "inst_steps": "8",
    "lat_tokens": "24", "lat_modes": "6", "lat_beta_max": "8", "causal_dims": "2",
    "causal_tokens": "4", "causal_seeds": "3", "causal_t1": "400", "renyi_tokens": "24",
    "renyi_seeds": "3", "renyi_times": "5,20", "hard_seeds": "3", "hard_interior": "6",
    "hard_betas": "30,300", "hard_t1": "4", "sync_ns": "4", "sync_betas": "0.5,4",
    "sync_seeds": "4", "sync_t1": "100",
}  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    module = experiments.get("theory")
    config = fw.apply_overrides(module.Config(), TINY, "theory")
    out = tmp_path_factory.mktemp("theory")
    module.run(config, out)
    figures = module.plot(out)
    return module, out, figures, module.report(out), fw.load(out)


def test_tiny_run_writes_its_data_figures_and_report(tiny):
    module, _, figures, report, (_, arrays, results) = tiny
    assert {f.name for f in figures} == {f for f, _ in report.figures}
    assert all(f.stat().st_size > 1000 for f in figures)
    assert report.markdown("theory", module.TITLE).startswith("## ")
    assert arrays["lat__sa__measured"].shape == (8, 6)
    assert arrays["hard__share_softmax"].shape == (2, 3)
    assert arrays["sync__synced"].shape == (1, 2)
    assert list(arrays["lat__usa__dominant_theory"]) == [dominant_mode(b) for b in range(1, 9)]
    assert set(results) == {"equiangular", "instability", "causal", "hardmax", "sync"}


def test_tiny_run_shows_what_the_theory_predicts(tiny):
    _, _, _, report, (_, _, results) = tiny
    verdicts = {c.claim[:40]: c.verdict for c in report.claims}
    assert len(verdicts) == len(report.claims) == 12
    by_start = lambda text: [c.verdict for c in report.claims if c.claim.startswith(text)]  # noqa: E731
    assert by_start("n equiangular tokens") == ["agrees"]  # 1e-8
    assert by_start("LayerNorm has no") == ["agrees"]  # first order
    assert by_start("SA: mode k") == by_start("USA: mode k") == ["agrees"]
    assert by_start("Causal attention") == ["agrees"]
    assert by_start("Hardmax, A positive") == ["agrees"]
    assert by_start("USA gradient ascent") == ["agrees"]
    assert results["causal"]["causal/2"]["first_moved"] <= 1e-12
    assert results["instability"]["lattice/sa"]["max_rel_error"] < 1e-5


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"kernels": "softmax"}, r"kernels must be among sa, usa; received softmax"),
        ({"eq_ns": "1,3"}, r"eq_ns are token counts >= 2; received \(1, 3\)"),
        ({"hard_betas": "0,10"}, r"these must be > 0: every β"),
        ({"ln_dt": "0"}, r"these must be > 0: ln_dt = 0.0"),
        ({"lat_modes": "20", "lat_tokens": "32"}, r"lat_modes must be below lat_tokens/2"),
        ({"inst_seeds": "0"}, r"these must be >= 1: inst_seeds = 0"),
        ({"renyi_times": "0,5"}, r"renyi_times must be times > 0"),
    ],
)
def test_bad_config_is_refused(overrides, match):
    module = experiments.get("theory")
    with pytest.raises(fw.ConfigError, match=match):
        fw.apply_overrides(module.Config(), overrides, "theory")


def test_a_rate_without_a_fit_window_is_reported_not_a_crash(tiny, tmp_path):
    # A rate with no linear window (fewer than 3 saved times below inst_level) is NaN,
    # stored as null in meta.json; the report says so instead of failing on the format.
    import json
    import shutil

    module, out, *_ = tiny
    copy = tmp_path / "theory"
    shutil.copytree(out, copy)
    meta = json.loads((copy / "meta.json").read_text())
    run = meta["results"]["instability"]["random/sa/1"]
    run["rel_error"][0], run["rel_se"][0] = None, None
    (copy / "meta.json").write_text(json.dumps(meta))
    report = module.report(copy)
    text = report.markdown("theory", module.TITLE)
    assert "β = 1, k = 1: +nan ± nan" in text and "no fit: fewer than 3 saved times" in text
