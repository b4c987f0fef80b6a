"""Models, tokenizers and configs load through one checked door, :mod:`fspo.utils.checked_load`, in every command
and in the training job: a weights file cut short, a position table shorter than the run's lengths, or a LoRA scale
float32 cannot hold is refused in one line naming the file, not a traceback from transformers or safetensors.

The first tests walk fspo/'s syntax tree, as tests/test_layout.py does, so a new ``from_pretrained`` is a decision
listed in :data:`SIDE_DOORS` with why, not a way around the checks. The rest run each loading command on a tiny model
of fspo_testing, broken as the wild breaks them.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fspo
from fspo.cli import main as fspo_main
from fspo_testing.command_guard import message_lines

DOOR = "fspo.utils.checked_load"
# Names whose only use in fspo is loading: imported from transformers anywhere but the door, they are a side door.
LOADER_NAMES = {"AutoTokenizer", "AutoConfig", "AutoProcessor", "pipeline"}
# module -> why it may load past the door.
SIDE_DOORS = {
    # It converts the GGUF file packaged with fspo through transformers' GGUF reader; the door checks Hugging Face
    # folders (safetensors headers, config.json's position table), which a GGUF file is not.
    "fspo.quickstart.smollm2": "converts the packaged GGUF file",
}

PACKAGE = Path(fspo.__file__).parent


def module_name(path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def side_doors(tree: ast.AST) -> list[str]:
    """Where a module's syntax tree loads a model, tokenizer or config itself: ``line N: what``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "from_pretrained":
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "transformers":
            found += [f"line {node.lineno}: imports {a.name}" for a in node.names if a.name in LOADER_NAMES]
        elif (
            isinstance(node, ast.Attribute) and node.attr in LOADER_NAMES and ast.unparse(node.value) == "transformers"
        ):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def package_side_doors() -> dict[str, list[str]]:
    doors = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        if module != DOOR and (found := side_doors(ast.parse(path.read_text(), str(path)))):
            doors[module] = found
    return doors


def test_only_the_door_loads_models_tokenizers_and_configs():
    doors = package_side_doors()
    unlisted = {module: found for module, found in doors.items() if module not in SIDE_DOORS}
    assert not unlisted, f"load through {DOOR} (from_pretrained_checked, load_tokenizer, load_config): {unlisted}"
    assert set(SIDE_DOORS) <= set(doors), f"listed but no longer a side door: {set(SIDE_DOORS) - set(doors)}"


@pytest.mark.parametrize(
    "source",
    [
        "from transformers import AutoModelForCausalLM\nAutoModelForCausalLM.from_pretrained(path)",
        "from transformers import AutoTokenizer",
        "import transformers\ntransformers.AutoConfig",
        "from peft import PeftModel\nPeftModel.from_pretrained(model, path)",
        "loader = getattr(cls, 'x').from_pretrained",
    ],
    ids=["a model class", "a tokenizer import", "transformers.AutoConfig", "peft's loader", "the loader as a value"],
)
def test_a_planted_side_door_is_found(source):
    assert side_doors(ast.parse(source))


def test_loading_through_the_door_is_no_side_door():
    source = (
        "from transformers import AutoModelForCausalLM\n"
        "from fspo.utils.checked_load import from_pretrained_checked, load_tokenizer\n"
        "model = from_pretrained_checked(AutoModelForCausalLM, path, positions_needed=64)\n"
        "tokenizer = load_tokenizer(path)\n"
        "model.save_pretrained(out)\n"
    )
    assert side_doors(ast.parse(source)) == []


# ---------------------------------------------------------------------------------------------------------
# Each loading command on a broken tiny model: refused in one line (exit 2 for a usage error, 1 for the fold).
# ---------------------------------------------------------------------------------------------------------

