"""hhem and nli backends against tiny randomly initialised models of their architectures (no hub)."""

from __future__ import annotations

import json
import math
import textwrap

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.config.verifier import verifier_config
from fspo.verifiers import build_verifier
from fspo.verifiers.batching import NonFiniteOutput, pad_features

EVIDENCE = "Paris is the capital of France. The Seine flows through Paris. It has about 2.1 million inhabitants."
CLAIMS = [
    "The capital of France is Paris.",
    "Paris has 2.1 million inhabitants.",
    "The Seine is a river in Spain.",
    "Rome is large.",
]

# --- HHEM ---------------------------------------------------------------------------------------------
# A remote-code checkpoint with HHEM-2.1-Open's layout: a config carrying `foundation` (the T5 model and
# tokenizer directory) and `prompt`, and a wrapper holding a T5ForTokenClassification as `t5` whose
# forward returns the first token's logits. Written for this test.
CONFIG_CODE = textwrap.dedent("""
    from transformers import PretrainedConfig

    class TinyHHEMConfig(PretrainedConfig):
        model_type = "tiny_hhem"

        def __init__(self, foundation="", prompt="", **kwargs):
            super().__init__(**kwargs)
            self.foundation = foundation
            self.prompt = prompt
""")
MODEL_CODE = textwrap.dedent("""
    from transformers import AutoConfig, PreTrainedModel, T5ForTokenClassification
    from .configuration_tiny_hhem import TinyHHEMConfig

    class TinyHHEMForSequenceClassification(PreTrainedModel):
        config_class = TinyHHEMConfig

        def __init__(self, config):
            super().__init__(config)
            self.t5 = T5ForTokenClassification(AutoConfig.from_pretrained(config.foundation))
            self.post_init()

        def forward(self, **kwargs):
            outputs = self.t5(**kwargs)
            outputs.logits = outputs.logits[:, 0, :]
            return outputs
""")
PROMPT = "<pad> Determine if the hypothesis is true given the premise?\n\nPremise: {text1}\n\nHypothesis: {text2}"


def _t5_tokenizer(directory):
    """A small SentencePiece-style Unigram tokenizer with T5's special tokens (<pad>=0, </s>=1, <unk>=2)."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=400, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>")
    tok.train_from_iterator([PROMPT, EVIDENCE, *CLAIMS] * 3, trainer)
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    tokenizer.save_pretrained(directory)
    return tokenizer


@pytest.fixture(scope="module")
def tiny_hhem(tmp_path_factory):
    from transformers import AutoConfig, AutoModelForSequenceClassification, T5Config

    foundation = tmp_path_factory.mktemp("flan_t5_tiny")
    tokenizer = _t5_tokenizer(foundation)
    T5Config(
        vocab_size=len(tokenizer),
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        relative_attention_num_buckets=8,
        num_labels=2,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    ).save_pretrained(foundation)
    checkpoint = tmp_path_factory.mktemp("tiny_hhem")
    (checkpoint / "configuration_tiny_hhem.py").write_text(CONFIG_CODE)
    (checkpoint / "modeling_tiny_hhem.py").write_text(MODEL_CODE)
    (checkpoint / "config.json").write_text(
        json.dumps(
            {
                "model_type": "tiny_hhem",
                "foundation": str(foundation),
                "prompt": PROMPT,
                "auto_map": {
                    "AutoConfig": "configuration_tiny_hhem.TinyHHEMConfig",
                    "AutoModelForSequenceClassification": "modeling_tiny_hhem.TinyHHEMForSequenceClassification",
                },
            }
        )
    )
    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(checkpoint, trust_remote_code=True)
    model = AutoModelForSequenceClassification.from_config(config, trust_remote_code=True)
    model.save_pretrained(checkpoint)
    return checkpoint, foundation


def _hhem_reference(checkpoint, foundation, pairs):
    """HHEM's published scoring, one pair at a time: softmax of token 0's logits, class 1."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(checkpoint, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(foundation)
    scores = []
    for evidence, claim in pairs:
        inputs = tokenizer([PROMPT.format(text1=evidence, text2=claim)], return_tensors="pt")
        with torch.no_grad():
            logits = model.t5(**inputs).logits[:, 0, :]
        scores.append(float(torch.softmax(logits, -1)[0, 1]))
    return scores


