"""Prompt formats: the instruction, the chat messages of a row, and the Jinja chat template that renders them.

Every row's ``prompt`` holds the same two messages whatever the backbone: a system message with the
``<think>``/``<answer>`` instruction and a user message with the question (and, for some sets, its
context). The *format* decides how those messages become text:

- ``qwen-base``: the paper's plain transcript for base models,
  ``"<instruction>\\nUser: <question>\\nAssistant: <think>"``. A base model's tokenizer has no such
  template, so verl must be given it: ``actor_rollout_ref.model.custom_chat_template`` (verl sets it on
  the tokenizer used both by ``RLHFDataset``'s overlong-prompt filter and by the agent loop that renders
  rollout prompts).
- ``qwen-instruct`` / ``llama-instruct``: the chat layouts of Qwen2.5-Instruct and Llama-3.1-Instruct
  (without tool calling), written here so prompts can be rendered and counted with any tokenizer. The
  models' own templates render the same text for these messages, so setting the key is optional.
- ``chatml-think``: ChatML (SmolLM2, Qwen) whose generation prompt opens the ``<think>`` block, as
  ``qwen-base`` does: a small instruct model that would not start its reasoning on its own writes
  steps from the first token (``fspo quickstart`` trains SmolLM2-135M-Instruct with it).
- ``qwen3``: the ChatML layout of Qwen3's hybrid thinking models (Qwen3-4B/8B/14B, ...), whose own
  template adds no ``<think>``: with thinking on (their default) the model opens ``<think>`` itself,
  so the reasoning FSPO labels is the model's own block and the format must not add a second one
  (``qwen-base`` and ``chatml-think`` would). ``enable_thinking=False`` (a chat-template keyword, which
  verl passes from ``data.apply_chat_template_kwargs``) appends the empty ``<think>\n\n</think>\n\n``
  block the model's template writes to switch reasoning off. The Qwen3-2507 *Thinking* models' own
  template instead ends the generation prompt with ``<think>\n``: their responses hold only the closing
  ``</think>``, which :func:`fspo.steps.reasoning_span` reads as reasoning from the response's start.
  Keep the model's own template for either (``custom_chat_template`` unset); this one renders and
  counts the hybrid layout with any tokenizer.
- ``passthrough``: the messages' text as it is, nothing added (no roles, no generation prompt), for
  prompts already rendered to text. The paper's released parquet files hold the whole transcript in
  one user message (e.g. ending ``Assistant: Let me solve this step by step. <think>``); without this
  template the model's own would wrap that transcript in a second one.
"""

from __future__ import annotations

PROMPT_FORMATS = ("qwen-base", "qwen-instruct", "llama-instruct", "chatml-think", "passthrough", "qwen3")

INSTRUCTION = (
    "A conversation between User and Assistant. The User asks a question, and the Assistant answers it. "
    "The Assistant first thinks through the reasoning step by step, then gives the final answer. "
    "The reasoning is enclosed within <think> </think> tags and the final answer within <answer> </answer> "
    "tags, i.e., <think> reasoning here </think> <answer> answer here </answer>."
)

# The plain transcript of the paper's base-model prompt; the generation prompt opens the <think> block.
QWEN_BASE_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}{{ message['content'] + '\\n' }}"
    "{%- elif message['role'] == 'user' -%}{{ 'User: ' + message['content'] + '\\n' }}"
    "{%- elif message['role'] == 'assistant' -%}{{ 'Assistant: ' + message['content'] + '\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ 'Assistant: <think>' }}{%- endif -%}"
)

QWEN_INSTRUCT_TEMPLATE = (
    "{%- if messages[0]['role'] != 'system' -%}"
    "{{ '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

# Llama 3.1 puts its knowledge-cutoff header in the system turn and trims every message.
LLAMA_INSTRUCT_TEMPLATE = (
    "{{ '<|begin_of_text|>' }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set system_message = messages[0]['content'] | trim -%}{%- set rest = messages[1:] -%}"
    "{%- else -%}{%- set system_message = '' -%}{%- set rest = messages -%}{%- endif -%}"
    "{{ '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{{ 'Cutting Knowledge Date: December 2023\\nToday Date: 26 Jul 2024\\n\\n' }}"
    "{{ system_message + '<|eot_id|>' }}"
    "{%- for message in rest -%}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + (message['content'] | trim) + '<|eot_id|>' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif -%}"
)

CHATML_THINK_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n<think>' }}{%- endif -%}"
)

