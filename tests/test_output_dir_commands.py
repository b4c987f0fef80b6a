"""fspo.utils.output_dir's rule held by each command that writes a folder: a user's file where the command writes is
refused by name and left as it was, a link is never replaced, and a re-run replaces the command's own outputs."""

from __future__ import annotations

import json

from fspo.cli import main as fspo_main
from fspo.utils.output_dir import RECORD, read_record

GSM8K_ROW = {"question": "1+1?", "answer": "#### 2"}


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_data_builders_replace_their_own_parquet_not_a_users(tmp_path, capsys):
    source = tmp_path / "gsm8k.jsonl"
    source.write_text(json.dumps(GSM8K_ROW) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "test.parquet").write_text("a user's file")
    build = ["data", "gsm8k", "--input", str(source), "--output-dir", str(out), "--split", "test"]
    assert fspo_main(build) == 2
    assert "test.parquet was not written by fspo" in one_line(capsys)
    assert (out / "test.parquet").read_text() == "a user's file"
    synthetic = ["data", "synthetic", "--size", "2", "--test-size", "2", "--output-dir", str(out)]
    assert fspo_main(synthetic) == 2
    assert "test.parquet was not written by fspo" in one_line(capsys)
    assert sorted(p.name for p in out.iterdir()) == ["test.parquet"]  # not even train.parquet was written
    (out / "test.parquet").unlink()
    (out / "train.parquet").symlink_to(tmp_path / "elsewhere.parquet")
    assert fspo_main(synthetic) == 2
    assert "train.parquet is a symbolic link" in one_line(capsys)
    (out / "train.parquet").unlink()
    assert fspo_main(synthetic) == 0 and fspo_main(synthetic) == 0  # a re-run replaces its own files
    assert fspo_main(build) == 0  # another builder may replace them too: they are fspo's
    assert sorted(read_record(out)) == ["test.parquet", "train.parquet"] and (out / RECORD).is_file()
