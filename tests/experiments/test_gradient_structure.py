"""The ``gradient-structure`` study: a tiny run on the real models, its verdict rules, its
configuration errors."""

import numpy as np
import pytest

from tests.experiments.test_experiments import _run
from tpde import experiments


@pytest.mark.slow  # loads MiniLM, SmolLM2 and Gemma-3-270M and projects one layer of each
def test_gradient_structure_tiny(tmp_path):
    pytest.importorskip("gguf", reason="the real extra (tpde[real]) is not installed")
    (_, arrays, results), report = _run(
        "gradient-structure", tmp_path, sentences=1, tokens=6, layers="first", taus="0.25,1",
        control_width=16, control_layers=1,
    )  # fmt: skip
    assert results["models"] + list(results["missing"]) == ["minilm", "smollm2", "gemma3"]
    for name in results["models"]:
        heads = arrays[f"{name}_symmetry"].shape[1]
        assert arrays[f"{name}_symmetry"].shape == (1, heads)
        assert ((arrays[f"{name}_symmetry"] > 0) & (arrays[f"{name}_symmetry"] <= 1)).all()
        assert arrays[f"{name}_dynamic_gap"].shape == (1, 1, heads)
        assert arrays[f"{name}_jko_w2"].shape == (1, 1, 2)
        # an unconverged JKO step is NaN, never a number
        converged = arrays[f"{name}_jko_converged"].astype(bool)
        assert np.isnan(arrays[f"{name}_jko_w2"][~converged]).all()
        assert np.isfinite(arrays[f"{name}_explicit_w2"]).all()
        metrics = arrays[f"{name}_metrics"][0, 0]
        assert metrics[2] <= metrics[0] * (1 + 1e-9)  # Gelbrich: Bures of the fits ≤ W2
        assert len(results["jko_failures"][name]) == int((~converged).sum())
        # the control: random heads, symmetry ½ up to the sampling
        assert abs(float(np.median(arrays[f"{name}_control_symmetry"])) - 0.5) < 0.05
    # the family control: every registered family as a random model, 4 heads, 1 layer
    from tpde.pretrained import ARCHITECTURES

    assert results["families"] == [entry.family for entry in ARCHITECTURES]
    table = arrays["family_symmetry"]
    assert table.shape[0] == len(ARCHITECTURES) and table.shape[2] == 4
    assert np.isfinite(table[:, 0]).all() and np.isfinite(arrays["family_dynamic_gap"][:, 0]).all()
    assert len(report.claims) == 6
    assert all(c.verdict.endswith("(indicative)") for c in report.claims)
    assert len(report.tables) == len(results["models"]) + 1


def _medians(**changes) -> dict:
    base = {
        "layer_symmetry": 0.7, "layer_directionality": 0.0, "symmetry": 0.6,
        "definite_residual": 0.8, "dynamic_gap": 0.8, "control_definite_residual": 0.95,
        "control_dynamic_gap": 0.95, "energy_defined": 4, "energy_total": 4, "energy_scaled": 0,
        "energy_agree_share": 1.0, "jko_converged_share": 1.0, "jko_relative": 0.4,
        "explicit_relative": 0.6, "best_relative": 0.4, "jko_closer": 4, "compared": 4,
        "best_tau_jko": 1.0, "best_tau_explicit": 1.0,
    }  # fmt: skip
    return {**base, **changes}


def test_verdicts_follow_the_numbers():
    import importlib

    rp = importlib.import_module("tpde.experiments.gradient_structure.report")

    m = {"minilm": _medians(), "smollm2": _medians(layer_symmetry=0.6),
         "gemma3": _medians(layer_symmetry=0.55)}  # fmt: skip
    assert rp.contrast_claim(m).verdict == "agrees"
    m["gemma3"] = _medians(layer_symmetry=0.68)
    assert rp.contrast_claim(m).verdict == "partly"
    m["gemma3"] = m["smollm2"] = _medians(layer_symmetry=0.75)
    assert rp.contrast_claim(m).verdict == "differs"
    assert rp.contrast_claim({"smollm2": _medians()}).verdict == "n/a"
    assert rp.control_claim(m).verdict == "agrees"
    m["gemma3"] = _medians(dynamic_gap=0.99)
    assert rp.control_claim(m).verdict == "partly"
    assert rp.energy_claim(m).verdict == "agrees"
    assert rp.energy_claim({"a": _medians(energy_agree_share=0.25)}).verdict == "differs"
    jko, implicit = rp.step_claims(m)
    assert jko.verdict == "agrees" and implicit.verdict == "agrees"
    jko, implicit = rp.step_claims({"a": _medians(best_relative=1.2, compared=0, jko_closer=0)})
    assert jko.verdict == "differs" and implicit.verdict == "n/a"


def _family(**changes) -> dict:
    base = {"symmetry": 0.5, "directionality": 0.01, "definite_residual": 0.9, "dynamic_gap": 0.9}
    return {**base, **changes}


def test_family_claim_follows_the_numbers():
    """Random families less structured than every trained model in 4, 2 and 1 of the four
    scores: agrees, partly, differs; trained models 0.1 from ½ in symmetry, directionality
    0, residual and gap 0.8 (the _medians defaults)."""
    import importlib

    rp = importlib.import_module("tpde.experiments.gradient_structure.report")
    m = {"minilm": _medians(), "smollm2": _medians(layer_directionality=-0.2)}
    m["minilm"]["layer_directionality"] = 0.1
    fam = {"llama": _family(), "gpt2": _family(symmetry=0.52)}
    claim = rp.family_claim(m, fam)
    assert claim.verdict == "agrees" and "in 4 of 4" in claim.outcome
    fam["gpt2"] = _family(definite_residual=0.7, dynamic_gap=0.7)
    fam["bert"] = _family(definite_residual=0.7, dynamic_gap=0.7)
    assert rp.family_claim(m, fam).verdict == "partly"
    fam = {"llama": _family(symmetry=0.8, directionality=0.5, dynamic_gap=0.5)}
    assert rp.family_claim(m, fam).verdict == "differs"
    assert rp.family_claim(m, {}).verdict == "n/a"


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"sentences": 0}, "sentences must be in 1 … 238"),
        ({"tokens": 1}, "tokens must be in 2 … 128"),
        ({"layers": "odd"}, "layers must be one of all, ends, first"),
        ({"taus": "1,-2"}, "taus must be a comma-separated list of steps > 0"),
        ({"taus": "a"}, "taus must be a comma-separated list of steps > 0"),
        ({"control_width": 10}, "control_width must be a multiple of 4"),
        ({"control_layers": 0}, "control_layers must be in 1 … 8; received 0"),
    ],
)
def test_bad_configurations_are_refused(overrides, match):
    from dataclasses import replace

    module = experiments.get("gradient-structure")
    with pytest.raises(ValueError, match=match):
        replace(module.Config(), **overrides).check()
