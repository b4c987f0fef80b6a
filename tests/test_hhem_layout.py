"""HHEM-2.1-Open in its published layout, loaded through the ``hhem`` backend.

The checkpoint is built here (fspo_testing.tiny_model.build_tiny_hhem): the published config.json
(``auto_map`` to the remote code, model_type ``HHEMv2Config``, no ``foundation`` key), remote code that
loads ``google/flan-t5-base``'s config and tokenizer by hub id, ``t5.*`` safetensors with only the shared
embedding, no tokenizer files; a real T5 architecture and SentencePiece tokenizer at tiny sizes. The hub
is replaced by an HF cache holding both repos, read under ``HF_HUB_OFFLINE=1`` as an offline node does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.config.vocabulary import ConfigError
from fspo.verifiers.hhem import HHEM_FOUNDATION, HHEM_MODEL, HHEM_PROMPT

REPO = Path(__file__).resolve().parent.parent
PAIRS = [
    ("Paris is the capital of France.", "The capital of France is Paris."),
    ("The Eiffel Tower was completed in 1889.", "The tower was finished in 1920."),
    ("Marie Curie won two Nobel Prizes.", "Curie won the Nobel Prize in Physics in 1903 and in Chemistry in 1911."),
]

LOAD_AND_SCORE = """
import json, sys, transformers
from fspo.config.verifier import verifier_config
from fspo.verifiers import build_verifier
pairs = json.loads(sys.argv[1])
out = {"transformers": transformers.__version__}
for label, options in (("hub id", {}), ("folder", {"model_path": sys.argv[2]})):
    verifier = build_verifier(verifier_config({"name": "hhem", **options}))
    out[label] = {"class": type(verifier.model).__name__, "prompt": verifier.prompt, "scores": verifier.score(pairs)}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def hhem_cache(tmp_path_factory):
    from fspo_testing.tiny_model import build_tiny_hhem_cache

    return build_tiny_hhem_cache(tmp_path_factory.mktemp("hhem_layout"))


def reference_scores(hhem: Path, foundation: Path, pairs) -> list[float]:
    """HHEM's computation done by hand from the checkpoint's tensors: T5ForTokenClassification with the
    foundation's config, the shared embedding tied into the encoder, token 0's class-1 probability."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoTokenizer, T5ForTokenClassification

    model = T5ForTokenClassification(AutoConfig.from_pretrained(str(foundation), num_labels=2)).eval()
    state = {key.removeprefix("t5."): value for key, value in load_file(str(hhem / "model.safetensors")).items()}
    state["transformer.encoder.embed_tokens.weight"] = state["transformer.shared.weight"]
    model.load_state_dict(state, strict=True)
    tokenizer = AutoTokenizer.from_pretrained(str(foundation))
    scores = []
    for evidence, claim in pairs:  # one at a time: no padding question
        ids = tokenizer([HHEM_PROMPT.format(text1=evidence, text2=claim)], return_tensors="pt")
        with torch.no_grad():
            logits = model(**ids).logits[:, 0, :]
        scores.append(torch.softmax(logits, dim=-1)[0, 1].item())
    return scores


def test_the_builder_writes_the_published_layout(hhem_cache):
    from safetensors import safe_open

    hhem = hhem_cache["hhem"]
    assert sorted(p.name for p in hhem.iterdir()) == [
        "config.json",
        "configuration_hhem_v2.py",
        "model.safetensors",
        "modeling_hhem_v2.py",
    ]  # no tokenizer
    config = json.loads((hhem / "config.json").read_text())
    assert config["auto_map"] == {
        "AutoConfig": "configuration_hhem_v2.HHEMv2Config",
        "AutoModelForSequenceClassification": "modeling_hhem_v2.HHEMv2ForSequenceClassification",
    }
    assert config["model_type"] == "HHEMv2Config" and "foundation" not in config and "prompt" not in config
    with safe_open(str(hhem / "model.safetensors"), "pt") as weights:
        keys = set(weights.keys())
    assert all(key.startswith("t5.") for key in keys)
    assert "t5.transformer.shared.weight" in keys and "t5.transformer.encoder.embed_tokens.weight" not in keys
    assert {"t5.classifier.weight", "t5.classifier.bias"} <= keys


def test_hhem_loads_from_the_cache_and_a_folder_offline_and_scores_as_published(hhem_cache, tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(hhem_cache["cache"]),
        "HF_MODULES_CACHE": str(tmp_path / "modules"),
    }
    done = subprocess.run(
        [sys.executable, "-c", LOAD_AND_SCORE, json.dumps(PAIRS), str(hhem_cache["hhem"])],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    expected = reference_scores(hhem_cache["hhem"], hhem_cache["foundation"], PAIRS)
    assert len(set(round(score, 6) for score in expected)) == len(PAIRS)  # the pairs score apart: a real check
    for label in ("hub id", "folder"):
        loaded = result[label]
        assert loaded["prompt"] == HHEM_PROMPT  # the config class's attribute, absent from config.json
        assert loaded["scores"] == pytest.approx(expected, abs=1e-5), label
    # transformers 5 cannot build the published remote code (it predates `all_tied_weights_keys`): the
    # backend then runs the same weights in transformers' own T5ForTokenClassification.
    if int(result["transformers"].split(".")[0]) >= 5:
        assert result["hub id"]["class"] == "T5ForTokenClassification"
        assert "all_tied_weights_keys" in done.stderr


def test_a_missing_foundation_offline_is_named_before_anything_loads(tmp_path, monkeypatch):
    """An offline node with HHEM cached but not flan-t5: the preflight's one line, not a transformers traceback."""
    from huggingface_hub import constants

    from fspo.config.verifier import verifier_config
    from fspo.verifiers import build_verifier
    from fspo_testing.tiny_model import build_tiny_hhem_cache

    paths = build_tiny_hhem_cache(tmp_path, with_foundation=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(paths["cache"]))
    for options in ({}, {"model_path": str(paths["hhem"])}):
        with pytest.raises(ConfigError) as error:
            build_verifier(verifier_config({"name": "hhem", **options}))
        assert str(error.value).startswith(
            f"fspo.verifier.model_path's config.foundation: HF_HUB_OFFLINE is set and {HHEM_FOUNDATION} is not in "
            f"the HF cache ({paths['cache']}): pre-download it where the hub is reachable with `fspo verifier download hhem"
        )
    with pytest.raises(ConfigError, match=f"{HHEM_MODEL} is not in the HF cache"):
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
        build_verifier(verifier_config({"name": "hhem"}))


