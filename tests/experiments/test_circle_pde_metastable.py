"""The circle-pde study's metastability parts (issue 35): the line fit with standard
errors, the escape crossing, the Fourier amplitudes, the Dirac rate, and the claims'
rules on synthetic data with known answers."""

import math
import re

import numpy as np
import pytest
import torch

from tpde.experiments import framework as fw
from tpde.experiments.circle_pde.config import Config, initial_density
from tpde.experiments.circle_pde.meta_report import (
    count_claims,
    escape_claim,
    escape_fit,
    first_stated,
    lifetime_claims,
    lifetime_fit,
    lifetimes_of,
    settled_sweep,
)
from tpde.experiments.circle_pde.metastable import (
    KMAX,
    crossing,
    dirac_rate,
    lead_share,
    leading_mode,
    line_fit,
    meta_times,
    mode_amplitudes,
)
from tpde.experiments.common.circle_clusters import Plateau, lifetimes, settled


def test_line_fit_is_exact_on_a_line_and_refuses_too_few_points():
    x = np.array([1.0, 2.0, 4.0, 7.0])
    fit = line_fit(x, 3.0 - 0.5 * x)
    assert fit["slope"] == pytest.approx(-0.5, abs=1e-13)
    assert fit["offset"] == pytest.approx(3.0, abs=1e-13)
    assert fit["slope_se"] < 1e-13 and fit["n"] == 4
    with pytest.raises(ValueError, match="received 2 x and 2 y, 2 distinct x"):
        line_fit([1.0, 2.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="received 3 x and 3 y, 1 distinct x"):
        line_fit([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])


def test_line_fit_recovers_a_known_slope_within_its_error():
    """y = 2 + 0.7x + N(0, 0.9²) at the study's ln N (four sizes × 3 draws): the slope is
    within 2 s.e. of 0.7 in about 95% of 400 seeded series (t with 10 degrees of freedom:
    92.7%; allowed 88–97%, ±3 binomial sd), and the s.e. averages the exact σ/√Σ(x − x̄)²
    within 10% (E s = 0.975σ for 10 degrees of freedom)."""
    x = np.repeat(np.log([1e3, 1e4, 1e5, 1e6]), 3)
    rng = np.random.default_rng(35)
    inside, errors = 0, []
    for _ in range(400):
        fit = line_fit(x, 2 + 0.7 * x + rng.normal(0, 0.9, len(x)))
        inside += abs(fit["slope"] - 0.7) <= 2 * fit["slope_se"]
        errors.append(fit["slope_se"])
    assert 0.88 <= inside / 400 <= 0.97
    exact = 0.9 / math.sqrt(((x - x.mean()) ** 2).sum())
    assert np.mean(errors) == pytest.approx(exact, rel=0.1)


def test_crossing_of_an_exponential_is_exact():
    times = np.arange(0.0, 10.0, 0.5)
    amplitude = 0.01 * np.exp(0.7 * times)
    expected = math.log(0.1 / 0.01) / 0.7
    assert crossing(times, amplitude, 0.1) == pytest.approx(expected, abs=1e-12)
    assert math.isnan(crossing(times, amplitude, 20.0))  # never reached
    assert math.isnan(crossing(times, amplitude, 0.005))  # already above at the start


def test_mode_amplitudes_of_symmetric_clouds():
    """Tokens at the 3rd roots of unity (radius 2: normalised): |ĉ_k| = 1 for k = 3, 6 and 0
    otherwise (to rounding: k products of unit numbers, ≤ 1e-14); a uniform lattice of 64
    has none below k = 64."""
    angles = 0.3 + 2 * math.pi * torch.arange(3, dtype=torch.float64) / 3
    points = 2 * torch.stack([angles.cos(), angles.sin()], -1)
    found = mode_amplitudes(points)
    assert len(found) == KMAX
    assert found == pytest.approx([0, 0, 1, 0, 0, 1, 0, 0], abs=1e-14)
    lattice = 2 * math.pi * torch.arange(64, dtype=torch.float64) / 64
    assert mode_amplitudes(torch.stack([lattice.cos(), lattice.sin()], -1)).max() < 1e-14


def test_dirac_rate_closed_forms():
    """Two antipodal clusters: 4e^{−2β}; three at β = 5: 3·4.25·e^{−7.5} = 7.052e-3 (MATH.md
    §9, against 7.044e-3 from the Jacobian); one cluster: 0."""
    assert dirac_rate(2, 3.0) == pytest.approx(4 * math.exp(-6.0), rel=1e-12)
    assert dirac_rate(3, 5.0) == pytest.approx(3 * 4.25 * math.exp(-7.5), rel=1e-12)
    assert dirac_rate(3, 5.0) == pytest.approx(7.052e-3, abs=1e-6)
    assert dirac_rate(1, 5.0) == 0.0


def _escape_arrays(sizes, draws, slope, rate, seed=0):
    """modes (sizes, draws, T, KMAX): |ĉ_3| = e^{rate·t}·|z|/√N with |z|² ~ Exp(1), so the
    crossing of ε is ln N/(2·rate) + (ln ε − ln|z|)/rate: slope 1/(2·rate) = ``slope``."""
    times = np.arange(0.0, 40.0, 0.25)
    rng = np.random.default_rng(seed)
    modes = np.full((len(sizes), draws, len(times), KMAX), 1e-6)
    for i, n in enumerate(sizes):
        for s in range(draws):
            z = math.sqrt(rng.exponential())
            modes[i, s, :, 2] = np.minimum(1.0, z / math.sqrt(n) * np.exp(rate * times))
    return {"times": times, "modes": modes}


def test_escape_fit_recovers_the_law_and_the_claim_follows_the_rule():
    sizes, rate = [1000, 10_000, 100_000, 1_000_000], 0.6826783336167468
    arrays = _escape_arrays(sizes, 6, 1 / (2 * rate), rate)
    config = {"sizes": sizes, "beta": 5.0, "escape_level": 0.1}
    fit = escape_fit(config, arrays, 3, 0.1)
    assert fit["n"] == 24 and fit["missing"] == 0
    assert abs(fit["slope"] - 1 / (2 * rate)) <= 2 * fit["slope_se"]
    law = {"k_star": 3, "law_slope": 1 / (2 * rate)}
    claim, fits = escape_claim(config, arrays, law)
    assert claim.verdict == "agrees" and fits["large"]["n"] == 18
    wrong = {"k_star": 3, "law_slope": 1 / rate}  # twice the slope
    assert escape_claim(config, arrays, wrong)[0].verdict == "differs"
    one = {"sizes": sizes[:1], "beta": 5.0, "escape_level": 0.1}
    assert escape_claim(one, {**arrays, "modes": arrays["modes"][:1]}, law)[0].verdict == "n/a"


def _meta(first_counts, lifetimes, k_star=2):
    """A sweep result at one β: first plateaus of the given counts, 2-cluster states of the
    given (duration, censored)."""
    return {
        "k_star": k_star, "rate": 0.6, "runner_up": 3, "runner_up_rate": 0.4,
        "first": [[c, 5.0, 10.0, False, c - 1] if c else None for c in first_counts],
        "tally": {str(c): first_counts.count(c) for c in set(first_counts) if c},
        "states": [[[0, 0.0, 4.0, False], [2, 5.0, d, censored]] for d, censored in lifetimes],
        "merges": [[[2, 1, 5.0 + d, 2.5]] if not censored else [] for d, censored in lifetimes],
    }  # fmt: skip


def test_count_claims_need_ninety_percent():
    nine = _meta([2] * 9 + [3], [(10.0, False)] * 10)
    eight = _meta([2] * 8 + [3, 0], [(10.0, False)] * 10)  # a draw without a plateau: a miss
    verdicts = [c.verdict for c in count_claims({"2.0": nine, "3.0": eight})]
    assert verdicts == ["agrees", "differs"]
    assert "9/10 (2 ×9, 3 ×1)" in count_claims({"2.0": nine})[0].outcome
    seeded = count_claims({"2.0": nine}, 2000, 0.1)[0]
    share = lead_share(2.0, 2000, 0.1)[0]
    assert f"first mode to reach |ĉ_k| = 0.1 in {share:.0%} of clouds" in seeded.outcome
    assert seeded.verdict == "agrees"  # the diagnostic does not change the rule


def test_leading_mode_and_its_line_in_the_count_claim():
    """The leading mode: the largest |ĉ_k| at the first save where the largest reaches ε
    (NaN saves of a stopped run ignored); the claim counts draws led by k* and first
    plateaus with the leading mode's count, and the misses among them."""
    a = np.full((4, 8), 0.01)
    a[1, 2], a[2, 3], a[2, 2] = 0.05, 0.2, 0.15  # mode 4 leads once the largest reaches 0.1
    a[3] = np.nan
    assert leading_mode(a, 0.1) == 4 and leading_mode(a, 0.5) is None
    nine = {**_meta([2] * 9 + [3], [(10.0, False)] * 10), "leading": [2] * 8 + [3, 3]}
    text = count_claims({"2.0": nine})[0].outcome
    assert "leading at the escape is k* in 8/10" in text
    assert "leading mode's count in 9/10 (misses: 1 of 1)" in text


def first_above(amplitudes: np.ndarray, rates: np.ndarray, level: float) -> np.ndarray:
    """Per row of ``amplitudes`` (clouds × modes), the first mode (1-based) whose amplitude
    grown as e^{rate·t} reaches ``level`` on the time grid 0, 2e-3, … < 10 (0: none)."""
    first = np.zeros(len(amplitudes), dtype=int)
    for t in np.arange(0.0, 10.0, 2e-3):
        open_ = first == 0
        if not open_.any():
            break
        grown = amplitudes[open_] * np.exp(rates * t)
        above = grown.max(axis=1) >= level
        first[np.flatnonzero(open_)[above]] = grown[above].argmax(axis=1) + 1
    return first


def test_lead_share_against_the_amplitudes_grown_in_time():
    """lead_share's closed form (mode k reaches ε at (ln ε√N − ln|z_k|)/λ_k) against the
    complex amplitudes c_k = (X + iY)/√(2N) grown as e^{λ_k t} on a time grid of step 2e-3,
    the first mode above ε taken (β = 8, N = 2000, ε = 0.1, 10 000 clouds each): the shares
    within 4 combined s.e. (s.e. ≈ 0.005 each); the k* share grows with N (0.41, 0.49,
    0.66 at N = 2000, 10⁴, 10⁶: k*'s lead over λ_3, λ_5 is small at β = 8)."""
    from tpde.theory import dominant_mode, instability_rate

    beta, n, level, samples = 8.0, 2000, 0.1, 10_000
    share, median = lead_share(beta, n, level, samples)
    k_star = dominant_mode(beta)
    rates = np.array([float(instability_rate(k, beta)) for k in range(1, 4 * k_star + 9)])
    rng = np.random.default_rng(7)
    c = np.abs(rng.standard_normal((samples, len(rates))) + 1j * rng.standard_normal(
        (samples, len(rates)))) / math.sqrt(2 * n)  # fmt: skip
    first = first_above(c, rates, level)
    brute = float((first == k_star).mean())
    se = math.sqrt(share * (1 - share) / samples)
    assert abs(share - brute) < 4 * math.sqrt(2) * se
    assert 1.5 < median < 2.5  # ln(ε√N)/λ_4 = 2.1 at |z_4| = 1; the first of 40 modes: sooner
    assert lead_share(beta, 10**4, level)[0] > share + 0.05


def test_lifetime_fit_recovers_kappa_and_leaves_censored_out():
    """T = e^{1 + 2β}·e^{N(0, 0.3²)} at β = 2, 2.5, 3 (6 draws each): κ within 2 s.e. of 2;
    the censored lifetimes (at 1, far below the line) do not enter the fit."""
    rng = np.random.default_rng(7)
    meta = {}
    for beta in (2.0, 2.5, 3.0):
        rows = [(math.exp(1 + 2 * beta + rng.normal(0, 0.3)), False) for _ in range(6)]
        meta[str(beta)] = _meta([2] * 7, [*rows, (1.0, True)])
    fit = lifetime_fit(meta, 2)
    assert fit["n"] == 18 and abs(fit["slope"] - 2) <= 2 * fit["slope_se"]
    assert fit["dirac_kappa"] == pytest.approx(2.0, abs=1e-12)  # ln(1/(4e^{−2β})) = 2β − ln 4
    claims, _ = lifetime_claims(meta, 2, 800.0)
    assert [c.verdict for c in claims] == ["agrees", "agrees"]
    assert "β = 2.0: 1/7 ≥ 800" in claims[0].outcome
    flat = {b: _meta([2] * 3, [(100.0 + i, False) for i in range(3)]) for b in ("2.0", "3.0")}
    assert lifetime_claims(flat, 2, 800.0)[0][0].verdict == "differs"  # κ ≈ 0
    censored = {"2.0": _meta([2], [(800.0, True)])}
    assert lifetime_claims(censored, 2, 800.0)[0][0].verdict == "n/a"


def test_meta_times_are_dense_then_every_meta_step():
    config = Config(dense_until=10.0, dense_step=0.5, meta_step=5.0, meta_t1=32.0)
    times = meta_times(config)
    assert times[:3] == pytest.approx([0, 0.5, 1.0]) and times[20] == pytest.approx(10.0)
    assert times[21:] == pytest.approx([15, 20, 25, 30, 32])
    assert meta_times(Config(meta_t1=35.0, dense_until=10.0))[-2:] == pytest.approx([30, 35])
    assert meta_times(Config(meta_t1=20.0))[-2:] == pytest.approx([19.75, 20])  # dense only


CONFIGS = {
    "level": ({"escape_level": "1.5"}, "escape_level must lie in (0, 1)"),
    "seeds": ({"escape_seeds": "0"}, "escape_seeds >= 1; received escape_level = 0.1"),
    "betas": ({"meta_betas": "2,-1"}, "meta_betas must lie in (0, 1e12]; received (2.0, -1.0)"),
    "count": ({"meta_count": "1"}, "meta_count >= 2 and meta_step > 0"),
    "horizon": ({"meta_t1": "5"}, "meta_t1 must be >= dense_until = 20.0"),
}


@pytest.mark.parametrize("case", CONFIGS.values(), ids=CONFIGS.keys())
def test_config_refusals(case):
    overrides, match = case
    with pytest.raises(fw.ConfigError, match=re.escape(match)):
        fw.apply_overrides(Config(), overrides, "circle-pde")


def test_runs_stop_once_escaped_or_absorbed():
    """An escape-only draw (500 tokens, saves every 1.0 to 20: calls of 16 saves) stops after
    its first call, |ĉ_3| past 2ε by t = 16; a sweep run at β = 2 (200 tokens, calls of
    16 saves of 5 time units) stops once one cluster has held its last 4 saves, far before
    t1 = 2000, and the rest of its series is 1."""
    from tpde.experiments.circle_pde.draws import escape_draw, sweep_draw
    from tpde.experiments.circle_pde.metastable import sweep_summary

    config = Config(sizes=(500, 1000), seeds=1, escape_seeds=2, dense_step=0.5, grids=(512,),
                    meta_betas=(2.0,), meta_size=200, meta_seeds=1, meta_t1=2000.0)  # fmt: skip
    saves = np.arange(0.0, 20.25, 1.0)
    rho0 = initial_density(config, config.beta, 512)
    g = torch.Generator().manual_seed(3)
    for n in (500, 1000):
        found = escape_draw(config, rho0.sample(n, generator=g), saves)
        assert (found["info"]["status"], found["info"]["until"]) == ("stopped", 16.0)
        modes = found["modes"]
        assert np.isfinite(modes[:17]).all() and np.isnan(modes[17:]).all()
        assert modes[16, 2] >= 2 * config.escape_level
    times = meta_times(config)
    points = initial_density(config, 2.0, 512).sample(200, generator=g)
    run = sweep_draw(config, 2.0, points, times)
    assert run["info"]["status"] == "stopped" and run["info"]["until"] < 500
    until = int(np.searchsorted(times, run["info"]["until"]))
    series = run["counts"]
    assert (series[until - 3 :] == 1).all() and series.max() >= 2 and (series >= 0).all()
    summary = sweep_summary(config, 2.0, times, series[None], [run["info"]], [run["modes"]])
    assert summary["merges"][0][-1][1] == 1  # the last merge: to one cluster
    assert summary["leading"] == [leading_mode(run["modes"], config.escape_level)]


def test_settled_states_of_constructed_count_series():
    """Counts saved every 1.0: 0 to t = 9, 2 clusters for 4 saves (a third bump still
    growing), 3 to t = 39 with a flicker to 2 at t = 30, 2 to t = 79, 1 to the end. The
    joined states are 0, 2, 3, 2, 1; 0 and the first 2 are followed by a larger count
    (formation), so the settled ones are 3 (lifetime 25, across the flicker), 2 (39) and 1
    (censored); rows and Plateaus give the same states."""
    times = np.arange(0.0, 101.0)
    counts = np.zeros(101, dtype=int)
    counts[10:14], counts[14:40], counts[30], counts[40:80], counts[80:] = 2, 3, 2, 2, 1
    states = lifetimes(times, counts, 2.0)
    assert [p.count for p in states] == [0, 2, 3, 2, 1]
    assert settled(states) == [
        Plateau(3, 14.0, 25.0, False, 2),
        Plateau(2, 40.0, 39.0, False, 1),
        Plateau(1, 80.0, 20.0, True, None),
    ]
    rows = [[p.count, p.start, p.duration, p.censored] for p in states]
    assert settled(rows) == [[p.count, p.start, p.duration, p.censored] for p in settled(states)]
    # A series that only rises (formation to the end) keeps its last state alone; one that
    # only falls keeps every state; a count that returns after a drop: each rise is dropped.
    assert [s[0] for s in settled([[0], [1], [2], [3]])] == [3]
    assert [s[0] for s in settled([[4], [3], [2], [1]])] == [4, 3, 2, 1]
    assert [s[0] for s in settled([[3], [2], [3], [2], [1]])] == [3, 3, 2, 1]
    assert settled([]) == []


def test_settled_sweep_reads_the_metastable_state_and_reports_the_rule_as_first_stated():
    """Per draw a 2-cluster formation stage of length 1 (3 clusters follow), then the
    metastable 2-state of lifetime e^{1 + 2β}: the settled fit recovers κ = 2 and c = 1 (to
    rounding), the rule as first stated reads the stages (κ = 0), and the claim says both."""
    sweep = {str(b): _meta([2], [(1.0, False)]) for b in (2.0, 2.5, 3.0)}
    for b, m in sweep.items():
        held = math.exp(1 + 2 * float(b))
        m["states"] = [[[0, 0.0, 1.0, False], [2, 1.0, 1.0, False], [3, 2.0, 5.0, False],
                        [2, 7.0, held, False], [1, 200.0, 1.0, True]]]  # fmt: skip
    lived = settled_sweep(sweep)
    assert [s[0] for s in lived["2.0"]["states"][0]] == [3, 2, 1]
    assert lived["2.0"]["first"] == sweep["2.0"]["first"]  # the rest of the sweep unchanged
    assert lifetimes_of(lived, 2)["2.5"] == [(math.exp(6.0), False)]
    fit, first = lifetime_fit(lived, 2), lifetime_fit(sweep, 2)
    assert fit["slope"] == pytest.approx(2.0, abs=1e-10)
    assert fit["offset"] == pytest.approx(1.0, abs=1e-9)
    assert first["slope"] == pytest.approx(0.0, abs=1e-10)
    claims, _ = lifetime_claims(lived, 2, 800.0)
    assert claims[0].verdict == "agrees" and "κ = 2.00 ± 0.00" in claims[0].outcome
    assert first_stated(sweep, 2) == (
        " Settled states only; the rule as first stated (formation stages in): "
        "κ = 0.00 ± 0.00, c = 0.00 ± 0.00 (3 lifetimes)."
    )
    censored = {"2.0": _meta([2], [(5.0, True)])}
    assert first_stated(censored, 2).endswith("(formation stages in): no fit.")
