"""SmolLM2-135M-Instruct from the packaged GGUF file to a Hugging Face directory (the quickstart's model)."""

from __future__ import annotations

import pytest

from fspo.quickstart.smollm2 import convert_smollm2, gguf_path


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    return convert_smollm2(tmp_path_factory.mktemp("smollm2") / "SmolLM2-135M-Instruct")


def test_converted_model_computes_what_the_gguf_model_computes(converted):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(converted)
    model = AutoModelForCausalLM.from_pretrained(converted)
    assert type(model).__name__ == "LlamaForCausalLM" and model.config.num_hidden_layers == 30
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(134.5e6, rel=0.01)

    source = gguf_path()
    reference = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name, dtype=torch.float32)
    ids = tokenizer("Nora Vik works for Bolt Mills.", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, reference(ids).logits, atol=1e-4)


def test_tokenizer_ends_turns_with_im_end_and_keeps_the_chat_template(converted):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(converted)
    # The GGUF metadata names <|im_start|> as eos; generation must stop at the end of the turn.
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == 2
    assert tokenizer.pad_token_id == 2
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=False
    )
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_an_existing_conversion_is_reused(converted):
    weights = converted / "model.safetensors"
    written = weights.stat().st_mtime_ns
    assert convert_smollm2(converted) == converted
    assert weights.stat().st_mtime_ns == written
    assert not converted.with_name(converted.name + ".partial").exists()
