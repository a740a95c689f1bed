"""What the commands print: JSON for scripts, rich tables and timelines for people.

rich is imported inside the functions that draw, so `lookup --json` never pays for it. Whatever
reaches a terminal for people goes through `visible` and is drawn by `_console`: log lines, span
attributes, quarantined excerpts and file names come from whoever wrote them, and must not drive
the terminal of the person reading.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import shutil
import sys
from pathlib import Path

import orjson


PROGRESS_MIN_BYTES = 32 << 20  # below this a bar only flickers
SUMMARY_SHOWN = 20  # the requests a lookup lists in its summary table, of many that share a label


def print_json(obj) -> None:
    sys.stdout.buffer.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n")
    sys.stdout.flush()


def visible(text: str) -> str:
    """`text` safe to draw on a terminal: nothing in it may move the cursor, clear the screen,
    retitle the terminal, make a link, or hide or reorder what is shown. Every character Python's
    repr escapes is written out as repr writes it (`\\x1b`, `\\r`, `\\n`, `\\u202e`): C0 and C1
    controls (ESC, so ANSI CSI and OSC sequences; CR, BEL, backspace, newline, tab), DEL, bidi
    overrides and isolates, zero-width and other invisible format characters, line and paragraph
    separators, spaces other than ` `, lone surrogates. A backslash stays as it is, so paths and
    messages read as written. `--json` is data for scripts and keeps the text exactly as stored."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def command(*words) -> str:
    """A trace-join command line, each word quoted for a shell, that runs as pasted where the user
    stands: `make demo` runs `.venv/bin/trace-join`, which a new shell's PATH does not hold."""
    return " ".join([_program(), *(shlex.quote(str(word)) for word in words)])


@functools.cache
def _program() -> str:
    """`trace-join` when that is the trace-join the user's PATH finds, else the path of this one
    (relative to the current folder where it lies within it)."""
    running = Path(sys.argv[0])
    if running.name != "trace-join":  # `python -m tracejoin.cli`: the command installed beside this Python
        running = Path(sys.executable).parent / "trace-join"
    found = shutil.which("trace-join")
    if not running.exists() or (found and Path(found).resolve() == running.resolve()):
        return "trace-join"
    here = running.absolute()
    return shlex.quote(os.path.relpath(here) if here.is_relative_to(Path.cwd()) else str(here))