SHORT_TABLE = 16  # positions of the short model: fewer than any command below needs


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A tiny Qwen2 model (cached build), the inputs each command reads, and the model's weights bytes."""
    from fspo_testing.tiny_model import build_tiny_model

    root = tmp_path_factory.mktemp("model_door")
    model = build_tiny_model(
        root / "model", hidden_size=8, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=16
    )
    short = root / "short"
    shutil.copytree(model, short)
    config = json.loads((short / "config.json").read_text())
    (short / "config.json").write_text(json.dumps({**config, "max_position_embeddings": SHORT_TABLE}))
    row = {
        "data_source": "hotpotqa",
        "prompt": [{"role": "user", "content": "Where is the Eiffel Tower?"}],
        "reward_model": {"style": "rule", "ground_truth": "Paris"},
        "extra_info": {"index": 0, "split": "test", "evidence": "The Eiffel Tower is in Paris."},
    }
    pq.write_table(pa.Table.from_pylist([row]), root / "bench.parquet")
    claims = [
        {"evidence": "The Eiffel Tower is in Paris.", "claim": "It is in Paris.", "label": 1},
        {"evidence": "The Eiffel Tower is in Paris.", "claim": "It is in Rome.", "label": 0},
    ]
    (root / "claims.jsonl").write_text("".join(json.dumps(c) + "\n" for c in claims))
    (root / "pairs.jsonl").write_text("")
    actor = root / "actor"
    actor.mkdir()
    (actor / "lora_train_meta.json").write_text(json.dumps({"r": 8, "lora_alpha": 16}))
    return {"root": root, "model": model, "short": short, "weights": (model / "model.safetensors").read_bytes()}


def fspo_command(argv: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    try:
        code = fspo_main([str(arg) for arg in argv])
    except SystemExit as stop:
        code = stop.code
    return code, capsys.readouterr().err


def fold_command(merged, files, capsys) -> tuple[int, str]:
    from fspo.training.lora_fold import main

    (merged / "lora_adapter").mkdir(exist_ok=True)
    (merged / "lora_adapter" / "adapter_config.json").write_text(json.dumps({"r": 8, "lora_alpha": 16}))
    capsys.readouterr()
    return main([str(merged), str(files["root"] / "actor")]), capsys.readouterr().err


def training_job(model, files, capsys, lengths=(256, 64)) -> tuple[int, str]:
    """The training job's check before Ray starts (fspo.training.config_checks.check_config's model check)."""
    from omegaconf import OmegaConf

    from fspo.config.vocabulary import ConfigError
    from fspo.training.config_checks import check_model_path, sequence_positions

    config = OmegaConf.create({"data": {"max_prompt_length": lengths[0], "max_response_length": lengths[1]}})
    try:
        check_model_path(str(model), positions=sequence_positions(config))
    except ConfigError as error:
        return 2, f"{error}\n"
    return 0, ""


def run_command(command: str, model, files, capsys) -> tuple[int, str]:
    out = files["root"] / f"out_{command}"
    shutil.rmtree(out, ignore_errors=True)
    if command == "evaluate":
        argv = ["evaluate", "--model", model, "--data", files["root"] / "bench.parquet", "--output-dir", out]
        return fspo_command([*argv, "--max-new-tokens", "32"], capsys)
    if command == "fdpo train":
        argv = ["fdpo", "train", "--model", model, "--pairs", files["root"] / "pairs.jsonl", "--output-dir", out]
        return fspo_command([*argv, "--max-length", "64"], capsys)
    if command == "verifier train":
        argv = ["verifier", "train", "--data", files["root"] / "claims.jsonl", "--output-dir", out]
        return fspo_command([*argv, "--base-model", model, "--max-length", "64"], capsys)
    if command == "lora fold":
        return fold_command(model, files, capsys)
    return training_job(model, files, capsys)


def assert_one_line_refusal(result: tuple[int, str], status: int, *named: str) -> None:
    code, err = result
    assert code == status, err[-2000:]
    [line] = message_lines(err)
    assert all(str(name) in line for name in named), line
    assert "Traceback" not in err


LOADING_COMMANDS = ["evaluate", "fdpo train", "verifier train", "lora fold", "training job"]


@pytest.mark.parametrize("command", LOADING_COMMANDS)
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.floats(0, 1, exclude_max=True))
def test_a_weights_file_cut_short_is_refused_in_one_line_by_each_command(files, capsys, command, cut):
    folder = files["root"] / f"cut_{command.replace(' ', '_')}"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(files["model"], folder, ignore=shutil.ignore_patterns("model.safetensors"))
    weights = folder / "model.safetensors"
    weights.write_bytes(files["weights"][: int(len(files["weights"]) * cut)])
    status = 1 if command == "lora fold" else 2
    assert_one_line_refusal(run_command(command, folder, files, capsys), status, weights, "not a readable safetensors")


