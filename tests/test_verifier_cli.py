"""`fspo verify`: JSONL rows in, each reasoning step with its score and verdict out."""

from __future__ import annotations

import json

from fspo.cli import main as fspo_main

ROWS = [
    {
        "evidence": [
            "Paris is the capital of France.",
            "The Eiffel Tower was completed in 1889.",
        ],
        "response": "<think>Okay. The Eiffel Tower is in Paris. It opened in 1925.</think> Paris",
    },
    {
        "evidence": "Bananas are yellow.",
        "response": "Bananas are yellow. Bananas are red.",
    },
]


def _write(tmp_path, rows):
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    return path


def test_verify_prints_each_step_with_score_and_verdict(tmp_path, capsys):
    assert (
        fspo_main(
            [
                "verify",
                str(_write(tmp_path, ROWS)),
                "--verifier",
                "lexical",
                "--threshold",
                "0.6",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "== row 1: 3 steps" in out
    # Training labels nothing in a response without closed reasoning: neither does verify.
    assert "== row 2: 0 steps (no closed <think> reasoning)" in out and "Bananas are red." not in out
    assert "nan UNVERIFIABLE Okay." in out
    assert "1.000 SUPPORTED    The Eiffel Tower is in Paris." in out
    assert "0.000 UNSUPPORTED  It opened in 1925." in out  # 'opened' and '1925' are not in the evidence
    assert "2 rows, 3 steps: 1 supported, 1 unsupported, 1 unverifiable" in out
    assert "1 of 2 rows have no reasoning to judge" in out


def test_verify_json_claims_only(tmp_path, capsys):
    assert (
        fspo_main(
            [
                "verify",
                str(_write(tmp_path, ROWS[:1])),
                "--json",
                "--claims-only",
                "--evidence-top-k",
                "1",
            ]
        )
        == 0
    )
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["text"] for r in records] == [
        "The Eiffel Tower is in Paris.",
        "It opened in 1925.",
    ]
    response = ROWS[0]["response"]
    assert all(response[r["start"] : r["end"]] == r["text"] for r in records)
    # top-1 evidence keeps only the Eiffel sentence, so "Paris" is no longer found: 2 of 3 words.
    # lexical's calibrated threshold, which training uses, is 1.0: two words of three is unsupported.
    assert records[0]["score"] == 2 / 3 and records[0]["verdict"] == "UNSUPPORTED"


def test_verify_bad_input_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"evidence": "x"}\n')
    assert fspo_main(["verify", str(bad)]) == 2
    assert "line 1" in capsys.readouterr().err
    assert fspo_main(["verify", str(_write(tmp_path, ROWS)), "--verifier-option", "nope=1"]) == 2
    assert "valid options" in capsys.readouterr().err


# --- issue 12: odd inputs get a message, not silence or a hub error ---


def test_verify_refuses_a_negative_limit(tmp_path, capsys):
    try:
        code = fspo_main(["verify", str(_write(tmp_path, ROWS)), "--limit", "-1"])
    except SystemExit as stop:
        code = stop.code
    assert code == 2
    assert "--limit: must be >= 1" in capsys.readouterr().err


def test_verify_treats_null_evidence_as_absent_like_training(tmp_path, capsys):
    # Training labels nothing without evidence; verifying against the text "None" would mislead.
    rows = [{"evidence": None, "response": "<think>None of it. None.</think> x"}]
    assert fspo_main(["verify", str(_write(tmp_path, rows)), "--json"]) == 0
    steps = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert steps and all(s["verdict"] == "UNVERIFIABLE" and s["score"] is None for s in steps)


def test_verify_names_a_model_path_that_does_not_exist(tmp_path, capsys):
    code = fspo_main(["verify", str(_write(tmp_path, ROWS)), "--verifier", "hhem", "--model-path", "/nonexistent"])
    err = capsys.readouterr().err
    assert code == 2 and "--model-path /nonexistent does not exist" in err
    assert "repo" not in err.lower()  # not the hub's repo-id error


def test_an_option_cannot_name_another_verifier_than_the_command_line(tmp_path, capsys):
    """Was: `--verifier lexical --verifier-option name=minicheck` scored with MiniCheck and reported "verifier lexical" at
    lexical's threshold; `fspo evaluate --verifier-option name=...` likewise."""
    rows = str(_write(tmp_path, ROWS))
    assert fspo_main(["verify", rows, "--verifier", "lexical", "--verifier-option", "name=minicheck"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--verifier-option name=minicheck contradicts --verifier lexical" in err
    assert fspo_main(["verify", rows, "--verifier-option", "threshold=0.2"]) == 2
    assert "give the threshold with --threshold" in capsys.readouterr().err
    assert (
        fspo_main(["verify", rows, "--verifier", "lexical", "--verifier-option", "name=lexical", "--limit", "1"]) == 0
    )
    capsys.readouterr()
    evaluate = ["evaluate", "--model", str(tmp_path), "--data", rows, "--output-dir", str(tmp_path / "out")]
    assert fspo_main([*evaluate, "--verifier", "lexical", "--verifier-option", "name=factcg"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--verifier-option name=factcg contradicts --verifier lexical" in err
