"""Finding the records that carry an id, in a store of any size, within a fixed memory budget.

DuckDB's ART index has to sit in memory whole while rows are inserted into its table, about 100
bytes an id on `record_ids.value`, which stops a store at a few GB of logs under the memory budget
(docs/performance.md, benchmark 5). So ids are indexed as sorted runs instead, the way a
log-structured merge tree keeps them:

- each batch's ids are appended to `id_tail` as (key, record_id), `key` being DuckDB's 64-bit
  `hash()` of the value; the tail is small enough to scan;
- when the tail holds BASE_ROWS ids, they become a table `id_run_<n>` sorted by key. DuckDB keeps
  the min and max of every row group, so looking a value up reads one row group of each run;
- runs of about the same size are merged FANIN at a time, so N ids make O(log N) runs and each id
  is rewritten O(log N) times; an ingest, which no one reads while it writes, merges the runs it
  made once, at its end (merge_since), so that each of its ids is rewritten once.

The runs hold the hash and the record, not the value: a lookup reads the few records a key names
from `record_ids` (stored in record order, so by their row groups' zone maps) and keeps those whose
value is the one looked for. Values are most of an id's bytes, and every merge rewrites the runs.

DuckDB does not promise `hash()` stays the same across releases, so the store keeps the hash of a
fixed text (KEY_CHECK) from when its keys were made; a DuckDB that hashes it differently re-keys
the index when it opens the store for writing (`rebuild`).

Readers go through the view `id_index` (the tail and every run; rebuilt whenever the runs change)
and the table macro `id_carriers(value)`, which SQL written by hand (the dashboards) can call as well.
"""

from __future__ import annotations

from .duckdb_engine import duckdb, transaction

BASE_ROWS = 100_000  # ids the tail holds before they become a run
FANIN = 4  # runs of one tier merged together
# Rows sorted at once: DuckDB's sort of these rows (their strings included) does not spill to disk
# enough to stay within 256 MB beyond ~700,000 of them, so larger runs are written a slice of the
# key range at a time, each slice sorted on its own and appended in order.
SLICE_ROWS = 250_000

