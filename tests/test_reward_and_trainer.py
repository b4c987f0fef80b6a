"""The FSPO reward manager's and trainer's pure parts: evidence, verdicts, token labels, metrics."""

from __future__ import annotations

import math
import pickle
import re
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transfer_queue import KVBatchMeta

import fspo
from fspo.advantage import apply_step_labels, flip_stats
from fspo.config.metrics import METRICS
from fspo.evidence import evidence_text
from fspo.steps import reasoning_steps
from fspo.token_labels import step_labels_for_response, verdicts_from_scores
from fspo.training.batch_dump import dump_file_name, save_atomically
from fspo.training.reward_extra_info import encode_labels, rows_labels_and_stats, step_metrics, update_metrics
from fspo.training.trainer import (
    FSPOAdvantageMixin,
    FSPOTrainer,
    PromptDrawOrder,
    canonical_row_order,
    fspo_trainer_class,
    labels_tensor,
)


def test_evidence_text_accepts_strings_lists_and_rejects_missing():
    assert evidence_text({"evidence": "  A is B. "}) == "A is B."
    assert evidence_text({"evidence": ["A is B.", "", "C is D."]}) == "A is B.\n\nC is D."
    assert evidence_text({"evidence": np.array(["A is B."], dtype=object)}) == "A is B."
    for missing in ({}, {"evidence": float("nan")}, {"evidence": None}, {"evidence": ""}, None, "text"):
        assert evidence_text(missing) == ""


@given(
    groups=st.lists(st.integers(1, 4), min_size=1, max_size=6),
    data=st.data(),
)
def test_canonical_row_order_is_the_draw_order_whatever_order_the_rows_were_stored_in(groups, data):
    # Two runs of a seed: the same prompts drawn in the same order, under other uuids, their rollouts
    # stored in another order. Both batches go to the actor in the same order of (prompt, rollout).
    def batch(uids):
        keys = [f"{uid}_{rollout}_0" for uid, count in zip(uids, groups) for rollout in range(count)]
        return data.draw(st.permutations(keys))

    one, other = ([f"{run}-{i:x}" for i in range(len(groups))] for run in ("a0b1", "ffe2"))
    stored_one, stored_other = batch(one), batch(other)
    ordered = [
        [keys[i] for i in canonical_row_order(keys, {uid: n for n, uid in enumerate(uids)})]
        for keys, uids in ((stored_one, one), (stored_other, other))
    ]
    assert sorted(ordered[0]) == sorted(stored_one)  # a permutation of the batch
    as_positions = [
        [(uids.index(key.split("_")[0]), key.split("_")[1]) for key in keys]
        for keys, uids in zip(ordered, (one, other))
    ]
    assert as_positions[0] == as_positions[1] == sorted(as_positions[0], key=lambda p: (p[0], int(p[1])))


def test_canonical_row_order_puts_unknown_prompts_last_by_uid():
    keys = ["zz_0_0", "b_1_0", "aa_0_0", "b_0_0", "b_10_0", "b_2_0"]
    order = canonical_row_order(keys, {"b": 0})
    assert [keys[i] for i in order] == ["b_0_0", "b_1_0", "b_2_0", "b_10_0", "aa_0_0", "zz_0_0"]


@given(st.lists(st.tuples(st.integers(1, 5), st.integers(0, 5)), min_size=1, max_size=8), st.randoms())
def test_prompts_drawn_later_sort_later_while_earlier_ones_wait(rounds, random):
    """The async modes draw a batch while prompts of earlier ones wait for their update: every prompt drawn keeps
    a position above all those drawn before it, whichever were released meanwhile (a reused position ties two
    prompts, and the random uids would order them)."""
    order, waiting, drawn = PromptDrawOrder(), [], []
    for round_number, (size, released) in enumerate(rounds):
        uids = [f"{random.getrandbits(64):016x}-{round_number}-{i}" for i in range(size)]
        order.draw(uids)
        drawn += uids
        waiting += uids
        random.shuffle(waiting)
        order.release(waiting[:released])
        waiting = waiting[released:]
        keys = [f"{uid}_0_0" for uid in waiting]
        ordered = [keys[i].partition("_")[0] for i in canonical_row_order(keys, order.positions)]
        assert ordered == sorted(waiting, key=drawn.index)


