"""The actor's weights through one shared-memory file (fspo/cpu/weight_file.py): what the rollout server reads is
bit for bit what the worker staged, whatever the tensors; where the file cannot serve, the caller is told to send
the tensors themselves; a killed writer's file does not stay in RAM."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.cpu import weight_file

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int8, torch.bool]


@st.composite
def named_tensors(draw) -> dict[str, torch.Tensor]:
    tensors = {}
    for index in range(draw(st.integers(0, 6))):
        dtype = draw(st.sampled_from(DTYPES))
        shape = tuple(draw(st.lists(st.integers(0, 5), max_size=3)))
        values = torch.randn(shape, generator=torch.Generator().manual_seed(draw(st.integers(0, 2**31))))
        tensor = (values > 0) if dtype is torch.bool else (values * 50).to(dtype)
        if draw(st.booleans()) and tensor.dim() >= 2:
            tensor = tensor.transpose(0, 1)  # not contiguous
        tensors[f"layers.{index}.weight"] = tensor
    return tensors


@settings(max_examples=40, deadline=None)
@given(tensors=named_tensors())
def test_what_is_read_is_what_was_staged_bit_for_bit(tensors, tmp_path_factory):
    folder = tmp_path_factory.mktemp("shm")
    staged = weight_file.stage(tensors, folder)
    assert staged is not None
    try:
        read = weight_file.read(staged.path, staged.size, staged.entries)
        assert list(read) == list(tensors)
        for name, tensor in tensors.items():
            assert read[name].dtype == tensor.dtype and read[name].shape == tensor.shape
            assert torch.equal(read[name], tensor), name
    finally:
        staged.remove()
    assert not list(folder.iterdir())


def test_no_room_a_shard_or_another_machine_means_send_the_tensors(tmp_path, monkeypatch):
    tensors = {"w": torch.ones(4, 4)}
    monkeypatch.setattr(weight_file, "HEADROOM_BYTES", 1 << 62)
    assert weight_file.stage(tensors, tmp_path) is None
    monkeypatch.undo()
    assert weight_file.stage(tensors, tmp_path / "missing") is None

    class Shard(torch.Tensor):  # stands for a DTensor: not a plain tensor
        pass

    assert weight_file.stage({"w": torch.ones(2).as_subclass(Shard)}, tmp_path) is None

    staged = weight_file.stage(tensors, tmp_path)
    gone = weight_file.StagedWeights(str(tmp_path / "elsewhere"), staged.size, staged.entries)
    assert weight_file.read(gone.path, gone.size, gone.entries) is None  # the server's machine lacks the file
    staged.remove()


def test_a_killed_writers_file_is_removed_by_the_next_writer_and_a_held_one_is_kept(tmp_path):
    import fcntl

    orphan = tmp_path / f"{weight_file.PREFIX}killed"  # its writer's lock went with its process
    orphan.write_bytes(b"x" * 100)
    held = weight_file.stage({"w": torch.ones(3)}, tmp_path)  # a writer mid-sync: its shared lock is held
    other = tmp_path / f"{weight_file.PREFIX}other-writer"
    other.write_bytes(b"x")
    handle = os.open(other, os.O_RDONLY)
    fcntl.flock(handle, fcntl.LOCK_SH)
    staged = weight_file.stage({"w": torch.zeros(3)}, tmp_path)
    assert not orphan.exists() and Path(held.path).exists() and other.exists()
    os.close(handle)
    for one in (staged, held):
        one.remove()
    weight_file.stage({}, tmp_path).remove()
    assert not list(tmp_path.iterdir())


def test_a_file_that_cannot_be_backed_means_send_the_tensors(tmp_path, monkeypatch):
    def full(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(weight_file.os, "posix_fallocate", full)
    assert weight_file.stage({"w": torch.ones(4)}, tmp_path) is None
    assert not list(tmp_path.iterdir())


@pytest.fixture(scope="module")
def rollout_server(tmp_path_factory):
    from omegaconf import OmegaConf

    from fspo.cpu.rollout import HFRolloutServer
    from fspo_testing.tiny_model import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("tiny"))
    config = OmegaConf.create(
        {"_target_": "verl.workers.config.RolloutConfig", "name": "hf", "dtype": "float32", "max_num_seqs": 8}
    )
    model_config = OmegaConf.create({"path": str(path), "local_path": str(path)})
    return HFRolloutServer(config, model_config)


def test_the_server_loads_a_staged_file_as_it_loads_the_tensors(rollout_server, tmp_path):
    # named_parameters: a tied output layer once (state_dict lists it twice, and the second copy would win).
    update = {name: torch.randn_like(tensor) for name, tensor in rollout_server.model.named_parameters()}
    staged = weight_file.stage(update, tmp_path)
    try:
        result = asyncio.run(rollout_server.load_weights(staged, global_steps=3))
    finally:
        staged.remove()
    assert result["loaded"] == len(update) and rollout_server.global_steps == 3
    for name, tensor in rollout_server.model.state_dict().items():
        if name in update:
            assert torch.equal(tensor, update[name]), name
    elsewhere = weight_file.StagedWeights(str(tmp_path / "gone"), staged.size, staged.entries)
    assert asyncio.run(rollout_server.load_weights(elsewhere)) is None
    assert Path(staged.path).exists() is False


class _Handle:
    """A Ray actor handle's ``load_weights.remote`` calling the real server in this process, the staged file as it
    is at the call (the adapter removes it after)."""

    def __init__(self, server, serves_files: bool):
        self.server, self.serves_files, self.calls = server, serves_files, []
        self.load_weights = self

    async def remote(self, named, *args):
        self.calls.append(type(named).__name__)
        if isinstance(named, weight_file.StagedWeights) and not self.serves_files:
            named = weight_file.StagedWeights(named.path + ".elsewhere", named.size, named.entries)
        return await self.server.load_weights(named, *args)


@pytest.mark.parametrize("serves_files", [True, False])
def test_the_adapter_sends_through_the_file_or_else_the_tensors(rollout_server, serves_files, monkeypatch, tmp_path):
    """HFServerAdapter.update_weights, the worker's end: the engine's weights arrive in the server either way, and no
    file is left in shared memory."""
    from fspo.cpu.rollout import HFServerAdapter

    adapter = HFServerAdapter.__new__(HFServerAdapter)  # its Ray and verl set-up is not what is tested
    handle = _Handle(rollout_server, serves_files)
    adapter.rollout_rank, adapter.server_handle, adapter.server_reads_files = 0, handle, True
    update = {name: torch.randn_like(tensor) for name, tensor in rollout_server.model.named_parameters()}
    monkeypatch.setattr(weight_file, "SHARED_MEMORY", tmp_path)  # a machine without /dev/shm tests the same
    asyncio.run(adapter.update_weights(iter(update.items()), global_steps=5))
    assert handle.calls == (["StagedWeights"] if serves_files else ["StagedWeights", "dict"])
    for name, tensor in rollout_server.model.named_parameters():
        assert torch.equal(tensor, update[name]), name
    assert not list(tmp_path.iterdir())
    # A server on another machine is not sent the file again.
    asyncio.run(adapter.update_weights(iter(update.items()), global_steps=6))
    assert handle.calls == (["StagedWeights"] * 2 if serves_files else ["StagedWeights", "dict", "dict"])
