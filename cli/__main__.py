"""`trace-join` and `python -m tracejoin.cli`: the command, with Python's garbage collector kept out
of start-up and exit.

A read command (`lookup`, `requests`, ...) lives a few hundred milliseconds, and most of that is
importing Typer and DuckDB: ~100k long-lived objects that the cyclic collector would scan several
times while they load, and once more at exit, finding nothing (~50 ms of a `lookup`,
docs/performance.md). Commands that run for long (`ingest`, `collect`, `proxy`, `demo`) turn it
back on (main.long_running).
"""

import atexit
import gc


def run() -> None:
    gc.disable()
    atexit.register(gc.freeze)  # atexit runs before the interpreter's last collection: skip it
    from tracejoin.collector.duckdb_engine import keep_pandas_out

    keep_pandas_out()
    from tracejoin.cli.main import run as run_command

    run_command()


if __name__ == "__main__":
    run()
