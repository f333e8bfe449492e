"""Adversarial inputs, fifth round (issue 36): a model's sentences and tokens.

A tiny llama GGUF file (written to tmp_path, as in tests/pretrained) loaded as a
:class:`~tpde.pretrained.Transformer`. Classes: messages that blame the wrong thing
(``embed(["fine", 5])`` said "token ids must be a non-empty 1-d sequence; received shape ()";
NaN tokens through ``split`` were reported as score overflow) and errors from deep inside (a
sentence that encodes to no token). Skipped where the ``real`` extra is missing.
(26 cases, 26 failed before.)
"""

import math

import pytest
import torch

from tests.adversarial.strategies import error_table_test

pytest.importorskip("gguf", reason="the 'real' extra is not installed")
pytest.importorskip("tokenizers", reason="the 'real' extra is not installed")

from tests.pretrained.test_gguf_llama import write_tiny
from tpde.pretrained.loader import load

_CACHE = {}


def _model():
    if "model" not in _CACHE:
        import tempfile
        from pathlib import Path

        folder = Path(tempfile.mkdtemp(prefix="tpde-round5-"))
        write_tiny(folder / "tiny.gguf")
        _CACHE["model"] = load(folder / "tiny.gguf", dtype=torch.float64)
    return _CACHE["model"]


IDS = torch.tensor([1, 2, 3])
NOT_A_SENTENCE = {
    "int": 5,
    "float": 2.5,
    "none": None,
    "bytes": b"fine",
    "list-of-ints": [1, 2],
    "dict": {"text": "fine"},
    "bool": True,
    "numpy-int": __import__("numpy").int64(3),
}
EMBED = {
    **{
        f"embed-second-is-{name}": (
            lambda value=value: _model().embed([IDS, value]),
            TypeError,
            rf"a sentence must be a str \(or a tensor of token ids\); received "
            rf"{type(value).__name__} .* at index 1 of sentences",
        )
        for name, value in NOT_A_SENTENCE.items()
    },
    **{
        f"embed-first-is-{name}": (
            lambda value=value: _model().embed((value, IDS)),
            TypeError,
            r"a sentence must be a str .* at index 0 of sentences",
        )
        for name, value in NOT_A_SENTENCE.items()
    },
    "embed-no-token": (  # fixed: "points must hold at least one point … shape (0, 8)"
        lambda: _model().embed("fine"),
        ValueError,
        r"the sentence 'fine' encodes to no tokens with this model's tokenizer",
    ),
}
test_embed_names_the_sentence_at_fault = error_table_test(EMBED)


@pytest.mark.parametrize("poison", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("call", ["split", "hidden_states", "velocity"])
def test_non_finite_tokens_are_named_not_called_an_overflow(call, poison):
    # fixed (split, velocity): "the velocity Γ[μ] overflowed …: the attention scores …";
    # hidden_states returned the NaN states.
    model = _model()
    mu = model.embed(IDS)[0]
    mu.points[1, 2] = poison
    calls = {
        "split": lambda: model.split(mu),
        "hidden_states": lambda: model.hidden_states(mu),
        "velocity": lambda: model.schedule.velocity(mu, t=0.5),
    }
    with pytest.raises(ValueError, match=r"mu's points has 1 non-finite value.*\(1, 2\)"):
        calls[call]()