def test_hhem_matches_published_scoring_one_pair_at_a_time(tiny_hhem):
    checkpoint, foundation = tiny_hhem
    verifier = build_verifier(
        verifier_config(
            {
                "name": "hhem",
                "model_path": str(checkpoint),
                "device": "cpu",
                "max_tokens_per_batch": 150,
            }
        )
    )
    pairs = [(EVIDENCE, c) for c in CLAIMS] + [("Short premise.", CLAIMS[0])]
    scores = verifier.score(pairs)
    assert scores == pytest.approx(_hhem_reference(checkpoint, foundation, pairs), abs=1e-5)
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert verifier.model.dtype == torch.float32  # as published


def test_hhem_without_remote_code_loads_the_same_weights_into_t5(tiny_hhem):
    checkpoint, foundation = tiny_hhem
    verifier = build_verifier(
        verifier_config(
            {
                "name": "hhem",
                "model_path": str(checkpoint),
                "device": "cpu",
                "trust_remote_code": False,
            }
        )
    )
    assert type(verifier.model).__name__ == "T5ForTokenClassification"
    pairs = [(EVIDENCE, c) for c in CLAIMS]
    assert verifier.score(pairs) == pytest.approx(_hhem_reference(checkpoint, foundation, pairs), abs=1e-5)


def test_hhem_remote_code_that_leaves_tied_embeddings_random_still_scores_right(tiny_hhem, tmp_path):
    # Remote code written for transformers 4 may not tie `encoder.embed_tokens` to `shared` under
    # transformers 5: the embedding stays random. The verifier re-reads the checkpoint's t5 weights.
    import shutil

    checkpoint, foundation = tiny_hhem
    for file in checkpoint.iterdir():
        shutil.copy(file, tmp_path / file.name)
    broken = MODEL_CODE.replace("        self.post_init()\n", "").replace(
        "config_class = TinyHHEMConfig\n",
        "config_class = TinyHHEMConfig\n    all_tied_weights_keys = {}\n",
    )
    assert broken != MODEL_CODE
    (tmp_path / "modeling_tiny_hhem.py").write_text(broken)
    from transformers import AutoModelForSequenceClassification

    raw = AutoModelForSequenceClassification.from_pretrained(tmp_path, trust_remote_code=True).t5.transformer
    # The failure is real: the two are separate tensors, the encoder's not loaded from the checkpoint (its
    # values are whatever initialisation left, which once in CI happened to equal `shared` bit for bit).
    assert raw.encoder.embed_tokens.weight.data_ptr() != raw.shared.weight.data_ptr()
    verifier = build_verifier(verifier_config({"name": "hhem", "model_path": str(tmp_path), "device": "cpu"}))
    pairs = [(EVIDENCE, c) for c in CLAIMS]
    assert verifier.score(pairs) == pytest.approx(_hhem_reference(checkpoint, foundation, pairs), abs=1e-5)


def test_hhem_input_is_the_prompt_with_leading_pad_and_trailing_eos(tiny_hhem):
    checkpoint, _ = tiny_hhem
    verifier = build_verifier(verifier_config({"name": "hhem", "model_path": str(checkpoint), "device": "cpu"}))
    rows, owners = verifier.encode([(EVIDENCE, CLAIMS[0])])
    ids = rows[0]["input_ids"]
    assert ids[0] == verifier.tokenizer.pad_token_id == 0 and ids[-1] == verifier.tokenizer.eos_token_id
    assert "Premise" in verifier.tokenizer.decode(ids) and owners == [0]


