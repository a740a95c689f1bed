"""The Grafana dashboards, as code: `python dashboards/build.py` writes fleet.json and
request-lookup.json into duckdb/, for Grafana's DuckDB data source, and into clickhouse/, for its
ClickHouse data source (`--out DIR`: into DIR/duckdb and DIR/clickhouse). Commit what it writes; a
test checks the committed JSON is what this script makes.

Plain dicts in Grafana's dashboard JSON model (schemaVersion 39, Grafana 10.4 and later). The two
flavors lay out the same panels; each panel's SQL lives in a file of its own under the flavor's
sql/, in DuckDB's dialect (the plugin `motherduck-duckdb-datasource`, reading the snapshot
`trace-join snapshot` writes) or ClickHouse's (`grafana-clickhouse-datasource`, reading the tables
`trace-join snapshot --store clickhouse://…` publishes), embedded as the target's `rawSql`; the
comment that opens the file becomes the panel's description. docs/grafana.md says what each panel
shows.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Sequence

HERE = Path(__file__).resolve().parent
# Fields of the timeline that only the Traces panel shows (Grafana's trace data frame).
TRACE_FIELDS = ("traceID", "spanID", "parentSpanID", "operationName", "serviceName", "startTime", "duration")

Json = dict[str, Any]
Format = Literal["table", "time_series"]


@dataclass(frozen=True)
class Flavor:
    """The dashboards for one data source plugin: where its queries are and how its targets look."""

    plugin: str
    folder: str  # under dashboards/: its JSON, and its queries in sql/
    suffix: str  # of the dashboards' uids

    @property
    def sql(self) -> Path:
        return HERE / self.folder / "sql"

    @property
    def datasource(self) -> Json:
        # Panels name their data source through the `ds` variable, so an imported dashboard finds
        # the data source whatever uid it was given.
        return {"type": self.plugin, "uid": "${ds}"}

    @property
    def fleet_uid(self) -> str:
        return f"tracejoin-fleet{self.suffix}"

    @property
    def lookup_url(self) -> str:
        return f"/d/tracejoin-request{self.suffix}/request-lookup"

    def sql_file(self, name: str) -> str:
        return (self.sql / name).read_text()

    def target(self, name: str, fmt: Format) -> Json:
        """A query in code mode: the DuckDB plugin's SQLQuery model (@grafana/plugin-ui), or
        ClickHouse's CHSqlQuery (its `format`: 0 a time series, 1 a table)."""
        if self.plugin == CLICKHOUSE.plugin:
            return {"refId": "A", "datasource": self.datasource, "editorType": "sql",
                    "queryType": "timeSeries" if fmt == "time_series" else "table",
                    "format": 0 if fmt == "time_series" else 1, "rawSql": self.sql_file(name)}
        return {"refId": "A", "datasource": self.datasource, "editorMode": "code", "format": fmt,
                "rawQuery": True, "rawSql": self.sql_file(name)}


DUCKDB = Flavor("motherduck-duckdb-datasource", "duckdb", "")
CLICKHOUSE = Flavor("grafana-clickhouse-datasource", "clickhouse", "-clickhouse")


def description(sql: str) -> str:
    """The comment that opens a query, as one paragraph."""
    lines = []
    for line in sql.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line.removeprefix("--").strip())
    return " ".join(lines)


def lookup_link(flavor: Flavor, field: str) -> Json:
    """Makes every value of `field` (an id) open the request lookup dashboard on it."""
    return {"matcher": {"id": "byName", "options": field},
            "properties": [{"id": "links", "value": [
                {"title": "Look this request up", "url": f"{flavor.lookup_url}?var-id=${{__value.raw}}"}]}]}