def _console(*, stderr: bool = False):
    """Where text for people is drawn. rich would read `[...]` in data as markup (styles, links)
    and `:name:` as an emoji; this console reads neither. Piped output keeps whole lines rather
    than wrapping at 80 columns."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, markup=False, emoji=False, highlight=False,
                   width=None if stream.isatty() else 220)


def _add_row(table, *cells: str) -> None:
    table.add_row(*map(visible, cells))


def window_text(result: dict) -> str:
    """The time window an answer was limited to (--since, --until), after a verb: `…started` it."""
    since, until = result["window"]["since"], result["window"]["until"]
    if since and until:
        return f" between {since} and {until}"
    return f" at or after {since}" if since else f" at or before {until}" if until else ""


@contextlib.contextmanager
def byte_progress(files: list[tuple]):
    """A progress bar over the bytes of large inputs (ingest.expand_paths' files) on a terminal; a
    no-op callback otherwise."""
    try:
        total = sum(os.path.getsize(path) for path, _ in files)
    except OSError:  # a file gone since: ingest reports it
        total = 0
    if total < PROGRESS_MIN_BYTES or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    with Progress(
        "[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
        TimeRemainingColumn(), transient=True,
    ) as bar:
        task = bar.add_task("ingesting", total=total)
        yield lambda n: bar.advance(task, n)


def ingest_summary(result, as_json: bool) -> None:
    by_source = {name: {"files": s.files, "records": s.records, "quarantined": s.quarantined}
                 for name, s in sorted(result.by_source.items())}
    total = {k: sum(s[k] for s in by_source.values()) for k in ("files", "records", "quarantined")}
    if as_json:
        print_json({
            "sources": by_source, "total": total, "errors": result.errors, "skipped": result.skipped,
            "quarantine_samples": result.quarantine_samples, "held_back": result.held_back,
            "unread": result.unread, "unread_samples": result.unread_samples,
            "clocks": {source: sorted(hows) for source, hows in sorted(result.clocks.items())},
        })
        return
    from rich.table import Table

    # Requests are not counted here: records join into requests when they are first read (`requests`).
    table = Table("source", "files", "records", "quarantined lines", title="ingested", title_justify="left")
    for name, s in [*by_source.items(), *([("all", total)] if len(by_source) > 1 else [])]:
        _add_row(table, name, *(str(s[k]) for k in ("files", "records", "quarantined")))
    _console().print(table)
    err = _console(stderr=True)
    lines = [f"quarantined {sample}" for sample in result.quarantine_samples]
    if result.quarantined > len(result.quarantine_samples):
        lines.append(f"({result.quarantined} quarantined lines in all: `trace-join quarantine` lists them)")
    lines += [f"stored as text {sample}" for sample in result.unread_samples]
    if result.unread > len(result.unread_samples):
        lines.append(f"({result.unread} lines in all stored as text their format could not read: "
                     "their records' attrs.unread says why)")
    lines += [f"skipped {path}: not a format trace-join reads" for path in result.skipped]
    lines += [f"held back an unfinished last line at {where}; it is read once the file grows"
              for where in result.held_back]
    lines += [f"{source}: {how}" for source, hows in sorted(result.clocks.items()) for how in sorted(hows)]
    for line in lines:
        err.print(visible(line), soft_wrap=True)  # one line each, however long the file name


def table_of_rows(rows: list[dict], as_json: bool, title: str) -> None:
    if as_json:
        print_json(rows)
        return
    if not rows:
        print(f"no {title}")
        return
    # aligned columns rather than a rich Table, which shortens a long file name to fit the width
    print(title)
    columns(list(rows[0].keys()), [["" if v is None else str(v) for v in row.values()] for row in rows])


def request_table(rows: list[dict], numbered: bool = False) -> None:
    """`numbered`: each row led by its number, as lookup numbers the requests it shows."""
    if rows:
        columns(*request_lines(rows, numbered))


def worker_role(worker: dict) -> str:
    """A worker's role, and whether only its name suggested it (an OTLP service.name such as
    `dynamo-prefill`), not the process itself."""
    if not worker["role"]:
        return "?"
    return f"{worker['role']} (by its name)" if worker.get("role_from") == "name" else worker["role"]


def request_lines(rows: list[dict], numbered: bool = False) -> tuple[list[str], list[list[str]]]:
    """The header and the cells of a table of requests (`requests --json` rows), as text."""
    lines = []
    for n, r in enumerate(rows, 1):
        status = str(r["http_status"] or ("error" if r["error"] else ""))
        if r["disconnected"]:
            status += " (client left)"
        ids = [r["reply_id"]] if r["reply_id"] else (r["internal_ids"] or r["disagg_request_ids"] or r["x_request_ids"])
        lines.append([*([str(n)] if numbered else []), (r["start"] or "")[:23], ms(r["duration_ms"]),
                      ms(r["ttft_ms"]), status, r["route"] or r["endpoint"] or "", r["entry_worker"] or "",
                      str(len(r["workers"])), ids[0] if ids else str(r["request_id"])])
    return [*(["#"] if numbered else []), "start (UTC)", "ms", "ttft ms", "status", "route", "entry", "workers",
            "id"], lines


def columns(header: list[str], lines: list[list[str]], styles: list[str | None] | None = None) -> None:
    """Rows of text cells, each cell written out by visible(), in aligned columns under the header,
    indented as lookup's lines of ids are; on a terminal, a row with a style (`styles`, one a row:
    "red" for a failure) is drawn in it.
    Aligned here rather than by a rich Table, which lays out every cell in Python: 8 s for the
    10,000 requests of a lookup by a label a whole agent session sends."""
    from rich.cells import cell_len

    def width(text: str) -> int:  # the columns a text takes on a terminal
        return len(text) if text.isascii() else cell_len(text)

    lines = [header, *([visible(cell) for cell in line] for line in lines)]
    widths = [max(width(line[i]) for line in lines) for i in range(len(header))]
    texts = ["  " + "  ".join(cell + " " * (w - width(cell)) for cell, w in zip(line, widths)).rstrip()
             for line in lines]
    styles = [None, *(styles or [None] * (len(lines) - 1))]
    if not sys.stdout.isatty() or not any(styles):
        sys.stdout.write("\n".join(texts) + "\n")
        sys.stdout.flush()
        return
    from rich.text import Text

    console = _console()
    for text, style in zip(texts, styles):
        console.print(Text(text, style=style or ""), soft_wrap=True)


def coverage_text(result: dict) -> None:
    from rich.table import Table

    console = _console()
    joined, replies = result["joined"], result["replies"]

    def share(n: int) -> str:
        return f"{n} ({100 * n / replies:.0f}%)" if replies else str(n)

    if window := window_text(result):
        console.print(f"requests that started{window}")
    console.print(f"replies seen: {replies}")
    console.print(f"  joined to both workers (ctx/prefill, gen/decode): {share(joined['both_workers'])}")
    console.print(f"  joined to one of the two:                         {share(joined['one_worker'])}")
    console.print(f"  joined to their aggregated worker:                {share(joined['aggregated_worker'])}")
    console.print(f"  joined to no worker's records:                    {share(joined['no_worker'])}")
    console.print(f"  carrying a collided id:                           {share(result['collided_replies'])}")
    orphans = result["orphans"]
    console.print(f"orphans: {orphans['records']} engine-side records in {orphans['requests']} groups no reply reaches")
    # each record in one part: the parts sum to the records
    parts = ("in_replies", "orphan_records", "unanswered_records", "no_request_records")
    headers = ("= in replies", "+ in orphans", "+ in requests with no reply, no worker", "+ about no request")
    sources = Table("source", "records", *headers, box=None, padding=(0, 2))
    for name, s in result["by_source"].items():
        _add_row(sources, name, str(s["records"]), *(str(s[p]) for p in parts))
    console.print(sources)
    workers = Table("worker", "role", "replies", "records", *headers, box=None, padding=(0, 2))
    for w in result["by_worker"]:
        _add_row(workers, w["worker"], w["role"] or "", str(w["replies"]), str(w["records"]), *(str(w[p]) for p in parts))
    console.print(workers)


def next_commands(lines: list[tuple[tuple | str, str]], then: str) -> None:
    """The demos' closing advice: each command (the words after `trace-join`, or another command's
    line) with why, aligned, each one to paste as it is; then how to go on with the user's own
    deployment, in words (a placeholder would not run)."""
    commands = [(words if isinstance(words, str) else command(*words), why) for words, why in lines]
    width = max(len(line) for line, _ in commands)
    print("\nNext, with this run's ids:")
    for line, why in commands:
        print(f"  {line:<{width}}  # {why}")
    print(f"\n{then}")


def grafana_hint(published: dict) -> str:
    """What `trace-join snapshot` wrote, and what to do with it, for people."""
    if "snapshot" in published:
        return (f"wrote {visible(str(Path(published['snapshot']).resolve()))}\nGrafana: point a DuckDB data source "
                "(motherduck-duckdb-datasource) at that file, then import dashboards/duckdb/fleet.json and "
                "dashboards/duckdb/request-lookup.json (docs/grafana.md)")
    window = published["window"]
    span = " to ".join(t for t in (window["since"], window["until"]) if t is not None)
    return (f"published {published['requests']} groups of records that started {'from ' + span if span else 'at any time'}"
            f" ({published['records']} records): {published['replies']} replies, {published['without_a_reply']} "
            f"requests no reply reaches, {published['about_no_request']} about no request; "
            f"{published['replaced']} published before are replaced\n"
            "Grafana: point a ClickHouse data source (grafana-clickhouse-datasource) at the database, then import "
            "dashboards/clickhouse/fleet.json and dashboards/clickhouse/request-lookup.json (docs/fleet.md)")


def ms(value) -> str:
    return "" if value is None else f"{value:.1f}"


def lookup_text(result: dict, full: bool = False) -> None:
    """`full`: after each request's timeline, every record with all it holds and where it was read."""
    from rich.text import Text

    console = _console()
    for warning in result["warnings"]:
        console.print(Text(visible(f"warning: {warning}"), style="yellow"))
    requests, matched = result["requests"], result["matched"]
    console.print(visible(
        f"{result['query']} ({result['id_kind']}) names {matched} request{'s' if matched != 1 else ''}"
        f"{window_text(result)}"
    ))
    if matched > 1:
        summary = result["summary"]
        request_table(summary[:SUMMARY_SHOWN], numbered=True)
        if len(summary) > SUMMARY_SHOWN:
            console.print(f"  and {len(summary) - SUMMARY_SHOWN} more (--json lists every one)")
    if more := more_requests(result):
        console.print(f"{more}:")
    for i, request in enumerate(requests, 1):
        console.print()
        heading, failed = request_heading(request, i, matched)
        console.print(Text(visible(heading), style="bold red" if failed else "bold yellow" if request["first_error"]
                           else "bold"))
        if more := more_records(request):
            console.print(f"  {more}")
        if longest := longest_phase(request):
            console.print(visible(f"  {longest}"))
        ids = request["ids"]
        for kind, values in ids.items():
            if kind == "engine_request_id":
                values = [f"{e['id']} on {e['worker']}" for e in values]
            if values:
                console.print(visible(f"  {kind:<18} {', '.join(values)}"))
        start = timeline_start(request["records"])
        workers = []
        for w in request["workers"]:
            own = [placed(r) for r in request["records"] if r["worker"] == w["worker"] and r["time"]]
            workers.append([w["worker"] or "?", worker_role(w), str(w["records"]),
                            _offset(min(own), start) if own else "", _offset(max(own), start) if own else ""])
        columns(["worker", "role", "records", "first", "last"], workers)
        _waterfall(request)
        # Records that only a steady clock timed, with nothing in the request to put that clock on
        # UTC, are shown on their own clock: "steady" for a time, +ms from the first of them.
        steady_start = min((r["steady_s"] for r in request["records"] if r.get("steady_s") is not None), default=None)
        timeline, styles, previous, previous_steady = [], [], None, None
        for r in request["records"]:
            t = seconds(r["time"]) if r["time"] else None
            steady = r.get("steady_s")
            if r.get("within"):  # known to its second: where in it, as far as the request tells
                cells = [clock_text(r["time"]), within_text(r, start), ""]
            elif t is not None:
                cells = [clock_text(r["time"]), _offset(t, start), "" if previous is None else f"{(t - previous) * 1000:.1f}"]
                previous = t
            elif steady is not None:
                cells = ["steady", _offset(steady, steady_start),
                         "" if previous_steady is None else f"{(steady - previous_steady) * 1000:.1f}"]
                previous_steady = steady
            else:
                cells = ["", "", ""]
            timeline.append([*cells, f"{r['worker'] or '?'} ({r['role'] or '?'})", r["kind"],
                             ("[ambiguous] " if r.get("ambiguous") else "") + r["summary"]])
            styles.append("red" if r["failed"] else "yellow" if (r["level"] or "").upper() in ("WARN", "WARNING") else None)
        columns(["time (UTC)", "+ms", "Δms", "worker", "kind", "summary"], timeline, styles)
        if full:
            for r in request["records"]:
                _full_record(console, r, start)