# --- the prompt's token ids: evidence tokenized once per distinct evidence --------------------------

# Text as rollouts and evidence bring it: words, digits, punctuation, every kind of whitespace (CJK and
# no-break spaces, tabs, newlines), combining marks, zero-width characters, braces and special-token strings.
_PIECES = st.sampled_from(
    ["Paris", "capital", "1,889", " ", "  ", "\n\n", "\t", "\u00a0", "\u3000", "\u200b", "e\u0301", "ﬁ", "{x}",
     "</s>", "<pad>", ":", "?", "Ünïcödé", "東京", "🙂", ".", "-", "_"]
)  # fmt: skip
_TEXT = st.lists(st.one_of(_PIECES, st.text(max_size=6)), max_size=400).map("".join)


@pytest.fixture(scope="module")
def t5_tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    from fspo_testing.tiny_model import build_t5_tokenizer

    return AutoTokenizer.from_pretrained(build_t5_tokenizer(tmp_path_factory.mktemp("t5_tokenizer")))


@settings(max_examples=60, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=3), st.lists(_TEXT, min_size=1, max_size=6), st.data())
def test_the_prompt_ids_match_the_whole_prompts_tokenized(t5_tokenizer, evidences, claims, data):
    """HHEM's prompt tokenized as the evidence's part (once per distinct evidence, cached) followed by the claim's
    gives the ids tokenizing each whole prompt gives, on long evidence and any text; cached parts too."""
    from fspo.verifiers.hhem import PromptIds

    pairs = [(data.draw(st.sampled_from(evidences)), claim) for claim in claims]
    prompt_ids = PromptIds(t5_tokenizer, HHEM_PROMPT)
    assert prompt_ids.split  # T5 splits at whitespace first: the fast path is the one tested
    whole = t5_tokenizer([HHEM_PROMPT.format(text1=e, text2=c) for e, c in pairs])["input_ids"]
    assert prompt_ids(pairs) == whole
    assert prompt_ids(pairs[::-1]) == whole[::-1]  # from the cache
    assert prompt_ids.heads_tokenized == len(set(e for e, _ in pairs))


def test_a_tokenizer_that_does_not_split_at_whitespace_tokenizes_each_prompt_whole(qwen_tokenizer):
    """Qwen's byte-level BPE keeps a space with the word after it: no split, the whole prompt is tokenized."""
    from fspo.verifiers.hhem import PromptIds, claim_splits_off

    assert not claim_splits_off(qwen_tokenizer, HHEM_PROMPT)
    pairs = [("Paris is the capital.", "Paris is  big."), ("Rome.", "")]
    expected = qwen_tokenizer([HHEM_PROMPT.format(text1=e, text2=c) for e, c in pairs])["input_ids"]
    assert PromptIds(qwen_tokenizer, HHEM_PROMPT)(pairs) == expected
