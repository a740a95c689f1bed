"""Local wall times: log lines stamped in the servers' local time without a zone (TensorRT-LLM,
vLLM, SGLang), some without a year (vLLM's `%m-%d %H:%M:%S`), read by one rule.

The zone is the first of:
1. `--tz ZONE` of `trace-join ingest` or `collect`;
2. the environment variable TRACEJOIN_TZ;
3. a variable of the source's own, where one exists (TRACEJOIN_TRTLLM_TZ for TensorRT-LLM's logs);
4. UTC, assumed: the file gives no zone and nobody named one.

A zone is an offset (`+02:00`, `-0530`, `Z`) or a zone name (`Europe/Berlin`, which follows daylight
saving). A value that is neither is refused: by the command, in one line, for --tz; for a variable,
every timed line of the file is quarantined with the reason, rather than placed at a wrong time.

A time without a year takes the year of the file's last dated line before it, when the file has
one, else the year that puts it at or before the file's last modification (a log is written before
it is last modified; a December line in a file modified in January is of the year before). Lines
run forward in time: a month lower than the line before's moves to the next year.

Nothing is guessed silently. How a file's times were read (`Clock.how`, and the year's origin) is
kept with the file (the `clock` of its origin), and shown with its records by lookup and in ingest's
summary; a local time that a change of daylight saving makes ambiguous (it occurs twice) or
nonexistent says so on its record (`time_note`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

VARIABLE = "TRACEJOIN_TZ"


class ZoneError(ValueError):
    """A zone that is neither an offset nor a zone name. Its text says what is wrong, to follow
    where the value came from: `f"--tz {value!r} {error}"`."""


def zone_named(value: str) -> tzinfo:
    """The zone an offset (`+02:00`, `-0530`, `Z`, `UTC`) or a zone name (`Europe/Berlin`) names."""
    value = value.strip()
    if value in ("Z", "UTC", "utc"):
        return timezone.utc
    m = re.fullmatch(r"([+-])(\d\d):?(\d\d)?", value)
    if m:
        offset = timedelta(hours=int(m.group(2)), minutes=int(m.group(3) or 0))
        if offset >= timedelta(hours=24):
            raise ZoneError("is not an offset: it is a day or more")
        return timezone(-offset if m.group(1) == "-" else offset)
    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ZoneError("is neither an offset like +02:00 nor a zone name like Europe/Berlin") from None


@dataclass
class Clock:
    """How one file's local times are read: its zone, and how that zone was chosen (`how`, for
    the user). `error`: why no time of the file can be read (a variable that names no zone)."""

    zone: tzinfo | None
    how: str
    assumed: bool = False  # the zone is UTC because nothing named one
    error: str | None = None

    @property
    def fixed_offset_s(self) -> int | None:
        """The zone's offset from UTC in seconds when it never changes (an offset or UTC)."""
        if isinstance(self.zone, timezone):
            return int(self.zone.utcoffset(None).total_seconds())
        return None


def clock(given: str | None, source_variable: str | None = None) -> Clock:
    """The clock of a source's files: `given` is --tz (already checked by the command); the
    source's own variable is read after TRACEJOIN_TZ."""
    if given:
        return Clock(zone_named(given), f"local time in {given} (--tz)")
    for name in (VARIABLE, source_variable):
        value = os.environ.get(name, "").strip() if name else ""
        if value:
            try:
                return Clock(zone_named(value), f"local time in {value} ({name})")
            except ZoneError as e:
                return Clock(None, f"{name}={value!r}", error=f"{name}={value!r} {e}")
    names = " or ".join(n for n in ("--tz", VARIABLE, source_variable) if n)
    return Clock(timezone.utc, f"{_ASSUMED_UTC}: the file names no zone and no {names} was given (to place "
                               f"them, ingest the file into a new store with --tz ZONE)", assumed=True)


# The beginnings of what `how` says when it assumed something the file did not say.
_ASSUMED_UTC = "local time read as UTC"
_YEAR_OF_MODIFICATION = "from the file's modification time"


