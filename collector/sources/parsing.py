"""Helpers every source shares: reading a JSON object from a line, times, id hygiene, and worker
names taken from file paths."""

from __future__ import annotations

import os
import re

import orjson

from .. import times


class Unparseable(ValueError):
    """A line a source cannot read; the message is the reason stored in quarantine."""


def load_json(text: bytes, expected: type = dict, what: str = "a JSON object"):
    """The JSON value of a line, which must be of the `expected` type."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise Unparseable(f"invalid JSON: {e}") from None
    if not isinstance(value, expected):
        raise Unparseable(f"expected {what}, got {type(value).__name__}")
    return value


def load_object(line: bytes) -> dict:
    return load_json(line)


def field(obj: dict, key: str, types: tuple, *, required: bool = False):
    """obj[key] if it has one of `types`; a wrong type makes the line unparseable."""
    value = obj.get(key)
    if value is None:
        if required:
            raise Unparseable(f"missing field {key!r}")
        return None
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        names = "/".join(t.__name__ for t in types)
        raise Unparseable(f"field {key!r} is {type(value).__name__}, expected {names}")
    return value


HEX = re.compile(r"^[0-9a-fA-F]+$")


def hex_id(value, length: int) -> str | None:
    """A trace or span id as lowercase hex of the given length; all-zero ids mean none."""
    if not isinstance(value, str) or len(value) != length or not HEX.match(value):
        return None
    value = value.lower()
    return None if value.strip("0") == "" else value


def iso_to_ns(text: str) -> int:
    try:
        return times.iso_to_ns(text)
    except times.BadTime as e:
        raise Unparseable(str(e)) from None


# A folder or file named after the process that wrote what it holds: `host:port` or `host_port`
# (a port has 2 to 5 digits), or `host-pid` (the host must contain a letter, so a dated folder such
# as 2026-09-18 is not read as one).
_HOST_PORT = re.compile(r"^(?P<host>.+?)[:_](?P<port>\d{2,5})$")
_HOST_PID = re.compile(r"^(?P<host>.*[A-Za-z].*)-(?P<pid>\d{2,})$")
_EXTENSIONS = re.compile(r"(?:\.[A-Za-z][\w-]*)+$")


def worker_from_path(path: str) -> str:
    """The worker a file of a source that names no process belongs to (docs/formats.md):
    1. its folder's name, when that is `host:port`, `host_port` or `host-pid`;
    2. its own name without extensions, when that is `host:port` or `host_port`
       (`10.0.0.5_8001.perf_metrics.json`);
    3. else `file:<name without its last extension>`: still says where it came from, and is not
       mistaken for a bare service name (lookup gives those the full name of another worker).
    """
    folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
    name = os.path.basename(path)
    if name.endswith(".gz"):
        name = name[:-3]
    m = _HOST_PORT.match(folder) or _HOST_PID.match(folder) or _HOST_PORT.match(_EXTENSIONS.sub("", name))
    if m:
        return f"{m.group('host')}:{m.group(2)}"
    return f"file:{os.path.splitext(name)[0]}"
