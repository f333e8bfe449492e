"""The S² seeding diagnostics of the sphere study's metastability (issue 35): the degree
leading at the escape, measured and predicted from a draw's own amplitudes, the lead share
of uniform clouds, the peaks at the escape, on constructed cases with known answers."""

import math

import numpy as np
import pytest
import torch

from tests.experiments.test_circle_pde_metastable import first_above
from tests.experiments.test_sphere_metastable import _rotation
from tpde.experiments.common.sphere_clusters import SphereCells
from tpde.experiments.sphere.meta_report import count_claims, seeding_text, share_text
from tpde.experiments.sphere.metastable import LMAX, Watch, amplitudes
from tpde.experiments.sphere.seeding import (
    KEYS,
    degree_rates,
    escape_peaks,
    escape_save,
    evolved_weights,
    lead_share,
    own_peaks,
    predicted_lead,
    seeding,
)
from tpde.theory import dominant_mode


@pytest.fixture(scope="module")
def cells():
    return SphereCells()


def _octahedron(seed: int = 3) -> np.ndarray:
    """Tokens at ±e_i, rotated off the lattice's axes: degrees 1, 2, 3 vanish (cubic
    symmetry), E_4 = 7/12 is the largest (f_4 at a vertex: (2 + 4·P_4(0))/6)."""
    return np.concatenate([np.eye(3), -np.eye(3)]) @ _rotation(seed).T


def _grown(start, rates, times) -> np.ndarray:
    """A_l(t) = A_l(0)e^{λ_l t}, exactly linear amplitudes (T, top)."""
    return np.asarray(start)[None, :] * np.exp(np.outer(times, rates))


def test_predicted_lead_is_the_largest_grown_amplitude_and_refuses_bad_shapes():
    """Degree 2 starts 3× above degree 3 but grows slower by 0.1: it leads until
    t = ln 3/0.1 = 11.0, degree 3 after."""
    start, rates = np.array([1e-3, 3e-2, 1e-2, 1e-3]), np.array([0.1, 0.5, 0.6, 0.2])
    assert predicted_lead(start, rates, 10.9) == 2
    assert predicted_lead(start, rates, 11.1) == 3
    with pytest.raises(ValueError, match=r"received shapes \(4,\) and \(3,\)"):
        predicted_lead(start, rates[:3], 1.0)


def test_escape_save_and_seeding_of_exactly_linear_amplitudes(cells):
    """Amplitudes that grow exactly linearly: the measured lead (the largest A_l at the
    first save above ε) is the predicted one, at the save where the largest first reaches
    ε; a stopped run's NaN rows are ignored; a run that never reaches ε has no seeding."""
    beta, level = 5.0, 0.1
    rates = degree_rates(beta, LMAX)
    times = np.arange(0.0, 20.0, 0.25)
    start = np.full(LMAX, 0.01)
    start[1] = 0.02  # degree 2 doubled: it leads l* = 3 (λ_3 − λ_2 = 0.048) at ε
    a = _grown(start, rates, times)
    j = escape_save(a, level)
    assert a[j].max() >= level > a[j - 1].max()
    pair = np.array([[0.0, 0.6, 0.8], [0.0, -0.6, -0.8]])  # f_2 = P_2(⟨x, e⟩): 2 peaks
    found = seeding(pair, a, times, beta, level, cells)
    assert found["lead"] == found["predicted"] == 2 and found["escape_time"] == times[j]
    assert found["lead_peaks"] == 2
    a[j + 5 :] = np.nan
    assert escape_save(a, level) == j
    assert seeding(pair, a * 1e-3, times, beta, level, cells) == dict.fromkeys(KEYS)


def test_the_peaks_of_a_cloud_whose_leading_degree_is_known(cells):
    """The octahedron at β = 10 (l* = 4): its leading degree is 4 by construction (degrees
    1–3 vanish), its degree-4 part peaks at the six vertices, and so does its profile
    evolved linearly (degrees 4, 6, 8 only, degree 4 the fastest), at the escape and at
    the lead's amplitude 1; two antipodal tokens have a degree-2 part with 2 peaks."""
    octahedron = _octahedron()
    assert int(np.argmax(amplitudes(torch.as_tensor(octahedron)))) + 1 == 4
    assert own_peaks(octahedron, 4, cells) == 6
    found = escape_peaks(octahedron, 10.0, 4, 2.0, 0.1, cells)
    assert found == {"lead_peaks": 6, "escape_evolved_peaks": 6, "evolved_peaks": 6}
    pair = np.array([[0.0, 0.6, 0.8], [0.0, -0.6, -0.8]])
    assert own_peaks(pair, 2, cells) == 2


def test_evolved_weights_are_the_linear_growth_of_the_density():
    """(2l + 1)e^{(λ_l − λ_max)T}: 2l* + 1 at l*, 0 at l = 0, the ratio of two degrees
    e^{(λ_l − λ_m)T}(2l + 1)/(2m + 1)."""
    beta, horizon = 10.0, 7.5
    w, rates = evolved_weights(beta, horizon, LMAX), degree_rates(beta, LMAX)
    assert w[0] == 0 and w[4] == pytest.approx(9, rel=1e-14)
    assert w[3] / w[5] == pytest.approx(7 / 11 * math.exp((rates[2] - rates[4]) * horizon))


