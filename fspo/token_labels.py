"""Token labels from step verdicts: support scores -> verdicts, and exact character-to-token alignment.

Their transport to the trainer: :mod:`fspo.training.reward_extra_info`. `step_labels_for_response` is the whole
path for one response, as the reward manager runs it.

The text that spans point into is `tokenizer.decode(response_ids, skip_special_tokens=...)` with the
tokenizer's own `clean_up_tokenization_spaces` (pass the same `skip_special_tokens` here as to that decode;
verl's reward managers decode with `skip_special_tokens=True`). `token_char_offsets` gives each token's
character span in that text; `token_labels` lays step verdicts over those spans.

Alignment rules:

- A token's span is the characters it helps build. When a multi-byte character is split across tokens
  (byte-level BPE, SentencePiece byte fallback) every one of those tokens covers that character, so spans of
  neighbouring tokens overlap only there. Bytes that do not form a character (a response cut at the length
  limit inside one) decode to U+FFFD, which every token holding some of those bytes covers. A token that adds
  no text (a skipped special token) has an empty span at the position where it sits. Whitespace that the
  decode drops (a leading "▁", the space before punctuation under `clean_up_tokenization_spaces`) is taken
  from the start of its run.
- A token gets a span's verdict when it shares at least one non-whitespace character with the span. A token
  such as ".\\n\\n" that ends a sentence therefore belongs to that sentence, and a token "\\n\\n" between
  sentences belongs to none. A token that shares non-whitespace characters with several spans (e.g. "。这"
  ending one CJK sentence and starting the next) belongs to the first of them.
- A whitespace-only token inside a span (the span has non-whitespace characters before it and after it,
  e.g. the lone " " Qwen emits before digits: " in", " ", "1", "9"...) is part of that step and gets its
  verdict. Whitespace at a span's edge or between spans gets none.
- Every other token gets 0.

The usual call is `tokenizer.decode(ids, skip_special_tokens=True)` in the reward function, then
`reasoning_steps` on that text, verification, and `token_labels(ids, tokenizer, spans, verdicts,
skip_special_tokens=True)`.

Offsets are computed in one pass: from the byte-level alphabet for byte-level BPE (Qwen, GPT-2, Llama 3),
otherwise from each token decoded after a fixed one-token context (WordPiece "##" pieces and SentencePiece
"▁" spaces come out right). The pieces are checked against the full decode, where only whitespace may have
been removed (first-token space, `clean_up_tokenization_spaces`). If the check fails the offsets come from
decoding every prefix, which is exact for any tokenizer but quadratic (about 1.5 s for 2,048 tokens; in
practice only SentencePiece byte-fallback tokens that split a character get there). The byte table for a
byte-level tokenizer is built on first use (a few hundred ms for Qwen's 151k tokens) and cached.
"""

from __future__ import annotations

import math
import re
import weakref
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from fspo.steps import Step, reasoning_span

# A step's label: supported +1, unsupported -1, unscored 0 (the reward manager encodes only these).
LABEL_VALUES = (-1, 0, 1)
_BYTE_LEVEL_DECODER = "ByteLevel"
_WHITESPACE = re.compile(r"\s")  # the characters str.isspace() accepts


def verdicts_from_scores(scores: Sequence[float], threshold: float, strict: bool = False) -> list[int]:
    """Support probabilities -> step labels: >= threshold (``strict``: > threshold) -> +1, else -1; NaN -> 0.

    ``strict`` is the comparison of the backends whose authors label ``prob > 0.5`` (MiniCheck, FactCG:
    :attr:`fspo.verifiers.base.Verifier.strict_threshold`).
    """
    return [
        0 if (s is None or math.isnan(s)) else (1 if (s > threshold if strict else s >= threshold) else -1)
        for s in scores
    ]


