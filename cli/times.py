"""Times given on the command line: ISO 8601 (UTC unless it says otherwise) or a span ago."""

from __future__ import annotations

import re
import time

from tracejoin.collector.times import BadTime, iso_to_ns

_AGO = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d)$")
_UNIT_NS = {"s": 1_000_000_000, "m": 60_000_000_000, "h": 3_600_000_000_000, "d": 86_400_000_000_000}
_USAGE = "use ISO 8601 like 2026-11-30T10:00:00Z, or 30m, 2h, 1d"
# The earliest time ISO 8601 names (the year 1): a window that reaches back further has no bound a
# command could show, and an ISO time given instead cannot lie outside it.
_EARLIEST_NS = iso_to_ns("0001-01-01T00:00:00Z")


def parse_time(text: str, now_ns: int | None = None) -> int:
    """ns since the epoch for '2026-11-30T10:00:00Z', '2026-11-30 10:00', or '90m' (ago)."""
    text = text.strip()
    m = _AGO.match(text)
    if m:
        now_ns = time.time_ns() if now_ns is None else now_ns
        ago_ns = float(m.group(1)) * _UNIT_NS[m.group(2)]  # inf for a number past what a float holds
        if ago_ns > now_ns - _EARLIEST_NS:
            raise ValueError(f"{text} ago is before the year 1 ({_USAGE})")
        return now_ns - int(ago_ns)
    try:
        return iso_to_ns(text.replace(" ", "T", 1))
    except BadTime:
        raise ValueError(f"not a time: {text!r} ({_USAGE})") from None
