"""MiniCheck (RoBERTa, DeBERTa-v3, Flan-T5) and FactCG through the verifier factory.

Each backend loads a checkpoint of its published layout built here with random weights and a real
tokenizer of its kind (fspo_testing.tiny_verifiers), and must score exactly as the authors' recipe
does, one pair at a time: their input string, their window, their label index or label tokens. Their
chunking of long documents is compared with the authors' in tests/test_verifier_authors.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from fspo.config.verifier import VerifierConfig, verifier_config
from fspo.verifiers import build_verifier
from fspo.verifiers.factcg import FACTCG_TEMPLATE, FactCGVerifier
from fspo.verifiers.minicheck import MiniCheckClassifier, MiniCheckT5
from fspo.verifiers.placement import resolve_placement
from fspo_testing.tiny_verifiers import BUILDERS

EVIDENCE = "Bolt Mills is headquartered in Lima. The river in Peru was founded in 1999."
PAIRS = [
    (EVIDENCE, "Bolt Mills is headquartered in Lima."),
    (EVIDENCE, "The students are on vacation."),
    ("The students study in the library for exams.", "The students are preparing for an exam."),
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
    assert math.isnan(verifier.score([("", "A claim without evidence.")])[0])  # no evidence: unverifiable


def test_authors_chunk_sizes():
    assert MiniCheckClassifier.evidence_chunk_size == 400  # tokens of the checker's tokenizer
    assert MiniCheckT5.evidence_chunk_size == 500  # whitespace words
    assert FactCGVerifier.evidence_chunk_size == 550  # NLTK word tokens


@pytest.mark.parametrize("arch", ["roberta-large", "flan-t5-large"])
def test_a_row_past_the_window_is_cut_from_the_right_as_the_authors_tokenizer_call_cuts_it(checkpoints, arch):
    """A one-sentence chunk longer than the window (RoBERTa's 512 positions) keeps its start; the claim,
    at the end, is what the right truncation drops, as MiniCheck's ``tokenizer(..., truncation=True)``."""
    from transformers import AutoTokenizer

    verifier = build_verifier(
        verifier_config({"name": "minicheck", "model_path": str(checkpoints[arch]), "device": "cpu"})
    )
    claim = "Bolt Mills is headquartered in Lima."
    run_on = "It " + " ".join(["was founded in Lima"] * 600) + "."
    chunks, owners = verifier.evidence_windows([(run_on, claim)])
    assert chunks == [(run_on, claim)] and owners == [0]  # one sentence: one chunk, however long
    rows, _ = verifier.encode(chunks)
    assert len(rows[0]["input_ids"]) == verifier.max_input_tokens
    text = AutoTokenizer.from_pretrained(checkpoints[arch]).decode(rows[0]["input_ids"], skip_special_tokens=True)
    assert "Bolt Mills" not in text
    assert len(verifier.score([(run_on, claim)])) == 1


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


def test_row_windows_are_not_options_of_the_fact_checkers():
    """max_row_tokens and long_evidence size HHEM's rows; MiniCheck and FactCG chunk as their authors do."""
    config = VerifierConfig(name="factcg", max_row_tokens=0, long_evidence="top_k")
    assert config.ignored_options() == ["long_evidence", "max_row_tokens"]
    assert "max_row_tokens" not in config.backend_options()


@pytest.mark.parametrize("name", ["factcg", "minicheck", "nli"])
def test_a_checkpoint_of_another_architecture_is_refused_not_scored_through_a_random_head(
    tmp_path_factory, checkpoints, name
):
    """Was: factcg (and nli) loaded a Qwen2 causal LM or a Flan-T5 checkpoint as a sequence classifier, with
    transformers initialising its classification head at random, and scored with it."""
    from fspo_testing.tiny_model import build_tiny_model

    causal_lm = build_tiny_model(tmp_path_factory.mktemp("qwen2_causal_lm"))
    wrong = {"causal": (causal_lm, "Qwen2ForCausalLM checkpoint, not a Qwen2ForSequenceClassification")}
    if name != "minicheck":  # minicheck reads a T5 checkpoint as MiniCheck-Flan-T5, its own architecture
        wrong["t5"] = (checkpoints["flan-t5-large"], "checkpoint, not a T5ForSequenceClassification")
    for path, message in wrong.values():
        with pytest.raises(ValueError, match=message) as refused:
            build_verifier(verifier_config({"name": name, "model_path": str(path), "device": "cpu"}))
        assert str(path) in str(refused.value) and "initialised at random" in str(refused.value)