def step_labels_for_response(
    response_ids: Sequence[int],
    tokenizer,
    text: str,
    steps: Sequence[Step],
    verdicts: Sequence[int],
    label_outside_reasoning: int = 0,
) -> list[int]:
    """Per-token labels of one response from its steps' verdicts.

    ``text`` must be ``tokenizer.decode(response_ids, skip_special_tokens=True)`` (what verl's reward
    loop decodes, and what the steps' offsets point into). With ``label_outside_reasoning`` set
    (the released code's behaviour), every token from the end of the reasoning on -- the
    ``</think>`` tag and the answer included -- gets that label too.
    """
    spans = [(step.start, step.end) for step in steps]
    labels = list(verdicts)
    if label_outside_reasoning:
        span = reasoning_span(text)
        if span is not None and span[1] < len(text):
            spans.append((span[1], len(text)))
            labels.append(int(label_outside_reasoning))
    offsets = token_char_offsets(response_ids, tokenizer, skip_special_tokens=True, text=text)
    return labels_from_offsets(offsets, text, spans, labels)


def token_char_offsets(
    response_ids: Sequence[int], tokenizer, skip_special_tokens: bool = False, text: str | None = None
) -> list[tuple[int, int]]:
    """Character span of each token in `tokenizer.decode(response_ids, skip_special_tokens=...)`.

    Args:
        response_ids: Token ids of the response (no padding).
        tokenizer: A Hugging Face tokenizer.
        skip_special_tokens: Must match the decode call that produced the text the spans point into.
        text: That decoded text, when the caller has it already (saves a second decode per response).

    Returns:
        One `(start, end)` per id.
    """
    ids = _as_id_list(response_ids)
    if text is None:
        text = tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
    return _offsets_for_text(ids, tokenizer, skip_special_tokens, text)


def token_labels(
    response_ids: Sequence[int],
    tokenizer,
    spans: Sequence[tuple[int, int]],
    verdicts: Sequence[int | bool],
    skip_special_tokens: bool = False,
) -> list[int]:
    """One label in {-1, 0, 1} per response token from step verdicts (rules in the module docstring).

    Args:
        response_ids: Token ids of the response (no padding): a list, numpy array or 1-D tensor.
        tokenizer: The tokenizer that produced them.
        spans: `(start, end)` character offsets into `tokenizer.decode(response_ids,
            skip_special_tokens=skip_special_tokens)`, in order and not overlapping.
        verdicts: One per span: -1 (unsupported), 0 (no label), 1 (supported), or a bool (True -> 1,
            False -> -1).
        skip_special_tokens: The value used for the decode that the spans point into.

    Returns:
        A list with one label per id.
    """
    ids = _as_id_list(response_ids)
    text = tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
    labels = _check_verdicts(spans, verdicts)
    _check_spans(spans, len(text))
    offsets = _offsets_for_text(ids, tokenizer, skip_special_tokens, text)
    return labels_from_offsets(offsets, text, spans, labels)


def labels_from_offsets(
    offsets: Sequence[tuple[int, int]],
    text: str,
    spans: Sequence[tuple[int, int]],
    labels: Sequence[int],
) -> list[int]:
    """Token labels from token character offsets (see `token_char_offsets`) and labelled spans of `text`."""
    if not offsets:
        return []
    token_starts, token_ends = np.asarray(offsets, dtype=np.int64).reshape(-1, 2).T
    result = np.zeros(len(offsets), dtype=np.int64)
    if not spans:
        return result.tolist()
    span_starts, span_ends = np.asarray(spans, dtype=np.int64).reshape(-1, 2).T
    span_labels = np.asarray(labels, dtype=np.int64)
    is_space = np.zeros(len(text), dtype=np.int64)
    is_space[[match.start() for match in _WHITESPACE.finditer(text)]] = 1
    # non_space_before[i]: non-whitespace characters in text[:i]; an overlap holds one iff the count grows.
    non_space_before = np.concatenate(([0], np.cumsum(1 - is_space)))
    # Try spans in order, from the first one ending after the token starts, until one shares a
    # non-whitespace character with the token or starts after it; rounds = most spans one token touches.
    candidate = np.searchsorted(span_ends, token_starts, side="right")
    pending = np.arange(len(offsets))
    while pending.size:
        pending = pending[candidate[pending] < len(spans)]
        pending = pending[span_starts[candidate[pending]] < token_ends[pending]]
        span = candidate[pending]
        low = np.maximum(token_starts[pending], span_starts[span])
        high = np.minimum(token_ends[pending], span_ends[span])
        shares_text = (low < high) & (non_space_before[np.maximum(high, low)] > non_space_before[low])
        # A whitespace-only token with step text on both sides of it, inside the span.
        start, end = token_starts[pending], token_ends[pending]
        inside = (
            (start < end)
            & (non_space_before[end] == non_space_before[start])
            & (non_space_before[start] > non_space_before[span_starts[span]])
            & (non_space_before[span_ends[span]] > non_space_before[end])
        )
        hit = shares_text | inside
        result[pending[hit]] = span_labels[span[hit]]
        pending = pending[~hit]
        candidate[pending] += 1
    return result.tolist()


