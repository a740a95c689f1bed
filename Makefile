# The two commands a new user needs: `make demo` and `make test`. Both create .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test integration bench clean

$(BIN)/trace-join: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	@touch $@

demo: $(BIN)/trace-join
	$(BIN)/trace-join demo

test: $(BIN)/trace-join
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache tracejoin.duckdb tracejoin.duckdb.wal
