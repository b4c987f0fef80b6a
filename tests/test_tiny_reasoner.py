"""The tiny reasoner's warm-up (``fspo_testing.tiny_model.teach_reasoning_format``) is full-vocabulary training.

It trains the output rows of the tokens no example uses as one shared row: they start equal (zero) and each gets
the same gradient. This checks that claim against the plain loop from the same start: the model's own loss over
all of Qwen's logits, AdamW over every parameter.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from fspo.data.synthetic import make_rows
from fspo.training.prompt_formats import chat_template
from fspo_testing.tiny_model import build_tiny_model, reasoning_batches, reasoning_examples, teach_reasoning_format

STEPS, BATCH, LEARNING_RATE = 3, 4, 3e-3


def test_warm_up_is_full_vocabulary_training_from_the_same_start(tmp_path):
    rows = make_rows(6, seed=0, split="train")
    fast = build_tiny_model(tmp_path / "fast")
    plain = shutil.copytree(fast, tmp_path / "plain")
    result = teach_reasoning_format(fast, rows, steps=STEPS, batch_size=BATCH, learning_rate=LEARNING_RATE)

    tokenizer = AutoTokenizer.from_pretrained(plain)
    tokenizer.chat_template = chat_template("qwen-base")
    model = AutoModelForCausalLM.from_pretrained(plain, dtype=torch.float32)
    examples = reasoning_examples(tokenizer, rows, model.generation_config.eos_token_id)
    used = {tokenizer.pad_token_id}.union(*(prompt + response for prompt, response in examples))
    embedding = model.get_output_embeddings().weight
    with torch.no_grad():  # the start: every row no example uses at zero
        unused = torch.ones(len(embedding), dtype=torch.bool)
        unused[sorted(used)] = False
        embedding[unused] = 0.0
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    losses = []
    for input_ids, attention, labels in reasoning_batches(examples, tokenizer.pad_token_id, STEPS, BATCH, seed=0):
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())

    assert result == {
        "first_loss": pytest.approx(losses[0], rel=1e-5),
        "last_loss": pytest.approx(losses[-1], rel=1e-5),
    }
    assert losses[-1] < losses[0] - 0.1, "the loop did not train: the comparison lost its point"
    trained = AutoModelForCausalLM.from_pretrained(fast, dtype=torch.float32).state_dict()
    for name, weights in model.state_dict().items():
        # AdamW divides tiny gradients by their own size, so rounding shows: a tenth of one step's size.
        torch.testing.assert_close(trained[name], weights, rtol=0, atol=LEARNING_RATE / 10, msg=name)
    assert (trained["lm_head.weight"][unused] == trained["lm_head.weight"][unused][0]).all()
