"""DuckDB's engine, without the Python layer of the `duckdb` package unless a command needs it.

`import duckdb` takes ~150 ms here, and ~80 ms of it is the package's Python layer (relations,
expressions, Arrow and pandas sources, its version read through importlib.metadata), none of which
a read command uses: a `lookup` runs SQL and fetches rows. The C++ engine underneath is the module
`_duckdb`, which the package re-exports (`duckdb.connect is _duckdb.connect`, and the same
exception classes), so code written against one runs against the other. Scanning Arrow tables
does need the package (it sets up the engine's Arrow sources): `with_arrow()` imports it, and
open_store calls it for every writer.
"""

import os
from collections.abc import Iterator
from contextlib import contextmanager

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