@pytest.mark.parametrize("command", ["evaluate", "fdpo train", "verifier train", "training job"])
def test_a_short_position_table_is_refused_in_one_line_by_each_command(files, capsys, command):
    assert_one_line_refusal(
        run_command(command, files["short"], files, capsys), 2, files["short"], f"has {SHORT_TABLE} positions"
    )


def test_the_training_job_passes_a_model_whose_table_holds_the_run():
    from omegaconf import OmegaConf

    from fspo.training.config_checks import sequence_positions

    config = OmegaConf.create({"data": {"max_prompt_length": 256, "max_response_length": 64}})
    assert sequence_positions(config)[0] == 320
    assert sequence_positions(OmegaConf.create({"data": {"max_prompt_length": None}})) is None


@settings(max_examples=40, deadline=None)
@given(
    rank=st.integers(1, 128),
    scale=st.one_of(
        st.floats(3.5e38, 1e300),  # past float32's largest, 3.4e38: the fold would write inf
        st.floats(1e-300, 1e-39),  # below float32's smallest normal, 1.2e-38: it would fold (almost) nothing
    ),
)
def test_an_adapter_scale_float32_cannot_hold_is_refused_in_one_line(rank, scale):
    from fspo.training.lora_fold import ADAPTER_PREFIX, LORA_A, LORA_B, LoraCheckpointError, check_lora_checkpoint

    module = "model.layers.0.self_attn.q_proj"
    adapter = {f"{ADAPTER_PREFIX}{module}{LORA_A}": (rank, 8), f"{ADAPTER_PREFIX}{module}{LORA_B}": (8, rank)}
    alpha = scale * rank
    config = {"r": rank, "lora_alpha": alpha, "target_modules": ["q_proj"]}
    with pytest.raises(LoraCheckpointError) as refused:
        check_lora_checkpoint({"r": rank, "lora_alpha": alpha}, config, adapter, {f"{module}.weight": (8, 8)})
    message = str(refused.value)
    assert "\n" not in message and "adapter_config.json" in message and f"lora_alpha={alpha!r}" in message


@pytest.mark.parametrize(
    ("adapter", "refusal"),
    [
        ({"r": 8, "lora_alpha": 1e300}, "is 1.25e+299, outside float32"),
        ({"r": 8, "lora_alpha": 1e-300}, "is 1.25e-301, outside float32"),
        ({"r": 0, "lora_alpha": 16}, "r must be a positive number"),
        ({"r": 8.5, "lora_alpha": 16}, "r must be an integer"),
        ({"r": 8, "lora_alpha": None}, "lora_alpha must be a positive number"),
        ([1, 2], "is not a JSON object"),
    ],
)
def test_an_adapter_beside_a_models_weights_is_checked_before_transformers_loads_it(tmp_path, adapter, refusal):
    """transformers loads a folder's adapter_config.json through peft (the guard found `fspo evaluate`, `fdpo train`
    and `verifier train` serving an adapter of scale 1.25e299): the door reads it first, as the fold does."""
    from fspo.utils.checked_load import check_model_files

    (tmp_path / "adapter_config.json").write_text(json.dumps(adapter))
    with pytest.raises(ValueError, match=re.escape(refusal)) as refused:
        check_model_files(str(tmp_path))
    assert "\n" not in str(refused.value) and "adapter_config.json" in str(refused.value)
    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 8, "lora_alpha": 16, "peft_type": "LORA"}))
    check_model_files(str(tmp_path))
