"""Adversarial cases of the runner (issue 28): config values that passed the check and
crashed later, sweeps refused only after their workers started. Each table's cases are
refused before any work with a message naming the value; "fixed" marks those that crashed
(a traceback mid-run or while writing the report) before this round.
"""

import dataclasses
import importlib
import json
import math
import re
import typing

import numpy as np
import pytest
import torch

from tpde import cli, experiments
from tpde.experiments import framework as fw
from tpde.experiments import sweep
from tpde.experiments.sweep import studies

theory_rates = importlib.import_module("tpde.experiments.theory.rates")

# ---------------------------------------------------------------------- theory: the jackknife
THEORY = {
    "inst_seeds-one": (
        {"inst_seeds": "1"},
        "inst_seeds must be >= 2: the measured rates carry jackknife errors",
    ),  # fixed: report crashed (se None)
    "inst_seeds-zero": ({"inst_seeds": "0"}, "these must be >= 1: inst_seeds = 0"),
    "inst_seeds-negative": ({"inst_seeds": "-3"}, "inst_seeds = -3"),
}


@pytest.mark.parametrize("case", THEORY.values(), ids=THEORY.keys())
def test_theory_values_are_refused_before_any_work(case):
    overrides, match = case
    module = experiments.get("theory")
    with pytest.raises(fw.ConfigError, match=re.escape(match)):
        fw.apply_overrides(module.Config(), overrides, "theory")


def test_two_seeds_pass_the_check():
    module = experiments.get("theory")
    config = fw.apply_overrides(module.Config(), {"inst_seeds": "2"}, "theory")
    assert config.inst_seeds == 2


@pytest.mark.parametrize("rates", [(0.3, 0.5), (0.2, 0.25, 0.4), (1.0, 1.0)])
def test_the_jackknife_error_of_the_rates_is_the_textbook_one(rates):
    # Seed s has E|m_k(t)|² = 1e-4 e^(2 λ_s k t) exactly: leaving seed s out, the fit of the
    # others' summed power is a mixture, so the oracle refits it the same way; with two seeds
    # each leave-one-out fit is the other seed's rate and se = |λ_1 − λ_2|/2 (float64, 1e-9).
    times = np.linspace(0.0, 1.0, 9)
    lam = np.asarray(rates)
    k = np.arange(1, 4)
    power = 1e-4 * np.exp(2 * lam[None, :, None] * k[None, None, :] * times[:, None, None])
    se = theory_rates.jackknife_se(times, power, level=1.0)
    fits = []
    for s in range(len(lam)):
        rest = np.delete(power, s, 1).sum(1) / np.delete(power, s, 1)[0].sum(0)
        fits.append([np.polyfit(times, np.log(rest[:, j]), 1)[0] / 2 for j in range(3)])
    fits = np.asarray(fits)
    expected = np.sqrt((len(lam) - 1) / len(lam) * ((fits - fits.mean(0)) ** 2).sum(0))
    np.testing.assert_allclose(se, expected, rtol=1e-9, atol=1e-12)
    if len(lam) == 2:
        np.testing.assert_allclose(se, abs(lam[0] - lam[1]) / 2 * k, rtol=1e-9, atol=1e-12)
    assert np.all(np.isfinite(se)) and not math.isnan(se.sum())


# ------------------------------------------------------------ sweeps: a δ the dtype resolves
def _clustering(**fixed):
    return {"study": "clustering", "fixed": {"samples": 2, "n": 4, "horizon": 1.0, "dt": 0.1,
                                             "saves": 3, **fixed}}  # fmt: skip


SWEEPS = {
    "delta-below-eps": (
        _clustering(delta=1e-16),
        "float64 cannot resolve delta = 1e-16 in d = 3",
    ),  # fixed
    "delta-subnormal": (_clustering(delta=5e-324), "cannot resolve delta = 4.94066e-324"),  # fixed
    "delta-just-below-d2": (
        _clustering(d=2, delta=1.7e-15),
        "delta must be >= 4·d·eps = 1.78e-15",
    ),  # fixed
    "delta-in-grid-large-d": (
        {
            **_clustering(),
            "grid": {"d": [3, 1000]},
            "fixed": {**_clustering()["fixed"], "delta": 1e-13},
        },
        "in d = 1000",
    ),  # fixed: only the d = 1000 task cannot resolve it
    "delta-two": (_clustering(delta=2.0), "delta must lie in (0, 2)"),
    "delta-zero": (_clustering(delta=0.0), "delta = 0.0 is out of range"),
}


@pytest.mark.parametrize("case", SWEEPS.values(), ids=SWEEPS.keys())
def test_sweep_values_are_refused_by_the_spec_check(case):
    spec, message = case
    with pytest.raises(sweep.SweepError, match=re.escape(message)):
        sweep.check_spec(spec)


def test_the_spec_check_and_the_metric_draw_the_same_line():
    # Just above 4·d·eps the spec passes and the metric counts; just below both refuse.
    from tpde.measures import uniform_on_sphere
    from tpde.metrics import angular_cluster_count

    mu = uniform_on_sphere(4, 3, generator=torch.Generator().manual_seed(0))
    edge = studies.delta_resolution(3)
    assert edge == 4 * 3 * torch.finfo(torch.float64).eps
    sweep.check_spec(_clustering(delta=edge * (1 + 1e-12)))
    assert int(angular_cluster_count(mu, edge * (1 + 1e-12))) >= 1
    below = edge * (1 - 1e-12)
    with pytest.raises(sweep.SweepError, match="cannot resolve delta"):
        sweep.check_spec(_clustering(delta=below))
    with pytest.raises(ValueError, match="cannot resolve delta"):
        angular_cluster_count(mu, below)


