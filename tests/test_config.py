"""The typed ``fspo:`` block: a wrong value fails the dry run naming the key; defaults live in the dataclasses."""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from fspo.config.calibrated_thresholds import calibrated_threshold
from fspo.config.fspo_config import FSPOConfig, fspo_config
from fspo.config.verifier import VerifierConfig, verifier_config
from fspo.config.vocabulary import ConfigError
from fspo_testing.warm_python import warm_python

REPO = Path(__file__).resolve().parent.parent

# (override, the one line the dry run must print)
WRONG_VALUES = [
    ("fspo.flip=maybe", "fspo: fspo.flip: Value 'maybe' is not a valid bool (type str)"),
    (
        "fspo.step_reward_weight=abc",
        "fspo: fspo.step_reward_weight: Value 'abc' of type 'str' could not be converted to Float",
    ),
    (
        "fspo.label_outside_reasoning=x",
        "fspo: fspo.label_outside_reasoning: Value 'x' of type 'str' could not be converted to Integer",
    ),
    (
        "fspo.verifier.evidence_top_k=two",
        "fspo: fspo.verifier.evidence_top_k: Value 'two' of type 'str' could not be converted to Integer",
    ),
    (
        "fspo.verifier.max_concurrency=-1",
        "fspo: fspo.verifier.max_concurrency must be a positive integer or null, got -1",
    ),
    ("+fspo.fllip=true", "fspo: unknown key fspo.fllip; valid keys of fspo: enable, flip,"),
]


def dry_run(*overrides: str) -> subprocess.CompletedProcess:
    """``recipes/run_qwen2.5_7b_instruct.sh`` with ``FSPO_DRY_RUN=1``: validates the config, starts no Ray."""
    env = {**os.environ, "FSPO_DRY_RUN": "1", "PYTHON": warm_python(), "MODEL_PATH": "/nonexistent/model"}
    return subprocess.run(
        ["bash", str(REPO / "recipes" / "run_qwen2.5_7b_instruct.sh"), *overrides],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def wrong_value_runs() -> dict[str, subprocess.CompletedProcess]:
    from concurrent.futures import ThreadPoolExecutor

    overrides = [override for override, _ in WRONG_VALUES]
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(overrides, pool.map(dry_run, overrides)))


@pytest.mark.parametrize(("override", "line"), WRONG_VALUES)
def test_a_wrong_value_fails_the_dry_run_naming_the_key(wrong_value_runs, override, line):
    process = wrong_value_runs[override]
    assert process.returncode == 2, process.stderr[-2000:]
    # The error, and no other line but the verifier's and the flash-attn fallback's (no flash-attn on CPU).
    message = [
        text
        for text in process.stderr.splitlines()
        if text.startswith("fspo: ") and "verifier hhem" not in text and not text.startswith("fspo: flash-attn")
    ]
    assert len(message) == 1 and message[0].startswith(line), process.stderr[-2000:]
    assert "Traceback" not in process.stderr and "dry run OK" not in process.stderr


def test_the_yaml_shows_the_dataclass_defaults():
    """fspo_trainer.yaml lists every key (a Hydra override needs no `+`) with the dataclass's default."""
    block = yaml.safe_load((REPO / "fspo" / "config" / "fspo_trainer.yaml").read_text())["fspo"]
    verifier = block.pop("verifier")
    assert (
        block.pop("_target_") == "fspo.config.fspo_config.FSPOConfig"
        and verifier.pop("_target_") == "fspo.config.verifier.VerifierConfig"
    )
    defaults = dataclasses.asdict(FSPOConfig())
    verifier_defaults = defaults.pop("verifier")
    for values in (defaults, verifier_defaults):
        values.pop("_target_")
    assert block == defaults
    # The threshold follows the backend (fspo.config.calibrated_thresholds); the default backend's is the default.
    assert verifier.pop("threshold") == "${fspo_calibrated_threshold:${fspo.verifier.name}}"
    assert verifier_defaults.pop("threshold") == calibrated_threshold(verifier_defaults["name"])
    assert verifier == verifier_defaults


