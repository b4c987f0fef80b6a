"""Every parquet file the package reads goes through the one door, :mod:`fspo.utils.input_files`.

Each module's syntax tree is walked (as tests/test_input_doors.py walks it for JSON and the environment): a call of
a parquet reader of pyarrow (``read_table``, ``read_schema``, ``read_metadata``, ``read_pandas``, ``ParquetFile``,
``ParquetDataset``), pandas (``read_parquet``) or ``datasets`` (``load_dataset("parquet", ...)``,
``Dataset.from_parquet``) outside the door is a side door: its failures would reach the user as a traceback, and its
rows would skip the door's schema. Names are resolved through the module's imports (``import pyarrow.parquet as
pq``, ``from pandas import read_parquet``), and the usual aliases (``pq.``, ``pd.``) count even unimported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import fspo

PACKAGE = Path(fspo.__file__).parent
PARQUET_DOOR = "fspo.utils.input_files"
READERS = {
    *(
        f"pyarrow.parquet.{name}"
        for name in ("read_table", "read_schema", "read_metadata", "read_pandas", "ParquetFile", "ParquetDataset")
    ),
    "pandas.read_parquet",
    "datasets.Dataset.from_parquet",
}
# What the usual short names stand for where a module does not import them (a planted snippet, a lazy import).
USUAL_ALIASES = {"pq": "pyarrow.parquet", "pd": "pandas", "Dataset": "datasets.Dataset"}


def imported_names(tree: ast.AST) -> dict[str, str]:
    """Each name the module's imports bind (at any depth), with the dotted name it stands for."""
    names = dict(USUAL_ALIASES)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def dotted(node: ast.expr, names: dict[str, str]) -> str | None:
    """``pq.read_table`` as ``pyarrow.parquet.read_table``, through the module's imports; None if not a name."""
    if isinstance(node, ast.Name):
        return names.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = dotted(node.value, names)
        return None if base is None else f"{base}.{node.attr}"
    return None


def parquet_reader(node: ast.AST, names: dict[str, str]) -> str | None:
    """The parquet reader ``node`` names or calls, else None: a reader named without a call (``read=pq.read_table``)
    is a door too."""
    if isinstance(node, ast.Name | ast.Attribute):
        name = dotted(node, names) or ""
        return name if name in READERS or name.endswith(".from_parquet") else None
    if isinstance(node, ast.Call) and dotted(node.func, names) == "datasets.load_dataset":
        builder = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "path"), None)
        if isinstance(builder, ast.Constant) and builder.value == "parquet":
            return 'datasets.load_dataset("parquet")'
    return None


def parquet_side_doors(tree: ast.AST, module: str) -> list[str]:
    """Each parquet read of ``module`` (its syntax ``tree``) outside the door, as ``"line N: reader"``."""
    if module == PARQUET_DOOR:
        return []
    names = imported_names(tree)
    return [
        f"line {node.lineno}: {reader} outside {PARQUET_DOOR}"
        for node in ast.walk(tree)
        if (reader := parquet_reader(node, names))
    ]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_package_reads_parquet_only_through_the_door():
    doors = {
        module_name(path): parquet_side_doors(ast.parse(path.read_text(), str(path)), module_name(path))
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    assert {module: found for module, found in doors.items() if found} == {}


PLANTED = {
    "pq.read_table": "import pyarrow.parquet as pq\npq.read_table(path)",
    "pq.read_schema": "import pyarrow.parquet as pq\npq.read_schema(path)",
    "pq.ParquetFile": "import pyarrow.parquet as pq\npq.ParquetFile(path).metadata.num_rows",
    "pq.read_metadata": "import pyarrow.parquet as pq\npq.read_metadata(path)",
    "pq unimported, in a function": "def rows(path):\n    return pq.read_table(path).to_pylist()",
    "read_table imported by name": "from pyarrow.parquet import read_table as load\nload(path)",
    "pyarrow.parquet spelled out": "import pyarrow.parquet\npyarrow.parquet.read_table(path)",
    "parquet from pyarrow": "from pyarrow import parquet\nparquet.ParquetDataset(path)",
    "pd.read_parquet": "import pandas as pd\npd.read_parquet(path)",
    "pandas.read_parquet": "import pandas\npandas.read_parquet(path)",
    "read_parquet from pandas": "from pandas import read_parquet\nread_parquet(path)",
    'load_dataset("parquet")': 'import datasets\ndatasets.load_dataset("parquet", data_files=path)',
    "load_dataset(path='parquet')": "from datasets import load_dataset\nload_dataset(path='parquet', data_files=path)",
    "Dataset.from_parquet": "from datasets import Dataset\nDataset.from_parquet(path)",
    "datasets.Dataset.from_parquet": "import datasets\ndatasets.Dataset.from_parquet(path)",
    "a reader handed on": "import pyarrow.parquet as pq\nread = pq.read_table\nread(path)",
}


@pytest.mark.parametrize("source", PLANTED.values(), ids=PLANTED.keys())
def test_a_planted_side_door_is_found(source):
    assert len(parquet_side_doors(ast.parse(source), "fspo.data.planted")) == 1
    assert parquet_side_doors(ast.parse(source), PARQUET_DOOR) == []


def test_writing_parquet_and_reading_the_hub_are_no_side_doors():
    source = (
        "import pyarrow.parquet as pq\nimport datasets\npq.write_table(table, path)\n"
        "datasets.load_dataset(name, config, split=split)\ndatasets.load_dataset('json', data_files=path)"
    )
    assert parquet_side_doors(ast.parse(source), "fspo.data.io") == []


def test_the_door_reads_parquet_and_is_no_side_door():
    door = PACKAGE / "utils" / "input_files.py"
    tree = ast.parse(door.read_text())
    assert parquet_side_doors(tree, PARQUET_DOOR) == []
    assert len(parquet_side_doors(tree, "fspo.elsewhere")) == 3  # read_schema, read_metadata, read_table


DOOR_READERS = ["read_parquet", "read_parquet_rows", "read_parquet_schema", "parquet_row_count"]


@pytest.mark.parametrize("reader", DOOR_READERS)
def test_each_door_refuses_what_is_no_parquet_file_in_one_line_naming_it(tmp_path, reader):
    import fspo.utils.input_files as door

    (tmp_path / "folder.parquet").mkdir()
    (tmp_path / "csv.parquet").write_text("question,answer\nWhere?,Paris\n")
    (tmp_path / "cut.parquet").write_bytes(b"PAR1" + b"\0" * 64)  # a header, then nothing of a footer
    for name, says in (
        ("missing.parquet", "does not exist"),
        ("folder.parquet", "is a folder, not a parquet file"),
        ("csv.parquet", "not a readable parquet file"),
        ("cut.parquet", "not a readable parquet file"),
    ):
        with pytest.raises(door.InputFileError) as refused:
            getattr(door, reader)(tmp_path / name)
        assert str(refused.value).startswith(f"{tmp_path / name}") and says in str(refused.value)
        assert "\n" not in str(refused.value)


def test_the_door_reads_a_parquet_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from fspo.utils.input_files import parquet_row_count, read_parquet, read_parquet_rows, read_parquet_schema

    rows = [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")
    assert parquet_row_count(tmp_path / "t.parquet") == 2
    assert read_parquet_schema(tmp_path / "t.parquet").names == ["a", "b"]
    assert read_parquet(tmp_path / "t.parquet", ["b"]).column_names == ["b"]
    assert read_parquet_rows(tmp_path / "t.parquet") == rows
