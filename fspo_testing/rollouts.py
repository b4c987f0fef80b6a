"""Rollouts as verl's reward loop hands them to a reward manager: one ``DataProto`` row per rollout."""

from __future__ import annotations

import numpy as np


def single_rollout(
    tokenizer,
    response: str | list[int],
    *,
    data_source: str,
    ground_truth,
    extra_info,
    padding: int = 0,
    **columns,
):
    """One rollout of the prompt "Question?" and ``response``, and the response's length in tokens.

    Args:
        tokenizer: tokenizes the prompt, and the response when it is text.
        response: the response text, or its token ids as they are (none added, none cut).
        data_source: the row's ``data_source``.
        ground_truth: ``reward_model["ground_truth"]``.
        extra_info: the row's ``extra_info``, whatever its shape.
        padding: pad tokens after the response, masked out as verl pads a batch.
        columns: further non-tensor columns of the row (the released files' top-level ``knowledge``).

    Returns:
        ``(DataProto, response length without the padding)``.
    """
    import torch
    from verl import DataProto

    ids = tokenizer(response, add_special_tokens=False)["input_ids"] if isinstance(response, str) else list(response)
    prompt = tokenizer("Question?", add_special_tokens=False)["input_ids"]
    responses = torch.full((1, len(ids) + padding), tokenizer.pad_token_id or 0)
    responses[0, : len(ids)] = torch.tensor(ids, dtype=responses.dtype)
    attention = torch.zeros(1, len(prompt) + len(ids) + padding, dtype=torch.long)
    attention[0, : len(prompt) + len(ids)] = 1
    data = DataProto.from_single_dict(
        {
            "prompts": torch.tensor([prompt]),
            "responses": responses,
            "attention_mask": attention,
            "data_source": np.array([data_source], dtype=object),
            "reward_model": np.array([{"ground_truth": ground_truth, "style": "rule"}], dtype=object),
            "extra_info": np.array([extra_info], dtype=object),
            **{name: np.array([value], dtype=object) for name, value in columns.items()},
        }
    )
    return data, len(ids)
