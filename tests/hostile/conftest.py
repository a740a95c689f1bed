"""The hostile-input suite: each test reproduces one way bad input or load broke a promise
(docs/hostile-input.md), and holds trace-join to it. The collector fixture is the collect tests'."""

from tests.collector.conftest import collector  # noqa: F401  (a fixture, used by name)