def test_the_trainer_hands_rows_over_in_draw_order_while_batches_overlap():
    """The async modes draw batch C while batch B's prompts wait; B's and C's rollouts, stored C first, reach the
    actor B first, whatever their uids (C's sort before B's here), through the trainer's own two hooks."""

    class _Loop:  # verl's steps around the hooks: draw a batch of prompts; hand a batch of rows to balancing
        def _fetch_one_gen_batch(self):
            return {"uid": np.array(next(self.draws), dtype=object)}

        def _balance_batch(self, batch, metrics):
            return list(batch.keys)

    class Trainer(FSPOAdvantageMixin, _Loop):
        def __init__(self):  # the mixin's own __init__ reads a config; this test needs only the draw order
            self._fspo_prompt_order = PromptDrawOrder()

    def rows(*uids):
        return KVBatchMeta(
            partition_id="train", keys=[f"{u}_{r}_0" for u in uids for r in range(2)], tags=[{}] * 2 * len(uids)
        )

    trainer = Trainer()
    trainer.draws = iter([["f-a1", "f-a2"], ["f-b1", "f-b2"], ["0-c1", "0-c2"]])
    trainer._fetch_one_gen_batch(), trainer._fetch_one_gen_batch()  # A and B drawn
    assert trainer._balance_batch(rows("f-a2", "f-a1"), {}) == [f"f-a{i}_{r}_0" for i in (1, 2) for r in range(2)]
    trainer._fetch_one_gen_batch()  # C drawn while B waits
    handed = trainer._balance_batch(rows("0-c2", "f-b1", "0-c1", "f-b2"), {})
    assert [key.split("_")[0] for key in handed[::2]] == ["f-b1", "f-b2", "0-c1", "0-c2"]


class _StoringBuffer:
    """A replay buffer that hands back each batch's rollouts in the order they were stored (given)."""

    def __init__(self, storage_orders):
        self.storage_orders = storage_orders

    def sample(self, global_steps, partition_id, batch_size):
        keys = next(self.storage_orders)
        return KVBatchMeta(partition_id=partition_id, keys=keys, tags=[{} for _ in keys]), {}


class _Validator:
    """The steps of verl's ``RayPPOTrainer._validate`` (verl/trainer/ppo/v1/trainer_base.py, from line 1031) that
    decide its rows' order: draw a batch, name its prompts by fresh uuids, read its rollouts back from the buffer."""

    def _validate(self):
        read = []
        for batch in self.val_dataloader:
            batch["uid"] = np.array([f"{uuid.uuid4()}" for _ in batch["prompt"]], dtype=object)
            keys, _ = self.replay_buffer.sample(global_steps=1, partition_id="val", batch_size=len(batch["uid"]))
            names = dict(zip(batch["uid"], batch["prompt"]))
            read += [(names[key.split("_")[0]], int(key.split("_")[1])) for key in keys.keys]
        return read


@given(st.data())
def test_validation_reads_rollouts_in_the_order_their_prompts_were_drawn(data):
    batches = [{"prompt": [f"p{b}{i}" for i in range(data.draw(st.integers(1, 3)))]} for b in range(2)]
    rollouts = data.draw(st.integers(1, 3))

    class Trainer(FSPOAdvantageMixin, _Validator):
        def __init__(self):  # the mixin's own __init__ reads a config; this test needs none of it
            self.val_dataloader = batches

    def stored_orders():  # each batch's rollouts, stored in an order hypothesis picks, once verl named its prompts
        for _ in batches:
            uids = trainer.val_dataloader.last["uid"]
            yield data.draw(st.permutations([f"{uid}_{rollout}_0" for uid in uids for rollout in range(rollouts)]))

    trainer = Trainer()
    trainer.replay_buffer = _StoringBuffer(stored_orders())
    read = trainer._validate()
    assert read == [(prompt, r) for batch in batches for prompt in batch["prompt"] for r in range(rollouts)]
    assert trainer.val_dataloader is batches and trainer.replay_buffer.sample.__func__ is _StoringBuffer.sample