def test_the_configuration_page_holds_the_generated_option_tables():
    """docs/configuration.md's option and metrics tables are `python -m fspo.config.reference`'s output, and each
    default is the dataclass's value as YAML writes it."""
    from fspo.config.reference import options, page_with_tables

    page = (REPO / "docs" / "configuration.md").read_text()
    assert page == page_with_tables(page), "run `python -m fspo.config.reference` to regenerate the tables"
    assert len(page.encode()) <= 9_500, "docs/configuration.md's budget (issue 72)"
    settings = FSPOConfig()
    shown = list(options())
    assert len(shown) >= 40
    for option in shown:
        owner, _, name = option.key.removeprefix("fspo.").rpartition(".")
        value = getattr(settings.verifier if owner == "verifier" else settings, name)
        assert option.default == yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("\n...").strip()


def test_the_docs_tables_show_the_first_sentence_of_each_help_without_asides():
    """``fspo train --options`` prints each help whole; the page's tables its gist (docs/configuration.md's budget)."""
    from fspo.config.reference import first_sentence, gist, without_asides

    assert first_sentence("Master switch. false = off.") == "Master switch."
    assert first_sentence("Cut (e.g. a. B) here. Not this.") == "Cut (e.g. a. B) here."
    assert first_sentence("e.g. one sentence") == "e.g. one sentence"
    assert without_asides("exp(1 - x) for n (KnowRL: 10 (facts)) steps") == "exp(1 - x) for n steps"
    assert gist("llm_judge: requests at once; null = the backend's default.", ("llm_judge",)) == "requests at once."
    assert gist("nli: tokens (x).", ("nli", "hhem")) == "nli: tokens."


@given(st.text(alphabet="ab .()eg", max_size=40))
@settings(max_examples=200, deadline=None)
def test_a_gist_is_made_of_the_help_s_own_words(help_text):
    from fspo.config.reference import first_sentence, without_asides

    assert help_text.startswith(first_sentence(help_text))
    if ". " not in help_text:
        assert first_sentence(help_text) == help_text
    if "(" not in help_text:
        assert without_asides(help_text) == help_text


def test_every_option_belongs_to_a_backend_or_to_all():
    """Options passed to a backend's class name that backend; the rest are read by FSPO itself."""
    from fspo.config.vocabulary import VERIFIER_NAMES

    for field in dataclasses.fields(VerifierConfig):
        assert set(field.metadata.get("backends", ())) <= set(VERIFIER_NAMES), field.name
        assert field.name.startswith("_") or field.metadata["help"], field.name