class Layout:
    """Places panels left to right in rows of Grafana's 24 columns, numbering them in order."""

    def __init__(self) -> None:
        self.panels: list[Json] = []
        self.x = self.y = self.row_height = 0
        self.next_id = 1

    def add(self, panel: Json, width: int, height: int, into: list[Json] | None = None) -> Json:
        if self.x + width > 24:
            self.newline()
        panel = {"id": self.next_id, "gridPos": {"h": height, "w": width, "x": self.x, "y": self.y}, **panel}
        self.next_id += 1
        self.x += width
        self.row_height = max(self.row_height, height)
        (self.panels if into is None else into).append(panel)
        return panel

    def newline(self) -> None:
        self.x, self.y, self.row_height = 0, self.y + self.row_height, 0

    def row(self, title: str, collapsed: bool = False) -> list[Json]:
        """A row; returns the list a collapsed row keeps its panels in."""
        if self.x:
            self.newline()
        row = self.add({"type": "row", "title": title, "collapsed": collapsed, "panels": []}, 24, 1)
        self.newline()
        return row["panels"]


def timeseries(flavor: Flavor, sql: str, title: str, unit: str, overrides: Sequence[Json] = (),
               stacked: bool = False, display_name: str | None = None) -> Json:
    defaults: Json = {"unit": unit, "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
                                               "showPoints": "auto", "spanNulls": False,
                                               "stacking": {"mode": "normal" if stacked else "none", "group": "A"}}}
    if display_name:
        defaults["displayName"] = display_name
    return {"type": "timeseries", "title": title, "description": description(flavor.sql_file(sql)),
            "datasource": flavor.datasource, "targets": [flavor.target(sql, "time_series")],
            "fieldConfig": {"defaults": defaults, "overrides": list(overrides)},
            "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "desc"}}}


def table(flavor: Flavor, sql: str, title: str, overrides: Sequence[Json] = (), hidden: tuple[str, ...] = ()) -> Json:
    panel: Json = {"type": "table", "title": title, "description": description(flavor.sql_file(sql)),
                   "datasource": flavor.datasource, "targets": [flavor.target(sql, "table")],
                   "fieldConfig": {"defaults": {}, "overrides": list(overrides)},
                   "options": {"showHeader": True, "cellHeight": "sm", "footer": {"show": False}}}
    if hidden:
        panel["transformations"] = [{"id": "organize", "options": {"excludeByName": {f: True for f in hidden}}}]
    return panel


def dashboard(flavor: Flavor, uid: str, title: str, panels: list[Json], variables: list[Json], link: Json,
              **extra: Any) -> Json:
    return {"uid": uid, "title": title, "tags": ["trace-join"], "timezone": "utc", "editable": True,
            "graphTooltip": 1, "schemaVersion": 39, "version": 1, "refresh": "",
            "time": {"from": "now-6h", "to": "now"}, **extra,
            "templating": {"list": [datasource_variable(flavor), *variables]},
            "annotations": {"list": []}, "links": [link], "panels": panels}


def datasource_variable(flavor: Flavor) -> Json:
    return {"name": "ds", "label": "Store", "type": "datasource", "query": flavor.plugin, "current": {},
            "hide": 0, "refresh": 1, "regex": "", "options": []}


def dashboard_link(title: str, url: str) -> Json:
    return {"title": title, "type": "link", "url": url, "icon": "dashboard", "tooltip": "",
            "asDropdown": False, "includeVars": False, "keepTime": False, "targetBlank": False, "tags": []}


def fleet(flavor: Flavor) -> Json:
    grid = Layout()
    grid.row("Traffic and latency")
    grid.add(timeseries(flavor, "fleet/requests_per_second.sql", "Requests per second by route and status", "reqps",
                        display_name="${__field.labels.route} ${__field.labels.status}"), 12, 8)
    grid.add(timeseries(flavor, "fleet/latency_over_time.sql", "Latency: TTFT, queue, end to end", "ms"), 12, 8)
    grid.add(table(flavor, "fleet/latency_by_worker.sql", "Latency percentiles by role and worker"), 16, 9)
    grid.add(timeseries(flavor, "fleet/kv_transfer.sql", "KV-cache transfer (disaggregated)", "ms"), 8, 9)
    grid.row("Errors and slow requests")
    grid.add(timeseries(flavor, "fleet/errors_over_time.sql", "Errors and client disconnects", "short"), 8, 9)
    grid.add(table(flavor, "fleet/errors.sql", "Errors", [lookup_link(flavor, "id")]), 16, 9)
    grid.add(table(flavor, "fleet/slowest_requests.sql", "Slowest requests", [lookup_link(flavor, "id")]), 24, 9)
    grid.row("Joins")
    replies_on_right = {"matcher": {"id": "byName", "options": "replies"},
                        "properties": [{"id": "unit", "value": "short"},
                                       {"id": "custom.axisPlacement", "value": "right"},
                                       {"id": "custom.stacking", "value": {"mode": "none", "group": "A"}}]}
    grid.add(timeseries(flavor, "fleet/coverage_over_time.sql", "Join coverage: replies joined to their workers",
                        "percentunit", [replies_on_right], stacked=True), 12, 8)
    grid.add(timeseries(flavor, "fleet/collisions_orphans_over_time.sql", "Collisions and orphans", "short"), 12, 8)
    grid.add(table(flavor, "fleet/orphans_by_worker.sql", "Orphans by source and worker"), 24, 8)
    return dashboard(flavor, flavor.fleet_uid, "trace-join: fleet", grid.panels, [],
                     dashboard_link("Request lookup", flavor.lookup_url))


def request_lookup(flavor: Flavor) -> Json:
    id_variable = {"name": "id", "label": "Any id", "type": "textbox", "query": "",
                   "current": {"text": "", "value": ""}, "hide": 0, "options": [],
                   "description": "A reply id, x-request-id, internal, disaggregated, trace or engine request id"}
    variable_sql = flavor.sql_file("lookup/request_variable.sql")
    request_variable = {"name": "request", "label": "Request", "type": "query", "datasource": flavor.datasource,
                        "query": variable_sql, "definition": variable_sql, "refresh": 1, "sort": 0,
                        "multi": True, "includeAll": True,
                        "current": {"text": ["All"], "value": ["$__all"]}, "hide": 0, "regex": "", "options": []}
    grid = Layout()
    grid.add(table(flavor, "lookup/requests.sql", "Requests this id names"), 24, 6)
    timeline = grid.add(table(flavor, "lookup/timeline.sql", "Timeline", hidden=TRACE_FIELDS), 24, 16)
    trace_row = grid.row("Trace view (unverified: the data source may not hand Grafana a trace frame)",
                         collapsed=True)
    dashboard_source = {"type": "datasource", "uid": "-- Dashboard --"}
    grid.add({"type": "traces", "title": "Trace", "datasource": dashboard_source,
              "description": "The timeline's rows as spans. Pick one request in the Request variable first.",
              "targets": [{"refId": "A", "datasource": dashboard_source, "panelId": timeline["id"]}]},
             24, 14, into=trace_row)
    return dashboard(flavor, f"tracejoin-request{flavor.suffix}", "trace-join: request lookup", grid.panels,
                     [id_variable, request_variable],
                     dashboard_link("Fleet", f"/d/{flavor.fleet_uid}/fleet"),
                     # Lookups ignore the time range: an id names its requests whenever they ran.
                     timepicker={"hidden": True})


DASHBOARDS = {f"{flavor.folder}/{name}.json": (build, flavor)
              for flavor in (DUCKDB, CLICKHOUSE) for name, build in (("fleet", fleet), ("request-lookup", request_lookup))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write the JSON to (default: dashboards/)")
    out = parser.parse_args().out
    for name, (build, flavor) in DASHBOARDS.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(json.dumps(build(flavor), indent=2, ensure_ascii=False) + "\n")
        print(out / name)


if __name__ == "__main__":
    main()