def test_verdicts_from_scores():
    assert verdicts_from_scores([0.9, 0.5, 0.49, math.nan], threshold=0.5) == [1, 1, -1, 0]


def test_step_labels_cover_exactly_the_steps(qwen_tokenizer):
    response = " Ana works at Vigo. Vigo is in Pia.\n</think> <answer> Pia </answer>"
    ids = qwen_tokenizer(response, add_special_tokens=False)["input_ids"]
    text = qwen_tokenizer.decode(ids, skip_special_tokens=True)
    steps = reasoning_steps(text)
    assert [s.text for s in steps] == ["Ana works at Vigo.", "Vigo is in Pia."]
    labels = step_labels_for_response(ids, qwen_tokenizer, text, steps, [1, -1])
    tokens = qwen_tokenizer.convert_ids_to_tokens(ids)
    first = [t for t, label in zip(tokens, labels) if label == 1]
    second = [t for t, label in zip(tokens, labels) if label == -1]
    assert "".join(first).replace("Ġ", " ").replace("Ċ", "\n").strip() == "Ana works at Vigo."
    assert "".join(second).replace("Ġ", " ").replace("Ċ", "\n").strip() == "Vigo is in Pia."
    # The answer is never labelled by default...
    offsets_after = [i for i, t in enumerate(tokens) if "answer" in t]
    assert all(labels[i] == 0 for i in offsets_after)
    # ...and gets +1 with the released code's switch, from </think> on.
    released = step_labels_for_response(ids, qwen_tokenizer, text, steps, [1, -1], label_outside_reasoning=1)
    assert all(released[i] == 1 for i in offsets_after)
    assert released[: len(labels)] != labels


def test_labels_tensor_pads_and_rejects_bad_rows():
    labels, rejects = labels_tensor([encode_labels([1, -1, 0]), "", "0x2", "garbage"], [3, 2, 3, 2])
    assert labels.tolist() == [[1, -1, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]]
    assert rejects == 2  # the wrong-length row and the malformed one


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.sampled_from([-1, 0, 1]), min_size=1, max_size=30), min_size=1, max_size=6))
def test_labels_tensor_round_trips(rows):
    labels, rejects = labels_tensor([encode_labels(r) for r in rows], [len(r) for r in rows])
    assert rejects == 0
    for i, row in enumerate(rows):
        assert labels[i, : len(row)].tolist() == row
        assert torch.all(labels[i, len(row) :] == 0)


def test_step_metrics():
    infos = [
        {
            "fspo_has_evidence": 1,
            "fspo_steps": 4,
            "fspo_supported": 3,
            "fspo_unsupported": 1,
            "fspo_labelled": 1,
            "fspo_verifier_seconds": 0.2,
        },
        {"fspo_has_evidence": 1, "fspo_steps": 0, "fspo_labelled": 0},
        {"fspo_has_evidence": 0},
    ]
    metrics = step_metrics(infos)
    assert metrics["fspo/evidence_rollout_frac"] == pytest.approx(2 / 3)
    assert metrics["fspo/steps_per_response"] == 2.0
    assert metrics["fspo/supported_step_rate"] == 0.75
    assert metrics["fspo/unverifiable_rollout_rate"] == 0.5
    assert metrics["fspo/verifier_seconds"] == pytest.approx(0.1)
    assert step_metrics([])["fspo/supported_step_rate"] == 0.0
    # Nothing verified: no GPU share to report (verl would average a 0.0 into the step's other updates).
    assert "fspo/verifier_ray_gpu_frac" not in metrics
    verified = [{"fspo_has_evidence": 1, "fspo_verified": 1, "fspo_verifier_ray_gpu": 1}, {"fspo_has_evidence": 1}]
    assert step_metrics(verified)["fspo/verifier_ray_gpu_frac"] == 1.0