def _as_id_list(response_ids) -> list[int]:
    """Plain ints from a list, numpy array or tensor (`tolist` avoids a slow per-element loop)."""
    if hasattr(response_ids, "tolist"):
        response_ids = response_ids.tolist()
    return [int(i) for i in response_ids]


def _check_verdicts(spans: Sequence[tuple[int, int]], verdicts: Sequence[int | bool]) -> list[int]:
    if len(spans) != len(verdicts):
        raise ValueError(f"got {len(spans)} spans but {len(verdicts)} verdicts: need one verdict per span")
    labels = []
    for verdict in verdicts:
        if isinstance(verdict, (bool, np.bool_)):
            labels.append(1 if verdict else -1)
        elif int(verdict) in LABEL_VALUES and int(verdict) == verdict:
            labels.append(int(verdict))
        else:
            raise ValueError(f"verdicts must be -1, 0, 1 or bool, got {verdict!r}")
    return labels


def _check_spans(spans: Sequence[tuple[int, int]], text_length: int) -> None:
    previous_end = 0
    for start, end in spans:
        if not 0 <= start <= end <= text_length:
            raise ValueError(f"span ({start}, {end}) is not inside the decoded text of length {text_length}")
        if start < previous_end:
            raise ValueError(f"span ({start}, {end}) overlaps or precedes the one before: spans must be in order")
        previous_end = end


def _offsets_for_text(ids: list[int], tokenizer, skip_special_tokens: bool, text: str) -> list[tuple[int, int]]:
    if not ids:
        return []
    if _decoder_name(tokenizer) == _BYTE_LEVEL_DECODER:
        pieces = _byte_level_pieces(ids, tokenizer, skip_special_tokens)
    else:
        pieces = _context_pieces(ids, tokenizer, skip_special_tokens)
    if pieces is not None:
        offsets = _align_pieces(*pieces, text)
        if offsets is not None:
            return offsets
    return _prefix_decode_offsets(ids, tokenizer, skip_special_tokens, text)


def _decoder_name(tokenizer) -> str | None:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = getattr(backend, "decoder", None)
    return None if decoder is None else type(decoder).__name__


@lru_cache(maxsize=1)
def _byte_level_table() -> dict[int, str]:
    """Translation from the byte-level alphabet to latin-1 characters (one per byte).

    Characters below 256 that are not in the alphabet map to a character that latin-1 cannot encode, so a
    token holding them falls back to its UTF-8 bytes, as the `tokenizers` ByteLevel decoder does.
    """
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    byte_to_char = {b: chr(b) for b in printable}
    shift = 0
    for b in range(256):
        if b not in byte_to_char:
            byte_to_char[b] = chr(256 + shift)
            shift += 1
    table = {ord(char): chr(b) for b, char in byte_to_char.items()}
    for code in range(256):
        table.setdefault(code, "\uffff")
    return table


