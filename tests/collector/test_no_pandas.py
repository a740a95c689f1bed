"""pyarrow imports pandas, where it is installed, whenever it converts Python values: 48 MB more
in every process that writes a store. trace-join's commands keep it out (duckdb_engine.py), and a
ClickHouse store on chdb, which needs it, lets it back in."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("pandas", reason="pandas is not installed: pyarrow has nothing to import")

_CONVERT = """
import sys
from tracejoin.collector import duckdb_engine
duckdb_engine.keep_pandas_out()
import pyarrow as pa
pa.table({"a": [1, 2]})
print("pandas" in sys.modules)
duckdb_engine.let_pandas_in()
import pandas
print(pandas.__name__)
"""


def test_a_command_converts_to_arrow_without_importing_pandas():
    out = subprocess.run([sys.executable, "-c", _CONVERT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "pandas"]
