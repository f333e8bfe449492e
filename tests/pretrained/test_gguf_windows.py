"""The sliding window of llama (Mistral's), qwen2, qwen3 and starcoder2 GGUF files, which
llama.cpp does not read (``llama_model::load_hparams`` reads no window for them: every
position attended) while a Hugging Face config that carries it applies it on every layer:
two readings, as Phi-3's (test_gguf_phi3). By default the file is read as llama.cpp
computes it, with a warning naming the key and ``gguf_window``; ``gguf_window="file"``
applies the window (a llama file read as Mistral, Qwen with ``use_sliding_window`` on every
layer); ``"llama.cpp"`` chooses llama.cpp's reading without the warning.

Each file is the tiny model of :mod:`tests.pretrained.test_gguf_converted` written as
llama.cpp's converter writes it, with ``<arch>.attention.sliding_window`` = W = 5 added
(llama.cpp's converter writes none for these architectures: such files come from other
writers); the folder beside it holds the same values without a window, and a copy of it
the window in its config.json as the family's checkpoints say it. Both in float64: a
reading equals its folder to rounding (≤ 1e-12 relative; measured 0), and the two readings
differ (> 1e-6: W binds over N = 9 tokens).
"""

from __future__ import annotations

import json
import shutil
import warnings

import pytest
import torch

from tests.pretrained.test_gguf_converted import (
    N,
    _transformers_reads,
    errors,
    outputs,
    transformers_errors,
    transformers_model,
    write_pair,
)
from tests.pretrained.test_load import _relative
from tpde.pretrained import LoadError, load

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

W = 5  # binds within the context (32) and the N = 9 tokens: Mistral-7B-v0.1's 4096 of 32768
#: case → (GGUF architecture, the config.json changes that give its folder the window)
WINDOWED = {
    "llama-tied": ("llama", {"model_type": "mistral", "architectures": ["MistralForCausalLM"],
                             "sliding_window": W}),
    "qwen2": ("qwen2", {"use_sliding_window": True, "sliding_window": W,
                        "max_window_layers": 0}),
    "qwen3": ("qwen3", {"use_sliding_window": True, "sliding_window": W,
                        "max_window_layers": 0}),
    "starcoder2": ("starcoder2", {"sliding_window": W}),
}  # fmt: skip


def _warning(arch: str) -> str:
    return (rf"the metadata key '{arch}\.attention\.sliding_window' = 5 is a sliding window "
            rf"within the file's context \(32 positions\), which llama\.cpp does not read for "
            rf"{arch} files .* applies it on every layer .* read as llama\.cpp computes it, "
            rf"without a window\. Pass gguf_window='file' to load\(…\) to apply it")  # fmt: skip


def _pair(case: str, base, window: int = W):
    """(file with the window, folder without it, folder with it as the checkpoint says)."""
    arch, changes = WINDOWED[case]
    metadata = {f"{arch}.attention.sliding_window": ("add_uint32", window)}
    folder, file = write_pair(case, base, vocabulary=True, metadata=metadata)
    windowed = base / "windowed"
    shutil.copytree(folder, windowed)
    config = json.loads((windowed / "config.json").read_text())
    config.update(changes)
    if "layer_types" in config:  # transformers 5 writes Qwen's, from use_sliding_window
        config["layer_types"] = ["sliding_attention"] * config["num_hidden_layers"]
    (windowed / "config.json").write_text(json.dumps(config))
    return file, folder, windowed


def _differences(model, expected) -> float:
    ids = torch.randint(3, 40, (N,), generator=torch.Generator().manual_seed(1))
    return max(errors(model, expected, ids).values())


@pytest.mark.parametrize("case", list(WINDOWED))
def test_a_binding_window_reads_as_llama_cpp_computes_with_a_warning(case, tmp_path):
    """Default: no window, warned, naming the key, both readings and the keyword; equal to the
    folder without a window (measured 0), apart from the folder with it (the window binds)."""
    file, folder, windowed = _pair(case, tmp_path)
    with pytest.warns(UserWarning, match=_warning(WINDOWED[case][0])) as record:
        model = load(file, dtype=torch.float64)
    assert [w.filename for w in record] == [__file__]  # it points at the call of load
    assert model.config.window is None
    assert model.architecture == load(folder).architecture
    assert _differences(model, load(folder, dtype=torch.float64)) < 1e-12
    windowed_model = load(windowed, dtype=torch.float64)
    assert windowed_model.config.window == W
    ids = torch.arange(3, 3 + N)
    logits, expected = outputs(model, ids)[1], outputs(windowed_model, ids)[1]
    assert _relative(logits, expected) > 1e-6