_RUN_COLUMNS = "hash(value) AS key, record_id"
KEY_CHECK = "hash('trace-join id key')"

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS id_tail AS SELECT {_RUN_COLUMNS} FROM record_ids WHERE false;
CREATE TABLE IF NOT EXISTS id_runs (
    run   INTEGER NOT NULL,  -- the table is id_run_<run>
    tier  INTEGER NOT NULL,
    "rows" BIGINT NOT NULL
);
"""



def carriers_sql(records: str, values: str) -> str:
    """SQL for the ids (record_id, kind, value, scope) whose value is one of `values` (SQL: a value
    or a list of them) among those of the records `records` picks (SQL: a condition on record_id,
    naming the records the index finds by the values' keys).

    The few record ids read one row group of record_ids each; a filter on the value would have
    DuckDB read every row group instead, were it pushed into that scan, so `OFFSET 0` keeps it out."""
    return (f"SELECT * FROM (SELECT record_id, kind, value, scope FROM record_ids "
            f"WHERE {records} OFFSET 0) WHERE value IN ({values})")


# Up to this many values, each is looked up on its own (one row group of each run); more are joined
# against the whole index in one scan, which costs the same for 10 values as for 2,000.
_FEW_VALUES = 32


def found_sql(n: int) -> str:
    """SQL for the record ids the index finds for n values, the parameters $1 to $n, by their
    hashes: a record so found may carry another value of the same hash."""
    marks = [f"${i}" for i in range(1, n + 1)]
    if n <= _FEW_VALUES:  # each hash a constant: one row group of each run
        return " UNION ALL ".join(f"SELECT record_id FROM id_index WHERE key = hash({m})" for m in marks)
    return f"SELECT record_id FROM id_index WHERE key IN (SELECT hash(unnest([{', '.join(marks)}])))"


# Defined once: it reads whatever `id_index` holds when it runs. The ids of one value, for SQL
# written by hand (the dashboards); lookup's walk (graph.py) reads every id of the records the
# index finds, since it goes on to walk from them, and keeps the values it asked for.
CARRIERS_MACRO = ("CREATE OR REPLACE MACRO id_carriers(v) AS TABLE "
                  + carriers_sql("record_id IN (SELECT record_id FROM id_index WHERE key = hash(v))", "v"))


def create(con: duckdb.DuckDBPyConnection) -> None:
    """The tail, the catalog of runs, the view and the macro; for a store that has them, the view and
    the macro as this release defines them."""
    con.execute(SCHEMA)
    _define_view(con)
    con.execute(CARRIERS_MACRO)
    con.execute(f"INSERT OR IGNORE INTO meta VALUES ('id_key_check', CAST({KEY_CHECK} AS VARCHAR))")


def keys_current(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether this DuckDB hashes as the one that made the store's keys."""
    return con.execute(
        f"SELECT value = CAST({KEY_CHECK} AS VARCHAR) FROM meta WHERE key = 'id_key_check'"
    ).fetchone() == (True,)


def rebuild(con: duckdb.DuckDBPyConnection) -> None:
    """Index every id again: with this DuckDB's hash, in this release's layout."""
    with transaction(con):
        for (run,) in con.execute("SELECT run FROM id_runs").fetchall():
            con.execute(f"DROP TABLE id_run_{run}")
        con.execute("DROP VIEW IF EXISTS id_index")
        con.execute("DROP TABLE id_runs")
        con.execute("DROP TABLE id_tail")
        con.execute(SCHEMA)
        index_existing(con)
        _define_view(con)
        con.execute(CARRIERS_MACRO)
        con.execute(f"UPDATE meta SET value = CAST({KEY_CHECK} AS VARCHAR) WHERE key = 'id_key_check'")
    compact(con)


def add(con: duckdb.DuckDBPyConnection, ids: str) -> None:
    """Index the ids `ids` names (a table or a registered Arrow table with record_id, kind, value
    and scope), in the caller's transaction."""
    con.execute(f"INSERT INTO id_tail SELECT {_RUN_COLUMNS} FROM {ids}")


def compact(con: duckdb.DuckDBPyConnection, merge: bool = True) -> None:
    """Sort a full tail into a run, and merge runs while some tier holds FANIN of them, each step in
    a transaction of its own (a merge can take seconds; the batches that called for it are committed
    already, and a crash here loses nothing). `merge=False` leaves the runs to merge_since."""
    tail = con.execute("SELECT count(*) FROM id_tail").fetchone()[0]
    if tail >= BASE_ROWS:
        with transaction(con):
            _new_run(con, "id_tail", tail)
            con.execute("DROP TABLE id_tail")
            con.execute(SCHEMA)
            _define_view(con)
    if merge:
        _merge_tiers(con)


def last_run(con: duckdb.DuckDBPyConnection) -> int:
    return con.execute("SELECT coalesce(max(run), 0) FROM id_runs").fetchone()[0]


def merge_since(con: duckdb.DuckDBPyConnection, run: int) -> None:
    """Merge the runs made after `run` (last_run's) into one, then as compact does. A long ingest
    makes a run a batch and merges them once at its end: merged FANIN at a time as they came, each
    id would be rewritten once a tier."""
    runs = [r for (r,) in con.execute("SELECT run FROM id_runs WHERE run > ? ORDER BY run", [run]).fetchall()]
    if len(runs) > 1:
        _merge(con, runs)
    _merge_tiers(con)


def _merge_tiers(con: duckdb.DuckDBPyConnection) -> None:
    while tier_runs := _full_tier(con):
        _merge(con, tier_runs)


def _merge(con: duckdb.DuckDBPyConnection, runs: list[int]) -> None:
    """These runs as one, in a transaction."""
    with transaction(con):
        union = " UNION ALL ".join(f"SELECT * FROM id_run_{r}" for r in runs)
        listed = ",".join(map(str, runs))
        rows = con.execute(f'SELECT sum("rows") FROM id_runs WHERE run IN ({listed})').fetchone()[0]
        _new_run(con, f"({union})", rows)
        for r in runs:
            con.execute(f"DROP TABLE id_run_{r}")
        con.execute(f"DELETE FROM id_runs WHERE run IN ({listed})")
        _define_view(con)


def index_existing(con: duckdb.DuckDBPyConnection, first_record_id: int = 0) -> None:
    """Index the ids of `record_ids` from first_record_id on, in chunks the memory limit allows: of a
    store from before runs, of one being re-keyed, or written in bulk (bench/corpus.py)."""
    first, last, total = con.execute(
        "SELECT min(record_id), max(record_id), count(*) FROM record_ids WHERE record_id >= ?", [first_record_id]
    ).fetchone()
    if first is None:
        return
    step = max(1, (last - first + 1) * SLICE_ROWS // total)
    for start in range(first, last + 1, step):
        chunk = f"(SELECT {_RUN_COLUMNS} FROM record_ids WHERE record_id >= {start} AND record_id < {start + step})"
        _new_run(con, chunk, SLICE_ROWS)
    _define_view(con)


def tier_of(rows: int) -> int:
    tier, bound = 0, BASE_ROWS
    while rows >= bound:
        tier, bound = tier + 1, bound * FANIN
    return tier


def _new_run(con: duckdb.DuckDBPyConnection, source: str, rows: int) -> None:
    """A run of the rows of `source` (a relation of id_tail's columns, about `rows` of them), sorted
    by key, in the catalog (not yet in the view)."""
    run = con.execute("SELECT coalesce(max(run), 0) + 1 FROM id_runs").fetchone()[0]
    con.execute(f"CREATE TABLE id_run_{run} AS FROM id_tail LIMIT 0")
    slices = max(1, -(-rows // SLICE_ROWS))
    for i in range(slices):
        # keys are hashes, spread evenly: equal ranges hold about equal numbers of rows
        low, high = i * 2**64 // slices, (i + 1) * 2**64 // slices
        in_slice = f"key >= CAST({low} AS UBIGINT)" + (f" AND key < CAST({high} AS UBIGINT)" if i < slices - 1 else "")
        con.execute(f"INSERT INTO id_run_{run} SELECT * FROM {source} WHERE {in_slice} ORDER BY key")
    written = con.execute(f"SELECT count(*) FROM id_run_{run}").fetchone()[0]
    if written == 0:
        con.execute(f"DROP TABLE id_run_{run}")
        return
    con.execute("INSERT INTO id_runs VALUES (?, ?, ?)", [run, tier_of(written), written])


def _full_tier(con: duckdb.DuckDBPyConnection) -> list[int]:
    """The runs of the lowest tier that holds FANIN or more, oldest first; none when no tier does."""
    row = con.execute(
        "SELECT list(run ORDER BY run) FROM id_runs GROUP BY tier HAVING count(*) >= ? ORDER BY tier LIMIT 1",
        [FANIN],
    ).fetchone()
    return row[0] if row else []


def _define_view(con: duckdb.DuckDBPyConnection) -> None:
    runs = [r for (r,) in con.execute("SELECT run FROM id_runs ORDER BY run").fetchall()]
    body = " UNION ALL ".join(["SELECT * FROM id_tail"] + [f"SELECT * FROM id_run_{r}" for r in runs])
    con.execute(f"CREATE OR REPLACE VIEW id_index AS {body}")