def _byte_level_pieces(
    ids: list[int], tokenizer, skip_special_tokens: bool
) -> tuple[str, list[tuple[int, int]]] | None:
    """Decoded text and each token's character span in it, built from the tokens' bytes."""
    vocabulary = _byte_level_vocabulary(tokenizer, ids)
    if vocabulary is None:
        return None
    # An id past the vocabulary (vLLM can sample the embedding's padding rows: Qwen2.5 has 151,665 tokens and
    # 152,064 rows) decodes to nothing, as in `decode`; the alignment below checks the text either way.
    size = len(vocabulary)
    special = _special_ids(tokenizer) if skip_special_tokens else ()
    chunks = [b"" if i >= size or i in special else vocabulary[i] for i in ids]
    data = b"".join(chunks)
    token_bytes = [len(c) for c in chunks]
    decoded = _utf8_with_byte_map(data)
    if decoded is None:
        return None
    text, char_of_byte = decoded
    ends = np.cumsum(token_bytes)
    starts = ends - np.asarray(token_bytes)
    char_of_byte = np.append(char_of_byte, len(text))  # an empty token at the end sits at len(text)
    first_char = char_of_byte[starts]
    last_char = char_of_byte[np.maximum(ends - 1, 0)]
    end_char = np.where(ends > starts, last_char + 1, first_char)
    return text, list(zip(first_char.tolist(), end_char.tolist()))


def _token_bytes(token: str, table: dict[int, str]) -> bytes:
    try:
        return token.translate(table).encode("latin-1")
    except UnicodeEncodeError:
        return token.encode("utf-8")


# Per tokenizer (weakly held): the bytes each id decodes to. Rebuilt when an id is missing (tokens were added);
# a stale entry cannot go unnoticed because the pieces are checked against the full decode.
_VOCABULARY_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _byte_level_vocabulary(tokenizer, ids: list[int]) -> list[bytes | None] | None:
    """The bytes each token id stands for, as the `tokenizers` ByteLevel decoder turns it into bytes; None where
    an id is negative or falls in a gap of the vocabulary (the prefix decode then labels). Built once per
    tokenizer, and again if tokens were added since. An id past it has no bytes: it decodes to nothing."""
    if min(ids) < 0:
        return None
    try:
        vocabulary = _VOCABULARY_CACHE.get(tokenizer)
    except TypeError:  # not weakly referenceable: build every time
        vocabulary = None
    if vocabulary is None or _added_since(vocabulary, ids, tokenizer):
        token_to_id = tokenizer.backend_tokenizer.get_vocab(with_added_tokens=True)
        vocabulary = [None] * (max(token_to_id.values(), default=-1) + 1)
        table = _byte_level_table()
        for token, index in token_to_id.items():
            vocabulary[index] = _token_bytes(token, table)
        try:
            _VOCABULARY_CACHE[tokenizer] = vocabulary
        except TypeError:
            pass
    if any(vocabulary[i] is None for i in ids if i < len(vocabulary)):
        return None
    return vocabulary


def _added_since(vocabulary: list[bytes | None], ids: list[int], tokenizer) -> bool:
    """Whether an id past ``vocabulary`` is a token added to the tokenizer after it was built."""
    if max(ids) < len(vocabulary):
        return False
    added = tokenizer.added_tokens_decoder  # (reading the tokenizer's vocabulary size takes ~30 ms)
    return any(i in added for i in ids if i >= len(vocabulary))


def _special_ids(tokenizer) -> set[int]:
    """Ids that `decode(..., skip_special_tokens=True)` drops: added tokens marked special."""
    return {index for index, token in tokenizer.added_tokens_decoder.items() if token.special}


def _utf8_with_byte_map(data: bytes) -> tuple[str, np.ndarray] | None:
    """Decode UTF-8 like `bytes.decode(errors="replace")` and give, for each byte, its character's index."""
    parts: list[str] = []
    char_of_byte = np.empty(len(data), dtype=np.int64)
    position, chars = 0, 0
    while position < len(data):
        try:
            part = data[position:].decode("utf-8")
            bad = None
        except UnicodeDecodeError as error:
            part = data[position : position + error.start].decode("utf-8")
            bad = (position + error.start, position + error.end)
        valid_end = position + len(part.encode("utf-8"))
        block = np.frombuffer(data[position:valid_end], dtype=np.uint8)
        is_char_start = (block & 0xC0) != 0x80
        char_of_byte[position:valid_end] = chars + np.cumsum(is_char_start) - 1
        parts.append(part)
        chars += len(part)
        if bad is None:
            break
        char_of_byte[bad[0] : bad[1]] = chars
        parts.append("\ufffd")
        chars += 1
        position = bad[1]
    return "".join(parts), char_of_byte


