"""MiniCheck (RoBERTa, DeBERTa-v3, Flan-T5) and FactCG through the verifier factory.

Each backend loads a checkpoint of its published layout built here with random weights and a real
tokenizer of its kind (fspo_testing.tiny_verifiers), and must score exactly as the authors' recipe
does, one pair at a time: their input string, their window, their label index or label tokens.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.config.verifier import VerifierConfig, verifier_config
from fspo.verifiers import build_verifier
from fspo.verifiers.fact_checker import clip_to_tokens
from fspo.verifiers.factcg import FACTCG_TEMPLATE, FactCGVerifier
from fspo.verifiers.minicheck import MiniCheckClassifier, MiniCheckT5
from fspo.verifiers.placement import resolve_placement
from fspo_testing.tiny_verifiers import BUILDERS

EVIDENCE = "Bolt Mills is headquartered in Lima. The river in Peru was founded in 1999."
PAIRS = [
    (EVIDENCE, "Bolt Mills is headquartered in Lima."),
    (EVIDENCE, "The students are on vacation."),
    ("The students study in the library for exams.", "The students are preparing for an exam."),
    ("", "A claim without evidence."),
]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("fact_checkers")
    return {arch: build(root / arch) for arch, build in BUILDERS.items()}


def _published_scores(checkpoint, texts, window, t5=False):
    """The authors' scoring of already-rendered texts: one text at a time, truncated to their window."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, T5ForConditionalGeneration

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = (T5ForConditionalGeneration if t5 else AutoModelForSequenceClassification).from_pretrained(checkpoint)
    scores = []
    with torch.no_grad():
        for text in texts:
            inputs = tokenizer(text, truncation=True, max_length=window, return_tensors="pt")
            if t5:
                logits = model(**inputs, decoder_input_ids=torch.zeros((1, 1), dtype=torch.long)).logits[:, 0, :]
                probabilities = torch.softmax(logits[:, [3, 209]], dim=-1)
            else:
                probabilities = torch.softmax(model(**inputs).logits, dim=-1)
            scores.append(float(probabilities[0, 1]))
    return scores


CASES = {
    # backend name, architecture, class, authors' input string, window
    "minicheck-roberta": ("minicheck", "roberta-large", MiniCheckClassifier, "{e}</s>{c}", 512),
    "minicheck-deberta": ("minicheck", "deberta-v3-large", MiniCheckClassifier, "{e}[SEP]{c}", 2048),
    "minicheck-flan-t5": ("minicheck", "flan-t5-large", MiniCheckT5, "predict: {e}</s>{c}", 2048),
    "factcg": ("factcg", "deberta-v3-large", FactCGVerifier, None, 2048),
}


@pytest.mark.parametrize("case", CASES)
def test_scores_as_the_authors_recipe_through_the_factory(checkpoints, case):
    name, arch, cls, layout, window = CASES[case]
    verifier = build_verifier(
        verifier_config(
            {"name": name, "model_path": str(checkpoints[arch]), "device": "cpu", "max_tokens_per_batch": 256}
        )
    )
    assert type(verifier) is cls and verifier.max_input_tokens == window
    if layout is None:
        texts = [FACTCG_TEMPLATE.format(evidence=e, claim=c) for e, c in PAIRS]
    else:
        texts = [layout.format(e=e, c=c) for e, c in PAIRS]
    expected = _published_scores(checkpoints[arch], texts, window, t5=cls is MiniCheckT5)
    assert verifier.score(PAIRS) == pytest.approx(expected, abs=1e-5)
    assert verifier.score(PAIRS[::-1]) == pytest.approx(expected[::-1], abs=1e-5)  # batching-order invariant
    assert len(set(round(score, 6) for score in expected)) > 1  # the pairs really differ for the model


def test_published_evidence_chunks_are_data_for_the_shared_chunker():
    assert (MiniCheckClassifier.evidence_chunk_size, MiniCheckClassifier.evidence_chunk_unit) == (400, "tokens")
    assert (MiniCheckT5.evidence_chunk_size, MiniCheckT5.evidence_chunk_unit) == (500, "words")
    assert (FactCGVerifier.evidence_chunk_size, FactCGVerifier.evidence_chunk_unit) == (550, "words")