@pytest.mark.parametrize("reading", ["llama.cpp", "file"])
@pytest.mark.parametrize("case", list(WINDOWED))
def test_gguf_window_chooses_the_reading_without_a_warning(case, reading, tmp_path):
    """ "llama.cpp": the default's model, not warned; "file": the window on every layer, equal
    to the folder that carries it (llama's as Mistral's; measured 0)."""
    file, folder, windowed = _pair(case, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = load(file, dtype=torch.float64, gguf_window=reading)
    expected = load(windowed if reading == "file" else folder, dtype=torch.float64)
    assert model.architecture == expected.architecture
    assert model.config.window == expected.config.window == (W if reading == "file" else None)
    assert _differences(model, expected) < 1e-12


@pytest.mark.parametrize("case", list(WINDOWED))
def test_llama_cpps_reading_is_transformers_gguf_loaders(case, tmp_path):
    """transformers' GGUF loader maps no ``attention.sliding_window`` of these architectures
    (its config keeps no window in force, checked): its model of the file equals tpde's
    default reading (float64, ≤ 1e-12), as llama.cpp computes it."""
    _transformers_reads(case)
    file, _, _ = _pair(case, tmp_path)
    hf = transformers_model(tmp_path, file, torch.float64, case)
    assert not getattr(hf.config, "use_sliding_window", False) or case == "starcoder2"
    if case in ("starcoder2", "llama-tied"):
        assert getattr(hf.config, "sliding_window", None) is None
    with pytest.warns(UserWarning, match=_warning(WINDOWED[case][0])):
        model = load(file, dtype=torch.float64)
    ids = torch.randint(3, 40, (N,), generator=torch.Generator().manual_seed(1))
    measured = transformers_errors(model, hf, ids)
    assert measured.pop("argmax")
    assert max(measured.values()) < 1e-12, measured


@pytest.mark.parametrize("case", list(WINDOWED))
def test_the_file_reading_is_transformers_model_of_the_windowed_folder(case, tmp_path):
    """ "file" against transformers' own model of the folder that carries the window
    (Mistral, Qwen2/3 with use_sliding_window, Starcoder2; float64, its RMSNorm, RoPE and
    softmax in float64 as in test_load): every hidden state and the logits ≤ 1e-12."""
    from tests.pretrained.test_load import _exact_float64

    file, _, windowed = _pair(case, tmp_path)
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        windowed, dtype=torch.float64, attn_implementation="eager"
    ).eval()
    _exact_float64(hf)
    assert hf.config.sliding_window == W
    model = load(file, dtype=torch.float64, gguf_window="file")
    ids = torch.randint(3, 40, (N,), generator=torch.Generator().manual_seed(1))
    measured = transformers_errors(model, hf, ids)
    assert measured.pop("argmax")
    assert max(measured.values()) < 1e-12, measured


def test_a_biased_llama_file_is_not_read_as_mistral(tmp_path, monkeypatch):
    """Mistral has no biases: the "file" reading of a llama file that holds them is refused,
    naming a bias and the reading that reads it; the default reads it (warned)."""
    monkeypatch.setitem(WINDOWED, "llama", WINDOWED["llama-tied"])
    file, _, _ = _pair("llama", tmp_path)
    with pytest.raises(LoadError, match=r"gguf_window='file' reads the window of a llama file "
                                        r"as a mistral checkpoint's, which has no biases, but "
                                        r"the file holds 'blk\.0\.attn_k\.bias'"):  # fmt: skip
        load(file, gguf_window="file")
    with pytest.warns(UserWarning, match=_warning("llama")):
        assert load(file).config.window is None


def test_sizes_and_weights_only_scores_read_no_window_and_do_not_warn(tmp_path):
    """checkpoint_size and weight_scores: no window changes their results (bytes; scores of
    the weights alone), so a binding window of a llama file is not warned there."""
    from tpde.pretrained import checkpoint_size, weight_scores

    file, folder, _ = _pair("llama-tied", tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert checkpoint_size(file).total == checkpoint_size(folder).total
        assert len(weight_scores(file, layers=[0]).reports) > 0
