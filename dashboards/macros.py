"""What Grafana and its data source plugin do to a panel's SQL before the database runs it, so the
dashboards' queries run outside Grafana: in tests/test_dashboards.py, or by hand. `expand` models
the DuckDB plugin, `expand_clickhouse` ClickHouse's (below):

    python dashboards/macros.py dashboards/duckdb/sql/fleet/errors.sql \\
        --from 2026-11-30T10:00:00Z --to 2026-11-30T11:00:00Z --interval-ms 60000 \\
        | duckdb -readonly tracejoin.duckdb.snapshot.duckdb

Two steps, in Grafana's order (motherduck-duckdb-datasource 0.4.5 on @grafana/plugin-ui and
grafana/sqlds v3, whose macros are grafana-plugin-sdk-go's sqlutil.DefaultMacros):

1. In the browser, the plugin's query model replaces template variables -- `$name`, `${name}`,
   `${name:format}` -- formatting each with `sqlstring` (quoted, quotes doubled) unless the
   reference names a format, and the global `$__interval_ms` (a number, so it arrives quoted too:
   `'60000'`). plugin-ui then turns every `''` in the query into `'`, so a query must never
   contain an empty string literal, and an empty variable formatted as `sqlstring` breaks it.
2. The backend expands the macros: `$__timeFilter(col)` becomes
   `col >= '<from>' AND col <= '<to>'` (RFC 3339, UTC, whole seconds, no parentheses added).

ClickHouse's plugin (grafana-clickhouse-datasource 4.x, its `applyTemplateVariables` and the macros
of pkg/macros/macros.go) does less: Grafana replaces the variables, a reference without a format
taking a single value as typed and several as `'a','b'`, and `sqlstring` doubling quotes; no quote
pairs are merged; then the backend expands `$__timeFilter(col)` to `col >= toDateTime(<from, Unix
seconds>) AND col <= toDateTime(<to>)`, `$__timeInterval(col)` to `toStartOfInterval(toDateTime(col),
INTERVAL <s> second)` and `$__interval_s` to <s>, Grafana's interval in whole seconds (at least 1).
A variable's query takes the same path as a panel's.

A DuckDB variable's own query (the lookup's `request`) takes another path (plugin-ui's
metricFindQuery, `variable_query=True`): a reference without a format gets a single value as
typed, several quoted, and no quote pairs are merged. Only what the dashboards use is modelled:
anything else left in the query (another macro, a variable nobody set) is an error here, where
Grafana would pass it on to DuckDB.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Mapping, Union

Value = Union[str, list[str]]


@dataclass(frozen=True)
class Window:
    """The dashboard's time range and the interval Grafana picked for it."""

    start: datetime
    end: datetime
    interval_ms: int


class ExpansionError(ValueError):
    """A query uses something Grafana would not expand as the dashboards expect."""


def _sqlstring(value: Value) -> str:
    def quote(v: str) -> str:
        return "'" + v.replace("'", "''").replace('"', '\\"') + "'"

    return ",".join(map(quote, value)) if isinstance(value, list) else quote(value)


def _as_typed(value: Value) -> str:
    # plugin-ui's interpolateVariable, the default format of a variable's query.
    return _sqlstring(value) if isinstance(value, list) else value


def _csv(value: Value) -> str:
    return ",".join(value) if isinstance(value, list) else value


_FORMATS: dict[str, Callable[[Value], str]] = {
    "sqlstring": _sqlstring,
    "csv": _csv,
}
_VARIABLE = re.compile(r"\$\{(\w+)(?::(\w+))?\}|\$(\w+)")


def expand(sql: str, window: Window, variables: Mapping[str, Value] | None = None, *,
           variable_query: bool = False) -> str:
    """The query DuckDB receives from Grafana for this window and these variable values: a panel's,
    or with `variable_query` a template variable's."""
    values = {**(variables or {}), "__interval_ms": str(window.interval_ms)}
    default = _as_typed if variable_query else _sqlstring

    def variable(m: re.Match) -> str:
        name, fmt = (m[1], m[2]) if m[1] else (m[3], None)
        if name not in values:
            return m[0]  # Grafana leaves what is not a variable (the backend's macros) alone
        if fmt and fmt not in _FORMATS:
            raise ExpansionError(f"variable format {fmt!r} in {m[0]} is not modelled")
        return (_FORMATS[fmt] if fmt else default)(values[name])

    sql = _VARIABLE.sub(variable, sql)
    if not variable_query:
        sql = sql.replace("''", "'")
    sql = _expand_time_filters(sql, window)
    leftover = _VARIABLE.search(sql)
    if leftover:
        raise ExpansionError(f"{leftover[0]} is neither a macro the dashboards use nor a variable given")
    return sql