def test_every_metric_the_trainer_logs_is_described_once_in_the_metrics_list():
    """docs/configuration.md's metrics table is made from fspo.config.metrics.METRICS: an update's metrics
    (update_metrics, with a verified rollout so that the GPU share is logged too) and the names the trainer
    writes itself (a "fspo/..." literal in fspo/training, fspo/methods or fspo/advantage.py) are its keys."""
    advantages, labels, mask = torch.tensor([[1.0, 1.0, -1.0]]), torch.tensor([[1, -1, 0]]), torch.ones(1, 3)
    flip = flip_stats(advantages, apply_step_labels(advantages, labels, mask), labels, mask)
    info = {"fspo_has_evidence": 1, "fspo_steps": 2, "fspo_supported": 1, "fspo_unsupported": 1, "fspo_verified": 1}
    logged = set(update_metrics([info], flip, rejected_rows=0))
    package = Path(fspo.__file__).parent
    sources = [*(package / "training").rglob("*.py"), *(package / "methods").rglob("*.py"), package / "advantage.py"]
    named = {name for path in sources for name in re.findall(r"[\"'](fspo/[a-z_]+)[\"']", path.read_text())}
    assert sorted(logged - set(METRICS)) == [] and sorted(named - set(METRICS)) == []
    assert sorted(set(METRICS) - logged - named) == []


def test_pad_rows_get_no_labels_count_nowhere_and_are_not_rejected():
    # verl's padding copies sample 0's fields, labels included, onto a one-token response.
    real = {"fspo_labels": encode_labels([0, 1, 1, -1]), "fspo_has_evidence": 1, "fspo_steps": 2}
    other = {"fspo_labels": encode_labels([0, 0]), "fspo_has_evidence": 0}
    infos, keys = [real, other, real, real], ["u1_0_0", "u2_0_0", "padx_0_0", "padx_1_0"]
    texts, counted, missing = rows_labels_and_stats(infos, keys, [False, False, True, True])
    assert texts == [real["fspo_labels"], other["fspo_labels"], "", ""] and missing == 0
    labels, rejects = labels_tensor(texts, [4, 2, 1, 1])
    assert rejects == 0 and labels[2:].abs().sum() == 0
    assert counted == [real, other]
    assert step_metrics(counted)["fspo/evidence_rollout_frac"] == 0.5  # not 0.75 with the pads
    assert step_metrics(counted)["fspo/rollouts"] == 2


def test_each_output_of_an_agent_run_takes_its_own_labels_and_the_run_counts_once():
    run = {
        "fspo_labels": ";".join([encode_labels([-1, -1]), encode_labels([0]), encode_labels([1, 0, 1])]),
        "fspo_steps": 3,
    }
    keys = ["uid_3_0", "uid_3_1", "uid_3_2"]
    texts, counted, missing = rows_labels_and_stats([run] * 3, keys, [False] * 3)
    labels, rejects = labels_tensor(texts, [2, 1, 3])
    assert labels.tolist() == [[-1, -1, 0], [0, 0, 0], [1, 0, 1]] and rejects == missing == 0
    assert counted == [run]
    # A key of another form is the run's last output; an index past the labelled outputs is rejected.
    assert rows_labels_and_stats([run], ["custom-key"], [False])[0] == [encode_labels([1, 0, 1])]
    assert rows_labels_and_stats([run], ["uid_3_5"], [False])[2] == 1


