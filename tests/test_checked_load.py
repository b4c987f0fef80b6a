"""Checkpoints checked before use: a safetensors file's header, a checkpoint missing offline (one line each)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.utils.checked_load import check_safetensors_header, from_pretrained_checked

shapes = st.lists(st.lists(st.integers(1, 4), min_size=1, max_size=3), min_size=1, max_size=3)


@settings(max_examples=60, deadline=None)
@given(shapes=shapes, cut=st.floats(0, 1, exclude_max=True), garbage=st.binary(min_size=1, max_size=16))
def test_a_safetensors_file_passes_whole_and_is_refused_cut_short_or_garbled(tmp_path_factory, shapes, cut, garbage):
    from safetensors.torch import load_file, save_file

    folder = tmp_path_factory.mktemp("weights")
    whole = folder / "model.safetensors"
    save_file({f"t{i}": torch.zeros(shape) for i, shape in enumerate(shapes)}, str(whole))
    check_safetensors_header(whole)
    load_file(str(whole))  # what passed, safetensors reads
    data = whole.read_bytes()
    broken = {"cut.safetensors": data[: int(len(data) * cut)], "garbage.safetensors": garbage + data}
    for name, content in broken.items():
        (folder / name).write_bytes(content)
        with pytest.raises(ValueError, match=f"{name} is not a readable safetensors file") as refused:
            check_safetensors_header(folder / name)
        assert "\n" not in str(refused.value)


def test_a_model_folder_with_a_malformed_weights_file_is_one_line(tmp_path):
    from transformers import AutoModel

    (tmp_path / "config.json").write_text('{"model_type": "bert", "hidden_size": 8, "num_attention_heads": 2}')
    (tmp_path / "model.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(ValueError, match="model.safetensors is not a readable safetensors file"):
        from_pretrained_checked(AutoModel, str(tmp_path))


def test_a_checkpoint_missing_offline_is_one_line(monkeypatch, tmp_path):
    from transformers import AutoModel

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(ValueError, match="no-such-org/no-such-model: cannot load the checkpoint") as refused:
        from_pretrained_checked(AutoModel, "no-such-org/no-such-model")
    assert "\n" not in str(refused.value)
