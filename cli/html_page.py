"""`lookup ID --html FILE`: the answer as one self-contained page for a ticket.

Everything is in the file: styles inline, no script, no font, image or stylesheet fetched from
anywhere, so it opens the same offline, attached to a ticket or mailed. What it shows is the
`lookup --json` object: the warnings, the summary of every request the id names, and for each
request shown its ids, its workers, the phases its workers measured and its records on one time
axis (a bar for what lasted, a tick for what did not, failures in red) and every record whole, with the
file and byte it was read from. Every text from the records is escaped: a log line cannot add
markup, styles or links to the page.
"""

from __future__ import annotations

from html import escape

from tracejoin.cli.render import (
    clock_text, longest_phase, more_records, more_requests, origin_text, record_fields, request_heading, request_lines,
    seconds, timeline_start, within_text, worker_role,
)
from tracejoin.collector.times import extent

_STYLE = """
body { font: 13px/1.4 system-ui, sans-serif; margin: 24px; color: #1d1d1f; }
h1 { font-size: 18px; } h2 { font-size: 15px; margin-top: 28px; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { text-align: left; padding: 2px 10px 2px 0; vertical-align: top; }
th { color: #555; font-weight: 600; }
code, .mono { font-family: ui-monospace, monospace; font-size: 12px; }
.warning { background: #fff4ce; padding: 6px 10px; border-left: 4px solid #e0a800; margin: 4px 0; }
.failure { background: #b00020; color: #fff; padding: 10px 14px; margin: 8px 0; font-size: 16px; }
.failure .what { font-weight: 700; font-size: 18px; }
.recovered { background: #fff4ce; padding: 10px 14px; border-left: 6px solid #e0a800; margin: 8px 0; font-size: 15px; }
.went { margin: 4px 0 10px 0; font-weight: 600; }
.error, .error td { color: #b00020; }
.lane { position: relative; height: 16px; background: #f3f3f6; margin: 2px 0; min-width: 600px; }
.bar { position: absolute; top: 3px; height: 10px; background: #4a78c2; border-radius: 2px; min-width: 2px; }
.bar.error { background: #d0343f; }
.bar.coarse { background: repeating-linear-gradient(45deg, #b7c7e3 0 4px, #dfe6f3 4px 8px); }
.bar.coarse.error { background: repeating-linear-gradient(45deg, #e6a1a7 0 4px, #f5d6d9 4px 8px); }
.tick { position: absolute; top: 1px; width: 2px; height: 14px; background: #777; }
.tick.error { background: #d0343f; }
details { margin: 2px 0 6px 0; } summary { cursor: pointer; }
.attrs td:first-child { color: #555; }
.attrs td { white-space: pre-wrap; }  /* a traceback keeps its lines */
"""

def page(result: dict) -> str:
    """The page for one `lookup` answer (its JSON object)."""
    query = result["query"]
    parts = [f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
             f"<title>trace-join lookup {escape(query)}</title><style>{_STYLE}</style></head><body>",
             f"<h1>{escape(query)} <span class=mono>({escape(result['id_kind'])})</span> names "
             f"{result['matched']} request{'s' if result['matched'] != 1 else ''}</h1>"]
    parts += [f"<div class=warning>{escape(w)}</div>" for w in result["warnings"]]
    if result["summary"]:
        parts.append(_summary(result["summary"]))
    if more := more_requests(result):
        parts.append(_went(f"{more}."))
    for i, request in enumerate(result["requests"], 1):
        parts.append(_request(request, i, result["matched"]))
    parts.append("</body></html>")
    return "\n".join(parts)