def test_hhem_bare_t5_token_classifier_directory(tiny_hhem, tmp_path):
    from transformers import AutoConfig, AutoModelForSequenceClassification

    checkpoint, foundation = tiny_hhem
    wrapped = AutoModelForSequenceClassification.from_pretrained(checkpoint, trust_remote_code=True)
    wrapped.t5.save_pretrained(tmp_path)
    verifier = build_verifier(
        verifier_config(
            {
                "name": "hhem",
                "model_path": str(tmp_path),
                "tokenizer_path": str(foundation),
                "device": "cpu",
            }
        )
    )
    pairs = [(EVIDENCE, c) for c in CLAIMS]
    assert verifier.score(pairs) == pytest.approx(_hhem_reference(checkpoint, foundation, pairs), abs=1e-5)
    assert AutoConfig.from_pretrained(tmp_path).model_type == "t5"


# --- NLI ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def minilm_tokenizer():
    from transformers import AutoTokenizer

    from fspo.launch.preflight import minilm_path

    return AutoTokenizer.from_pretrained(minilm_path())


def _tiny_nli(tmp_path, tokenizer, architecture, id2label):
    import transformers

    config_cls, model_cls = {
        "bert": (transformers.BertConfig, transformers.BertForSequenceClassification),
        "roberta": (
            transformers.RobertaConfig,
            transformers.RobertaForSequenceClassification,
        ),
        "deberta-v2": (
            transformers.DebertaV2Config,
            transformers.DebertaV2ForSequenceClassification,
        ),
    }[architecture]
    config = config_cls(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=66,
        type_vocab_size=2,
        pad_token_id=tokenizer.pad_token_id,
        id2label=id2label,
        label2id={v: k for k, v in id2label.items()},
    )
    torch.manual_seed(0)
    model_cls(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    return tmp_path


def _direct_probabilities(path, pairs):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    with torch.no_grad():
        return [torch.softmax(model(**tokenizer(e, c, return_tensors="pt")).logits, -1)[0] for e, c in pairs]


@pytest.mark.parametrize(
    ("architecture", "id2label", "entail"),
    [
        ("bert", {0: "entailment", 1: "neutral", 2: "contradiction"}, 0),
        ("roberta", {0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}, 2),
        ("deberta-v2", {0: "not_supported", 1: "supported"}, 1),
    ],
)
def test_nli_scores_the_entailment_probability(tmp_path, minilm_tokenizer, architecture, id2label, entail):
    path = _tiny_nli(tmp_path, minilm_tokenizer, architecture, id2label)
    verifier = build_verifier(
        verifier_config(
            {
                "name": "nli",
                "model_path": str(path),
                "device": "cpu",
                "max_tokens_per_batch": 64,
            }
        )
    )
    pairs = [("Paris is in France.", c) for c in CLAIMS]
    expected = [float(p[entail]) for p in _direct_probabilities(path, pairs)]
    assert verifier.label_index == entail
    assert verifier.score(pairs) == pytest.approx(expected, abs=1e-5)
    assert verifier.score(pairs[::-1]) == pytest.approx(expected[::-1], abs=1e-5)  # batching-order invariant


def test_nli_long_evidence_is_chunked_and_best_chunk_counts(tmp_path, minilm_tokenizer):
    path = _tiny_nli(
        tmp_path,
        minilm_tokenizer,
        "bert",
        {0: "entailment", 1: "neutral", 2: "contradiction"},
    )
    verifier = build_verifier(verifier_config({"name": "nli", "model_path": str(path), "device": "cpu"}))
    assert verifier.max_length == 66
    long_evidence = " ".join(f"Sentence number {i} mentions the river Seine and Paris." for i in range(30))
    claim = CLAIMS[0]
    rows, owners = verifier.encode([(long_evidence, claim)])
    assert len(rows) > 3 and set(owners) == {0}
    assert all(len(r["input_ids"]) <= verifier.max_length for r in rows)
    # Consecutive chunks overlap by the stride and every chunk carries the whole claim.
    claim_ids = minilm_tokenizer(claim, add_special_tokens=False)["input_ids"]
    assert all(r["input_ids"][-len(claim_ids) - 1 : -1] == claim_ids for r in rows)
    with torch.inference_mode():
        chunk_scores = [float(verifier.forward(pad_features([row], 0, "cpu"))[0]) for row in rows]
    assert verifier.score([(long_evidence, claim)])[0] == pytest.approx(max(chunk_scores), abs=1e-5)


def test_nli_without_entailment_label_is_a_clear_error(tmp_path, minilm_tokenizer):
    path = _tiny_nli(tmp_path, minilm_tokenizer, "bert", {0: "LABEL_0", 1: "LABEL_1"})
    with pytest.raises(ValueError, match="entailment_label"):
        build_verifier(verifier_config({"name": "nli", "model_path": str(path), "device": "cpu"}))
    verifier = build_verifier(
        verifier_config({"name": "nli", "model_path": str(path), "device": "cpu", "entailment_label": 1})
    )
    assert verifier.label_index == 1 and not math.isnan(verifier.score([("a b", "c d")])[0])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.one_of(st.floats(0, 1), st.just(math.nan))), max_size=12))