def test_dump_files_of_several_actor_updates_per_step_do_not_overwrite_each_other():
    assert dump_file_name(3, 1, 0) == "step_3.pt"
    names = {dump_file_name(3, 4, k) for k in range(4)} | {dump_file_name(4, 4, k) for k in range(4)}
    assert len(names) == 8


def test_every_trainer_mode_gets_the_fspo_advantage_step():
    from verl.trainer.ppo.v1 import PPOTrainerColocateAsync, PPOTrainerSeparateAsync, PPOTrainerSync

    assert fspo_trainer_class("sync") is FSPOTrainer and issubclass(FSPOTrainer, PPOTrainerSync)
    for mode, base in (("colocate_async", PPOTrainerColocateAsync), ("separate_async", PPOTrainerSeparateAsync)):
        cls = fspo_trainer_class(mode)
        assert issubclass(cls, base) and cls is fspo_trainer_class(mode)
        assert cls._compute_advantage is FSPOTrainer._compute_advantage
        assert cls._update_actor is FSPOTrainer._update_actor
    with pytest.raises(ValueError, match="trainer.v1.trainer_mode='fully_async'"):
        fspo_trainer_class("fully_async")


@pytest.mark.parametrize(
    "overrides, poll_s", [([], 2.0), (["platform=cpu"], 0.25), (["platform=cpu", "fspo.rollout_poll_s=0.5"], 0.5)]
)
def test_verls_replay_buffer_checks_for_finished_rollouts_every_fspo_rollout_poll_s(overrides, poll_s):
    """verl 0.9.1 builds its replay buffer with a fixed 2-s poll; the trainer sets fspo.rollout_poll_s on it."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from fspo.training.main import register_config_resolvers

    register_config_resolvers()
    with initialize_config_module("fspo.config", version_base=None):
        config = compose("fspo_trainer", overrides=overrides)
    OmegaConf.resolve(config)  # as verl's task runner does before it builds the trainer
    # verl's __init__ would start the TransferQueue and the workers; only the buffer is built here, as __init__ does.
    trainer = FSPOTrainer.__new__(FSPOTrainer)
    trainer.config, trainer.trainer_mode, trainer._add_prompts_to_generate = config, "sync", None
    assert trainer._build_replay_buffer().poll_interval == poll_s


def test_verls_task_runner_builds_the_fspo_trainer_of_each_mode_only_inside_fspo_s_runner():
    """FSPOTaskRunner runs verl's own TaskRunnerV1.run; only the registry it takes its trainer from differs."""
    from verl.trainer.main_ppo import TaskRunnerV1
    from verl.trainer.ppo.v1 import PPOTrainerSync, get_trainer_cls

    from fspo.training.main import FSPOTaskRunner, fspo_trainers_registered

    runner = FSPOTaskRunner.__ray_actor_class__
    assert issubclass(runner, TaskRunnerV1.__ray_actor_class__)
    assert "init_agent_loop_manager" not in vars(runner)  # verl's, not a copy
    before = {mode: get_trainer_cls(mode) for mode in ("sync", "colocate_async", "separate_async")}
    with fspo_trainers_registered():
        for mode in before:
            assert get_trainer_cls(mode) is fspo_trainer_class(mode)
    assert {mode: get_trainer_cls(mode) for mode in before} == before
    assert before["sync"] is PPOTrainerSync


def test_a_dump_is_written_whole_or_not_at_all(tmp_path):
    path = str(tmp_path / "step_1.pt")
    save_atomically({"advantages": torch.ones(2, 3)}, path)
    assert torch.equal(torch.load(path)["advantages"], torch.ones(2, 3))
    # A record that fails to serialise mid-write leaves the earlier dump as it was and no partial file.
    with pytest.raises((AttributeError, TypeError, pickle.PicklingError)):
        save_atomically({"advantages": torch.zeros(2, 3), "unpicklable": lambda: None}, path)
    assert torch.equal(torch.load(path)["advantages"], torch.ones(2, 3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_1.pt"]