def timeline_start(records: list[dict]) -> float | None:
    """Where a request's timeline starts (its +0.0): the first moment its records place it at. A
    line of a log stamped to the second (TensorRT-LLM's, vLLM's) counts from the first moment the
    request's finer records leave for it (`within`), not from the start of its second."""
    return min((placed(r) for r in records if r["time"]), default=None)


def placed(record: dict) -> float:
    """Where a timed record (lookup --json's) goes on the timeline, in seconds: at its time, or a
    line known to its second at the first moment it can have been written (`within`)."""
    return seconds(record["within"]["from"] if record.get("within") else record["time"])


def clock_text(iso: str) -> str:
    """The time of day of an ISO time, to the digits it has (`07:01:19` for a line's second)."""
    return iso[11:].rstrip("Z")


def within_text(record: dict, start: float | None) -> str:
    """Where on the timeline a line known to its second can have been written: `+ms…+ms`."""
    return f"{_offset(seconds(record['within']['from']), start)}…{_offset(seconds(record['within']['until']), start)}"


def more_requests(result: dict) -> str | None:
    """When a lookup shows fewer requests than it found: how many it shows, and how to see others."""
    shown, matched = len(result["requests"]), result["matched"]
    if shown >= matched:
        return None
    if result["requests_cut"]:
        return (f"the first {shown} of {matched} with their records, the most one answer shows (--since and "
                "--until for fewer, or look one up by an id of its own from the summary)")
    return f"the first {shown} with their records (--limit N for more, --limit 0 for up to 100)"


