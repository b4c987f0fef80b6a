"""Attention computed row by row over each row's own keys: a row's result does not depend on its batch-mates.

In a left-padded batch a row's attention runs over the batch's full key length, padding included (masked).
The masked keys add exact zeros, but the reduction over keys is grouped differently for each amount of
padding (SIMD lanes, blocks), so the row's output changes in the last bits with the longest prompt beside
it; greedy decoding then flips on near-ties. Here each row attends with its own query and key slice (its
padding cut off), so it runs the same computation, on the same shapes, whatever shares its batch.

Select it with ``attn_implementation="fspo_row"`` after :func:`register`; the forward call passes
``key_starts`` (per row, the number of leading padded key positions; rows with none real are left zero).
"""

from __future__ import annotations

import torch

ROW_ATTENTION = "fspo_row"


def row_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    key_starts: torch.Tensor | None = None,
    **_: object,
) -> tuple[torch.Tensor, None]:
    """Causal attention for ``query`` ``(B, H, q, D)`` over ``key``/``value`` ``(B, H_kv, k, D)``, the queries being
    the last ``q`` of the ``k`` positions; returns ``(B, q, H, D)`` as transformers' attention functions do.

    ``attention_mask`` is not read: ``key_starts[b]`` says where row b's keys begin (left padding before it).
    Queries at padded positions get zeros.
    """
    if getattr(module, "sliding_window", None):
        raise NotImplementedError(f"{ROW_ATTENTION} attention does not implement sliding-window attention")
    if dropout:
        raise NotImplementedError(f"{ROW_ATTENTION} attention is for inference: dropout must be 0")
    rows, heads, q_len, _ = query.shape
    kv_len = key.shape[2]
    grouped = heads != key.shape[1]
    output = query.new_zeros(rows, q_len, heads, query.shape[-1])
    for row in range(rows):
        start = int(key_starts[row]) if key_starts is not None else 0
        if start >= kv_len:
            continue  # a row with no keys (a filler row)
        first_query = max(0, start - (kv_len - q_len))
        # Views, not copies: sdpa's GQA reads each key head for its query heads (the same bits as repeating the
        # keys, measured in float32 and bfloat16; a copy of every row's keys cost ~15% of a decoding step).
        keys = key[row : row + 1, :, start:]
        values = value[row : row + 1, :, start:]
        queries = query[row : row + 1, :, first_query:]
        visible = None
        if queries.shape[2] > 1:  # causal, aligned to the last key: query i sees keys up to its own position
            visible = torch.ones(queries.shape[2], keys.shape[2], dtype=torch.bool).tril(
                keys.shape[2] - queries.shape[2]
            )
        attended = torch.nn.functional.scaled_dot_product_attention(
            queries, keys, values, attn_mask=visible, scale=scaling, enable_gqa=grouped
        )
        output[row, first_query:] = attended[0].transpose(0, 1)
    return output, None


def register() -> None:
    """Make ``attn_implementation="fspo_row"`` known to transformers (idempotent). Its masks are not used, but
    the model builds one before the layers run: the sdpa mask builder serves."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ROW_ATTENTION, row_attention)
    AttentionMaskInterface.register(ROW_ATTENTION, sdpa_mask)
