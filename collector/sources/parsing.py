"""Helpers every source shares: reading a JSON object from a line, times, and id hygiene."""

from __future__ import annotations

import re

import orjson

from .. import times


class Unparseable(ValueError):
    """A line a source cannot read; the message is the reason stored in quarantine."""


def load_object(line: bytes) -> dict:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise Unparseable(f"invalid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise Unparseable(f"expected a JSON object, got {type(obj).__name__}")
    return obj


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


_HEX = re.compile(r"^[0-9a-fA-F]+$")


def hex_id(value, length: int) -> str | None:
    """A trace or span id as lowercase hex of the given length; all-zero ids mean none."""
    if not isinstance(value, str) or len(value) != length or not _HEX.match(value):
        return None
    value = value.lower()
    return None if value.strip("0") == "" else value


def iso_to_ns(text: str) -> int:
    try:
        return times.iso_to_ns(text)
    except times.BadTime as e:
        raise Unparseable(str(e)) from None
