"""Local times without a zone or a year: one rule for every source (collector/local_time.py), said
wherever it assumed something, never a silent guess."""

from __future__ import annotations

import os
from datetime import datetime, timezone

import pytest

from tracejoin.collector import local_time
from tracejoin.collector.local_time import LocalTimes, ZoneError, clock, zone_named
from tracejoin.collector.sources import trtllm_log

from tests.conftest import assert_one_clear_line


def utc_ns(*fields: int) -> int:
    return int(datetime(*fields, tzinfo=timezone.utc).timestamp()) * 10**9


@pytest.fixture
def no_zone_variables(monkeypatch):
    for name in (local_time.VARIABLE, trtllm_log.TZ_VARIABLE):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_zone_is_the_option_then_the_variables_then_utc_said_to_be_assumed(no_zone_variables):
    monkeypatch = no_zone_variables
    assumed = clock(None, trtllm_log.TZ_VARIABLE)
    assert assumed.assumed and assumed.zone == timezone.utc
    assert assumed.how.startswith("local time read as UTC") and "--tz" in assumed.how
    assert local_time.guessed(assumed.how)

    monkeypatch.setenv(trtllm_log.TZ_VARIABLE, "+01:00")
    assert clock(None, trtllm_log.TZ_VARIABLE).how == "local time in +01:00 (TRACEJOIN_TRTLLM_TZ)"
    monkeypatch.setenv(local_time.VARIABLE, "Europe/Berlin")
    assert clock(None, trtllm_log.TZ_VARIABLE).how == "local time in Europe/Berlin (TRACEJOIN_TZ)"
    named = clock("-0530", trtllm_log.TZ_VARIABLE)
    assert named.how == "local time in -0530 (--tz)" and not named.assumed and not local_time.guessed(named.how)
    assert LocalTimes(named).ns(2026, 8, 20, 10, 15, 2) == utc_ns(2026, 8, 20, 15, 45, 2)


def test_a_variable_that_names_no_zone_makes_times_unreadable_with_the_reason(no_zone_variables):
    no_zone_variables.setenv(local_time.VARIABLE, "Mars/Olympus")
    times = LocalTimes(clock(None))
    with pytest.raises(ZoneError, match="TRACEJOIN_TZ='Mars/Olympus' is neither an offset"):
        times.ns(2026, 8, 20, 10, 15, 2)


@pytest.mark.parametrize("value", ["Mars/Olympus", "+25:00", "2 hours", ""])
def test_what_is_not_a_zone_is_refused(value):
    with pytest.raises(ZoneError):
        zone_named(value or "nowhere")


def test_a_year_less_time_takes_the_year_that_puts_it_before_the_files_last_change(tmp_path, no_zone_variables):
    log = tmp_path / "vllm.log"
    log.write_text("")
    january = utc_ns(2027, 1, 2, 8, 0, 0)
    os.utime(log, ns=(january, january))
    times = LocalTimes.of_file(str(log), clock(None))
    # December lines in a file last changed in January are of the year before, and the lines after
    # new year are of the next one.
    assert times.ns(None, 12, 31, 23, 59, 58) == utc_ns(2026, 12, 31, 23, 59, 58)
    assert times.ns(None, 1, 1, 0, 0, 1) == utc_ns(2027, 1, 1, 0, 0, 1)
    assert "the year 2026 from the file's modification time (2027-01-02 08:00)" in times.how


def test_a_year_less_time_after_a_dated_one_takes_its_year(tmp_path, no_zone_variables):
    times = LocalTimes(clock("UTC"), modified_ns=utc_ns(2030, 1, 1, 0, 0, 0))
    times.ns(2026, 8, 20, 10, 15, 2)  # a line that has its year
    assert times.ns(None, 8, 20, 10, 15, 3) == utc_ns(2026, 8, 20, 10, 15, 3)
    assert times.how == "local time in UTC (--tz); the year from the file's dated lines"
    assert not local_time.guessed(times.how)


def test_a_local_time_that_daylight_saving_makes_ambiguous_says_so():
    times = LocalTimes(clock("Europe/Berlin"))
    notes: list[str] = []
    times.ns(2026, 10, 25, 2, 30, 0, notes)  # clocks went back at 03:00: 02:30 came twice
    assert notes == ["2026-10-25 02:30:00 occurs twice in Europe/Berlin (daylight saving); read as 2:00:00 from UTC"]
    notes.clear()
    times.ns(2026, 3, 29, 2, 30, 0, notes)  # clocks went forward at 02:00: no 02:30
    assert "does not exist in Europe/Berlin" in notes[0]
    notes.clear()
    times.ns(2026, 7, 1, 12, 0, 0, notes)
    assert notes == []


TRTLLM_LINE = "[08/20/2026-10:15:02] [TRT-LLM] [E] Post-processor hook failed for request 7\n"


def test_ingest_says_how_it_read_local_times_and_lookup_warns_of_an_assumed_zone(tj, tmp_path, no_zone_variables):
    logs = tmp_path / "gpu-node-1_8001"
    logs.mkdir()
    (logs / "worker.log").write_text(TRTLLM_LINE)
    run = tj("ingest", logs)
    assert run.code == 0, run.err
    assert "trtllm_log: local time read as UTC: the file names no zone" in run.err
    found = tj("lookup", "7", "--json").json()
    assert any("local time read as UTC" in w for w in found["warnings"])
    [record] = found["requests"][0]["records"]
    assert record["time"] == "2026-08-20T10:15:02Z"
    assert record["origin"]["local_time"].startswith("local time read as UTC")


def test_ingest_tz_places_local_times_in_the_zone_given(tj, tmp_path, db, no_zone_variables):
    logs = tmp_path / "gpu-node-1_8001"
    logs.mkdir()
    (logs / "worker.log").write_text(TRTLLM_LINE)
    run = tj("ingest", "--tz", "Europe/Berlin", logs)
    assert run.code == 0, run.err
    assert "trtllm_log: local time in Europe/Berlin (--tz)" in run.err
    found = tj("lookup", "7", "--json").json()
    assert found["warnings"] == []
    assert found["requests"][0]["records"][0]["time"] == "2026-08-20T08:15:02Z"  # CEST is UTC+2


def test_a_tz_that_names_no_zone_is_one_usage_line_and_no_store(tj, tmp_path, db):
    (tmp_path / "worker.log").write_text(TRTLLM_LINE)
    run = tj("ingest", "--tz", "Mars/Olympus", tmp_path / "worker.log")
    assert run.code == 2
    assert_one_clear_line(run)
    assert "Mars/Olympus" in run.err and "neither an offset" in run.err
    assert not db.exists()