def more_records(request: dict) -> str | None:
    """When a request shown has more records than the lookup shows: how many, and how to see more."""
    if not request["records_cut"]:
        return None
    return (f"its first {len(request['records'])} records are shown of {request['records_total']} "
            "(--records N for more)")


def request_heading(request: dict, i: int, matched: int) -> tuple[str, bool]:
    """`request 1 of 3 · HTTP 500 · failed: <its first error> (<worker>, <role>, <time>)`, and
    whether the request failed for its client (an HTTP status of 500 and up, or a failure and no
    status); a failure the request got past is said as such."""
    outcome, error = request["outcome"], request["first_error"]
    status = outcome["http_status"]
    parts = [f"request {i} of {matched}", f"HTTP {status}" if status else "no HTTP status recorded"]
    if outcome["client_left"]:
        parts.append("the client left first")
    failed = error is not None and (status is None or status >= 500)
    if error:
        where = ", ".join(filter(None, (error["worker"] or "?", error["role"] or "?", clock_text(error["time"] or ""))))
        parts.append(f"{'failed' if failed else 'answered after a failure'}: {error['text']} ({where})")
    return " · ".join(parts), failed


WATERFALL_COLUMNS = 48
def longest_phase(request: dict) -> str | None:
    """Where most of a request's time went, in a line: its longest phase as its workers measured it
    (below the entry's `end to end`; and within a phase, the one of its own that took most of it:
    the queue that held most of a time to first token) and its share of the whole request (`end to
    end`, else all its phases together)."""
    phases = request["phases"]
    # a tier in front of the engines measures its time to first token from the client's side: the
    # whole wait, not a part of it
    parts = [p for p in phases if p["phase"] != "end to end"
             and not (p["phase"] == "to first token" and p["role"] in ("router", "frontend", "proxy"))]
    if not parts:
        return None
    whole = max((p["duration_ms"] for p in phases if p["phase"] == "end to end"), default=None)
    if whole is None:
        whole = 1000 * (max(seconds(p["start"]) + p["duration_ms"] / 1000 for p in phases)
                        - min(seconds(p["start"]) for p in phases))

    def within(inner: dict, outer: dict) -> bool:
        begin = seconds(inner["start"]) - seconds(outer["start"])
        return (inner is not outer and inner["worker"] == outer["worker"] and begin >= 0
                and begin * 1000 + inner["duration_ms"] <= outer["duration_ms"] + 1e-6)

    longest = max(parts, key=lambda p: p["duration_ms"])
    while (inner := max((p for p in parts if within(p, longest)), key=lambda p: p["duration_ms"], default=None)) \
            and inner["duration_ms"] >= longest["duration_ms"] / 2:
        longest = inner
    share = f" ({100 * longest['duration_ms'] / whole:.0f}%)" if whole > 0 else ""
    return (f"the longest part: {longest['phase']} on {longest['worker'] or '?'} ({longest['role'] or '?'}), "
            f"{longest['duration_ms']:.1f} of {whole:.1f} ms{share}")


