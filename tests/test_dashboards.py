"""The Grafana dashboards in dashboards/: Grafana cannot run here, so everything short of rendering.

Every panel's query runs, as Grafana and the DuckDB plugin would send it (dashboards/macros.py),
against the snapshot the collector publishes for Grafana, of a store `trace-join demo` built; the
core panels must show rows, and agree with `trace-join coverage` and `trace-join lookup`. Every
panel of the ClickHouse dashboards runs, as ClickHouse's plugin would send it, on chdb holding the
same records, published by `trace-join snapshot --store chdb:…`, and shows what its DuckDB twin
shows. The committed JSON must be what dashboards/build.py makes.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator

import duckdb
import pyarrow as pa
import pytest

from dashboards.macros import ExpansionError, Window, expand, expand_clickhouse
from tracejoin.collector.service.snapshot import publish
from tracejoin.collector.store import open_store

ROOT = Path(__file__).resolve().parents[1]
DASHBOARDS = {name: json.loads((ROOT / "dashboards" / name).read_text())
              for name in ("duckdb/fleet.json", "duckdb/request-lookup.json",
                           "clickhouse/fleet.json", "clickhouse/request-lookup.json")}
INTERVAL_MS = 1000
TRACE_FIELDS = ["traceID", "spanID", "parentSpanID", "operationName", "serviceName", "startTime", "duration"]
# Column types the plugin turns into Grafana fields; lists, structs, JSON and HUGEINT it cannot.
FIELD_TYPES = {"VARCHAR", "BIGINT", "INTEGER", "DOUBLE", "BOOLEAN", "TIMESTAMP"}


def all_panels(dashboard: dict) -> list[dict]:
    """Every panel, the ones inside collapsed rows too."""
    return [p for top in dashboard["panels"] for p in [top, *top.get("panels", [])]]


def panel(dashboard: str, title: str) -> dict:
    [found] = [p for p in all_panels(DASHBOARDS[dashboard]) if p["title"] == title]
    return found


SQL_PANELS = [(name, p) for name, d in DASHBOARDS.items() for p in all_panels(d)
              if any("rawSql" in t for t in p.get("targets", [])) and name.startswith("duckdb/")]
CLICKHOUSE_PANELS = [(name, p) for name, d in DASHBOARDS.items() for p in all_panels(d)
                     if any("rawSql" in t for t in p.get("targets", [])) and name.startswith("clickhouse/")]


@dataclass
class Demo:
    snapshot: Path
    con: duckdb.DuckDBPyConnection
    window: Window
    reply_id: str

    def variables(self) -> dict:
        """The lookup dashboard's variables as Grafana sets them for the reply id: `request` is
        every request its own query returns ("All")."""
        return {"id": self.reply_id, "request": [str(value) for _, value in self.requests_named(self.reply_id)]}

    def requests_named(self, id: str) -> list[tuple]:
        """The options of the lookup's `request` variable (text, value) for this id."""
        return self.query(variable_query("request"), {"id": id}, variable_query=True).fetchall()

    def run(self, sql: str) -> list[tuple]:
        return self.con.sql(sql).fetchall()

    def query(self, sql: str, variables: dict | None = None, **how) -> duckdb.DuckDBPyRelation:
        return self.con.sql(expand(sql, self.window, variables, **how))

    def rows(self, dashboard: str, title: str, variables: dict | None = None) -> tuple[list[str], list[dict]]:
        [target] = panel(dashboard, title)["targets"]
        relation = self.query(target["rawSql"], variables)
        return relation.columns, [dict(zip(relation.columns, row)) for row in relation.fetchall()]

    def tj(self, *args) -> dict:
        p = subprocess.run([sys.executable, "-m", "tracejoin.cli", *args, "--db", str(self.snapshot), "--json"],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)


def variable_query(name: str, dashboard: str = "duckdb/request-lookup.json") -> str:
    [variable] = [v for v in DASHBOARDS[dashboard]["templating"]["list"] if v["name"] == name]
    return variable["query"]


