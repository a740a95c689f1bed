"""Shared fixtures: run the real `trace-join` command against a database in a temporary folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


@pytest.fixture
def db(tmp_path) -> Path:
    return tmp_path / "store.duckdb"


@pytest.fixture
def tj(db):
    """Run `trace-join ARGS... --db DB` as a user would, in a separate process."""

    def run(*args, with_db: bool = True) -> Run:
        argv = [sys.executable, "-m", "tracejoin.cli", *map(str, args)]
        if with_db:
            argv += ["--db", str(db)]
        env = {k: v for k, v in os.environ.items() if k != "TRACEJOIN_DEBUG"}
        p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
        return Run(p.returncode, p.stdout, p.stderr)

    return run


def assert_one_clear_line(run: Run) -> None:
    """An error a user sees: one line on stderr, no traceback."""
    assert "Traceback" not in run.err, run.err
    lines = [ln for ln in run.err.splitlines() if ln.strip()]
    assert len(lines) == 1, run.err
    assert lines[0].startswith("trace-join: "), lines[0]
