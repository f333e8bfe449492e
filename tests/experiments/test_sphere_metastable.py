"""The sphere study's metastability on S² (issue 35): the cluster counter on the sphere,
the degree-l profiles and their peaks (the prediction rule), the escape fit and the
claims' rules on constructed inputs with known answers."""

import math

import numpy as np
import pytest
import torch
from scipy.special import eval_legendre

from tpde.experiments.circle_pde.meta_report import lifetime_fit, lifetimes_of
from tpde.experiments.common.sphere_clusters import (
    Profile,
    SphereCells,
    degree_profiles,
    fibonacci_cells,
)
from tpde.experiments.sphere.config import Config
from tpde.experiments.sphere.meta_report import (
    count_claims,
    escape_claim,
    escape_count_claim,
    peak_hits,
    runner_up,
    settled,
)
from tpde.experiments.sphere.metastable import (
    LMAX,
    amplitudes,
    evolved_coefficients,
    meta_times,
    predictions,
)
from tpde.theory import dominant_mode, instability_rate


@pytest.fixture(scope="module")
def cells():
    return SphereCells()


def _rotation(seed: int) -> np.ndarray:
    q, r = np.linalg.qr(np.random.default_rng(seed).normal(size=(3, 3)))
    return q * np.sign(np.diag(r))


def _groups(centres, sizes, spread: float, seed: int = 0) -> torch.Tensor:
    """Tight groups: sizes[i] tokens around centres[i], Gaussian offsets of sd ``spread``
    per coordinate, normalised (an angular spread of about that size)."""
    rng = np.random.default_rng(seed)
    out = []
    for c, n in zip(np.asarray(centres, float), sizes, strict=True):
        x = c + spread * rng.normal(size=(n, 3))
        out.append(x / np.linalg.norm(x, axis=1, keepdims=True))
    return torch.as_tensor(np.concatenate(out))


def _uniform(n: int, seed: int) -> torch.Tensor:
    x = np.random.default_rng(seed).normal(size=(n, 3))
    return torch.as_tensor(x / np.linalg.norm(x, axis=1, keepdims=True))


def test_fibonacci_cells_are_unit_and_balanced():
    c = fibonacci_cells(1000)
    np.testing.assert_allclose(np.linalg.norm(c, axis=1), 1, atol=1e-15)
    # equal-area bands: the z are the midpoints of 1000 equal intervals of [−1, 1]
    np.testing.assert_allclose(np.sort(c[:, 2]), np.sort(1 - (2 * np.arange(1000) + 1) / 1000))
    assert np.linalg.norm(c.mean(0)) < 1e-2
    with pytest.raises(ValueError, match="count >= 2 cells; received 1"):
        fibonacci_cells(1)


def test_counter_refuses_bad_settings():
    with pytest.raises(ValueError, match=r"received radius = 0\.0, level = 2\.0"):
        SphereCells(radius=0.0)
    with pytest.raises(ValueError, match=r"level = 1\.0, min_share = 0\.02"):
        SphereCells(level=1.0)


def test_uniform_tokens_have_no_cluster(cells):
    """20 000 uniform tokens: 40 per cap on average, the level 80 is 6 sd away."""
    assert cells.count(_uniform(20_000, 1)) == 0


@pytest.mark.parametrize("k", [2, 4, 6])
def test_separated_groups_are_counted_with_their_masses_and_centres(cells, k):
    """k equal tight groups (sd 0.02 rad) at the antipodes / a tetrahedron / an octahedron,
    rotated off the lattice's axes, plus 2000 uniform tokens: k clusters, each holding its
    group (its share of the tokens, ±1 uniform token per 2 cap shares), centred on it
    within 0.01 rad."""
    shapes = {
        2: [[0, 0, 1], [0, 0, -1]],
        4: np.array([[1, 1, 1], [1, -1, -1], [-1, 1, -1], [-1, -1, 1]]) / math.sqrt(3),
        6: [[1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1]],
    }
    centres = np.asarray(shapes[k], float) @ _rotation(k).T
    tokens = torch.cat([_groups(centres, [500] * k, 0.02, seed=k), _uniform(2000, k)])
    found = cells.clusters(cells.masses(tokens))
    assert len(found) == k == cells.count(tokens)
    share = 500 / len(tokens)
    for mass, centre in found:
        nearest = np.max(centres @ centre)
        assert math.acos(min(1.0, nearest)) < 0.01
        assert share <= mass <= share + 0.02  # the group plus the uniform tokens near it


def test_groups_closer_than_the_cap_merge_and_small_groups_are_dropped(cells):
    """Two groups 0.15 rad apart (less than the cap radius 0.2: the average between them
    stays above the level) are one cluster, 1.0 rad apart two; a group of 1 % of the mass
    (below min_share = 2 %) is none."""
    north = np.array([0.0, 0.0, 1.0])
    for gap, count in ((0.15, 1), (1.0, 2)):
        other = np.array([math.sin(gap), 0.0, math.cos(gap)])
        tokens = torch.cat([_groups([north, other], [400, 400], 0.01), _uniform(1000, 3)])
        assert cells.count(tokens) == count
    tokens = torch.cat([_groups([north], [20], 0.01), _uniform(1980, 4)])
    assert cells.count(tokens) == 0


