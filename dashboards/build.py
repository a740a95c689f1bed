"""The Grafana dashboards, as code: `python dashboards/build.py` writes fleet.json and
request-lookup.json next to this file (`--out DIR` elsewhere). Commit what it writes; a test
checks the committed JSON is what this script makes.

Plain dicts in Grafana's dashboard JSON model (schemaVersion 39, Grafana 10.4 and later), for the
DuckDB data source plugin `motherduck-duckdb-datasource`. Every panel's SQL lives in its own file
under sql/, embedded here as the target's `rawSql`; the comment that opens the file becomes the
panel's description. docs/grafana.md says what each panel shows.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Literal, Sequence, TypedDict

HERE = Path(__file__).resolve().parent
SQL = HERE / "sql"

PLUGIN = "motherduck-duckdb-datasource"
FLEET_UID = "tracejoin-fleet"
LOOKUP_UID = "tracejoin-request"
LOOKUP_URL = f"/d/{LOOKUP_UID}/request-lookup"
# Panels name their data source through the `ds` variable, so an imported dashboard finds the
# DuckDB data source whatever uid it was given.
DATASOURCE = {"type": PLUGIN, "uid": "${ds}"}
# Fields of the timeline that only the Traces panel shows (Grafana's trace data frame).
TRACE_FIELDS = ("traceID", "spanID", "parentSpanID", "operationName", "serviceName", "startTime", "duration")

Json = dict[str, Any]


class SqlTarget(TypedDict):
    """A query of the plugin (its SQLQuery model, from @grafana/plugin-ui), in code mode."""

    refId: str
    datasource: Json
    editorMode: Literal["code"]
    format: Literal["table", "time_series"]
    rawQuery: bool
    rawSql: str


def sql_file(name: str) -> str:
    return (SQL / name).read_text()


def description(sql: str) -> str:
    """The comment that opens a query, as one paragraph."""
    lines = []
    for line in sql.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line.removeprefix("--").strip())
    return " ".join(lines)


def target(name: str, fmt: Literal["table", "time_series"]) -> SqlTarget:
    return {"refId": "A", "datasource": DATASOURCE, "editorMode": "code", "format": fmt,
            "rawQuery": True, "rawSql": sql_file(name)}


def lookup_link(field: str) -> Json:
    """Makes every value of `field` (an id) open the request lookup dashboard on it."""
    return {"matcher": {"id": "byName", "options": field},
            "properties": [{"id": "links", "value": [
                {"title": "Look this request up", "url": f"{LOOKUP_URL}?var-id=${{__value.raw}}"}]}]}


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


def timeseries(sql: str, title: str, unit: str, overrides: Sequence[Json] = (), stacked: bool = False,
               display_name: str | None = None) -> Json:
    defaults: Json = {"unit": unit, "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
                                               "showPoints": "auto", "spanNulls": False,
                                               "stacking": {"mode": "normal" if stacked else "none", "group": "A"}}}
    if display_name:
        defaults["displayName"] = display_name
    return {"type": "timeseries", "title": title, "description": description(sql_file(sql)),
            "datasource": DATASOURCE, "targets": [target(sql, "time_series")],
            "fieldConfig": {"defaults": defaults, "overrides": list(overrides)},
            "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "desc"}}}


def table(sql: str, title: str, overrides: Sequence[Json] = (), hidden: tuple[str, ...] = ()) -> Json:
    panel: Json = {"type": "table", "title": title, "description": description(sql_file(sql)),
                   "datasource": DATASOURCE, "targets": [target(sql, "table")],
                   "fieldConfig": {"defaults": {}, "overrides": list(overrides)},
                   "options": {"showHeader": True, "cellHeight": "sm", "footer": {"show": False}}}
    if hidden:
        panel["transformations"] = [{"id": "organize", "options": {"excludeByName": {f: True for f in hidden}}}]
    return panel


def dashboard(uid: str, title: str, panels: list[Json], variables: list[Json], link: Json, **extra: Any) -> Json:
    return {"uid": uid, "title": title, "tags": ["trace-join"], "timezone": "utc", "editable": True,
            "graphTooltip": 1, "schemaVersion": 39, "version": 1, "refresh": "",
            "time": {"from": "now-6h", "to": "now"}, **extra,
            "templating": {"list": [datasource_variable(), *variables]},
            "annotations": {"list": []}, "links": [link], "panels": panels}


def datasource_variable() -> Json:
    return {"name": "ds", "label": "Store", "type": "datasource", "query": PLUGIN, "current": {},
            "hide": 0, "refresh": 1, "regex": "", "options": []}


def dashboard_link(title: str, url: str) -> Json:
    return {"title": title, "type": "link", "url": url, "icon": "dashboard", "tooltip": "",
            "asDropdown": False, "includeVars": False, "keepTime": False, "targetBlank": False, "tags": []}


def fleet() -> Json:
    grid = Layout()
    grid.row("Traffic and latency")
    grid.add(timeseries("fleet/requests_per_second.sql", "Requests per second by route and status", "reqps",
                        display_name="${__field.labels.route} ${__field.labels.status}"), 12, 8)
    grid.add(timeseries("fleet/latency_over_time.sql", "Latency: TTFT, queue, end to end", "ms"), 12, 8)
    grid.add(table("fleet/latency_by_worker.sql", "Latency percentiles by role and worker"), 16, 9)
    grid.add(timeseries("fleet/kv_transfer.sql", "KV-cache transfer (disaggregated)", "ms"), 8, 9)
    grid.row("Errors and slow requests")
    grid.add(timeseries("fleet/errors_over_time.sql", "Errors and client disconnects", "short"), 8, 9)
    grid.add(table("fleet/errors.sql", "Errors", [lookup_link("id")]), 16, 9)
    grid.add(table("fleet/slowest_requests.sql", "Slowest requests", [lookup_link("id")]), 24, 9)
    grid.row("Joins")
    replies_on_right = {"matcher": {"id": "byName", "options": "replies"},
                        "properties": [{"id": "unit", "value": "short"},
                                       {"id": "custom.axisPlacement", "value": "right"},
                                       {"id": "custom.stacking", "value": {"mode": "none", "group": "A"}}]}
    grid.add(timeseries("fleet/coverage_over_time.sql", "Join coverage: replies joined to their workers",
                        "percentunit", [replies_on_right], stacked=True), 12, 8)
    grid.add(timeseries("fleet/collisions_orphans_over_time.sql", "Collisions and orphans", "short"), 12, 8)
    grid.add(table("fleet/orphans_by_worker.sql", "Orphans by source and worker"), 24, 8)
    return dashboard(FLEET_UID, "trace-join: fleet", grid.panels, [],
                     dashboard_link("Request lookup", LOOKUP_URL))


def request_lookup() -> Json:
    id_variable = {"name": "id", "label": "Any id", "type": "textbox", "query": "",
                   "current": {"text": "", "value": ""}, "hide": 0, "options": [],
                   "description": "A reply id, x-request-id, internal, disaggregated, trace or engine request id"}
    variable_sql = sql_file("lookup/request_variable.sql")
    request_variable = {"name": "request", "label": "Request", "type": "query", "datasource": DATASOURCE,
                        "query": variable_sql, "definition": variable_sql, "refresh": 1, "sort": 0,
                        "multi": True, "includeAll": True,
                        "current": {"text": ["All"], "value": ["$__all"]}, "hide": 0, "regex": "", "options": []}
    grid = Layout()
    grid.add(table("lookup/requests.sql", "Requests this id names"), 24, 6)
    timeline = grid.add(table("lookup/timeline.sql", "Timeline", hidden=TRACE_FIELDS), 24, 16)
    trace_row = grid.row("Trace view (unverified: the DuckDB plugin may not hand Grafana a trace frame)",
                         collapsed=True)
    dashboard_source = {"type": "datasource", "uid": "-- Dashboard --"}
    grid.add({"type": "traces", "title": "Trace", "datasource": dashboard_source,
              "description": "The timeline's rows as spans. Pick one request in the Request variable first.",
              "targets": [{"refId": "A", "datasource": dashboard_source, "panelId": timeline["id"]}]},
             24, 14, into=trace_row)
    return dashboard(LOOKUP_UID, "trace-join: request lookup", grid.panels, [id_variable, request_variable],
                     dashboard_link("Fleet", f"/d/{FLEET_UID}/fleet"),
                     # Lookups ignore the time range: an id names its requests whenever they ran.
                     timepicker={"hidden": True})


DASHBOARDS = {"fleet.json": fleet, "request-lookup.json": request_lookup}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write the JSON to (default: dashboards/)")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    for name, build in DASHBOARDS.items():
        (out / name).write_text(json.dumps(build(), indent=2, ensure_ascii=False) + "\n")
        print(out / name)


if __name__ == "__main__":
    main()
