"""trace-join's benchmarks (issue 8): ingest, lookup, middleware overhead, OTLP intake, memory.

`python -m bench` (or `make bench`) generates the data, runs each benchmark several times next to
its baseline, and prints one table of medians and ratios. docs/performance.md records a run.
"""