def test_each_backend_gets_only_its_own_options():
    config = verifier_config({"name": "nli", "model_path": "m", "stride": 8, "url": "http://judge", "cache_size": 4})
    assert config.backend_options() == {"model_path": "m", "stride": 8, "cache_size": 4}
    assert config.ignored_options() == ["url"]
    judge = verifier_config({"name": "llm_judge", "url": "http://judge", "max_concurrency": 4})
    assert judge.backend_options() == {"url": "http://judge", "max_concurrency": 4, "cache_size": 0}


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"step_reward_weight": -0.5}, "fspo.step_reward_weight must be a finite number >= 0, got -0.5"),
        ({"label_outside_reasoning": 2}, "fspo.label_outside_reasoning must be 0 (off), 1 or -1"),
        ({"scorer_timeout_s": -1}, "fspo.scorer_timeout_s must be a number of seconds >= 0"),
        ({"evidence_key": ""}, "fspo.evidence_key must name a column"),
        ({"verifier": {"threshold": 1.5}}, "fspo.verifier.threshold must be a number in [0, 1], got 1.5"),
        ({"verifier": {"threshold": float("nan")}}, "fspo.verifier.threshold must be a number in [0, 1]"),
        ({"verifier": {"dtype": "fp16"}}, "fspo.verifier.dtype must be one of float32, tf32, bfloat16, float16"),
        ({"verifier": {"cache_size": -1}}, "fspo.verifier.cache_size must be a non-negative integer"),
        ({"verifier": {"start_timeout_s": 0}}, "fspo.verifier.start_timeout_s must be a positive number"),
        ({"verifier": {"name": "alignscore"}}, "unknown fspo.verifier.name 'alignscore'; valid names: lexical"),
        ({"verifier": {"placement": "gpu"}}, "fspo.verifier.placement must be one of auto, local, colocated, ray"),
        ({"verifier": None}, "fspo.verifier: field 'verifier' is not Optional"),
        ({"enable": None}, "fspo.enable: Incompatible value 'None' for field of type 'bool'"),
        ({"verifier": {"fllip": 1}}, "unknown key fspo.verifier.fllip; valid keys of fspo.verifier: name, threshold"),
        ({"threshold": 0.3}, "unknown key fspo.threshold; valid keys of fspo: enable, flip"),
    ],
)
def test_values_out_of_range_are_named(block, message):
    with pytest.raises(ConfigError) as error:
        fspo_config(OmegaConf.create({"fspo": block}))
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_values_convert_to_their_field_types():
    settings = fspo_config(
        OmegaConf.create(
            {
                "fspo": {
                    "flip": "false",
                    "step_reward_weight": 1,
                    "verifier": {"evidence_top_k": "3", "num_gpus": 1, "entailment_label": 2},
                }
            }
        )
    )
    assert settings.flip is False and settings.step_reward_weight == 1.0
    assert settings.verifier.evidence_top_k == 3 and settings.verifier.num_gpus == 1.0
    assert settings.verifier.entailment_label == 2
    assert fspo_config(OmegaConf.create({})) == FSPOConfig()


def test_the_config_crosses_process_boundaries():
    """Ray pickles the verifier config to its actors; verl hands workers the DictConfig, which converts alike."""
    settings = fspo_config(OmegaConf.create({"fspo": {"verifier": {"name": "lexical", "cache_size": 3}}}))
    assert pickle.loads(pickle.dumps(settings)) == settings
    resolved = OmegaConf.create({"fspo": OmegaConf.to_container(OmegaConf.structured(settings))})
    assert fspo_config(resolved) == settings
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.flip = False


@settings(max_examples=60, deadline=None)
@given(
    flip=st.booleans(),
    weight=st.floats(min_value=0, max_value=1e6, allow_nan=False),
    outside=st.sampled_from([0, 1, -1]),
    key=st.text(min_size=1, max_size=12).filter(lambda text: "$" not in text),
    name=st.sampled_from(["lexical", "embedding", "hhem", "nli", "llm_judge"]),
    threshold=st.floats(min_value=0, max_value=1),
    top_k=st.one_of(st.none(), st.integers(min_value=1, max_value=64)),
    label=st.one_of(st.none(), st.integers(min_value=0, max_value=3), st.sampled_from(["entailment", "yes"])),
)
def test_any_valid_block_converts_alike_in_the_driver_and_in_a_worker(
    flip, weight, outside, key, name, threshold, top_k, label
):
    """The DictConfig Ray pickles to verl's workers converts there to the dataclass the driver checked."""
    block = {
        "flip": flip,
        "step_reward_weight": weight,
        "label_outside_reasoning": outside,
        "evidence_key": key,
        "verifier": {"name": name, "threshold": threshold, "evidence_top_k": top_k, "entailment_label": label},
    }
    settings_ = fspo_config({"fspo": block})
    assert (settings_.flip, settings_.step_reward_weight, settings_.evidence_key) == (flip, weight, key)
    assert (settings_.verifier.name, settings_.verifier.evidence_top_k, settings_.verifier.entailment_label) == (
        name,
        top_k,
        label,
    )
    shipped = pickle.loads(pickle.dumps(OmegaConf.create({"fspo": block})))
    assert fspo_config(shipped) == settings_
    assert pickle.loads(pickle.dumps(settings_)) == settings_
