"""Adversarial experiment configurations, second round (issue 20): values that ran and then
crashed while writing the report, or died in the allocator, are refused before any work;
a report that fails to build still leaves a report saying what failed; a sweep task that
stopped at max_steps says so in its row.
"""

import json
import types

import pytest

from tpde import cli, experiments
from tpde.experiments import framework as fw
from tpde.experiments import sphere, sweep

REFUSED = {
    "blowup-before-t-star": ({"blowup_t1": "0.3"}, "blowup_t1 must exceed the blow-up time"),
    "ngpt-alpha-huge": ({"ngpt_alpha": "1e300"}, r"ngpt_alpha · scheme_dt must be <= 1"),
    "systems-huge": ({"systems": "1000000000000"}, "GiB of memory"),
    "scheme-tokens-huge": ({"scheme_tokens": "100000000"}, "GiB of memory"),
    "blowup-tokens-huge": ({"blowup_tokens": "100000000"}, "GiB of memory"),
}


@pytest.mark.parametrize("case", REFUSED.values(), ids=REFUSED.keys())
def test_sphere_config_refused_before_running(case):
    overrides, match = case
    with pytest.raises(fw.ConfigError, match=match):
        fw.apply_overrides(sphere.Config(), overrides, "sphere")


def test_every_experiment_has_a_memory_estimate():
    for name in experiments.names():
        config = experiments.get(name).Config()
        estimate = fw.memory_estimate(config)
        assert estimate > 0, name


def test_a_report_that_fails_still_leaves_a_report(tmp_path, monkeypatch):
    (tmp_path / "sphere").mkdir()
    (tmp_path / "sphere" / "meta.json").write_text("{}")

    def broken(out):
        raise KeyError("t_star")

    fake = types.SimpleNamespace(report=broken, TITLE="sphere")
    registry = types.SimpleNamespace(get=lambda name: fake, title=lambda name: fake.TITLE)
    monkeypatch.setattr(cli, "_experiments", lambda: registry)
    record = {"experiments": ["sphere"], "started": "now", "quick": True, "metadata": {}}
    path = cli.write_report(tmp_path, record)
    text = path.read_text()
    assert "report failed: KeyError" in text and "t_star" in text


def test_a_clustering_task_stopped_at_max_steps_carries_its_status():
    params = {"scheme": "post-ln", "n": 4, "d": 3, "samples": 2, "horizon": 1.0, "dt": 0.1,
              "saves": 2, "max_steps": 3, "seed": 0}  # fmt: skip
    result = sweep.clustering(params)
    assert result["flow_status"] == "max_steps: 2/2"
    assert sweep.task_status(result) == "max_steps: 2/2"
    assert json.dumps(result)