# Qwen3's hybrid template for system/user turns: no default system message, no <think> of its own
# unless thinking is switched off.
QWEN3_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif -%}"
    "{%- endif -%}"
)

PASSTHROUGH_TEMPLATE = "{%- for message in messages -%}{{ message['content'] }}{%- endfor -%}"

_TEMPLATES = {
    "qwen-base": QWEN_BASE_TEMPLATE,
    "qwen-instruct": QWEN_INSTRUCT_TEMPLATE,
    "llama-instruct": LLAMA_INSTRUCT_TEMPLATE,
    "chatml-think": CHATML_THINK_TEMPLATE,
    "qwen3": QWEN3_TEMPLATE,
    "passthrough": PASSTHROUGH_TEMPLATE,
}


def check_prompt_format(prompt_format: str) -> str:
    """Return `prompt_format` unchanged, or raise naming the known formats."""
    if prompt_format not in _TEMPLATES:
        raise ValueError(f"unknown prompt format {prompt_format!r}; known formats: {', '.join(PROMPT_FORMATS)}")
    return prompt_format


def chat_template(prompt_format: str) -> str:
    """The Jinja chat template that renders a row's ``prompt`` messages for `prompt_format`.

    Pass it to verl as ``actor_rollout_ref.model.custom_chat_template`` (required for ``qwen-base``;
    for the instruct formats it reproduces the model's own template).
    """
    return _TEMPLATES[check_prompt_format(prompt_format)]


def build_messages(user_text: str, prompt_format: str = "qwen-base") -> list[dict[str, str]]:
    """The chat messages of one prompt: the instruction as system message, then `user_text`.

    The messages are the same for every format (the format only changes the template), so a parquet
    written for one backbone differs from another's only in the recorded format.
    """
    check_prompt_format(prompt_format)
    return [{"role": "system", "content": INSTRUCTION}, {"role": "user", "content": user_text}]


def render_prompt(messages: list[dict[str, str]], prompt_format: str, tokenizer=None, **template_kwargs) -> str:
    """Render `messages` as the text the model sees, with the generation prompt appended.

    Uses `tokenizer.apply_chat_template` when a tokenizer is given (the same call verl makes), otherwise
    renders the template with jinja2 directly. `template_kwargs` are the template's variables (verl's
    ``data.apply_chat_template_kwargs``, e.g. ``enable_thinking=False`` for ``qwen3``).
    """
    template = chat_template(prompt_format)
    if tokenizer is not None:
        return tokenizer.apply_chat_template(
            messages, chat_template=template, add_generation_prompt=True, tokenize=False, **template_kwargs
        )
    import jinja2

    environment = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return environment.from_string(template).render(messages=messages, add_generation_prompt=True, **template_kwargs)


def count_prompt_tokens(messages: list[dict[str, str]], prompt_format: str, tokenizer, **template_kwargs) -> int:
    """Number of tokens of the rendered prompt, counted as verl's overlong-prompt filter counts them."""
    ids = tokenizer.apply_chat_template(
        messages,
        chat_template=chat_template(prompt_format),
        add_generation_prompt=True,
        tokenize=True,
        **template_kwargs,
    )
    if isinstance(ids, dict) or hasattr(ids, "keys"):  # transformers 5 may return a BatchEncoding
        ids = ids["input_ids"]
    return len(ids)


CHAT_TEMPLATE_RESOLVER = "fspo_chat_template"


def register_chat_template_resolver() -> None:
    """Let configs write ``custom_chat_template: ${fspo_chat_template:qwen-base}`` (OmegaConf resolver).

    The template is full of quotes and braces that a Hydra command-line override cannot carry; a
    resolver keeps recipes to one short line. Register it in every process that resolves the config
    (or resolve the config in the driver with ``OmegaConf.resolve`` before it is shipped to Ray actors).
    """
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(CHAT_TEMPLATE_RESOLVER):
        OmegaConf.register_new_resolver(CHAT_TEMPLATE_RESOLVER, chat_template)