def test_watch_records_amplitudes_and_the_own_peaks_at_the_first_save_above_the_level(cells):
    """A near-uniform cloud (all A_l ≈ 1/√N ≈ 0.01 < 0.1) then the octahedron: counts and
    amplitudes at both saves, the own peaks read at the octahedron's save (lead 4: 6)."""
    counts, modes = np.full(2, -1), np.full((2, LMAX), np.nan)
    watch = Watch(counts, modes, 0.1, cells)
    x = np.random.default_rng(1).normal(size=(10_000, 3))
    uniform = torch.as_tensor(x / np.linalg.norm(x, axis=1, keepdims=True))
    watch(0, type("M", (), {"points": uniform}))
    assert watch.own is None and counts[0] == 0 and modes[0].max() < 0.1
    watch(1, type("M", (), {"points": torch.as_tensor(_octahedron())}))
    assert watch.own == 6 and counts[1] == 6
    assert modes[1, 3] == pytest.approx(math.sqrt(7 / 12), rel=1e-12)


def test_lead_share_against_amplitudes_grown_in_time():
    """The closed form (degree l reaches ε at (ln ε√N − ln z_l)/λ_l) against Gaussian
    coefficients, 2l + 1 per degree, A_l = |c_l|/√(N(2l + 1)), grown as e^{λ_l t} on a grid
    of step 2e-3, the first degree above ε taken (β = 5, N = 4000, ε = 0.1, 10 000 clouds
    each): the shares within 4 combined s.e. (≈ 0.005 each); the share grows with N and
    tends to 1 (β = 3: λ_2 leads λ_3 by 0.16)."""
    beta, n, level, samples = 5.0, 4000, 0.1, 10_000
    share, median = lead_share(beta, n, level, samples)
    rates = degree_rates(beta, LMAX)
    rng = np.random.default_rng(7)
    a = np.array([np.linalg.norm(rng.standard_normal((samples, 2 * l + 1)), axis=1)
                  / math.sqrt(n * (2 * l + 1)) for l in range(1, LMAX + 1)]).T  # fmt: skip
    first = first_above(a, rates, level)
    brute = float((first == dominant_mode(beta, d=3)).mean())
    assert abs(share - brute) < 4 * math.sqrt(2) * math.sqrt(share * (1 - share) / samples)
    assert 1.5 < median < 4.0  # ln(ε√N)/λ_3 = 2.5 at z = 1
    assert lead_share(beta, 10**6, level)[0] > share + 0.1
    assert lead_share(3.0, 10**12, level)[0] > 0.99
    with pytest.raises(ValueError, match=r"received n = 4000, level = 1\.5"):
        lead_share(beta, n, 1.5)


def _runs(leads, predicted, lead_peaks):
    return [{"lead": a, "predicted": b, "lead_peaks": c, "own_peaks": c,
             "escape_evolved_peaks": 9, "evolved_peaks": c}
            for a, b, c in zip(leads, predicted, lead_peaks, strict=True)]  # fmt: skip


def test_seeding_line_counts_leads_predictions_and_the_misses_kept_by_the_lead():
    """Four draws, l* = 3, peaks of f_3 all 4: two hits; the two misses were led by
    degree 2 (2 peaks), one of them forms 2 clusters (kept by the lead), the other 3."""
    first = [[4, 3.0, 5.0, False, 3], [4, 3.0, 5.0, False, 3], [2, 3.0, 5.0, False, 1],
             [3, 3.0, 5.0, False, 2]]  # fmt: skip
    runs = _runs([3, 3, 2, 2], [3, 2, 2, 2], [4, 4, 2, 2])
    text = seeding_text(runs, first, 3, [4, 4, 4, 4])
    assert "is l* in 2/4 (leads 2 ×2, 3 ×2)" in text
    assert "predicts it in 3/4; the rule holds in 2/2 of the draws led by l*; of the 2" in text
    assert "leading degree's part in 1 (of the cloud's own part of it at the escape in 1)" in text
    assert "amplitude 1 in 1 (over all draws: 3/4, 3/4, 0/4, 3/4)" in text
    assert seeding_text([{"peaks": 4}], [None], 3, [4]) == ""  # a run saved without them
    assert "; no draw led by l*; of the 1" in seeding_text(runs[2:3], first[2:3], 3, [4])
    sweep = {"5.0": {"l_star": 3, "peaks": [4] * 4, "evolved": [4] * 4, "first": first,
                     "runs": runs}}  # fmt: skip
    claim = count_claims(sweep, 4000, 0.1)[0]
    assert claim.verdict == "differs" and text in claim.outcome
    assert share_text(5.0, 4000, 0.1) in claim.outcome
    assert f"in {lead_share(5.0, 4000, 0.1)[0]:.0%} of clouds" in share_text(5.0, 4000, 0.1)