def _table(header: list[str], rows: list[list[str]], classes: list[str] | None = None) -> str:
    """A table of texts, each escaped; `classes` of the rows (an error row is red)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        f"<tr class='{escape(cls)}'>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>"
        for row, cls in zip(rows, classes or [""] * len(rows)))
    return f"<table><tr>{head}</tr>{body}</table>"


def _summary(rows: list[dict]) -> str:
    header, lines = request_lines(rows, numbered=True)
    return "<h2>Every request</h2>" + _table(header, lines, ["error" if r["error"] else "" for r in rows])


def _went(sentence: str) -> str:
    """A sentence of how the request went, begun with a capital."""
    return f"<p class=went>{escape(sentence[0].upper() + sentence[1:])}</p>"


def _request(request: dict, i: int, matched: int) -> str:
    records = request["records"]
    heading, failed = request_heading(request, i, matched)
    title, _, outcome = heading.partition(" · ")
    parts = [f"<h2>{escape(title.capitalize())}</h2>", _outcome(request, failed, outcome)]
    if more := more_records(request):
        parts.append(_went(f"{more}."))
    if longest := longest_phase(request):
        parts.append(_went(longest))
    start = timeline_start(records)
    id_rows = []
    for kind, values in request["ids"].items():
        if kind == "engine_request_id":
            values = [f"{e['id']} on {e['worker']}" for e in values]
        if values:
            id_rows.append([kind, ", ".join(values)])
    parts.append(_table(["id", "value"], id_rows))
    parts.append(_table(["worker", "role", "records"],
                        [[w["worker"] or "?", worker_role(w), str(w["records"])] for w in request["workers"]]))
    parts.append(_waterfall("Where the time went, as the workers measured it", _phase_lanes(request["phases"])))
    parts.append(_waterfall("Every record on one axis", _record_lanes(records)))
    parts.append("<h3>Every record</h3>")
    parts += [_record(r, start) for r in records]
    return "\n".join(parts)


def _outcome(request: dict, failed: bool, outcome: str) -> str:
    """The request's outcome, a failure first and largest: what failed, when (date and time, UTC),
    on which worker; a failure it got past in yellow; else the plain status."""
    error = request["first_error"]
    if error is None:
        return f"<p>{escape(outcome)}</p>"
    status = request["outcome"]["http_status"]
    when = f"{error['time'][:10]} {clock_text(error['time'])} UTC" if error["time"] else "at a time not recorded"
    where = f"{error['worker'] or '?'} ({error['role'] or '?'})"
    answered = f"HTTP {status}" if status else "no HTTP status recorded"
    if failed:
        return (f"<div class=failure><div class=what>Failed: {escape(error['text'])}</div>"
                f"<div>{escape(when)} · on {escape(where)} · {escape(answered)}</div></div>")
    return (f"<div class=recovered><b>Answered after a failure</b> ({escape(answered)}): {escape(error['text'])}"
            f"<div>{escape(when)} · on {escape(where)}</div></div>")


def _waterfall(title: str, lanes: list[tuple[str, float, float, bool, bool]]) -> str:
    """Lanes of (label, start, end in seconds, failed, known only to the second) on one time axis: a
    bar for what lasted, a tick for what did not, a pale bar for the time a line logged to the
    second can have been written in."""
    if not lanes:
        return ""
    start = min(b for _, b, _, _, _ in lanes)
    span = max(max(e for _, _, e, _, _ in lanes) - start, 1e-6)
    rows = []
    for label, begin, until, failed, coarse in lanes:
        cls = (" error" if failed else "") + (" coarse" if coarse else "")
        left = 100 * (begin - start) / span
        if until > begin:
            mark = f"<div class='bar{cls}' style='left:{left:.3f}%;width:{100 * (until - begin) / span:.3f}%'></div>"
        else:
            mark = f"<div class='tick{cls}' style='left:{left:.3f}%'></div>"
        offset = f"+{(begin - start) * 1000:.1f}" + (f"…{(until - start) * 1000:.1f}" if coarse else "")
        rows.append(f"<tr><td class=mono>{offset} ms · {escape(label)}</td>"
                    f"<td style='width:60%'><div class=lane>{mark}</div></td></tr>")
    return f"<h3>{escape(title)}: {span * 1000:.1f} ms</h3><table style='width:100%'>{''.join(rows)}</table>"


def _phase_lanes(phases: list[dict]) -> list[tuple[str, float, float, bool, bool]]:
    return [(f"{p['worker'] or '?'} ({p['role'] or '?'}) · {p['phase']}", seconds(p["start"]),
             seconds(p["start"]) + p["duration_ms"] / 1000, p["failed"], False) for p in phases]


def _record_lanes(records: list[dict]) -> list[tuple[str, float, float, bool, bool]]:
    """A lane a record with a wall-clock time (those without one are listed below only)."""
    lanes = []
    for r in records:
        if r["time"]:
            if r.get("within"):  # logged to the second: the span of time it can have been written in
                begin, until, coarse = seconds(r["within"]["from"]), seconds(r["within"]["until"]), True
            else:
                begin, until = extent(r["kind"], seconds(r["time"]), (r["duration_ms"] or 0) / 1000)
                coarse = False
            lanes.append((f"{r['worker'] or '?'} ({r['role'] or '?'}) · {r['kind']} · {r['name'] or ''}",
                          begin, until, r["failed"], coarse))
    return lanes


def _record(record: dict, start: float | None) -> str:
    rows = [[key, value] for key, value in (
        ("time", record["time"]), ("worker", record["worker"]), ("role", record["role"]), ("source", record["source"]),
        ("read from", origin_text(record["origin"])),
        *((f"also from {also['source']}", origin_text(also["origin"])) for also in record.get("also", ())))
        if value is not None] + [list(field) for field in record_fields(record)]
    cls = " class=error" if record["failed"] else ""
    # as the text's timeline: time, offset, worker, then what it says
    if record.get("within") and start is not None:
        when = f"{clock_text(record['time'])} +{within_text(record, start)} ms"
    elif record["time"] and start is not None:
        when = f"{clock_text(record['time'])} +{(seconds(record['time']) - start) * 1000:.1f} ms"
    else:
        when = "no time"
    who = f"{record['worker'] or '?'} ({record['role'] or '?'})"
    return (f"<details><summary{cls}><span class=mono>{escape(when)} · {escape(who)} · {escape(record['kind'])} · "
            f"{escape(record['summary'])}</span></summary>"
            f"<div class=attrs>{_table(['field', 'value'], rows)}</div></details>")