def test_degree_profiles_equal_the_legendre_sums():
    """f_l(y) = (1/N)Σ_j P_l(⟨y, x_j⟩) against scipy's Legendre polynomials, l ≤ 8: the
    recurrence and the moments round at ~1e-16 per step (allowed 1e-13); weights too."""
    x, y = _uniform(700, 5).numpy(), fibonacci_cells(200)
    w = np.random.default_rng(6).random(700)
    w /= w.sum()
    for l, row in zip(range(LMAX + 1), degree_profiles(x, range(LMAX + 1), y), strict=True):
        np.testing.assert_allclose(row, eval_legendre(l, y @ x.T).mean(1), atol=1e-13)
    got = Profile(x, 5, torch.as_tensor(w))(y)[5]
    np.testing.assert_allclose(got, eval_legendre(5, y @ x.T) @ w, atol=1e-13)


def test_a_degree_two_part_has_two_antipodal_maxima(cells):
    """f_2 is a traceless quadratic form on S²: its maxima are ±(top eigenvector)."""
    for seed in range(3):
        x = _uniform(300, 10 + seed)
        coefficients = np.zeros(3)
        coefficients[2] = 1
        found = Profile(x, 2).maxima(coefficients, cells)
        assert len(found) == 2
        assert found[0] @ found[1] == pytest.approx(-1, abs=1e-6)
        second = (x.numpy().T @ x.numpy()) / len(x)
        top = np.linalg.eigh(second)[1][:, -1]
        assert abs(found[0] @ top) == pytest.approx(1, abs=1e-6)


def test_the_octahedron_degree_four_part_peaks_at_its_six_vertices(cells):
    """Tokens at ±e_i (rotated): f_4(y) = (1/3)Σ_i P_4(y_i), the cubic harmonic, has its six
    maxima at the vertices (0.583 there, −0.389 at the cube's corners)."""
    rotation = _rotation(7)
    vertices = np.concatenate([np.eye(3), -np.eye(3)]) @ rotation.T
    coefficients = np.zeros(5)
    coefficients[4] = 1
    found = Profile(vertices, 4).maxima(coefficients, cells)
    assert len(found) == 6
    assert np.sort(np.max(found @ vertices.T, axis=1)) == pytest.approx(np.ones(6), abs=1e-6)


def test_predictions_and_evolved_coefficients(cells):
    """β = 3 (l* = 2): the rule predicts 2 clusters for any cloud; the evolved profile's
    weights are (2l + 1)e^{(λ_l − λ_l*)T}: 2l* + 1 at l*, less elsewhere, none at l = 0."""
    assert dominant_mode(3.0, d=3) == 2
    guess = predictions(_uniform(500, 8), 3.0, cells)
    assert guess["l_star"] == 2 and guess["peaks"] == 2 and guess["evolved"] >= 1
    a = evolved_coefficients(5.0, 10_000)
    assert a[0] == 0 and a[3] == pytest.approx(7, rel=1e-14)
    assert all(a[l] < 2 * l + 1 for l in range(1, LMAX + 1) if l != 3)
    horizon = math.log(10_000) / (2 * float(instability_rate(3, 5.0, d=3)))
    rate = float(instability_rate(4, 5.0, d=3)) - float(instability_rate(3, 5.0, d=3))
    assert a[4] == pytest.approx(9 * math.exp(rate * horizon), rel=1e-12)


def test_amplitudes_of_uniform_tokens_and_of_one_point():
    """N E_l ≈ 1 on average for uniform tokens (mean over l ≤ 8 and 40 clouds of 500: the
    χ² mean has relative sd ≈ 1/√(40·Σ(2l+1)/8) ≈ 0.05; allowed 0.2); all tokens at one
    point: E_l = P_l(1) = 1."""
    mean = np.mean([(amplitudes(_uniform(500, s)) ** 2).mean() * 500 for s in range(40)])
    assert mean == pytest.approx(1, abs=0.2)
    one = torch.tensor([[0.6, 0.0, 0.8]] * 10, dtype=torch.float64)
    np.testing.assert_allclose(amplitudes(one), np.ones(LMAX), atol=1e-13)


def _escape(sizes, draws, rate, seed=0):
    """A_l* = e^{rate·t}·z/√N (z² ~ χ²_7/7), so the crossing of ε has slope 1/(2·rate)."""
    times = np.arange(0.0, 30.0, 0.25)
    rng = np.random.default_rng(seed)
    modes = np.full((len(sizes), draws, len(times), LMAX), 1e-6)
    for i, n in enumerate(sizes):
        for s in range(draws):
            z = math.sqrt(rng.chisquare(7) / 7)
            modes[i, s, :, 2] = np.minimum(1.0, z / math.sqrt(n) * np.exp(rate * times))
    return {"meta_escape_times": times, "meta_escape_modes": modes}