def _waterfall(request: dict) -> None:
    """Where the request's time went on one axis: the phases its workers measured, then its spans,
    each under its parent; a failed one is marked so."""
    records = request["records"]
    spans = [r for r in records if r["kind"] == "span" and r["time"] and r["duration_ms"] is not None]
    bars = [(f"{p['worker'] or '?'} ({p['role'] or '?'})", p["phase"], seconds(p["start"]), p["duration_ms"], p["failed"])
            for p in request["phases"]]
    depth = {}
    by_span = {r["span_id"]: r for r in spans}
    for r in spans:
        d, parent = 0, by_span.get(r["parent_span_id"])
        while parent is not None and d < 32:
            d, parent = d + 1, by_span.get(parent["parent_span_id"])
        depth[id(r)] = d
    bars += [(f"{r['worker'] or '?'} ({r['role'] or '?'})", "  " * depth[id(r)] + (r["name"] or "span"),
              seconds(r["time"]), r["duration_ms"], r["failed"]) for r in spans]
    if not bars:
        return
    start = min(b[2] for b in bars)
    total = max(max(b[2] + b[3] / 1000 for b in bars) - start, 1e-6)
    lines = []
    for who, what, t, took_ms, failed in bars:
        first = min(WATERFALL_COLUMNS - 1, int(WATERFALL_COLUMNS * (t - start) / total))
        last = max(first + 1, round(WATERFALL_COLUMNS * (t - start + took_ms / 1000) / total))
        bar = " " * first + ("x" if failed else "█") * (last - first) + " " * (WATERFALL_COLUMNS - last)
        lines.append([who, what, f"|{bar}|", f"+{(t - start) * 1000:.1f}", f"{took_ms:.1f} ms",
                      "failed" if failed else ""])
    print(f"  where the time went: {total * 1000:.1f} ms (phases its workers measured, then its spans)")
    columns(["worker", "phase or span", "", "+ms", "took", ""], lines, ["red" if b[4] else None for b in bars])


