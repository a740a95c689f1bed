"""Wall-clock times as ns since the epoch, UTC, to and from ISO 8601 text; how finely a record's
time is known; when a record's duration ran, and when the failure it states was known."""

from __future__ import annotations

import re
from datetime import datetime, timezone


class BadTime(ValueError):
    pass


# The store's integer columns are 64-bit: a time in ns holds 1677-09-21 to 2262-04-11.
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


_ISO_FRACTION = re.compile(r"\.(\d+)")


# Seconds since the epoch of "YYYY-MM-DDTHH:MM:SS" (UTC) texts seen lately: log lines come many to
# a second, and datetime parsing is most of what reading their time costs.
_SECONDS: dict[str, int] = {}


def iso_to_ns(text: str) -> int:
    """RFC 3339 / ISO 8601 time to ns since the epoch (UTC), keeping sub-microsecond digits."""
    fraction = text[20:-1]
    if text[19:20] == "." and text[-1:] == "Z" and fraction.isdigit() and fraction.isascii():
        # The common shape (Dynamo, OTLP JSON, trace-join's own lines): UTC with a fraction.
        seconds = _SECONDS.get(text[:19])
        if seconds is None:
            if len(_SECONDS) > 10_000:
                _SECONDS.clear()
            seconds = _SECONDS[text[:19]] = _seconds_of(text[:19])
        return seconds * 1_000_000_000 + int(fraction[:9].ljust(9, "0"))
    return _iso_to_ns(text)


def _seconds_of(text: str) -> int:
    try:
        return int(datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp())
    except ValueError:
        raise BadTime(f"unreadable time {text!r}") from None


def _iso_to_ns(text: str) -> int:
    fraction_ns = 0
    m = _ISO_FRACTION.search(text)
    if m:
        digits = m.group(1)
        fraction_ns = int(digits[:9].ljust(9, "0"))
        text = text[: m.start()] + text[m.end():]
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise BadTime(f"unreadable time {text!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp()) * 1_000_000_000 + fraction_ns


SECOND_NS = 1_000_000_000
# The sources that read text logs: engines stamp their lines to the second (TensorRT-LLM's
# `[MM/DD/YYYY-HH:MM:SS]`, vLLM's `MM-DD HH:MM:SS`, SGLang's `[YYYY-MM-DD HH:MM:SS]`).
TEXT_LOGS = ("trtllm_log", "vllm_log", "sglang_log", "text_log")


def known_to_ns(source: str, time_ns: int) -> int:
    """How finely a record's time is known, in ns: a text log's line timed on a whole second was
    stamped to the second (a wrapper's own stamp, kubectl's `--timestamps` or the kubelet's, and
    the formats that write fractions are finer: a fraction of exactly zero is taken for a second's
    stamp too, a place within that second that is merely drawn wider)."""
    return SECOND_NS if source in TEXT_LOGS and time_ns % SECOND_NS == 0 else 1


def ns_to_iso(ns: int, known_to: int = 1) -> str:
    """The time as ISO 8601 text, with no more digits than it is known to (`known_to`, ns)."""
    seconds, rest = divmod(ns, SECOND_NS)
    base = datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}Z" if known_to >= SECOND_NS else f"{base}.{rest // 1000:06d}Z"


def window_iso(since_ns: int | None, until_ns: int | None) -> dict:
    """A window's bounds as ISO times, None where it is open."""
    return {name: None if ns is None else ns_to_iso(ns) for name, ns in (("since", since_ns), ("until", until_ns))}


def extent(kind: str, time, duration):
    """When a record's duration ran, in the unit of its time and duration: from its time for a span
    or a measurement (perf metrics and hooks are timed at the request's arrival), up to its time
    for a log line, which is written when what it measures has ended (`request.end`)."""
    return (time - duration, time) if kind == "log" else (time, time + duration)


def failure_known_ns(row: dict) -> int:
    """When the failure a record states (a lookup row, timed) was known: when its answer's first
    byte went out, for a record that measured that (`ttfb_ms`: the status was sent then, and the
    caller may log the failure before this record is written); else when its duration ended."""
    begin, end = extent(row["kind"], row["time_ns"], row["duration_ns"] or 0)
    return begin + round(row["ttfb_ms"] * 1e6) if row.get("ttfb_ms") is not None else end


def shown_order(row: dict) -> tuple:
    """Where a record goes on a request's timeline: by its time, then (records of one moment) by
    what it is and where it was read, not by the numbers a store gave it, so that every store shows
    one request alike; the records of one file stay in the file's order."""
    return (row["time_ns"] is None, row["time_ns"] or 0, row["source"], row["offset"], row["seq"], row["origin_id"])


SHOWN_ORDER_SQL = 'time_ns NULLS LAST, source, "offset", seq, origin_id'  # shown_order, in SQL
