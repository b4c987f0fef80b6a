"""fspo.utils.input_files: every failure of a file the project reads is one InputFileError naming the file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fspo.utils.input_files import (
    InputFileError,
    read_hf_config,
    read_json,
    read_jsonl,
    read_parquet_rows,
    read_safetensors_index,
    read_toml,
)

READERS = {
    "json": read_json,
    "jsonl": read_jsonl,
    "toml": read_toml,
    "parquet": read_parquet_rows,
    "index.json": read_safetensors_index,
}
REPO = Path(__file__).resolve().parents[1]

# Bytes near the valid ones: JSON fragments, escapes of surrogates, a byte-order mark, bytes that are not UTF-8.
PIECES = [b"{", b"}", b"[", b"]", b'"', b":", b",", b"1", b"null", b'"\\udcff"', b'"\\ud83d"', b"\xef\xbb\xbf"]
PIECES += [b"\xff", b"\xe9", b"\n", b" ", b'"a"', b"=", b"[tool]", b"x = ", b"PAR1", b'"weight_map"', b"\x00"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(sorted(READERS)), content=st.lists(st.sampled_from(PIECES), max_size=12).map(b"".join))
def test_every_reader_returns_or_names_the_file_in_one_line(tmp_path, kind, content):
    path = tmp_path / f"input.{kind}"
    path.write_bytes(content)
    try:
        value = READERS[kind](path)
    except InputFileError as error:
        message = str(error)
        assert str(path) in message and "\n" not in message
        return
    # What a reader returns is what its caller may print or write: encodable text, the type promised.
    json.dumps(value, default=str).encode("utf-8")
    assert isinstance(value, list if kind in ("jsonl", "parquet") else dict)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"a": "\\udcff"}', "unpaired surrogate"),
        (b'{"\\ud800": 1}', "unpaired surrogate"),
        (b"[1, 2]", "holds a list, expected an object"),
        (b'{"caf\xe9": 1}', r"is not UTF-8 text \(byte 5"),
        (b'{"a": 1', "line 1: not valid JSON"),
    ],
)
def test_read_json_refuses(tmp_path, content, message):
    path = tmp_path / "f.json"
    path.write_bytes(content)
    with pytest.raises(InputFileError, match=message):
        read_json(path)


def test_missing_files_folders_and_shapes(tmp_path):
    with pytest.raises(InputFileError, match="does not exist"):
        read_json(tmp_path / "none.json")
    with pytest.raises(InputFileError, match="is a folder"):
        read_jsonl(tmp_path)
    (tmp_path / "rows.jsonl").write_text('{"a": 1}\n[2]\n')
    with pytest.raises(InputFileError, match="line 2: holds a list"):
        read_jsonl(tmp_path / "rows.jsonl")
    (tmp_path / "cut.jsonl").write_text('{"a": 1}\n{"a": ')
    assert read_jsonl(tmp_path / "cut.jsonl", drop_partial_last=True) == [{"a": 1}]
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(InputFileError, match="names no model_type"):
        read_hf_config(tmp_path)
    (tmp_path / "i.json").write_text('{"weight_map": [1]}')
    with pytest.raises(InputFileError, match="no weight_map object"):
        read_safetensors_index(tmp_path / "i.json")
    (tmp_path / "x.parquet").write_text("a,b\n1,2\n")
    with pytest.raises(InputFileError, match="not a readable parquet file"):
        read_parquet_rows(tmp_path / "x.parquet")


def test_verify_refuses_a_row_with_an_unpaired_surrogate_in_one_line(tmp_path):
    """Was: `fspo verify` scored the row, then died printing it (UnicodeEncodeError traceback)."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"evidence": "e", "response": "<think>\\ud800 x.</think>"}).replace("\\\\", "\\") + "\n")
    result = subprocess.run(
        [sys.executable, "-m", "fspo.cli", "verify", str(rows)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert f"{rows}, line 1" in result.stderr and "unpaired surrogate" in result.stderr


def test_flash_attn_wheel_picker_names_a_broken_pyproject(tmp_path):
    """Was: a KeyError or TOMLDecodeError traceback from scripts/setup.sh's wheel picker."""
    (tmp_path / "pyproject.toml").write_text("[tool\n")
    (tmp_path / "report.json").write_text('{"install": []}')
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "fspo.cli.flash_attn_wheel",
            "--pyproject",
            str(tmp_path / "pyproject.toml"),
            "--report",
            str(tmp_path / "report.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert "Traceback" not in result.stderr
    del result  # a report without torch installs without flash-attn: exit 0 before the pyproject is read
    from fspo.cli.flash_attn_wheel import listed_wheels

    with pytest.raises(InputFileError, match="not valid TOML"):
        listed_wheels(tmp_path / "pyproject.toml")
    (tmp_path / "pyproject.toml").write_text('[tool.fspo]\nflash-attn-wheels = "x"\n')
    with pytest.raises(InputFileError, match="must be a list of tables"):
        listed_wheels(tmp_path / "pyproject.toml")


# Any JSON value whose text is valid Unicode: str.splitlines' line breaks (U+2028, U+0085, ...) included.
json_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | json_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(json_text, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    records=st.lists(st.dictionaries(json_text, json_values, max_size=4), max_size=5),
    bom=st.booleans(),
    ending=st.sampled_from(["\n", "\r\n"]),
    ascii_only=st.booleans(),
)
def test_json_lines_read_back_whatever_their_text_holds(tmp_path, records, bom, ending, ascii_only):
    """Every list of objects, written one per line (escaped or not, LF or CRLF, after a byte-order mark or not),
    reads back as the same list: lines split on \\n only, never on what str.splitlines also splits on."""
    from fspo.utils.input_files import read_jsonl

    path = tmp_path / "records.jsonl"
    text = "".join(json.dumps(r, ensure_ascii=ascii_only) + ending for r in records)
    path.write_bytes(("\ufeff" if bom else "").encode() + text.encode("utf-8"))
    assert read_jsonl(path) == records


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(st.dictionaries(json_text, json_values, min_size=1, max_size=3), min_size=2, max_size=5))
def test_a_bad_line_is_refused_naming_it_and_only_a_cut_last_line_is_dropped(tmp_path, records):
    from fspo.utils.input_files import InputFileError, read_jsonl

    lines = [json.dumps(r, ensure_ascii=False) for r in records]
    path = tmp_path / "records.jsonl"
    cut = lines[-1][: len(lines[-1]) - 1]  # a write cut short: never valid JSON, no newline after it
    path.write_text("\n".join([*lines[:-1], cut]), encoding="utf-8")
    assert read_jsonl(path, drop_partial_last=True) == records[:-1]
    path.write_text("\n".join([cut, *lines[1:]]) + "\n", encoding="utf-8")
    with pytest.raises(InputFileError, match="records.jsonl, line 1: not valid JSON"):
        read_jsonl(path, drop_partial_last=True)