@pytest.mark.parametrize("arch", ["roberta-large", "flan-t5-large"])
def test_long_evidence_is_clipped_never_the_claim(checkpoints, arch):
    """Evidence past the window (RoBERTa's 512 positions) is cut to fit; the claim stays whole at the end."""
    from transformers import AutoTokenizer

    verifier = build_verifier(
        verifier_config({"name": "minicheck", "model_path": str(checkpoints[arch]), "device": "cpu"})
    )
    claim = "Bolt Mills is headquartered in Lima."
    long_evidence = " ".join([EVIDENCE] * 400)  # ~8k tokens
    rows, owners = verifier.encode([(long_evidence, claim)])
    assert owners == [0] and len(rows[0]["input_ids"]) <= verifier.max_input_tokens
    assert len(rows[0]["input_ids"]) > verifier.max_input_tokens - 8  # the window is used, not wasted
    text = AutoTokenizer.from_pretrained(checkpoints[arch]).decode(rows[0]["input_ids"], skip_special_tokens=False)
    assert text.rstrip("</s>").rstrip().endswith(claim)
    assert len(verifier.score([(long_evidence, claim)])) == 1


@settings(max_examples=60, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(list('Bolt Mills is in Lima. 1999?!\n"é')), max_size=200),
    max_tokens=st.integers(min_value=0, max_value=80),
)
def test_clip_to_tokens_is_the_longest_fitting_prefix(roberta_tokenizer, text, max_tokens):
    clipped = clip_to_tokens(roberta_tokenizer, text, max_tokens)
    count = len(roberta_tokenizer(text, add_special_tokens=False)["input_ids"])
    assert text.startswith(clipped)
    if count <= max_tokens:
        assert clipped == text
    else:
        offsets = roberta_tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        assert clipped == text[: offsets[max_tokens - 1][1]] if max_tokens else clipped == ""


@pytest.fixture(scope="module")
def roberta_tokenizer(checkpoints):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(checkpoints["roberta-large"])


def test_wrong_checkpoints_are_named(tmp_path, checkpoints):
    from transformers import BertConfig, BertForSequenceClassification, DebertaV2ForSequenceClassification

    bert = tmp_path / "bert"
    BertForSequenceClassification(
        BertConfig(
            vocab_size=400,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=1,
            intermediate_size=16,
            num_labels=2,
        )
    ).save_pretrained(bert)
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(checkpoints["roberta-large"]).save_pretrained(bert)
    with pytest.raises(ValueError, match="'bert' model; MiniCheck's classifiers are roberta or deberta-v2"):
        build_verifier(verifier_config({"name": "minicheck", "model_path": str(bert), "device": "cpu"}))
    three_way = tmp_path / "three_way"
    model = DebertaV2ForSequenceClassification.from_pretrained(
        checkpoints["deberta-v3-large"], num_labels=3, ignore_mismatched_sizes=True
    )
    model.save_pretrained(three_way)
    AutoTokenizer.from_pretrained(checkpoints["deberta-v3-large"]).save_pretrained(three_way)
    with pytest.raises(ValueError, match="has 3 labels; a fact checker has 2"):
        build_verifier(verifier_config({"name": "factcg", "model_path": str(three_way), "device": "cpu"}))


def test_config_names_defaults_and_placement():
    for name in ("minicheck", "factcg"):
        config = VerifierConfig(name=name)
        assert config.backend_options() == {"cache_size": 0}  # model_path null: the class's published default
        assert resolve_placement(name, "auto", "cuda") == "colocated"
    assert VerifierConfig(name="minicheck", model_path="x", max_length=10).ignored_options() == ["max_length"]


@pytest.mark.parametrize(
    "case, row_tokens",
    [
        ("minicheck-roberta", 512),
        ("minicheck-flan-t5", 762),
        ("factcg", 827),
    ],
)
def test_long_evidence_is_scored_in_windows_of_the_authors_chunk(checkpoints, case, row_tokens):
    """A 3,000-word evidence: windows of about the authors' chunk, each row within it, best window counts."""
    name, arch, cls, _, _ = CASES[case]
    verifier = build_verifier(verifier_config({"name": name, "model_path": str(checkpoints[arch]), "device": "cpu"}))
    assert verifier.max_row_tokens == row_tokens == cls.default_row_tokens()
    claim = "Bolt Mills is headquartered in Lima."
    evidence = " ".join(f"Sentence {i} says the river in Peru was founded in {1900 + i % 100}." for i in range(300))
    windows, owners = verifier.evidence_windows([(evidence, claim)])
    assert len(windows) > 3 and set(owners) == {0}
    rows, _ = verifier.encode(windows)
    assert max(len(row["input_ids"]) for row in rows) <= row_tokens + 2  # a token either side of a window's edge
    whole = build_verifier(
        verifier_config({"name": name, "model_path": str(checkpoints[arch]), "device": "cpu", "max_row_tokens": 0})
    )
    assert whole.evidence_windows([(evidence, claim)])[0] == [(evidence, claim)]  # 0: the paper's whole evidence
    # Scored as its best window (each window scored as it is, not windowed again).
    assert verifier.score([(evidence, claim)])[0] == pytest.approx(max(whole.score(windows)), abs=1e-5)
