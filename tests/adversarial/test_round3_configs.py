"""Adversarial configurations of the ``theory`` and ``real-decoder`` experiments, third round
(issue 20): every key with a bad value is refused before any work with a message naming
the key, its range and the value received; figures that fail still leave a report saying
what failed. "fixed" marks the cases that ran (or crashed mid-run) before this round
(40 cases, 37 failed before).
"""

import json
import types

import pytest

from tpde import cli, experiments
from tpde.experiments import framework as fw

THEORY = {
    "eq_ns-huge": ({"eq_ns": "1000000000000"}, "at most 4096"),  # fixed
    "eq_rtol-tiny": ({"eq_rtol": "1e-300"}, r"eq_rtol must lie in \[1e-14, 0.01\]"),  # fixed
    "eq_rtol-huge": ({"eq_rtol": "10"}, "eq_rtol must lie in"),  # fixed
    "eq_beta-usa-overflow": ({"eq_beta": "1e300"}, "eq_beta must be at most 700"),  # fixed
    "eq_saves-huge": ({"eq_saves": "1000000000000"}, "GiB of memory"),  # fixed
    "ngpt_alpha-huge": ({"ngpt_alpha": "1e300"}, r"ngpt_alpha must lie in \(0, 10\]"),  # fixed
    "ln_dt-huge": ({"ln_dt": "1e300"}, r"ln_dt must lie in \(0, 1\]"),  # fixed
    "ln_dt-tiny": ({"ln_dt": "1e-300"}, r"eq_t1 / ln_dt = 2e\+300"),  # fixed
    "eq_t1-huge": ({"eq_t1": "1e300"}, r"eq_t1 / ln_dt"),  # fixed
    "inst_betas-usa": ({"inst_betas": "1e300"}, "inst_betas must be at most 700"),  # fixed
    "inst_betas-empty": ({"inst_betas": ""}, "inst_betas must hold at least one"),  # fixed
    "inst_modes-aliasing": ({"inst_modes": "1000000000000"}, "inst_modes must be below"),  # fixed
    "inst_level-above-1": ({"inst_level": "1e300"}, r"inst_level must lie in \(0, 1\]"),  # fixed
    "inst_level-below-1/N": ({"inst_level": "1e-300"}, "at least 2/inst_tokens"),  # fixed
    "inst_steps-huge": ({"inst_steps": "1000000000000"}, "inst_steps = 1e\\+12"),  # fixed
    "lat_tokens-huge": ({"lat_tokens": "1000000000000"}, "GiB of memory"),  # fixed
    "lat_beta_max-usa": ({"lat_beta_max": "1000"}, "lat_beta_max must be at most 700"),  # fixed
    "lat_delta-huge": ({"lat_delta": "1e300"}, r"lat_delta must lie in \[1e-12, 0.01\]"),  # fixed
    "lat_delta-tiny": ({"lat_delta": "1e-300"}, "lat_delta must lie in"),  # fixed
    "causal_tokens-huge": ({"causal_tokens": "1000000000000"}, "GiB of memory"),  # fixed
    "causal_seeds-huge": ({"causal_seeds": "1000000000000"}, "GiB of memory"),  # fixed
    "causal_tol-tiny": ({"causal_tol": "1e-300"}, "causal_tol must lie in"),  # fixed
    "causal_tol-huge": ({"causal_tol": "1e300"}, "causal_tol must lie in"),  # fixed
    "renyi_beta-huge": (
        {"renyi_beta": "1e300"},
        "renyi_beta and hard_betas must be at most",
    ),  # fixed
    "renyi_times-decreasing": ({"renyi_times": "40,10"}, "renyi_times must be increasing"),  # fixed
    "renyi_times-negative": ({"renyi_times": "-1"}, "renyi_times must be times > 0"),
    "hard_seeds-huge": ({"hard_seeds": "1000000000000"}, "GiB of memory"),  # fixed
    "hard_vertices-huge": ({"hard_vertices": "1000000000000"}, "at most 4096"),  # fixed
    "hard_betas-empty": ({"hard_betas": ""}, "hard_betas must hold at least one"),  # fixed
    "hard_t1-huge": ({"hard_t1": "1e300"}, r"hard_t1 / 0.05"),  # fixed
    "sync_ns-zero": ({"sync_ns": "0"}, r"sync_ns are token counts >= 2; received \(0,\)"),  # fixed
    "sync_betas-overflow": ({"sync_betas": "1e300"}, "sync_betas must be at most 700"),  # fixed
    "kernels-unknown": ({"kernels": "softmax"}, "kernels must be among sa, usa"),
}

DECODER = {
    "splits-empty": ({"splits": ""}, "splits must hold at least one k"),  # fixed: max() arg
    "flow_rtol-tiny": ({"flow_rtol": "1e-300"}, r"flow_rtol must lie in \[1e-13, 1e-2\]"),  # fixed
    "cluster_delta-unresolvable": ({"cluster_delta": "1e-300"}, "cannot be resolved"),  # fixed
    "loop_passes-huge": ({"loop_passes": "1000000000000"}, "loop_passes at most 100000"),  # fixed
    "sentences-beyond-corpus": ({"sentences": "239"}, "must be in 1 … 238"),
}


@pytest.mark.parametrize(
    ("name", "case"),
    [("theory", c) for c in THEORY.values()] + [("real-decoder", c) for c in DECODER.values()],
    ids=[f"theory.{k}" for k in THEORY] + [f"real-decoder.{k}" for k in DECODER],
)
def test_bad_values_are_refused_before_any_work(name, case):
    overrides, match = case
    module = experiments.get(name)
    quick = fw.apply_overrides(module.Config(), module.QUICK, name)
    with pytest.raises(fw.ConfigError, match=match) as err:
        fw.apply_overrides(quick, overrides, name)
    key = next(iter(overrides))
    assert f"received {key}=" in str(err.value)  # the value given is named


def test_the_cli_refuses_them_before_making_the_folder(capsys, tmp_path):
    out = tmp_path / "out"
    code = cli.main(["run", "theory", "--quick", "--set", "sync_ns=0", "--out", str(out)])
    assert code == 2 and "sync_ns are token counts >= 2" in capsys.readouterr().err
    assert not out.exists()


def test_figures_that_fail_still_leave_a_report_saying_so(tmp_path, monkeypatch, capsys):
    # fixed: an exception in plot() ended `tpde run` with a traceback and no report.
    def run(config, out):
        out.mkdir(parents=True)
        (out / "meta.json").write_text(json.dumps({"config": {}}))

    def plot(out):
        raise OverflowError("cannot convert float infinity to integer")

    report = types.SimpleNamespace(summary="3/3 agree.", markdown=lambda name, title: "body\n")
    fake = types.SimpleNamespace(run=run, plot=plot, report=lambda out: report, TITLE="T")
    registry = types.SimpleNamespace(get=lambda n: fake, title=lambda n: fake.TITLE)
    monkeypatch.setattr(cli, "_experiments", lambda: registry)
    cli._run_experiment("theory", None, tmp_path, 1)
    assert "figures failed: OverflowError" in capsys.readouterr().err
    record = {"experiments": ["theory"], "started": "now", "quick": True, "metadata": {}}
    text = cli.write_report(tmp_path, record).read_text()
    assert "3/3 agree. Figures failed: OverflowError: cannot convert float infinity" in text
    assert "The figures of `theory` failed" in text and "body" in text