@pytest.fixture(scope="session")
def demo(tmp_path_factory) -> Iterator[Demo]:
    """What `trace-join demo` stores, published as the snapshot Grafana reads, once per session."""
    folder = tmp_path_factory.mktemp("dashboards")
    db = folder / "demo.duckdb"
    subprocess.run([sys.executable, "-m", "tracejoin.cli", "demo", "--db", str(db), "--folder", str(folder / "records")],
                   check=True, capture_output=True, timeout=120)
    with open_store(db) as store:
        snapshot = publish(store)  # as `trace-join collect` does, the requests tables included
    con = duckdb.connect(str(snapshot), read_only=True)
    [(first, last)] = con.execute("SELECT min(start_ns), max(start_ns) FROM requests WHERE has_entry").fetchall()
    # Whole minutes around the replies, as a dashboard's time range would be.
    start = datetime.fromtimestamp(first // 60_000_000_000 * 60, timezone.utc)
    end = datetime.fromtimestamp(math.ceil(last / 60e9) * 60, timezone.utc) + timedelta(minutes=1)
    # A reply id as the user quotes it. A Dynamo store has none: Dynamo's logs never print the one
    # it sends, `chatcmpl-` and the internal id they do print (docs/id-model.md, rule 4).
    [(reply_id,)] = con.execute("""
        SELECT coalesce(reply_ids[1], 'chatcmpl-' || internal_ids[1]) FROM requests
        WHERE has_entry ORDER BY start_ns, request_id LIMIT 1""").fetchall()
    yield Demo(snapshot, con, Window(start, end, INTERVAL_MS), reply_id)
    con.close()


@pytest.mark.parametrize("dashboard, query_panel", SQL_PANELS, ids=[p["title"] for _, p in SQL_PANELS])
def test_every_panel_query_runs_as_grafana_sends_it(demo, dashboard, query_panel):
    variables = demo.variables() if dashboard == "duckdb/request-lookup.json" else {}
    for target in query_panel["targets"]:
        relation = demo.query(target["rawSql"], variables)
        rows = relation.fetchall()
        types = {str(t) for t in relation.types}
        assert types <= FIELD_TYPES, f"columns the plugin cannot turn into fields: {types - FIELD_TYPES}"
        if target["format"] == "time_series":
            # The plugin turns long frames wide by a leading time column, sorted.
            assert relation.columns[0] == "time" and str(relation.types[0]) == "TIMESTAMP"
            times = [row[0] for row in rows]
            assert times == sorted(times)


def test_requests_per_second_count_every_reply_in_the_range(demo):
    columns, rows = demo.rows("duckdb/fleet.json", "Requests per second by route and status")
    assert columns == ["time", "route", "status", "requests_per_s"]
    [(replies,)] = demo.run("SELECT count(*) FROM requests WHERE has_entry")
    assert rows and sum(r["requests_per_s"] for r in rows) * INTERVAL_MS / 1000 == pytest.approx(replies)
    assert all(r["route"] and r["status"] for r in rows)


def test_latency_percentiles_by_role_and_worker_include_ttft(demo):
    columns, rows = demo.rows("duckdb/fleet.json", "Latency percentiles by role and worker")
    assert columns == ["role", "worker", "metric", "requests", "p50_ms", "p90_ms", "p99_ms", "max_ms"]
    assert any(r["metric"] == "ttft_ms" for r in rows)
    assert all(r["worker"] and r["p50_ms"] <= r["p90_ms"] <= r["p99_ms"] <= r["max_ms"] for r in rows)


def test_slowest_requests_come_first_and_their_ids_find_them(demo):
    columns, rows = demo.rows("duckdb/fleet.json", "Slowest requests")
    assert columns == ["time", "id", "duration_ms", "ttft_ms", "queue_ms", "kv_transfer_ms", "route", "status",
                       "entry_worker", "workers"]
    durations = [r["duration_ms"] for r in rows]
    assert rows and durations == sorted(durations, reverse=True)
    # What the data link does: the lookup dashboard's `request` variable finds the row's request.
    found = demo.requests_named(rows[0]["id"])
    assert len(found) == 1 and found[0][1] != -1


def test_errors_are_the_failed_or_cut_short_replies(demo):
    columns, rows = demo.rows("duckdb/fleet.json", "Errors")
    assert columns == ["time", "id", "status", "error", "disconnected", "first_error", "route", "entry_worker",
                       "workers", "duration_ms"]
    [(failed,)] = demo.run("""SELECT count(*) FROM requests
                              WHERE has_entry AND (error OR disconnected OR TRY_CAST(http_status AS INTEGER) >= 400)""")
    assert rows and len(rows) == failed
    assert all(r["id"] for r in rows)


def test_join_coverage_over_time_adds_up_to_what_trace_join_coverage_reports(demo):
    columns, rows = demo.rows("duckdb/fleet.json", "Join coverage: replies joined to their workers")
    assert columns == ["time", "replies", "both_workers", "one_worker", "aggregated_worker", "no_worker"]
    assert rows
    for r in rows:
        assert r["both_workers"] + r["one_worker"] + r["aggregated_worker"] + r["no_worker"] == pytest.approx(1)
    coverage = demo.tj("coverage")
    assert sum(r["replies"] for r in rows) == coverage["replies"]
    assert sum(r["replies"] * r["both_workers"] for r in rows) == pytest.approx(coverage["joined"]["both_workers"])


def test_the_timeline_of_a_reply_id_shows_what_trace_join_lookup_shows(demo):
    variables = demo.variables()
    looked_up = demo.tj("lookup", demo.reply_id)["requests"]
    assert len(variables["request"]) == len(looked_up) >= 1

    columns, rows = demo.rows("duckdb/request-lookup.json", "Timeline", variables)
    assert columns == ["time", "since_start_ms", "worker", "role", "kind", "source", "name", "level", "status",
                       "duration_ms", "ids", "attributes", "clock", "request_id", *TRACE_FIELDS]
    # The timeline holds the records joined by their ids; the error lines lookup places by worker and
    # time (inferred, docs/grafana.md) are lookup's alone.
    records = [record for request in looked_up for record in request["records"] if not record.get("inferred")]
    assert any(record.get("inferred") for request in looked_up for record in request["records"])
    assert len(rows) == len(records)
    assert sorted(r["kind"] for r in rows) == sorted(r["kind"] for r in records)
    assert sum(r["time"] is None for r in rows) == sum(r["time"] is None for r in records)
    assert rows[0]["since_start_ms"] == 0
    assert {r["worker"] for r in rows} == {r["worker"] for r in records}

    columns, requests = demo.rows("duckdb/request-lookup.json", "Requests this id names", variables)
    assert columns[:2] == ["time", "request_id"] and len(requests) == len(looked_up)


def test_an_id_that_names_nothing_leaves_the_lookup_panels_empty_not_broken(demo):
    for missing in ("", "no-such-id", "it's"):
        [(text, value)] = demo.requests_named(missing)
        assert value == -1, text
        variables = {"id": missing, "request": [str(value)]}
        assert demo.rows("duckdb/request-lookup.json", "Timeline", variables)[1] == []


def test_the_trace_panel_reads_the_timeline():
    [trace] = [p for p in all_panels(DASHBOARDS["duckdb/request-lookup.json"]) if p["type"] == "traces"]
    [source] = trace["targets"]
    [timeline] = [p for p in all_panels(DASHBOARDS["duckdb/request-lookup.json"]) if p["id"] == source["panelId"]]
    assert timeline["title"] == "Timeline"
    # The table leaves the span fields to the Traces panel.
    [organize] = timeline["transformations"]
    assert sorted(organize["options"]["excludeByName"]) == sorted(TRACE_FIELDS)


@pytest.mark.parametrize("flavor", ["duckdb", "clickhouse"])
@pytest.mark.parametrize("title", ["Slowest requests", "Errors"])
def test_every_row_of_the_request_tables_links_to_the_lookup(title, flavor):
    lookup = DASHBOARDS[f"{flavor}/request-lookup.json"]
    assert "id" in [v["name"] for v in lookup["templating"]["list"] if v["type"] == "textbox"]
    [override] = panel(f"{flavor}/fleet.json", title)["fieldConfig"]["overrides"]
    assert override["matcher"] == {"id": "byName", "options": "id"}
    [[link]] = [p["value"] for p in override["properties"] if p["id"] == "links"]
    assert link["url"] == f"/d/{lookup['uid']}/request-lookup?var-id=${{__value.raw}}"


def test_macros_expand_as_the_plugin_does():
    window = Window(datetime(2026, 11, 30, 10, 15, 2, 500000, timezone.utc),
                    datetime(2026, 11, 30, 11, 15, tzinfo=timezone.utc), 60_000)
    assert expand("WHERE a AND $__timeFilter(make_timestamp(start_ns // 1000))", window) == (
        "WHERE a AND make_timestamp(start_ns // 1000) >= '2026-11-30T10:15:02Z'"
        " AND make_timestamp(start_ns // 1000) <= '2026-11-30T11:15:00Z'")
    # A panel's query: values quoted by default, then every pair of quotes merged into one.
    assert expand("SELECT $__interval_ms, ${x:csv}, $x, ''", window, {"x": ["1", "it's"]}) == (
        "SELECT '60000', 1,it's, '1','it's', '")
    # A variable's query: a value as typed by default, quote pairs kept.
    assert expand("SELECT ${x:sqlstring}, $x, ''", window, {"x": "it's"}, variable_query=True) == (
        "SELECT 'it''s', it's, ''")
    for unknown in ("WHERE $__timeGroup(t, '1m')", "WHERE x = $nobody", "WHERE x IN (${x:glob})"):
        with pytest.raises(ExpansionError):
            expand(unknown, window, {"x": "1"})


@pytest.fixture(scope="module")
def clickhouse_demo(demo, tmp_path_factory) -> Iterator:
    """The demo's records ingested into chdb as the demo ingested them, and every request published
    for Grafana's ClickHouse data source: the chdb store, open in this process for this module only
    (chdb serves one folder a process until it is closed: other modules open theirs)."""
    pytest.importorskip("chdb", reason="chdb (ClickHouse's engine in process) is not installed")
    spec = f"chdb:{tmp_path_factory.mktemp('clickhouse-dashboards') / 'demo.chdb'}"
    zone = datetime.now().astimezone().strftime("%z")
    for args in (("ingest", "--tz", zone, str(demo.snapshot.parent / "records")),
                 ("snapshot", "--since", "2000-01-01T00:00:00Z")):
        subprocess.run([sys.executable, "-m", "tracejoin.cli", *args, "--store", spec],
                       check=args[0] == "snapshot", capture_output=True, timeout=120)
    with open_store(spec, read_only=True) as store:
        yield store


def clickhouse_rows(store, dashboard: str, title: str, window: Window, variables: dict | None = None) -> list[dict]:
    [target] = panel(dashboard, title)["targets"]
    rows = store.engine.arrow(expand_clickhouse(target["rawSql"], window, variables))
    # chdb's Arrow gives a DateTime as its Unix seconds (uint32); the plugin, reading ClickHouse's
    # native protocol, a time.
    return [{k: datetime.fromtimestamp(v, timezone.utc) if rows.schema.field(k).type == pa.uint32() else v
             for k, v in row.items()} for row in rows.to_pylist()]


def comparable(rows: list[dict], leave_out=(), approximate: bool = False) -> list[dict]:
    """Rows as both engines give them alike: times as microseconds since the epoch (DuckDB's
    TIMESTAMP has no zone and microseconds, ClickHouse's DateTime64 a zone and nanoseconds), numbers
    (with `approximate`) equal to those within a nanosecond of a millisecond, the engines' floating
    point; the columns that number a request or a record (each store numbers its own) left out."""
    def value(v):
        if isinstance(v, str):  # a number in a JSON attribute: 1.0 as DuckDB writes a double, 1 as ClickHouse
            return re.sub(r"(?<=\d)\.0\b", "", v)
        if isinstance(v, datetime):
            return ((v if v.tzinfo else v.replace(tzinfo=timezone.utc)) - EPOCH) // timedelta(microseconds=1)
        if isinstance(v, float) and approximate:
            return pytest.approx(v, rel=1e-9, abs=1e-6)
        return v
    return [{k: value(v) for k, v in row.items() if k not in leave_out} for row in rows]


EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# Columns each store fills with its own numbers for a request or a record.
NUMBERED = ("request_id", "traceID", "spanID")


@pytest.mark.parametrize("dashboard, query_panel", CLICKHOUSE_PANELS, ids=[p["title"] for _, p in CLICKHOUSE_PANELS])
def test_every_clickhouse_panel_shows_what_its_duckdb_twin_shows(demo, clickhouse_demo, dashboard, query_panel):
    duckdb_dashboard = dashboard.replace("clickhouse/", "duckdb/")
    variables = clickhouse_variables = None
    if "lookup" in dashboard:
        variables = demo.variables()
        options = clickhouse_demo.engine.arrow(expand_clickhouse(
            variable_query("request", dashboard), demo.window, {"id": demo.reply_id})).to_pylist()
        assert [o["__text"] for o in options] == [text for text, _ in demo.requests_named(demo.reply_id)]
        clickhouse_variables = {"id": demo.reply_id, "request": [str(o["__value"]) for o in options]}
    [target] = query_panel["targets"]
    rows = clickhouse_rows(clickhouse_demo, dashboard, query_panel["title"], demo.window, clickhouse_variables)
    _, twin = demo.rows(duckdb_dashboard, query_panel["title"], variables)
    if query_panel["title"] != "Orphans by source and worker":  # the demo leaves no orphans
        assert twin, "the DuckDB panel shows rows to compare with"
    # The one column ClickHouse's panels leave out: orphans without a wall-clock time, which no
    # window publishes.
    twin = [{k: v for k, v in r.items() if k != "without_wall_clock"} for r in twin]
    assert comparable(rows, NUMBERED) == comparable(twin, NUMBERED, approximate=True)
    if target["format"] == 0:  # a time series: the plugin wants its time first, sorted
        assert list(rows[0])[0] == "time" and [r["time"] for r in rows] == sorted(r["time"] for r in rows)


def test_a_clickhouse_lookup_of_an_id_that_names_nothing_is_empty_not_broken(demo, clickhouse_demo):
    for missing in ("", "no-such-id", "it's"):
        [option] = clickhouse_demo.engine.arrow(expand_clickhouse(
            variable_query("request", "clickhouse/request-lookup.json"), demo.window, {"id": missing})).to_pylist()
        assert option["__value"] == -1, option
        assert clickhouse_rows(clickhouse_demo, "clickhouse/request-lookup.json", "Timeline", demo.window,
                               {"id": missing, "request": ["-1"]}) == []


def test_clickhouse_macros_expand_as_the_plugin_does():
    window = Window(datetime(2026, 11, 30, 10, 15, 2, 500000, timezone.utc),
                    datetime(2026, 11, 30, 11, 15, tzinfo=timezone.utc), 60_000)
    assert expand_clickhouse("SELECT $__timeInterval(t) AS time, count() / $__interval_s WHERE $__timeFilter(t)",
                             window) == (
        "SELECT toStartOfInterval(toDateTime(t), INTERVAL 60 second) AS time, count() / 60 "
        "WHERE t >= toDateTime(1796033702) AND t <= toDateTime(1796037300)")
    # Values as typed by default, several quoted; Grafana's sqlstring doubles quotes; nothing merged.
    assert expand_clickhouse("SELECT ${x:csv}, $x, ${y:sqlstring}, $y, ''", window,
                             {"x": ["1", "2"], "y": "it's"}) == "SELECT 1,2, '1','2', 'it''s', it's, ''"
    for unknown in ("WHERE $__timeGroup(t, '1m')", "WHERE x = $nobody", "WHERE x IN (${x:glob})"):
        with pytest.raises(ExpansionError):
            expand_clickhouse(unknown, window, {"x": "1"})


def test_the_committed_dashboards_are_what_build_py_makes(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "dashboards" / "build.py"), "--out", str(tmp_path)],
                   check=True, capture_output=True, timeout=60)
    for name in DASHBOARDS:
        assert (tmp_path / name).read_text() == (ROOT / "dashboards" / name).read_text(), (
            f"dashboards/{name} is stale: run `python dashboards/build.py`")