def test_a_pair_with_a_nan_row_is_unverifiable_and_otherwise_its_best_row(rows):
    from fspo.verifiers.model_base import best_row_scores

    scores = best_row_scores([owner for owner, _ in rows], [value for _, value in rows], 4)
    for pair, score in enumerate(scores):
        values = [value for owner, value in rows if owner == pair]
        if not values or any(math.isnan(v) for v in values):
            assert math.isnan(score)  # unverifiable (label 0), never -inf (label -1)
        else:
            assert score == max(values)


def test_nan_from_the_model_fails_the_call_and_is_never_cached(tmp_path, minilm_tokenizer):
    # An fp16 overflow or broken weights make the forward return NaN: a failed call, not a verdict
    # (tests/test_verifier_nonfinite.py follows it through the reward manager to the run-level guard).
    path = _tiny_nli(tmp_path, minilm_tokenizer, "bert", {0: "entailment", 1: "neutral", 2: "contradiction"})
    verifier = build_verifier(
        verifier_config({"name": "nli", "model_path": str(path), "device": "cpu", "cache_size": 8})
    )
    pair = ("Paris is in France.", CLAIMS[0])
    healthy = verifier.model.classifier.weight.detach().clone()
    with torch.no_grad():
        verifier.model.classifier.weight.fill_(math.nan)
    with pytest.raises(NonFiniteOutput):
        verifier.score([pair])
    with torch.no_grad():
        verifier.model.classifier.weight.copy_(healthy)
    [again] = verifier.score([pair])  # scored afresh: the NaN was not cached
    assert 0.0 <= again <= 1.0


@given(st.integers(0, 5000), st.integers(1, 600), st.data())
def test_evidence_windows_cover_every_token_within_the_window(length, window, data):
    from fspo.verifiers.model_base import plan_windows

    overlap = data.draw(st.integers(0, window - 1))
    windows = plan_windows(length, window, overlap)
    assert windows[0][0] == 0 and windows[-1][1] == length
    assert all(0 < end - start <= window or length == 0 for start, end in windows)
    for (_, end), (start, _) in zip(windows, windows[1:]):
        assert end - start == overlap  # consecutive windows share exactly `overlap` tokens
    assert len(windows) <= 1 + max(0, math.ceil((length - window) / (window - overlap)))


def _peak_rss_bytes() -> int:
    import re

    with open("/proc/self/status") as status:
        return int(re.search(r"VmHWM:\s+(\d+) kB", status.read()).group(1)) * 1024


def _reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as refs:  # Linux: "5" resets the peak RSS (VmHWM) to the current
        refs.write("5")


