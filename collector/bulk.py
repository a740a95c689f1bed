"""Reading a source's lines in bulk: the lines of many files at once, their records made by DuckDB.

A source module whose lines DuckDB can read gives, beside its LineParser, the same rules as SQL
over a batch of lines (its `BULK`, a `Rules`; collector/sources/__init__.py says what its parser
adds). Ingest then reads its files through a BulkReader:

1. pieces: each file is cut into pieces of whole lines (lines.read_pieces); each piece becomes
   an Arrow string array over the bytes read, a line to a value, without a copy. The pieces of
   many files are staged together, until ingest reads the stage (at FLUSH_BYTES or its batch's
   lines: a query costs tens of milliseconds to plan, however little it reads, so stages are large).
2. stage: the module's `select` reads every staged line in one query, into the temporary table
   bulk_stage (DuckDB's memory, within its budget); its `ok` says that a row
   is the line's record, read exactly as the LineParser would read the line. A JSON-lines
   source may have DuckDB's JSON reader parse its lines once (Rules.json_columns): the stage's
   lines are then also written to a temporary file, each wrapped with its place, for read_json.
3. the parser's lines: the lines the SQL does not read (not `ok`, or not given to it: not UTF-8,
   over the length limit, an unfinished last line), the lines that may change what the parser
   knows of its file (those holding one of its `state_markers()`) and each piece's last line
   (for the next piece) go through the module's LineParser, file by file in line order, as
   ingest reads any line (lines.read_line): their records, quarantine reasons and positions,
   and a held-back last line, are the per-line path's own. What the parser carries from line to
   line is kept so: before each of them that follows a row of the stage it is told that row's
   time (the time an untimed line takes), its `scope` after each of them is given to the SQL
   of the lines between, and (Rules.votes) it learns the roles the stored rows vote for.
4. write: the stage's records and the parser's, numbered in line order, with their ids (the
   module's `ids`), in one transaction with the positions the files reach (Store.write_batch).

So the store holds what reading every line with the LineParser would have stored, table for
table: tests/collector/test_bulk_dynamo.py ingests the same files both ways and compares them.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import tempfile
from array import array
from bisect import bisect_left, bisect_right
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .duckdb_engine import duckdb
from .lines import read_line
from .records import NOT_IDS, RECORDS_SCHEMA, BatchBuilder
from .sources.bulk_sql import MACROS, Rules, literal
from .store import BulkRows, Origin, Store, registered

CHUNK_BYTES = 16 << 20  # a file is cut into pieces of about this; splitting one copies it for a moment
SCAN_ROWS = 8192  # lines to an Arrow record batch: DuckDB scans a table's batches in parallel


# -- reading ----------------------------------------------------------------------------------

@dataclass
class _File:
    """A file being read in bulk: its parser, whose state carries from piece to piece."""

    path: str
    source: str
    rules: Rules
    settings: dict[str, str]  # the parser's values for the select's `{name}`s, as SQL
    origin: Origin
    parser: object
    max_line: int
    line_no: int  # lines read so far, for quarantine positions
    consumed: int  # bytes read so far


@dataclass
class _Piece:
    """Whole lines of one file (lines.read_pieces)."""

    file: _File
    offset: int  # of its first byte in the file's (decompressed) stream
    data: bytes | None  # None: one line over the length limit, not kept
    length: int
    terminated: bool
    cut_short: str | None  # why the stream ended early, for an unfinished last line
    starts: list[int] = field(default_factory=list)  # each line's offset in data, then len(data)
    unsent: list[int] = field(default_factory=list)  # lines the SQL is not given
    sent: bytes | None = None  # data with the lines DuckDB cannot read blanked, when it has such lines

    @property
    def lines(self) -> int:
        return len(self.starts) - 1 if self.data is not None else 1

    def line(self, i: int) -> tuple[int, bytes | None, int, bool]:
        """Line i: its offset in the stream, its bytes (None when over the length limit), its
        length without the newline, and whether it has its newline."""
        if self.data is None:
            return self.offset, None, self.length, self.terminated
        start, end = self.starts[i], self.starts[i + 1]
        terminated = self.terminated or i < self.lines - 1
        length = end - start - terminated
        line = self.data[start:start + length] if length <= self.file.max_line else None
        return self.offset + start, line, length, terminated

    def end(self, lines: int) -> int:
        """The offset in the stream after its first `lines` lines."""
        if lines < self.lines:
            return self.offset + (self.starts[lines] if self.data is not None else 0)
        return self.offset + self.length + (self.data is None and self.terminated)


@dataclass
class Staged:
    """A stage read: the parser's records and quarantined lines (`batch`) and the stage's rows
    (`rows`), to be written together; the lines held back."""

    batch: BatchBuilder
    rows: BulkRows
    held_back: list[str]


class BulkReader:
    """Stages pieces of files; `flush` reads them. `reached(origin, parser, consumed, line_no)`
    is told how far each file's pieces were read (ingest moves the origin's position with it)."""

    def __init__(self, store: Store, reached: Callable[..., None]):
        self.store = store
        self.reached = reached
        self._pieces: list[_Piece] = []
        self._heads: dict[int, set[str]] = {}  # the staged files' origins' fingerprints, by head length
        self.bytes = 0  # staged
        self.lines = 0
        self._macros_on = None

    def takes(self, rules: Rules) -> bool:
        """Whether lines read by these rules can join the stage (one source's rules to a stage;
        each file's settings are values of its own lines)."""
        return not self._pieces or self._pieces[0].file.rules is rules

    def open(self, path: str, source: str, rules: Rules, settings: dict[str, str], origin: Origin, parser,
             max_line: int) -> _File:
        """A file to read from its origin's position on."""
        self._heads.setdefault(origin.head_len, set()).add(origin.fingerprint)
        return _File(path, source, rules, settings, origin, parser, max_line, origin.lines, origin.consumed)

    def add(self, file: _File, offset: int, data: bytes | None, length: int, terminated: bool,
            cut_short: str | None) -> None:
        """Stage a piece of the file (lines.read_pieces's)."""
        piece = _Piece(file, offset, data, length, terminated, cut_short)
        if data is not None:
            _split(piece)
        self._pieces.append(piece)
        self.bytes += length
        self.lines += piece.lines

    def __bool__(self) -> bool:
        return bool(self._pieces)

    def release(self) -> None:
        """Drop the last stage read, once written."""
        self.store.con.execute("DROP TABLE IF EXISTS bulk_stage; DROP TABLE IF EXISTS bulk_numbers")

    def holds_head(self, head: bytes) -> bool:
        """Whether a staged file starts with the same bytes as a file whose head this is: its
        origin, and how far it was read, which finding the file's origin weighs, are known only
        once the stage is read."""
        return any(head_len <= len(head) and hashlib.sha256(head[:head_len]).hexdigest() in fingerprints
                   for head_len, fingerprints in self._heads.items())

    def flush(self) -> Staged:
        """Read the staged lines; the stage is empty afterwards."""
        pieces, self._pieces, self.bytes, self.lines = self._pieces, [], 0, 0
        self._heads = {}
        con = self.store.con
        if self._macros_on is not con:
            con.execute(MACROS)
            self._macros_on = con
        unread, times, votes, marked = _stage(con, pieces)
        batch = BatchBuilder()
        first_record_id = self.store.allocate_record_ids(0)
        held_back: list[str] = []
        taken_rows, scope_rows, piece_rows, parser_record_ids = [], [], [], []
        records_by_source: dict[str, int] = {}
        for k, piece in enumerate(pieces):
            file = piece.file
            batch.reading(file.source, file.origin)
            read = _by_parser(k, piece, sorted(set(unread.get(k, ())).union(piece.unsent)), times.get(k),
                              marked.get(k, {}), batch, held_back)
            first = self.store.allocate_record_ids(read.records)
            parser_record_ids += [first + n for n in read.parser_records]
            taken_rows += read.taken
            scope_rows += read.scopes
            piece_rows.append((k, first, file.origin.origin_id, file.source, piece.offset, read.lines))
            records_by_source[file.source] = records_by_source.get(file.source, 0) + read.stage_records
            if k in votes:
                _learn(file.parser, votes[k], read)
            file.line_no += read.lines
            file.consumed = piece.end(read.lines)
            self.reached(file.origin, file.parser, file.consumed, file.line_no)
        tables = {
            "bulk_pieces": _table(piece_rows, f=pa.int32(), first_record_id=pa.int64(), origin_id=pa.int64(),
                                  source=pa.string(), piece_offset=pa.int64(), lines_read=pa.int64()),
            "bulk_taken": _table(taken_rows, f=pa.int32(), idx=pa.int32(), shift=pa.int64()),
            "bulk_scopes": _table(scope_rows, f=pa.int32(), idx=pa.int32(), scope=pa.string()),
        }
        with registered(con, tables):
            con.execute(_NUMBERS)
        rows = BulkRows(records=f"SELECT {_RECORD_COLUMNS} FROM ({_STORED})",
                        ids=_WITHOUT_NOT_IDS.format(pieces[0].file.rules.ids.replace("{records}", f"({_STORED_WITH_SCOPE})")),
                        tables=tables, first_record_id=first_record_id, batch_record_ids=parser_record_ids,
                        records_by_source=records_by_source)
        return Staged(batch, rows, held_back)


# The stage's rows that are stored: its ok lines the parser did not read, up to where each piece's
# reading stopped, numbered after the records of the lines before them (a line the parser reads
# may give none, or several).
_STORED = """
SELECT s.*, p.first_record_id + s.idx + n.shift AS record_id, p.source, p.origin_id,
    p.piece_offset + s.start AS "offset", 0 AS seq
FROM bulk_stage s JOIN bulk_pieces p USING (f) JOIN bulk_numbers n USING (f, idx)
"""
# Record.add_id's rule for the ids the SQL reads: the words that say there is none are not ids.
_WITHOUT_NOT_IDS = ("SELECT * FROM ({}) WHERE value NOT IN ("
                    + ", ".join(sorted(literal(v) for v in NOT_IDS)) + ")")
_STORED_WITH_SCOPE = """
SELECT s.*, p.first_record_id + s.idx + n.shift AS record_id, p.source, p.origin_id,
    p.piece_offset + s.start AS "offset", 0 AS seq, n.scope
FROM bulk_stage s JOIN bulk_pieces p USING (f) JOIN bulk_numbers n USING (f, idx)
"""
# Each stored row's shift (the records the parser's lines before it gave, less one a line) and the
# parser's scope there: ASOF joins of the rows' places only, the rows' columns joined after, since
# an ASOF join sorts all the columns it carries.
_NUMBERS = """
CREATE OR REPLACE TEMP TABLE bulk_numbers AS
SELECT s.f, s.idx, coalesce(t.shift, 0) AS shift, sc.scope
FROM (SELECT f, idx FROM bulk_stage WHERE ok) s JOIN bulk_pieces p USING (f)
ASOF LEFT JOIN bulk_taken t ON s.f = t.f AND s.idx >= t.idx
ASOF LEFT JOIN bulk_scopes sc ON s.f = sc.f AND s.idx > sc.idx
WHERE s.idx < p.lines_read AND (t.idx IS NULL OR t.idx < s.idx)
"""
_RECORD_COLUMNS = ", ".join(f'"{name}"' for name in RECORDS_SCHEMA.names)
_LINES_SCHEMA = pa.schema([("f", pa.int32()), ("idx", pa.int32()), ("start", pa.int32()), ("line", pa.string())])


def _split(piece: _Piece) -> None:
    """The piece's line starts, and the lines the SQL is not given: over the length limit, not
    UTF-8 (DuckDB refuses such text), the last one when it has no newline yet. The first two are
    blanked in a copy of the piece (0x01 bytes, so the lines keep their offsets, and a select
    sees a line it does not read, which the parser may store: not a blank one)."""
    data = piece.data
    # each line's start, then the end: after each newline, and the end of an unfinished last line
    starts = np.flatnonzero(np.frombuffer(data, np.uint8) == 10) + 1
    starts = np.concatenate(([0], starts) if piece.terminated else ([0], starts, [len(data)]))
    lengths = np.diff(starts) - 1
    if not piece.terminated:
        lengths[-1] += 1  # the unfinished last line has no newline
    piece.starts = starts.tolist()
    lengths = lengths.tolist()
    blank = [i for i, n in enumerate(lengths) if n > piece.file.max_line] if max(lengths) > piece.file.max_line else []
    if not data.isascii():
        blank += _not_utf8(data, piece.starts)
    if blank:
        sent = bytearray(data)
        for i in blank:
            sent[piece.starts[i]:piece.starts[i] + lengths[i]] = b"\x01" * lengths[i]
        piece.sent = bytes(sent)
    unsent = set(blank)
    if not piece.terminated:
        unsent.add(len(lengths) - 1)
    piece.unsent = sorted(unsent)


def _not_utf8(data: bytes, starts: list[int]) -> list[int]:
    """The lines of data that are not UTF-8."""
    if _is_utf8(data):
        return []
    bad, position = [], 0
    while position < len(data):
        try:
            codecs.utf_8_decode(memoryview(data)[position:], "strict", True)
            break
        except UnicodeDecodeError as e:
            i = bisect_right(starts, position + e.start) - 1
            bad.append(i)
            position = starts[i + 1]
    return bad


def _is_utf8(data: bytes) -> bool:
    """Whether the bytes are UTF-8: Arrow's check of a text, which makes no copy (a decode would
    make one, at ten times the cost)."""
    text = pa.Array.from_buffers(pa.large_string(), 1, [None, pa.py_buffer(array("q", [0, len(data)])), pa.py_buffer(data)])
    try:
        text.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _stage(con, pieces: list[_Piece]):
    """The module's select over the staged lines, as the temporary table bulk_stage (within
    DuckDB's memory budget, spilled to disk beyond it, where an Arrow table would add a stage's
    size to the peak); the lines of each piece it does not read, the times of its rows, their
    votes, and the lines holding one of the parsers' state markers (_marked)."""
    batches, first_row, rows = [], {}, 0
    for k, piece in enumerate(pieces):
        if piece.data is None:
            continue
        n = piece.lines
        first_row[k] = rows
        rows += n
        offsets = pa.py_buffer(array("i", piece.starts))
        line = pa.Array.from_buffers(pa.string(), n, [None, offsets, pa.py_buffer(piece.sent or piece.data)])
        start = pa.Array.from_buffers(pa.int32(), n, [None, offsets])
        batch = pa.RecordBatch.from_arrays(
            [pa.repeat(pa.scalar(k, pa.int32()), n), pa.array(range(n), pa.int32()), start, line], schema=_LINES_SCHEMA)
        batches += [batch.slice(i, SCAN_ROWS) for i in range(0, n, SCAN_ROWS)]
    file = pieces[0].file
    rules = file.rules
    select, staged_lines = _with_settings(rules.select, pieces)
    con.complete()  # a result a caller left unread would refuse the registering (as store.registered)
    con.register("bulk_lines", pa.Table.from_batches(batches, _LINES_SCHEMA))
    wrapped = _wrap_json_lines(pieces, rules.json_columns) if rules.json_columns else None
    # The rows carry their place (f, idx), so they may come in any order: on every thread.
    con.execute("SET preserve_insertion_order = false")
    try:
        try:
            if wrapped:
                select = select.replace("{json}", _read_json(wrapped.name, rules.json_columns))
            con.execute(f"CREATE OR REPLACE TEMP TABLE bulk_stage AS {select.replace('{lines}', staged_lines)}")
        except (duckdb.InvalidInputException, duckdb.ConversionException):
            # Text DuckDB cannot read after all: the parser reads every line of the stage.
            select = select.replace("{json}", f"(SELECT NULL::INTEGER AS f, NULL::INTEGER AS idx, "
                                              f"NULL::{rules.json_columns} AS r LIMIT 0)")
            con.execute("CREATE OR REPLACE TEMP TABLE bulk_stage AS "
                        + select.replace("{lines}", f"(FROM {staged_lines} LIMIT 0)"))
            return {k: list(range(piece.lines)) for k, piece in enumerate(pieces)}, {}, {}, {}
        marked = _marked(con, pieces)
    finally:
        con.execute("RESET preserve_insertion_order")
        con.unregister("bulk_lines")
        if wrapped:
            os.unlink(wrapped.name)
    stage = con.sql(f"SELECT ok, time_ns{', vote' if rules.votes else ''} FROM bulk_stage ORDER BY f, idx").to_arrow_table()
    keys, starts = list(first_row), list(first_row.values())
    unread: dict[int, list[int]] = {}
    for row in pc.indices_nonzero(pc.invert(stage["ok"])).to_pylist():
        k = keys[bisect_right(starts, row) - 1]
        unread.setdefault(k, []).append(row - first_row[k])
    times = {k: stage["time_ns"].slice(row, pieces[k].lines) for k, row in first_row.items()}
    votes = {k: pc.if_else(stage["ok"], stage["vote"], pa.scalar(None, pa.string())).slice(row, pieces[k].lines)
             for k, row in first_row.items()} if rules.votes else {}
    return unread, times, votes, marked


def _marked(con, pieces: list[_Piece]) -> dict[int, dict[bytes, memoryview]]:
    """The staged lines of each piece holding each of the state markers its parser has now, in
    order: found by DuckDB on all threads, where Python would scan each piece once for each
    marker. (As views of Arrow's numbers: a marker may be on most lines, and is looked up in them
    only while the parser has it.)"""
    by_marker: dict[bytes, list[int]] = {}
    for k, piece in enumerate(pieces):
        if piece.data is not None:
            for marker in piece.file.parser.state_markers():
                by_marker.setdefault(marker, []).append(k)
    if not by_marker:
        return {}
    markers = list(by_marker)
    holds = [f"contains(line, {literal(marker.decode())})" for marker in markers]
    found = con.sql(f"SELECT f, idx, {', '.join(holds)} FROM bulk_lines "
                    f"WHERE f IN ({', '.join(map(str, set().union(*by_marker.values())))}) "
                    f"AND ({' OR '.join(holds)}) ORDER BY f, idx").to_arrow_table()
    marked: dict[int, dict[bytes, memoryview]] = {}
    for n, marker in enumerate(markers):
        holding = found.filter(found.column(2 + n))
        f, idx = _ints(holding["f"]), _ints(holding["idx"])
        for k in by_marker[marker]:
            marked.setdefault(k, {})[marker] = idx[bisect_left(f, k):bisect_right(f, k)]
    return marked


def _ints(column: pa.ChunkedArray) -> memoryview:
    """An int32 column without nulls as a sequence of Python ints, without a copy per number."""
    array = column.combine_chunks()
    return memoryview(array.buffers()[1]).cast("i")[array.offset:array.offset + len(array)]


def _with_settings(select: str, pieces: list[_Piece]) -> tuple[str, str]:
    """The select with each of its `{name}` settings a column of the staged lines, `setting_<name>`,
    holding each file's value for its own lines; and the staged lines with those columns."""
    names = list(pieces[0].file.settings)
    if not names:
        return select, "bulk_lines"
    columns = ", ".join(f"setting_{name}" for name in names)
    values = ", ".join("(" + ", ".join([str(k), *(piece.file.settings[name] for name in names)]) + ")"
                       for k, piece in enumerate(pieces))
    for name in names:
        select = select.replace("{" + name + "}", f"setting_{name}")
    return select, f"(SELECT * FROM bulk_lines JOIN (VALUES {values}) settings(f, {columns}) USING (f))"


def _wrap_json_lines(pieces: list[_Piece], columns: str):
    """A temporary file of the stage's lines for DuckDB's JSON reader, each line not blank as
    `{"f":<piece>,"idx":<line>,"r":<the line>}`: its place comes with it, whatever order the
    reader gives its rows in. Lines the SQL is not given (blanked in `sent`) are left out."""
    out = tempfile.NamedTemporaryFile(prefix="tracejoin-stage-", suffix=".jsonl", delete=False)
    with out:
        for k, piece in enumerate(pieces):
            if piece.data is None:
                continue
            data, starts = piece.sent or piece.data, piece.starts
            unsent = set(piece.unsent)
            wrapped = []
            for i in range(piece.lines):
                line = data[starts[i]:starts[i + 1]]
                if i not in unsent and line and not line.isspace():
                    wrapped.append(b'{"f":%d,"idx":%d,"r":%s}\n' % (k, i, line.rstrip(b"\n")))
            out.write(b"".join(wrapped))
    return out


def _read_json(path: str, columns: str) -> str:
    return (f"(SELECT f, idx, r FROM read_json({literal(path)}, format = 'newline_delimited', "
            f"columns = {{'f': 'INTEGER', 'idx': 'INTEGER', 'r': '{columns}'}}))")


@dataclass
class _Read:
    lines: int  # lines read: all of the piece's, but an unfinished last line held back
    records: int  # their records
    stage_records: int  # of which the stage's
    parser_records: list[int]  # the number of each of the parser's records, from the piece's first
    taken: list[tuple]  # (piece, line, records shift after it) of each line the parser read
    scopes: list[tuple]  # (piece, line, the parser's scope from the next line on)


def _by_parser(k: int, piece: _Piece, unread: list[int], times: pa.ChunkedArray | None,
               marked: dict[bytes, memoryview], batch: BatchBuilder, held_back: list[str]) -> _Read:
    """The piece's lines the parser must read (the module doc's step 3), read in line order:
    `unread`, and the lines holding one of its state markers (`marked`, by marker) when it
    comes to them (they shrink as it learns)."""
    file, parser = piece.file, piece.file.parser
    n = piece.lines
    must = unread if unread and unread[-1] == n - 1 else [*unread, n - 1]
    read = _Read(n, 0, 0, [], [], [(k, -1, parser.scope)])
    shift, last, m = 0, -1, 0
    while read.lines == n:
        while m < len(must) and must[m] <= last:
            m += 1
        line = must[m] if m < len(must) else n
        for marker in parser.state_markers():
            lines = marked.get(marker, ())
            if (i := bisect_right(lines, last)) < len(lines):
                line = min(line, lines[i])
        if line >= n:
            break
        if times is not None and last < line - 1:  # the line before is a row of the stage
            parser.carry(times[line - 1].as_py())
        offset, text, length, terminated = piece.line(line)
        before = batch.record_count
        line_no = file.line_no + line + 1
        if read_line(batch, parser, file.path, line_no, offset, text, length, terminated, piece.cut_short,
                     file.max_line) is not None:
            held_back.append(f"{file.path}:{line_no} (byte {offset})")
            read.lines = line
            break
        got = batch.record_count - before
        read.parser_records += range(line + shift, line + shift + got)
        shift += got - 1
        read.taken.append((k, line, shift))
        last = line
        if parser.scope != read.scopes[-1][2]:
            read.scopes.append((k, line, parser.scope))
    read.records = read.lines + shift
    read.stage_records = read.lines - len(read.taken)
    return read


def _learn(parser, votes: pa.ChunkedArray, read: _Read) -> None:
    """Tell the parser the votes of the piece's rows that are stored (not read by the parser,
    which voted for those itself, and not held back)."""
    taken = {line for _, line, _ in read.taken}
    counts = Counter(v for i, v in enumerate(votes.slice(0, read.lines).to_pylist()) if v is not None and i not in taken)
    if counts:
        parser.learn(counts)


def _table(rows: list[tuple], **types: pa.DataType) -> pa.Table:
    columns = list(zip(*rows)) if rows else [[] for _ in types]
    return pa.table({name: pa.array(col, t) for (name, t), col in zip(types.items(), columns)})