def test_escape_claim_recovers_the_law_and_follows_the_rule():
    sizes, beta = [1000, 10_000, 100_000, 1_000_000], 5.0  # the study's four sizes
    rate = float(instability_rate(3, beta, d=3))
    config = {"escape_sizes": sizes, "escape_draws": [4, 4, 2, 1], "escape_beta": beta,
              "escape_level": 0.1}  # fmt: skip
    claim, fits = escape_claim(config, _escape(sizes, 4, rate))
    assert claim.verdict == "agrees" and fits["main"]["n"] == 11
    assert fits["large"]["n"] == 7 and "without the smallest N: " in claim.outcome
    assert set(fits["large"]["times"]) == {"10000", "100000", "1000000"}
    assert fits["law"] == pytest.approx(1 / (2 * rate))
    assert runner_up(beta) == 2  # λ_2 = 0.624 < λ_3 = 0.672 (λ_4 = 0.511)
    assert fits["second"] is None  # degree 2 is flat at 1e-6 here: no crossing
    assert escape_claim(config, _escape(sizes, 4, rate / 2))[0].verdict == "differs"
    one = {**config, "escape_sizes": sizes[:1], "escape_draws": [4]}
    assert escape_claim(one, _escape(sizes[:1], 4, rate))[0].verdict == "n/a"


def _sweep(first, peaks):
    return {
        "l_star": 3, "peaks": peaks, "evolved": [p + 1 for p in peaks],
        "first": [[c, 4.0, 10.0, False, c - 1] if c else None for c in first],
    }  # fmt: skip


def test_the_peak_rule_needs_ninety_percent_and_counts_no_plateau_as_a_miss():
    nine = _sweep([3] * 9 + [4], [3] * 10)
    eight = _sweep([3] * 8 + [4, 0], [3] * 10)
    assert peak_hits(eight["first"], eight["peaks"]) == (8, 9, 10)
    verdicts = [c.verdict for c in count_claims({"5.0": nine, "8.0": eight})]
    assert verdicts == ["agrees", "differs"]
    outcome = count_claims({"5.0": nine})[0].outcome
    assert outcome.startswith("9/10 (±1: 10/10); first plateaus 3 ×9, 4 ×1")
    runs = [{"n": 1000, "first": [3, 4.0, 1.0, False, 2], "peaks": 3},
            {"n": 4000, "first": None, "peaks": 4}]  # fmt: skip
    claim = escape_count_claim({"beta": 5.0, "l_star": 3, "runs": runs})
    assert claim.verdict == "differs" and "N = 4000: 0/1" in claim.outcome


def test_meta_times_and_bad_config():
    config = Config(meta_dense_until=2.0, meta_dense_step=0.5, meta_step=3.0, meta_t1=11.0)
    np.testing.assert_allclose(meta_times(config), [0, 0.5, 1, 1.5, 2, 5, 8, 11])
    with pytest.raises(ValueError, match=r"escape_sizes .* received \(1000, 2000\) and \(4,\)"):
        Config(escape_sizes=(1000, 2000), escape_draws=(4,)).check()
    with pytest.raises(ValueError, match="meta_betas must lie in"):
        Config(meta_betas=(0.0,)).check()
    with pytest.raises(ValueError, match=r"meta_count >= 2; received .* meta_count = 1"):
        Config(meta_count=1).check()
    with pytest.raises(ValueError, match="escape_level is an amplitude"):
        Config(escape_level=1.5).check()
    with pytest.raises(ValueError, match="meta_dense_step <= meta_dense_until <= meta_t1"):
        Config(meta_t1=10.0).check()


def test_settled_states_leave_formation_stages_out_of_the_lifetimes():
    """A 2-cluster stage that 3 clusters follow is formation, not the metastable 2-state:
    the lifetime read is the later 2-state's (30), and log T = c + κβ through exact
    lifetimes e^{1 + 2β} recovers κ = 2 (to rounding)."""
    states = [[[0, 0.0, 3.0, False], [2, 3.0, 2.0, False], [3, 5.0, 9.0, False],
               [2, 14.0, 30.0, False], [1, 44.0, 10.0, True]]]  # fmt: skip
    kept = settled({"5.0": {"states": states}})["5.0"]["states"][0]
    assert [s[0] for s in kept] == [3, 2, 1]  # 0 → 2 is a formation stage too
    assert lifetimes_of(settled({"5.0": {"states": states}}), 2)["5.0"] == [(30.0, False)]
    sweep = {str(b): {"states": [[[0, 0.0, 1.0, False], [2, 1.0, 1.0, False],
                                  [3, 2.0, 5.0, False], [2, 7.0, math.exp(1 + 2 * b), False]]]}
             for b in (2.0, 2.5, 3.0)}  # fmt: skip
    fit = lifetime_fit(settled(sweep), 2)
    assert fit["slope"] == pytest.approx(2.0, abs=1e-10)
    assert lifetime_fit(sweep, 2)["slope"] == pytest.approx(0.0, abs=1e-10)  # the stages: 1.0
