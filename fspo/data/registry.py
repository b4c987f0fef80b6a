"""Every dataset `fspo data <name>` builds, one `DatasetSpec` each, and the `fspo data` command.

A spec says where a set lives (hub, offline package) and which conversion turns a source record into an
`Example`; `fspo.data.builder` does the rest the same way for every set. The conversions live with the
sets that need them (`math_sets`, `multihop`, `truthfulqa`, `halueval`, `halluqa`).

    fspo data hotpotqa --size 2000                              # the paper's best training size
    fspo data hotpotqa --input hotpot_train_v1.1.json --split train
    fspo data 2wikimultihopqa --input 2wikimultihopqa/ --size 2000   # the official train.json / dev.json
    fspo data simplerl_math --input simplelr_qwen_level3to5/train.parquet --split train
    fspo data truthfulqa --form mc1
    python -m fspo.data gsm8k                                   # the same command without the `fspo` script
"""

from __future__ import annotations

import sys
from functools import partial

from fspo.data import halluqa, halueval, truthfulqa
from fspo.data.builder import DatasetSpec, run_cli
from fspo.data.io import SourceFieldError, SourceFileError
from fspo.data.math_sets import (
    add_simplerl_arguments,
    aime2025_offline_files,
    convert_aime,
    convert_gsm8k,
    convert_math,
    gsm8k_offline_files,
)
from fspo.data.multihop import convert_multihop
from fspo.utils.arguments import UsageError, refuse
from fspo.utils.subcommands import dispatch

SPECS = (
    DatasetSpec(
        name="hotpotqa",
        description="HotpotQA with gold supporting paragraphs as evidence",
        ability="factual_qa",
        splits=("train", "test"),
        hub=lambda split, args: ("hotpotqa/hotpot_qa", "distractor", "train" if split == "train" else "validation"),
        convert=convert_multihop,
        data_source=lambda args: "hotpotqa",
    ),
    DatasetSpec(
        name="2wikimultihopqa",
        description="2WikiMultiHopQA with gold supporting paragraphs as evidence",
        ability="factual_qa",
        splits=("train", "test"),
        hub=lambda split, args: ("xanhho/2WikiMultihopQA", None, "train" if split == "train" else "dev"),
        convert=convert_multihop,
        data_source=lambda args: "2wikimultihopqa",
    ),
    DatasetSpec(
        name="simplerl_math",
        description="SimpleRL-Zoo math problems with final answers",
        ability="math",
        splits=("train",),
        hub=lambda split, args: ("hkust-nlp/SimpleRL-Zoo-Data", f"{args.simplerl_subset}/{split}.parquet", split),
        convert=convert_math,
        data_source=lambda args: "simplerl_math",
        add_arguments=add_simplerl_arguments,
    ),
    DatasetSpec(
        name="gsm8k",
        description="GSM8K grade-school math (numeric answers)",
        ability="math",
        splits=("test",),
        hub=lambda split, args: ("openai/gsm8k", "main", split),
        convert=convert_gsm8k,
        data_source=lambda args: "gsm8k",
        offline=gsm8k_offline_files,
    ),
    DatasetSpec(
        name="math500",
        description="MATH-500 competition math (LaTeX answers)",
        ability="math",
        splits=("test",),
        hub=lambda split, args: ("HuggingFaceH4/MATH-500", None, "test"),
        convert=convert_math,
        data_source=lambda args: "math500",
    ),
    DatasetSpec(
        name="aime2024",
        description="AIME 2024 (integer answers)",
        ability="math",
        splits=("test",),
        hub=lambda split, args: ("HuggingFaceH4/aime_2024", None, "train"),
        convert=convert_aime,
        data_source=lambda args: "aime2024",
    ),
    DatasetSpec(
        name="aime2025",
        description="AIME 2025 I+II (integer answers)",
        ability="math",
        splits=("test",),
        hub=lambda split, args: ("yentinglin/aime_2025", None, "train"),
        convert=convert_aime,
        data_source=lambda args: "aime2025",
        offline=aime2025_offline_files,
    ),
    DatasetSpec(
        name="truthfulqa",
        description="TruthfulQA (generation, MC1 or MC2)",
        ability="factual_qa",
        splits=("test",),
        hub=lambda split, args: (
            "truthfulqa/truthful_qa",
            "generation" if args.form == "generation" else "multiple_choice",
            "validation",
        ),
        convert=truthfulqa.convert,
        data_source=lambda args: {"generation": "truthfulqa_gen"}.get(args.form, f"truthfulqa_{args.form}"),
        add_arguments=truthfulqa.add_arguments,
    ),
    DatasetSpec(
        name="halueval",
        description="HaluEval-QA as open question answering",
        ability="factual_qa",
        splits=("test",),
        hub=lambda split, args: ("pminervini/HaluEval", "qa", "data"),
        convert=halueval.convert,
        data_source=lambda args: "halueval_qa",
        offline=halueval.offline_files,
    ),
    DatasetSpec(
        name="halluqa",
        description="HalluQA (Chinese), generation or multiple choice",
        ability="factual_qa",
        splits=("test",),
        hub=lambda split, args: None,
        convert=halluqa.convert,
        data_source=lambda args: f"halluqa_{'gen' if args.form == 'generation' else 'mc'}",
        offline=halluqa.offline_files,
        add_arguments=halluqa.add_arguments,
    ),
)
DATASETS: dict[str, DatasetSpec] = {spec.name: spec for spec in SPECS}


def build(spec: DatasetSpec, argv: list[str]) -> int:
    """`fspo data <spec.name> ...`: bad or missing source data is one line saying what to fix (exit 2)."""
    try:
        return run_cli(spec, argv)
    except (SourceFieldError, SourceFileError, FileNotFoundError, UsageError) as error:
        return refuse(f"fspo data {spec.name}: error", error)


# `fspo data <name>`: the sets above, the generated synthetic set, and the file check.
COMMANDS = {
    **{name: (partial(build, spec), spec.description) for name, spec in DATASETS.items()},
    "synthetic": ("fspo.data.synthetic", "synthetic multi-hop questions over fictional worlds, with evidence"),
    "check": ("fspo.data.check", "FILE...: what parquet files hold and whether they can train"),
}


def main(argv: list[str] | None = None) -> int:
    return dispatch("fspo data", COMMANDS, argv, noun="dataset")


if __name__ == "__main__":
    sys.exit(main())
