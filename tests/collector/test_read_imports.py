"""A read command imports what reading needs: pyarrow and numpy (~60 ms and ~40 MB of a lookup
process) are for writing, and a `lookup` that imported them answered that much later."""

from __future__ import annotations

import json
import subprocess
import sys

_LINE = {"schema": "tracejoin.log.v1", "ts": "2026-12-06T03:30:00.000001Z", "level": "info", "event": "request.end",
         "service": "router", "role": "router", "worker": "gw-1:8000", "internal_id": "5b7e0f7c-1d1c-4f0e-9a53-0e6c2a1b9d11",
         "reply_id": "chatcmpl-read-imports", "status": 200, "duration_ms": 12.5}

# The command as `trace-join lookup` runs it, in this process, then what it imported.
_LOOKUP = """
import sys
from tracejoin.cli.__main__ import run
sys.argv = ["trace-join", "lookup", "--db", sys.argv[1], "chatcmpl-read-imports", "--json"]
try:
    run()
except SystemExit as e:
    assert not e.code, e.code
print(sorted(m for m in ("pyarrow", "numpy", "pandas") if m in sys.modules), file=sys.stderr)
"""


def test_lookup_answers_without_importing_the_writers_libraries(tmp_path):
    logs = tmp_path / "router.jsonl"
    logs.write_text(json.dumps(_LINE) + "\n")
    db = tmp_path / "store.duckdb"
    ingest = subprocess.run([sys.executable, "-m", "tracejoin.cli", "ingest", "--db", str(db), str(logs)],
                            capture_output=True, text=True, timeout=120)
    assert ingest.returncode == 0, ingest.stderr

    run = subprocess.run([sys.executable, "-c", _LOOKUP, str(db)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["requests"][0]["ids"]["reply_id"] == ["chatcmpl-read-imports"]
    assert run.stderr.strip().splitlines()[-1] == "[]"
