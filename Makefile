# The two commands a new user needs: `make demo` and `make test`. Both create .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test integration bench clean

# An editable install leaves trace-join's own modules uncompiled, and where PYTHONDONTWRITEBYTECODE
# is set (as on CI) every command would compile them again (~17 ms of a `lookup`): compile them here.
COMPILE := $(BIN)/python -m compileall -q collector cli middleware

$(BIN)/trace-join: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	$(COMPILE)
	@touch $@

demo: $(BIN)/trace-join
	$(BIN)/trace-join demo

# The whole suite, the real-Dynamo integration tests (tests/integration/) included. Those install
# Dynamo into a cached virtual environment of its own on first use (~/.cache/trace-join, or
# $$TRACEJOIN_CACHE; a minute or two, ~700 MB), so nothing of Dynamo's lands in .venv; they are
# skipped only where its wheels cannot be installed. The test files run in parallel, one process a core
# (a file's tests together, in one process: its module fixtures, a demo run, are made once).
test: $(BIN)/trace-join
	$(BIN)/python -m pytest -q -n auto --dist loadfile

# Only the real-Dynamo integration tests.
integration: $(BIN)/trace-join
	$(BIN)/python -m pytest -q -m integration

# Benchmarks (bench/, docs/performance.md); not part of `make test`. Arize Phoenix, the OTLP
# baseline, gets a venv of its own so its many pins cannot change what trace-join runs with.
# wrk drives the middleware benchmark and Valgrind counts its instructions (Debian: apt-get install -y wrk
# valgrind); opentelemetry-instrumentation-asgi is what it compares the middleware with. BENCH_ARGS=--quick:
# a smoke run.
bench: $(BIN)/trace-join
	$(BIN)/pip install --quiet py-spy opentelemetry-instrumentation-asgi
	test -x .venv-phoenix/bin/phoenix || { $(PYTHON) -m venv .venv-phoenix && .venv-phoenix/bin/pip install --quiet arize-phoenix; }
	@command -v wrk >/dev/null || echo "bench: wrk not found, the middleware benchmark is skipped (apt-get install -y wrk)"
	@command -v valgrind >/dev/null || echo "bench: valgrind not found, the middleware's instructions are not counted (apt-get install -y valgrind)"
	$(COMPILE)
	$(BIN)/python -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .venv-phoenix .pytest_cache tracejoin.duckdb tracejoin.duckdb.wal
