"""Fixtures for the collector's tests."""

from __future__ import annotations

import faulthandler

import pytest

from .collector_process import Collector


TEST_TIMEOUT_S = 120


@pytest.fixture
def collector(db):
    """start(*args, grpc=…, http=…): a running `trace-join collect --db DB ARGS…`; every collector
    started is killed at the end of the test, whatever happened. A test that hangs is ended, with
    every thread's traceback, after TEST_TIMEOUT_S."""
    started: list[Collector] = []

    def start(*args, **addresses) -> Collector:
        c = Collector(db, *args, **addresses)
        started.append(c)
        return c.start()

    faulthandler.dump_traceback_later(TEST_TIMEOUT_S, exit=True)
    try:
        yield start
    finally:
        faulthandler.cancel_dump_traceback_later()
        for c in started:
            c.ensure_dead()
