"""Fixtures for the middleware tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog

from .live_servers import Served, serve_openai_like_app


@pytest.fixture(autouse=True)
def unconfigured_structlog() -> Iterator[None]:
    """Each test's first middleware configures structlog, as in a fresh process."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


@pytest.fixture
def served(tmp_path) -> Iterator[Served]:
    with serve_openai_like_app(tmp_path / "router.jsonl", service="test-router", role="router") as served:
        yield served
