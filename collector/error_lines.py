"""Error lines of text logs, as a person reads them in a request's lookup.

A text log (TensorRT-LLM's stdout and stderr) is stored a line a record, each with its own place in
its file. Two things follow that a reader of one request should not have to undo by hand:

- A traceback is many lines. A line at a warning or error level, with the lines after it that
  continue it (marked `continues` by its source: no time and no level of their own), is shown as
  one record: its `text` is all of them, its summary ends with the exception they name.
- An error line of a serving process seldom names the request it failed. One that names no id
  (no request id, no trace) is shown in a request when, on the same worker and within the line's
  time resolution (a second for TensorRT-LLM), a record of that request states a failure or a
  warning, unless it names a peer (host:port) that is none of the request's workers. It is marked
  `inferred`, placed at that failure, and `ambiguous` when records of other requests state failures
  on that worker in that second too (it is then shown in each of them).
"""

from __future__ import annotations

import re

import orjson

from .times import SECOND_NS, TEXT_LOGS, extent, failure_known_ns, ns_to_iso, shown_order

# The lines of one traceback read at most, after or before the line a lookup found.
TRACEBACK_LINES = 400
_WORRYING = ("WARN", "WARNING", "ERROR", "CRITICAL", "FATAL")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Fault|Warning)\b")
# A peer a line names (`to http://127.0.0.1:8001/...`): its port, against the ports in the names of
# the request's workers (host:port).
_ADDRESS = re.compile(r"\b[\w.-]+:(\d{2,5})\b")
_TEXT_LOGS_SQL = "(" + ", ".join(f"'{s}'" for s in TEXT_LOGS) + ")"


def _worrying(row: dict) -> bool:
    return bool(row["failed"]) or (row["level"] or "").upper() in _WORRYING


def inferred_rows(graph, rows: list[dict]) -> list[dict]:
    """The error lines that name no id and that this request's failures place in it (rows as
    lookup's, with `inferred` and `clock` set, and `ambiguous` where other requests failed there
    then too)."""
    evidence = [r for r in rows if r["time_ns"] is not None and r["worker"] and r["source"] not in TEXT_LOGS
                and _worrying(r)]
    if not evidence:
        return []
    resolution = SECOND_NS  # the text logs' lines name no request, and their times say only the second
    own = {r["record_id"] for r in rows}
    by_worker: dict[str, list[tuple[int, int]]] = {}
    for r in evidence:
        by_worker.setdefault(r["worker"], []).append(extent(r["kind"], r["time_ns"], r["duration_ns"] or 0))
    where = " OR ".join("(worker = ? AND time_ns BETWEEN ? AND ?)" for _ in by_worker)
    params = []
    for worker, extents in by_worker.items():
        params += [worker, min(a for a, _ in extents) - resolution, max(b for _, b in extents)]
    graph.store.readable_between(min(params[1::3]), max(params[2::3]) + resolution)
    candidates = [r for (r,) in graph.store.con.execute(
        f"SELECT record_id FROM record_workers JOIN record_facts USING (record_id) "
        f"WHERE source IN {_TEXT_LOGS_SQL} AND kind = 'log' AND failed AND ({where})", params).fetchall()
        if r not in own]
    graph.load(candidates)
    # a line that names what it belongs to is placed by the walk, or not
    loose = [r for r in candidates if not (graph.nodes[r].ids or graph.nodes[r].trace_id)]
    ports = {r["worker"].rsplit(":", 1)[-1] for r in rows if r["worker"]}
    added = []
    for row in sorted(graph.rows(loose), key=lambda row: row["record_id"]):
        second = (row["time_ns"], row["time_ns"] + SECOND_NS)
        there = [r for r in evidence if r["worker"] == row["worker"]
                 for start, end in [extent(r["kind"], r["time_ns"], r["duration_ns"] or 0)] if start < second[1] and end >= second[0]]
        # placed where the request failed there (where a warning was all it had: at the warning)
        failures = [failure_known_ns(r) for r in there if r["failed"]] or [failure_known_ns(r) for r in there]
        named = set(_ADDRESS.findall(row["name"] or ""))
        if not failures or (named and not named & ports):
            continue  # no failure of this request there then, or it names a peer this request did not use
        others = _failures_of_others(graph.store.con, row["worker"], second, own)
        row["time_ns"] = min(failures)
        row["inferred"] = True
        row["ambiguous"] = others > 0
        row["clock"] = (f"logged at {ns_to_iso(second[0])[11:19]} (to the second) naming no request; placed at "
                        f"this request's failure on {row['worker']} in that second"
                        + (f", where {others} record(s) of other requests also state failures" if others else ""))
        added.append(row)
    return added


def _failures_of_others(con, worker: str, second: tuple[int, int], own: set[int]) -> int:
    """Records on the worker in that second, not of this request nor text-log lines, that state a
    failure or a warning."""
    found = con.execute(
        f"SELECT record_id FROM record_workers JOIN record_facts USING (record_id) "
        f"WHERE worker = ? AND time_ns >= ? AND time_ns < ? AND source NOT IN {_TEXT_LOGS_SQL} "
        f"AND (failed OR upper(coalesce(level, '')) IN {tuple(_WORRYING)})", [worker, *second]).fetchall()
    return sum(1 for (r,) in found if r not in own)


def whole_texts(graph, rows: list[dict]) -> list[dict]:
    """The rows with each text-log line that begins a traceback (or any message at a warning or
    error level that goes on over the lines after it) holding those lines: `text` is the whole of
    it, `lines` how many, `exception` the exception it names; a line it holds is not shown apart."""
    heads = {}
    for row in rows:
        if row["source"] not in TEXT_LOGS:
            continue
        head = row if not row["attrs"].get("continues") else _head_of(graph, row)
        if head is not None and (head["record_id"] not in heads) and (
                (head["level"] or "").upper() in _WORRYING or "Traceback" in (head["name"] or "")):
            heads[head["record_id"]] = head
    if not heads:
        return rows
    held: set[int] = set()
    for head in heads.values():
        lines = _continuation(graph.store, head)
        if not lines:
            continue
        held.update(r for r, _ in lines)
        texts = [text for _, text in lines]
        head["text"] = "\n".join([head["name"] or "", *texts])
        head["lines"] = 1 + len(texts)
        head["exception"] = next((t for t in reversed(texts) if _EXCEPTION_LINE.match(t)), None)
    shown = {r["record_id"]: r for r in rows if r["record_id"] not in held}
    for head in heads.values():  # a head found from a line it holds takes that line's place
        if head["record_id"] not in shown and "text" in head:
            shown[head["record_id"]] = head
    return sorted(shown.values(), key=shown_order)


def _continuation(store, head: dict) -> list[tuple[int, str]]:
    """(record id, text) of the lines after the head that continue it: the records right after it
    in its file."""
    lines = []
    for record_id, name, attrs in store.file_lines(head, TRACEBACK_LINES, after=True):
        if not (attrs and orjson.loads(attrs).get("continues")):
            break
        lines.append((record_id, name or ""))
    return lines


def _head_of(graph, row: dict) -> dict | None:
    """The line a continuing line goes on from: the last one before it in its file that does not
    continue another, as a row of lookup's, on the worker the row was shown on."""
    for record_id, attrs in ((r, a) for r, _, a in graph.store.file_lines(row, TRACEBACK_LINES, after=False)):
        if not (attrs and orjson.loads(attrs).get("continues")):
            graph.load([record_id])
            head, = graph.rows([record_id])
            head["worker"], head["role"] = row["worker"], row["role"]
            return head
    return None
