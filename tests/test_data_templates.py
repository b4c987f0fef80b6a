"""Prompt formats rendered by the real Qwen tokenizer and by verl's own code path."""

from __future__ import annotations

import shutil

import pytest

from fspo.training.prompt_formats import (
    INSTRUCTION,
    PROMPT_FORMATS,
    build_messages,
    chat_template,
    count_prompt_tokens,
    render_prompt,
)
from fspo_testing.tiny_model import qwen_tokenizer_dir


@pytest.fixture(scope="module")
def tokenizer(qwen_tokenizer):
    return qwen_tokenizer


MESSAGES = build_messages("Who wrote Hamlet?")


def test_qwen_base_is_the_plain_transcript_ending_in_think(tokenizer):
    text = render_prompt(MESSAGES, "qwen-base", tokenizer)
    assert text == f"{INSTRUCTION}\nUser: Who wrote Hamlet?\nAssistant: <think>"
    assert render_prompt(MESSAGES, "qwen-base") == text  # jinja2 directly gives the same text


def test_qwen_instruct_matches_the_models_own_template(tokenizer):
    # The shipped tokenizer's own (Qwen chat) template renders system/user turns the same way.
    own = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert render_prompt(MESSAGES, "qwen-instruct", tokenizer) == own
    default_system = render_prompt(MESSAGES[1:], "qwen-instruct", tokenizer)
    assert default_system.startswith("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.")


def test_chatml_think_opens_the_reasoning(tokenizer):
    # The ChatML turns of the instruct format (given a system message), then a generation prompt
    # that starts the response inside <think>.
    text = render_prompt(MESSAGES, "chatml-think", tokenizer)
    assert text == render_prompt(MESSAGES, "qwen-instruct", tokenizer) + "<think>"
    assert render_prompt(MESSAGES, "chatml-think") == text


def test_llama_instruct_layout(tokenizer):
    text = render_prompt(MESSAGES, "llama-instruct", tokenizer)
    assert text.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date:")
    assert f"{INSTRUCTION}<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho wrote Hamlet?<|eot_id|>" in text
    assert text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")


@pytest.mark.parametrize("prompt_format", PROMPT_FORMATS)
def test_token_count_is_the_rendered_prompts(tokenizer, prompt_format):
    text = render_prompt(MESSAGES, prompt_format, tokenizer)
    expected = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    assert count_prompt_tokens(MESSAGES, prompt_format, tokenizer) == expected


def test_templates_survive_omegaconf():
    # Recipes pass the template through Hydra/OmegaConf: it must hold no "${" interpolation.
    from omegaconf import OmegaConf

    for prompt_format in PROMPT_FORMATS:
        config = OmegaConf.create({"model": {"custom_chat_template": chat_template(prompt_format)}})
        assert config.model.custom_chat_template == chat_template(prompt_format)


def test_resolver_fills_the_verl_key():
    from omegaconf import OmegaConf

    from fspo.training.prompt_formats import register_chat_template_resolver

    register_chat_template_resolver()
    register_chat_template_resolver()  # idempotent
    config = OmegaConf.create(
        {"actor_rollout_ref": {"model": {"custom_chat_template": "${fspo_chat_template:qwen-base}"}}}
    )
    OmegaConf.resolve(config)
    assert config.actor_rollout_ref.model.custom_chat_template == chat_template("qwen-base")


def test_unknown_format():
    with pytest.raises(ValueError, match="qwen-base, qwen-instruct, llama-instruct, chatml-think, passthrough"):
        chat_template("chatml")