def test_a_20k_token_evidence_is_scored_in_windows_within_a_fixed_memory_bound(tiny_hhem):
    """Whole, the tiny T5's attention scores alone would take 4 heads x 20k^2 x 4 bytes = 6.4 GB; in windows of
    max_row_tokens (512), micro-batches of 2048 tokens hold 4 rows: 16 MB each. The pair scores as its best
    window. (Memory per micro-batch is rows x heads x max_row_tokens^2, whatever the evidence's length.)"""
    from fspo.verifiers.hhem import HHEMVerifier

    checkpoint, _ = tiny_hhem
    verifier = HHEMVerifier(model_path=str(checkpoint), device="cpu", max_tokens_per_batch=2048, max_row_tokens=512)
    sentences, evidence = EVIDENCE.split(". "), ""
    i = 0
    while len(verifier.tokenizer(evidence)["input_ids"]) < 20_000:
        evidence += f"{sentences[i % len(sentences)].rstrip('.')} {i}. "
        i += 1
    claim = CLAIMS[0]
    verifier.score([(EVIDENCE, claim)])  # warm-up: the allocator's first pages
    windows, owners = verifier.evidence_windows([(evidence, claim)])
    rows, _ = verifier.encode(windows)
    assert len(windows) >= 20_000 / 512 and max(len(row["input_ids"]) for row in rows) <= 512 + 4
    torch.set_num_threads(1)
    _reset_peak_rss()
    before = _peak_rss_bytes()
    (score,) = verifier.score([(evidence, claim)])
    grown = _peak_rss_bytes() - before
    print(f"20k-token evidence: {len(windows)} windows, peak RSS grew by {grown / 2**20:.0f} MiB")
    assert grown < 128 * 2**20
    whole = HHEMVerifier(model_path=str(checkpoint), device="cpu", max_row_tokens=0)
    assert score == pytest.approx(max(whole.score(windows)), abs=1e-5)  # the best window's support
    assert whole.evidence_windows([(evidence, claim)])[0] == [(evidence, claim)]  # 0: no windows


def test_long_evidence_top_k_keeps_the_claim_s_best_sentences(tiny_hhem):
    from fspo.verifiers.hhem import HHEMVerifier

    checkpoint, _ = tiny_hhem
    verifier = HHEMVerifier(
        model_path=str(checkpoint), device="cpu", max_row_tokens=160, long_evidence="top_k", evidence_top_k=1
    )
    filler = " ".join(f"Sentence number {i} is filler." for i in range(40))
    evidence = f"{filler} The Seine flows through Paris. {filler}"
    windows, owners = verifier.evidence_windows([(evidence, "The Seine flows through Paris."), (EVIDENCE[:30], "x")])
    assert windows[0] == ("The Seine flows through Paris.", "The Seine flows through Paris.") and owners == [0, 1]
    assert windows[1] == (EVIDENCE[:30], "x")  # short evidence is left whole


def test_an_evidence_is_tokenized_once_for_its_windows_across_calls(tiny_hhem):
    """Every rollout of a prompt brings the same evidence, in different merged calls: its token boundaries are
    remembered (bounded: EVIDENCE_SPANS_CACHED evidences), and the windows are those a fresh verifier cuts."""
    from fspo.verifiers import model_base
    from fspo.verifiers.hhem import HHEMVerifier

    checkpoint, _ = tiny_hhem
    evidence = " ".join(f"{EVIDENCE} {i}." for i in range(12))
    verifier = HHEMVerifier(model_path=str(checkpoint), device="cpu", max_row_tokens=160)
    first = verifier.evidence_windows([(evidence, claim) for claim in CLAIMS])
    for claim in CLAIMS:  # later requests of the same step, one rollout each
        verifier.score([(evidence, claim)])
    assert verifier.spans_tokenized == 1 and len(first[0]) > len(CLAIMS)
    fresh = HHEMVerifier(model_path=str(checkpoint), device="cpu", max_row_tokens=160)
    assert fresh.evidence_windows([(evidence, claim) for claim in CLAIMS]) == first
    for i in range(model_base.EVIDENCE_SPANS_CACHED + 5):  # the cache stays within its bound
        verifier._token_spans(f"evidence {i}")
    assert len(verifier._spans) == model_base.EVIDENCE_SPANS_CACHED


