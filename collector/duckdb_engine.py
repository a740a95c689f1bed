"""DuckDB as trace-join runs it: the engine without the `duckdb` package's Python layer unless a
command needs it, the memory budget, the threads, transactions.

Most of `import duckdb`'s time is the package's Python layer (relations, expressions, Arrow and
pandas sources, its version read through importlib.metadata), none of which a read command uses: a
`lookup` runs SQL and fetches rows (docs/performance.md, lookup). The C++ engine underneath is the
module `_duckdb`, which the package re-exports (`duckdb.connect is _duckdb.connect`, and the same
exception classes), so code written against one runs against the other. Scanning Arrow tables
does need the package (it sets up the engine's Arrow sources): `with_arrow()` imports it, and
open_store calls it for every writer.
"""

import importlib.abc
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

try:
    import _duckdb as duckdb
except ImportError:  # a DuckDB that does not split its engine out this way
    import duckdb


def with_arrow() -> None:
    """Set up what registering Arrow tables on a connection needs, and Arrow's memory from the
    system allocator unless ARROW_DEFAULT_MEMORY_POOL says otherwise: Arrow's default allocator
    (mimalloc) keeps what each batch freed, which next to DuckDB's budget held a 5 GB ingest's peak
    over 500 MB (516 MB; 494 MB with the system's, docs/performance.md benchmark 5)."""
    import duckdb as package  # noqa: F401  (its import registers the Arrow sources)
    import pyarrow

    if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
        pyarrow.set_memory_pool(pyarrow.system_memory_pool())


class _NoPandas(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("trace-join's commands keep pandas out (duckdb_engine.keep_pandas_out)")
        return None


_NO_PANDAS = _NoPandas()


def keep_pandas_out() -> None:
    """pyarrow imports pandas, where it is installed, whenever it converts Python values (to tell
    pandas' types apart): 48 MB more in every process that writes, for nothing trace-join uses.
    trace-join's commands run no one else's code, so they keep it out (cli/__main__.py)."""
    if "pandas" not in sys.modules and _NO_PANDAS not in sys.meta_path:
        sys.meta_path.insert(0, _NO_PANDAS)


def let_pandas_in() -> None:
    """For what needs pandas after all (chdb converts its results through it)."""
    if _NO_PANDAS in sys.meta_path:
        sys.meta_path.remove(_NO_PANDAS)


@contextmanager
def transaction(con) -> Iterator[None]:
    """BEGIN, then COMMIT, or ROLLBACK on any error. The error raised is the first one: after a
    failed COMMIT there is nothing to roll back, and after a fatal error (a full disk while
    checkpointing) every statement fails with `database has been invalidated`."""
    con.execute("BEGIN")
    try:
        yield
        con.execute("COMMIT")
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:
            pass
        raise


def memory_limit() -> str:
    """DuckDB's memory budget (it spills to `<db>.tmp/` beyond it). Its default, 80 % of the
    machine, would let a large ingest or the requests build take gigabytes next to the serving
    processes; a collector should stay small. 192 MB holds the requests update of a step of
    records (requests.UPDATE_STEP_RECORDS), with room (docs/performance.md, memory)."""
    return os.environ.get("TRACEJOIN_MEMORY_LIMIT", "192MB")


def connect(path: Path, *, read_only: bool):
    """A connection to the database at `path`, within the memory budget and with no progress bar:
    DuckDB draws it on stdout, through the output of --json, for queries over 2 s."""
    con = duckdb.connect(str(path), read_only=read_only, config={"memory_limit": memory_limit()})
    con.execute("SET enable_progress_bar = false")
    return con


@contextmanager
def threads(con, count: int | None) -> Iterator[None]:
    """DuckDB on `count` threads (None: its own number) until the block ends, then as before. Each
    thread keeps hash tables of its own, so a large build fits the memory budget only on one."""
    before = con.execute("SELECT current_setting('threads')").fetchone()[0]
    con.execute("RESET threads" if count is None else f"SET threads = {int(count)}")
    try:
        yield
    finally:
        con.execute(f"SET threads = {int(before)}")
