"""Adversarial cases of the runner (issue 28): config values that passed the check and
crashed later, sweeps refused only after their workers started. Each table's cases are
refused before any work with a message naming the value; "fixed" marks those that crashed
(a traceback mid-run or while writing the report) before this round.
"""

import importlib
import math
import re

import numpy as np
import pytest

from tpde import experiments
from tpde.experiments import framework as fw

theory_run = importlib.import_module("tpde.experiments.theory.run")  # the module, not run()

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
    se = theory_run._jackknife_se(times, power, level=1.0)
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