def expand_clickhouse(sql: str, window: Window, variables: Mapping[str, Value] | None = None) -> str:
    """The query ClickHouse receives from Grafana for this window and these variable values."""
    values = dict(variables or {})
    formats = {"sqlstring": _grafana_sqlstring, "csv": _csv}

    def variable(m: re.Match) -> str:
        name, fmt = (m[1], m[2]) if m[1] else (m[3], None)
        if name not in values:
            return m[0]
        if fmt and fmt not in formats:
            raise ExpansionError(f"variable format {fmt!r} in {m[0]} is not modelled")
        value = values[name]
        if fmt:
            return formats[fmt](value)
        return "'" + "','".join(value) + "'" if isinstance(value, list) else value

    sql = _VARIABLE.sub(variable, sql)
    seconds = max(window.interval_ms // 1000, 1)
    start, end = (f"toDateTime({int(t.timestamp())})" for t in (window.start, window.end))
    sql = _expand_macro(sql, "timeFilter", lambda column: f"{column} >= {start} AND {column} <= {end}")
    sql = _expand_macro(sql, "timeInterval",
                        lambda column: f"toStartOfInterval(toDateTime({column}), INTERVAL {seconds} second)")
    sql = re.sub(r"\$__interval_s\b", str(seconds), sql)
    leftover = _VARIABLE.search(sql)
    if leftover:
        raise ExpansionError(f"{leftover[0]} is neither a macro the dashboards use nor a variable given")
    return sql


def _grafana_sqlstring(value: Value) -> str:
    """Grafana's own `sqlstring` format: each value quoted, its quotes doubled."""
    quote = lambda v: "'" + v.replace("'", "''") + "'"
    return ",".join(map(quote, value)) if isinstance(value, list) else quote(value)


def _expand_macro(sql: str, name: str, expansion: Callable[[str], str]) -> str:
    """Each `$__name(column)` replaced by its expansion."""
    pattern = re.compile(rf"\$__{name}\b")
    while m := pattern.search(sql):
        args, length = _arguments(sql, m.end())
        if len(args) != 1:
            raise ExpansionError(f"$__{name} takes one argument, got {len(args)}")
        sql = sql[:m.start()] + expansion(args[0]) + sql[m.end() + length:]
    return sql


def _expand_time_filters(sql: str, window: Window) -> str:
    start, end = (_rfc3339(t) for t in (window.start, window.end))
    return _expand_macro(sql, "timeFilter", lambda column: f"{column} >= '{start}' AND {column} <= '{end}'")


def _arguments(sql: str, at: int) -> tuple[list[str], int]:
    """The comma-separated arguments of the parenthesized list at `at` (parentheses nest), and its
    length, as sqlutil's parseArgs reads them."""
    if not sql.startswith("(", at):
        return [], 0
    depth, args, current = 0, [], ""
    for i, c in enumerate(sql[at:]):
        if c == "(":
            depth += 1
            if depth == 1:
                continue
        elif c == ")":
            depth -= 1
            if depth == 0:
                return args + [current.strip()], i + 1
        elif c == "," and depth == 1:
            args.append(current.strip())
            current = ""
            continue
        current += c
    raise ExpansionError("a macro's argument list is not closed")


def _rfc3339(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _utc(text: str) -> datetime:
    t = datetime.fromisoformat(text.replace("Z", "+00:00"))  # Python 3.10 reads no "Z"
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Print a panel's SQL as Grafana would send it to the database.")
    parser.add_argument("sql", type=Path, help="a .sql file under dashboards/duckdb/sql/ (or dashboards/clickhouse/sql/)")
    parser.add_argument("--clickhouse", action="store_true", help="as ClickHouse's plugin sends it")
    parser.add_argument("--from", dest="start", required=True, type=_utc, help="ISO time, UTC if no zone")
    parser.add_argument("--to", dest="end", required=True, type=_utc, help="ISO time, UTC if no zone")
    parser.add_argument("--interval-ms", type=int, default=60_000, help="Grafana's $__interval_ms (default 60000)")
    parser.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                        help="a template variable; repeat a name for several values (the `request` variable)")
    parser.add_argument("--variable-query", action="store_true",
                        help="the query is a template variable's (sql/lookup/request_variable.sql)")
    args = parser.parse_args(argv)
    variables: dict[str, list[str]] = {}
    for item in args.var:
        name, _, value = item.partition("=")
        variables.setdefault(name, []).append(value)
    window = Window(args.start, args.end, args.interval_ms)
    single = {k: v[0] if len(v) == 1 else v for k, v in variables.items()}
    try:
        sql = args.sql.read_text()
        print(expand_clickhouse(sql, window, single) if args.clickhouse
              else expand(sql, window, single, variable_query=args.variable_query))
    except ExpansionError as e:
        sys.exit(f"macros.py: {e}")


if __name__ == "__main__":
    main()