def _context_pieces(ids: list[int], tokenizer, skip_special_tokens: bool) -> tuple[str, list[tuple[int, int]]] | None:
    """Each token's text decoded after a fixed context token, so it keeps its leading space or joins on."""
    context = tokenizer.encode("a", add_special_tokens=False)[:1]
    if not context:
        return None
    batch = [context] + [context + [i] for i in ids]
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        decoded = backend.decode_batch(batch, skip_special_tokens=skip_special_tokens)
    else:
        decoded = [tokenizer.decode(b, skip_special_tokens=skip_special_tokens) for b in batch]
    prefix = decoded[0]
    if not all(d.startswith(prefix) for d in decoded[1:]):
        return None
    pieces = [d[len(prefix) :] for d in decoded[1:]]
    if any("\ufffd" in p for p in pieces):  # a partial character: the prefix decode handles those
        return None
    spans, position = [], 0
    for piece in pieces:
        spans.append((position, position + len(piece)))
        position += len(piece)
    return "".join(pieces), spans


def _align_pieces(joined: str, spans: list[tuple[int, int]], text: str) -> list[tuple[int, int]] | None:
    """Map spans in `joined` to spans in `text`, where `text` is `joined` with some whitespace removed."""
    if joined == text:
        return spans
    # consumed[i]: characters of `text` matched before joined[i]. Inside a whitespace run the removed
    # characters are taken from its start (decoders strip a leading space; clean-up drops the space before
    # punctuation), so the run in `text` must be the end of the run in `joined`.
    consumed = np.empty(len(joined) + 1, dtype=np.int64)
    i = k = 0
    while i < len(joined):
        if joined[i].isspace():
            run_end = i
            while run_end < len(joined) and joined[run_end].isspace():
                run_end += 1
            kept_end = k
            while kept_end < len(text) and text[kept_end].isspace():
                kept_end += 1
            kept = kept_end - k
            if kept > run_end - i or text[k:kept_end] != joined[run_end - kept : run_end]:
                return None
            consumed[i : run_end - kept] = k
            consumed[run_end - kept : run_end] = np.arange(k, kept_end)
            i, k = run_end, kept_end
        elif k < len(text) and text[k] == joined[i]:
            consumed[i] = k
            i, k = i + 1, k + 1
        else:
            return None
    consumed[len(joined)] = k
    if k != len(text):
        return None
    return [(int(consumed[start]), int(consumed[end])) for start, end in spans]


def _prefix_decode_offsets(ids: list[int], tokenizer, skip_special_tokens: bool, text: str) -> list[tuple[int, int]]:
    """Exact offsets for any tokenizer from the decode of every prefix (quadratic; the fallback).

    A prefix whose decode is a prefix of `text` is a clean boundary. A token starts where the decode of the
    ids before it stops agreeing with `text`, but not before the last clean boundary (a partial character at
    the end can spoil the decode of earlier bytes), and ends at the next clean boundary after it, so tokens
    that build one character together all cover it.
    """
    prefixes = [tokenizer.decode(ids[:k], skip_special_tokens=skip_special_tokens) for k in range(len(ids) + 1)]
    agree = [_common_prefix_length(p, text) for p in prefixes]
    clean = [a == len(p) for a, p in zip(agree, prefixes)]
    clean[-1] = True
    last_clean_start = [0] * (len(ids) + 1)
    boundary = 0
    for k in range(len(ids) + 1):
        if clean[k]:
            boundary = agree[k]
        last_clean_start[k] = boundary
    next_clean_end = [len(text)] * (len(ids) + 1)
    boundary = len(text)
    for k in range(len(ids), -1, -1):
        if clean[k]:
            boundary = agree[k]
        next_clean_end[k] = boundary
    starts = [max(agree[k], last_clean_start[k]) for k in range(len(ids))]
    return [(start, max(start, next_clean_end[k + 1])) for k, start in enumerate(starts)]


def _common_prefix_length(a: str, b: str) -> int:
    limit = min(len(a), len(b))
    if a[:limit] == b[:limit]:
        return limit
    low, high = 0, limit  # binary search: a[:low] == b[:low] and a[:high] != b[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle
    return low
