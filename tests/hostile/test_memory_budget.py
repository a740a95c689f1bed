"""DuckDB's memory budget running out is one line that names the setting and what to do; what was
stored before is kept, and the same command with a larger budget goes on to the same store."""

from __future__ import annotations

import duckdb
import pytest

from tracejoin.cli.demo.dynamo_formats import DynamoSample

from ..conftest import assert_one_clear_line


@pytest.fixture
def logs(tmp_path):
    sample = DynamoSample()
    for i in range(300):
        sample.add(offset_ms=i, x_request_id=f"x-{i % 7}")
    sample.write(tmp_path / "logs")
    return tmp_path / "logs"


def records(db) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute('SELECT * EXCLUDE (record_id) FROM records ORDER BY origin_id, "offset", seq').fetchall()


@pytest.mark.parametrize("budget", ["1MB", "8MB"], ids=["at open", "while writing"])
def test_a_budget_too_small_is_named_and_a_larger_one_goes_on(tj, db, tmp_path, logs, monkeypatch, budget):
    monkeypatch.setenv("TRACEJOIN_MEMORY_LIMIT", budget)
    failed = tj("ingest", logs)
    assert failed.code == 2
    assert_one_clear_line(failed)
    assert f"TRACEJOIN_MEMORY_LIMIT={budget}" in failed.err and "run the same command again" in failed.err

    monkeypatch.delenv("TRACEJOIN_MEMORY_LIMIT")
    assert tj("ingest", logs).code == 0
    fresh = tmp_path / "fresh.duckdb"
    assert tj("ingest", logs, "--db", fresh, with_db=False).code == 0
    assert records(db) == records(fresh)