def test_verl_dataset_and_rollout_prompt_use_the_custom_template(tmp_path):
    """The path verl takes: HFModelConfig(custom_chat_template) -> RLHFDataset -> the agent loop's prompt ids."""
    from omegaconf import OmegaConf
    from transformers import Qwen2Config
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.tokenizer.continuous_token_wiring import (
        create_continuous_token_builder,
    )
    from verl.workers.config import HFModelConfig

    from fspo.data.io import write_parquet
    from fspo.data.synthetic import make_rows

    model_dir = tmp_path / "model"
    shutil.copytree(qwen_tokenizer_dir(), model_dir)
    Qwen2Config(
        vocab_size=151936,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        architectures=["Qwen2ForCausalLM"],
    ).save_pretrained(model_dir)
    rows = make_rows(4, seed=3)
    write_parquet(rows, tmp_path / "train.parquet")
    # A set with list ground truths (aliases) and known wrong answers loads too.
    truthful = [
        dict(
            row,
            data_source="truthfulqa_gen",
            reward_model={"style": "rule", "ground_truth": ["Nothing happens", "Nothing"]},
            extra_info=dict(row["extra_info"], incorrect_answers=["You get sick"]),
        )
        for row in rows
    ]
    write_parquet(truthful, tmp_path / "truthful.parquet")

    model_config = HFModelConfig(path=str(model_dir), custom_chat_template=chat_template("qwen-base"))
    data_config = OmegaConf.create(
        {
            "max_prompt_length": 1024,
            "filter_overlong_prompts": True,
            "filter_overlong_prompts_workers": 1,
            "cache_dir": str(tmp_path / "cache"),
        }
    )
    dataset = RLHFDataset(str(tmp_path / "train.parquet"), model_config.tokenizer, data_config)
    assert len(dataset) == 4
    item = dataset[0]
    assert item["extra_info"]["evidence"] == rows[0]["extra_info"]["evidence"]
    assert item["reward_model"]["ground_truth"] == rows[0]["reward_model"]["ground_truth"]

    no_filter = OmegaConf.merge(data_config, {"filter_overlong_prompts": False})
    truthful_item = RLHFDataset(str(tmp_path / "truthful.parquet"), model_config.tokenizer, no_filter)[1]
    assert list(truthful_item["reward_model"]["ground_truth"]) == ["Nothing happens", "Nothing"]
    assert list(truthful_item["extra_info"]["incorrect_answers"]) == ["You get sick"]

    builder = create_continuous_token_builder(model_config.tokenizer, hf_model_type="qwen2")
    prompt_ids = builder.build_initial_tokens(item["raw_prompt"])
    text = model_config.tokenizer.decode(prompt_ids)
    assert text == render_prompt(rows[0]["prompt"], "qwen-base")
    assert text.endswith("\nAssistant: <think>") and "<|im_start|>" not in text


# A released FSPO row (github nusnlp/FSPO, data/hotpot/qwen-instruct-2k): the transcript rendered to
# text, special tokens included, in one user message; the evidence in a top-level `knowledge` column.
RELEASED_PROMPT = (
    "<|im_start|>system\nYou are a helpful assistant. Think in <think> </think>, answer in <answer> </answer>."
    "<|im_end|>\n<|im_start|>user\nWhat University did he attend?\n<|im_end|>\n<|im_start|>assistant\n"
    "Let me solve this step by step.\n<think>"
)


def test_passthrough_renders_the_text_unchanged(tokenizer):
    messages = [{"role": "user", "content": RELEASED_PROMPT}]
    assert render_prompt(messages, "passthrough", tokenizer) == RELEASED_PROMPT
    assert render_prompt(messages, "passthrough") == RELEASED_PROMPT
    # The model's own template would wrap the transcript in a second one.
    assert tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) != RELEASED_PROMPT


def test_verl_passes_a_released_row_through_unwrapped_with_its_knowledge_column(tmp_path):
    """HFModelConfig(custom_chat_template=passthrough) -> RLHFDataset -> the agent loop's prompt ids."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from omegaconf import OmegaConf
    from transformers import Qwen2Config
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder
    from verl.workers.config import HFModelConfig

    model_dir = tmp_path / "model"
    shutil.copytree(qwen_tokenizer_dir(), model_dir)
    Qwen2Config(
        vocab_size=151936,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        architectures=["Qwen2ForCausalLM"],
    ).save_pretrained(model_dir)
    row = {
        "_id": "5abf",
        "data_source": "HotpotQA",
        "question": "What University did he attend?",
        "answer": "University of Wyoming",
        "knowledge": "Nick Bebout played for the University of Wyoming.",
        "prompt": [{"content": RELEASED_PROMPT, "role": "user"}],
        "ability": "factuality",
        "reward_model": {"ground_truth": "University of Wyoming", "style": "rule"},
        "extra_info": {"index": 0, "split": "train"},
    }
    pq.write_table(pa.Table.from_pylist([row]), tmp_path / "released.parquet")

    model_config = HFModelConfig(path=str(model_dir), custom_chat_template=chat_template("passthrough"))
    data_config = OmegaConf.create(
        {
            "max_prompt_length": 1024,
            "filter_overlong_prompts": True,
            "filter_overlong_prompts_workers": 1,
            "cache_dir": str(tmp_path / "cache"),
        }
    )
    item = RLHFDataset(str(tmp_path / "released.parquet"), model_config.tokenizer, data_config)[0]
    assert item["knowledge"] == row["knowledge"]  # every column reaches the agent loop, then the reward manager
    builder = create_continuous_token_builder(model_config.tokenizer, hf_model_type="qwen2")
    prompt_ids = builder.build_initial_tokens(item["raw_prompt"])
    # The special tokens written in the text become the model's special tokens, as in the released runs.
    assert prompt_ids == model_config.tokenizer(RELEASED_PROMPT, add_special_tokens=False)["input_ids"]
    assert model_config.tokenizer.decode(prompt_ids) == RELEASED_PROMPT