def test_tpde_sweep_refuses_an_unresolvable_delta_before_any_work(tmp_path, capsys):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(_clustering(delta=1e-16)))
    out = tmp_path / "out"
    code = cli.main(["sweep", str(path), "--out", str(out), "--workers", "2"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("tpde: error: ") and "cannot resolve delta" in err
    assert not out.exists()  # nothing written, no worker started


# ---------------------------------------------------------------------- configs: the check itself
def _edge_values(annotation, current) -> list[str]:
    """Texts at the edges of a key's type: empty and repeated tuples, 0/1/2, tiny and huge."""
    if typing.get_origin(annotation) is tuple:
        first = str(current[0]) if current else "1"
        return ["", first, f"{first},{first}"]
    if annotation is int:
        return ["0", "1", "2", "-1"]
    if annotation is float:
        return ["0", "-1", "1e-300", "1e300"]
    return []


EDGES = [
    (name, f.name, text)
    for name in experiments.names()
    for f in dataclasses.fields(experiments.get(name).Config)
    for text in _edge_values(
        typing.get_type_hints(experiments.get(name).Config)[f.name],
        getattr(experiments.get(name).Config(), f.name),
    )
]


@pytest.mark.parametrize(("name", "key", "text"), EDGES, ids=[f"{n}.{k}={t}" for n, k, t in EDGES])
def test_the_config_check_never_fails_with_a_traceback(name, key, text):
    # Every value at a type's edge is accepted or refused with a ConfigError (`tpde: error`);
    # `real-attention --set sample_sizes=` failed with max() of an empty sequence.
    module = experiments.get(name)
    quick = fw.apply_overrides(module.Config(), module.QUICK, name)
    try:
        fw.apply_overrides(quick, {key: text}, name)
    except fw.ConfigError as err:
        assert f"{key}=" in str(err) or key in str(err)


CONFIGS = {
    "real-attention.sample_sizes-empty": (
        "real-attention",
        {"sample_sizes": ""},
        "sample_sizes must be >= 2 (at least one size)",
    ),  # fixed: ValueError max() arg is an empty sequence
    "circle-pde.bins-zero": ("circle-pde", {"bins": "0"}, "bins >= 1"),  # fixed: crashed mid-run
    "circle-pde.sizes-one": (
        "circle-pde",
        {"sizes": "1000"},
        "sizes must hold two different N at least",
    ),  # fixed: a rate fitted through one point, reported
    "circle-pde.sizes-repeated": (
        "circle-pde",
        {"sizes": "1000,1000"},
        "received (1000, 1000)",
    ),  # fixed: the same
    "circle-pde.sizes-empty": ("circle-pde", {"sizes": ""}, "sizes >= 2"),  # fixed: min() arg
    "circle-pde.amplitude-huge": (
        "circle-pde",
        {"amplitude": "1e300"},
        "amplitude must be <= 1/2",
    ),  # fixed: crashed at the start (negative density)
    "circle-pde.amplitude-just-above": (
        "circle-pde",
        {"amplitude": "0.5000001"},
        "<= 1/2",
    ),  # fixed
    "jko.taus-repeated": (
        "jko",
        {"taus": "0.2,0.1,0.1"},
        "taus must not repeat",
    ),  # fixed: nan slope
    "jko.taus-all-equal": ("jko", {"taus": "0.2,0.2"}, "received (0.2, 0.2)"),  # fixed: the same
    "meanfield.sizes-repeated": (
        "meanfield",
        {"sizes": "100,100"},
        "sizes needs two different values",
    ),  # fixed: a rate fitted through one point
    "real-attention.particle_dt-tiny": (
        "real-attention",
        {"particle_dt": "1e-300"},
        "particle_dt must be >= 6e-05",
    ),  # fixed: 10^5 RK4 steps, then max_steps
    "circle-pde.beta-huge": ("circle-pde", {"beta": "1e300"}, "beta <= 1e12"),  # fixed: crashed
}


@pytest.mark.parametrize("case", CONFIGS.values(), ids=CONFIGS.keys())
def test_config_values_are_refused_before_any_work(case):
    name, overrides, match = case
    module = experiments.get(name)
    with pytest.raises(fw.ConfigError, match=re.escape(match)):
        fw.apply_overrides(module.Config(), overrides, name)


def test_a_memory_estimate_that_fails_is_a_config_error():
    @dataclasses.dataclass(frozen=True)
    class Config:
        sizes: tuple[int, ...] = (1,)

        def memory_bytes(self) -> int:
            return 8 * max(self.sizes)

    with pytest.raises(fw.ConfigError, match=re.escape(
        "toy: the memory estimate (Config.memory_bytes) cannot be made from these values "
        "(ValueError: max() arg is an empty sequence); a size key is empty or out of range "
        "(received sizes=())"
    )):  # fmt: skip
        fw.apply_overrides(Config(), {"sizes": ""}, "toy")


def test_circle_pde_edges_that_work_pass():
    module = experiments.get("circle-pde")
    config = fw.apply_overrides(
        module.Config(), {"amplitude": "0.5", "bins": "1", "sizes": "10,20"}, "circle-pde"
    )
    assert (config.amplitude, config.bins, config.sizes) == (0.5, 1, (10, 20))
