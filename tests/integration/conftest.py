"""Fixtures for the tests against a real NVIDIA Dynamo deployment."""

from __future__ import annotations

import pytest

from tracejoin.cli.demo.dynamo import DynamoUnavailable, dynamo_python


@pytest.fixture(scope="session")
def dynamo_installed() -> None:
    """Dynamo in its cached environment, installed on first use (about 1.5 minutes). A test that
    needs it is skipped when the wheels cannot be installed here, and only then: any other failure
    to start Dynamo fails it."""
    try:
        dynamo_python()
    except DynamoUnavailable as e:
        pytest.skip(f"Dynamo cannot be installed here: {e}")