# What a record holds besides its attributes, in the order `--full` prints it.
_RECORD_FIELDS = ("level", "status", "duration_ms", "trace_id", "span_id", "parent_span_id", "clock", "inferred",
                  "exception", "lines", "text")


def _full_record(console, record: dict, start: float | None) -> None:
    from rich.text import Text

    t = seconds(record["time"]) if record["time"] else None
    if record.get("within") and start is not None:
        when = f"+{within_text(record, start)} ms (logged to the second)"
    else:
        when = f"+{_offset(t, start)} ms" if t is not None and start is not None else record["time"] or "no time"
    console.print()
    console.print(Text(visible(f"{when}  {record['worker'] or '?'} ({record['role'] or '?'})  {record['kind']}  "
                               f"{record['name'] or ''}"), style="bold"))
    origin = record["origin"]
    console.print(visible(f"    read from   {origin_text(origin)}"
                          + (f", record {origin['seq'] + 1} of its {'line' if origin['kind'] == 'file' else 'body'}"
                             if origin["seq"] else "")
                          + f" ({record['source']})"))
    for also in record.get("also", ()):
        console.print(visible(f"    also from   {origin_text(also['origin'])} ({also['source']})"))
    fields = record_fields(record)
    width = max((len(k) for k, _ in fields), default=0)
    for key, text in fields:  # a text of many lines (a traceback) under its first, aligned
        console.print("\n".join(visible(f"    {key if n == 0 else '':<{width}}  {line}")
                                for n, line in enumerate(text.split("\n"))), soft_wrap=True)


def origin_text(origin: dict) -> str:
    """Where a record was read, for people: the file and byte its line starts at, or the receiver
    and the number of the body it came in."""
    return f"{origin['path']}, {'byte' if origin['kind'] == 'file' else 'body'} {origin['offset']}"


def record_fields(record: dict) -> list[tuple[str, str]]:
    """What a lookup record holds besides its time, worker and place, its attributes last, each
    value as text (JSON where it is not text)."""
    shown = {k: record.get(k) for k in _RECORD_FIELDS if record.get(k) is not None}
    # an attribute the record states as its own field (middleware's `status`, `duration_ms`) once
    attrs = [(k, v) for k, v in (record["attrs"] or {}).items() if v is not None and not _same(shown.get(k), v)]
    return [(key, value if isinstance(value, str) else orjson.dumps(value).decode())
            for key, value in [*shown.items(), *attrs]]


def _same(field, attr) -> bool:
    """Whether an attribute says what the record's field of its name says (`200` and "200")."""
    return field is not None and (field == attr or str(field) == str(attr))


def seconds(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _offset(t: float, start: float | None) -> str:
    return "" if start is None else f"{(t - start) * 1000:.1f}"