# --- compute precision -----------------------------------------------------------------------------------


def test_every_model_backend_has_a_gpu_precision():
    from fspo.config.vocabulary import GPU_DTYPES, MODEL_BACKENDS, VERIFIER_DTYPES

    assert set(GPU_DTYPES) == set(MODEL_BACKENDS)
    assert set(GPU_DTYPES.values()) <= set(VERIFIER_DTYPES)


def test_tf32_is_turned_on_only_for_a_cuda_device():
    """null is the backend's GPU default (tf32) on CUDA, float32 on a CPU; TF32's process-wide flag is
    touched only for a CUDA device (torch's CPU build keeps the flag, so this runs without a GPU)."""
    from fspo.verifiers.model_base import resolve_dtype

    matmul = torch.backends.cuda.matmul
    saved = matmul.fp32_precision  # a module-level property: set and restored by hand
    matmul.fp32_precision = "none"
    try:
        for asked in (None, "tf32", "float32"):
            assert resolve_dtype(asked, torch.device("cpu"), "hhem") == torch.float32
        assert matmul.fp32_precision == "none"
        assert resolve_dtype(None, torch.device("cuda"), "hhem") == torch.float32
        assert matmul.fp32_precision == "tf32"
        assert resolve_dtype("float32", torch.device("cuda:1"), "minicheck") == torch.float32
        assert matmul.fp32_precision == "ieee"  # an explicit float32 is IEEE float32
        assert resolve_dtype("tf32", torch.device("cuda"), "factcg") == torch.float32
        assert matmul.fp32_precision == "tf32"
        assert resolve_dtype("bfloat16", torch.device("cuda"), "hhem") == torch.bfloat16
    finally:
        matmul.fp32_precision = saved


def test_the_configured_dtype_reaches_the_loaded_model(tiny_hhem, monkeypatch):
    """fspo.verifier.dtype travels from the config block to the model the backend loads."""
    from fspo.cpu.compute import compute_dtype_choice

    monkeypatch.setenv("FSPO_CPU_DTYPE", "bfloat16")  # a CPU that computes bf16 natively keeps it
    compute_dtype_choice.cache_clear()
    try:
        checkpoint, _ = tiny_hhem
        for dtype, expected in ((None, torch.float32), ("bfloat16", torch.bfloat16), ("tf32", torch.float32)):
            block = {"name": "hhem", "model_path": str(checkpoint), "device": "cpu", "dtype": dtype}
            verifier = build_verifier(verifier_config(block))
            assert verifier.dtype == expected
            assert {p.dtype for p in verifier.model.parameters()} == {expected}
    finally:
        compute_dtype_choice.cache_clear()


def test_an_nli_window_past_the_position_table_is_refused(tmp_path, minilm_tokenizer):
    """A max_length past max_position_embeddings would index past the position table (an IndexError on a CPU,
    a device-side assert on CUDA) at the first long row: refused when the verifier is built."""
    path = _tiny_nli(tmp_path, minilm_tokenizer, "bert", {0: "entailment", 1: "neutral", 2: "contradiction"})
    limit = json.loads((path / "config.json").read_text())["max_position_embeddings"]
    with pytest.raises(ValueError, match=f"max_length={limit + 1} exceeds .* position limit of {limit}"):
        build_verifier(
            verifier_config({"name": "nli", "model_path": str(path), "device": "cpu", "max_length": limit + 1})
        )
    assert build_verifier(
        verifier_config({"name": "nli", "model_path": str(path), "device": "cpu", "max_length": limit})
    )
