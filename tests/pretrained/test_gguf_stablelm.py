"""StableLM GGUF files beyond test_gguf_converted's equality with their folders: the stacked
per-head QK-norm gains split back into the folder's ``norms.{h}`` (errors naming the file's
tensor and the row), and files whose tensors contradict their metadata refused by name.

The files are the tiny StableLM models of :mod:`tests.pretrained.test_gguf_converted`, written
as llama.cpp's converter writes them (:mod:`tests.pretrained.gguf_convert`), then changed.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.pretrained.test_gguf_converted import tiny
from tpde.pretrained import LoadError, load, read_checkpoint

gguf = pytest.importorskip("gguf")
pytest.importorskip("transformers")

from tests.pretrained.gguf_convert import convert  # noqa: E402

QK = "stablelm-qk-parallel"


def _write(tmp_path, case=QK, **options):
    model = tiny(case)
    path = tmp_path / f"{case}.gguf"
    return path, model, convert(model, path, "F32", **options)


def test_the_stacked_gains_are_the_folders_per_head_gains(tmp_path):
    """Row h of ``blk.l.attn_q_norm`` (H = 4 rows) and ``attn_k_norm`` (H_kv = 2) is the
    folder's ``q_layernorm.norms.h`` (``k_layernorm``), bit for bit (F32)."""
    path, model, _ = _write(tmp_path)
    config, tensors = read_checkpoint(path, dtype=torch.float32)
    assert config.heads == 4 and config.kv_heads == 2
    state = model.state_dict()
    names = [n for n in state if "layernorm.norms." in n]
    assert len(names) == 2 * (4 + 2)
    for name in names:
        assert torch.equal(tensors[name], state[name]), name


def test_a_gain_of_the_wrong_width_names_the_files_tensor_and_row(tmp_path):
    name = "blk.1.attn_k_norm.weight"
    wrong = {name: np.ones((2, 4), dtype=np.float32)}
    path, _, _ = _write(tmp_path, drop=(name,), tensors=wrong)
    match = (rf"the tensor '{name}' \(row 0: model\.layers\.1\.self_attn\.k_layernorm\.norms\.0"
             r"\.weight\) has shape \(4,\); the metadata implies \(8,\)")  # fmt: skip
    with pytest.raises(LoadError, match=match):
        load(path)


def test_query_gains_without_key_gains_are_refused_by_name(tmp_path):
    """llama.cpp's tensors say whether the QK-norms are there: with the query's, the key's
    are missing, named."""
    name = "blk.0.attn_k_norm.weight"
    path, _, _ = _write(tmp_path, drop=(name,))
    with pytest.raises(LoadError, match=rf"the tensor '{name}' \(row 0: .*\) is missing"):
        load(path)


def test_a_parallel_residual_key_its_tensors_contradict_is_refused_by_name(tmp_path):
    """use_parallel_residual = true, but the file holds ``ffn_norm`` (the MLP's own norm of a
    sequential block)."""
    metadata = {"stablelm.use_parallel_residual": ("add_bool", True)}
    path, _, _ = _write(tmp_path, "stablelm", metadata=metadata)
    with pytest.raises(LoadError, match=r"the tensor 'blk\.0\.ffn_norm\.weight' .* is not one a "
                                        r"stablelm model reads"):  # fmt: skip
        load(path)