def guessed(how: str) -> bool:
    """Whether a file's times, read as `how` says, rest on a zone nobody named. (A year taken from
    the file's modification time is said in `how`, not warned of: it is wrong only for a file
    copied without its times.)"""
    return how.startswith(_ASSUMED_UTC)


@dataclass
class LocalTimes:
    """One file's local times as ns since the epoch (UTC), by its clock. `modified_ns`: the file's
    last modification, for times without a year."""

    clock: Clock
    modified_ns: int | None = None
    year_from: str | None = None  # where the last year-less time's year came from, for `how`
    _year: int | None = None  # of the last time read
    _month: int = 0
    _cache: dict = field(default_factory=dict)

    @classmethod
    def of_file(cls, path: str, clock: Clock) -> "LocalTimes":
        try:
            modified_ns = os.stat(path).st_mtime_ns
        except OSError:
            modified_ns = None
        return cls(clock, modified_ns)

    @property
    def how(self) -> str:
        """How the file's times were read, for its origin."""
        if self.year_from is None:
            return self.clock.how
        return f"{self.clock.how}; the year {self.year_from}"

    def state(self) -> dict:
        """What reading on in the file needs: the year and month of the last time read."""
        return {"year": self._year, "month": self._month, "year_from": self.year_from}

    def restore(self, state: dict) -> None:
        self._year, self._month, self.year_from = state.get("year"), state.get("month", 0), state.get("year_from")

    def ns(self, year: int | None, month: int, day: int, hour: int, minute: int, second: int,
           notes: list[str] | None = None) -> int:
        """The time as ns since the epoch. ZoneError when the clock cannot read times; ValueError
        for a date that does not exist. A note on daylight saving goes to `notes`."""
        if self.clock.error:
            raise ZoneError(self.clock.error)
        if year is None:
            year = self._year_of(month, day, hour, minute, second)
        else:
            self._year, self._month = year, month
        key = (year, month, day, hour, minute, second)
        cached = self._cache.get(key)
        if cached is None:
            if len(self._cache) > 10_000:
                self._cache.clear()
            cached = self._cache[key] = self._read(*key)
        ns, note = cached
        if note and notes is not None:
            notes.append(note)
        return ns

    def _read(self, *fields: int) -> tuple[int, str | None]:
        zone = self.clock.zone
        local = datetime(*fields, tzinfo=zone)
        ns = int(local.timestamp()) * 1_000_000_000
        if isinstance(zone, timezone):
            return ns, None
        other = local.replace(fold=1)
        if other.utcoffset() == local.utcoffset():
            return ns, None
        # The two readings differ: the hour occurs twice (fall back) or not at all (spring forward).
        twice = datetime.fromtimestamp(other.timestamp(), zone).replace(tzinfo=None) == local.replace(tzinfo=None)
        what = "occurs twice" if twice else "does not exist"
        return ns, f"{local:%Y-%m-%d %H:%M:%S} {what} in {zone} (daylight saving); read as {local.utcoffset()} from UTC"

    def _year_of(self, month: int, day: int, hour: int, minute: int, second: int) -> int:
        if self._year is not None:  # the year of the line before; past new year when the month falls
            if month < self._month:
                self._year += 1
            self._month = month
            if self.year_from is None:
                self.year_from = "from the file's dated lines"
            return self._year
        if self.modified_ns is None:
            raise ValueError("no year in the time, and the file's modification time cannot be read")
        zone = self.clock.zone
        modified = datetime.fromtimestamp(self.modified_ns / 1e9, zone)
        year = modified.year
        if (month, day, hour, minute, second) > (modified.month, modified.day, modified.hour, modified.minute,
                                                  modified.second):
            year -= 1
        self._year, self._month = year, month
        self.year_from = f"{year} {_YEAR_OF_MODIFICATION} ({modified:%Y-%m-%d %H:%M})"
        return year
