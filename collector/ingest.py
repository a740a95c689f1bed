"""Reading files into the store: find them, recognize their format, resume where an earlier run
stopped, parse line by line, quarantine what cannot be read, write in Arrow batches.

Resuming: an origin is known by a hash of its first bytes (up to HEAD bytes), so the same bytes
under another name, a copy, or a rotated file are recognized, and a file that grew is read from
where the last run stopped. Each batch is stored together with the position it reaches.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import os
import stat
import zlib
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable

from . import bulk, line_blocks, sources
from .lines import MAX_LINE, iter_lines, read_line, read_pieces
from .records import BatchBuilder
from .store import BulkRows, Origin, Store, store_errors_named

HEAD = 4096  # bytes hashed to recognize a file
_OWN_FILES = (".duckdb", ".duckdb.wal", ".collector.sock")  # a store (and its collector's files) kept next to the logs
BATCH_RECORDS = 20_000  # held as Python objects until written: this bounds memory
# Lines read in bulk (bulk.py) that a transaction holds at most: their bytes are held until written
# (and their rows in DuckDB, within its budget), while planning each stage's queries costs the same
# whatever its size.
BULK_BATCH_RECORDS = 250_000
SNIFF_LINES = 20
# Stream bytes read between two commits even when they hold no records (a file of blank lines, a
# gzip bomb of newlines): a long read keeps its progress. Also what a bulk stage reads at most: its
# lines are held beside DuckDB's budget while it reads them, so this bounds a large ingest's peak
# memory (docs/performance.md, memory).
FLUSH_BYTES = 48 << 20


class InputError(Exception):
    """Input that cannot be read at all (missing path, unknown format); one line for the user."""


@dataclass
class SourceSummary:
    files: int = 0
    records: int = 0
    quarantined: int = 0


@dataclass
class IngestResult:
    by_source: dict[str, SourceSummary] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # one line per file that could not be read
    skipped: list[str] = field(default_factory=list)  # files in folders whose format is unknown
    quarantine_samples: list[str] = field(default_factory=list)
    held_back: list[str] = field(default_factory=list)  # unterminated last lines left for later
    unread: int = 0  # lines of text logs their format could not read, stored as text with why
    unread_samples: list[str] = field(default_factory=list)
    # How the local times of the files read were read (local_time.py), by source: what was assumed
    # is said, never left to be guessed.
    clocks: dict[str, set[str]] = field(default_factory=dict)

    @property
    def quarantined(self) -> int:
        return sum(s.quarantined for s in self.by_source.values())

    @property
    def records(self) -> int:
        return sum(s.records for s in self.by_source.values())


def expand_paths(paths: list[str], problems: list[str] | None = None) -> list[tuple[Path, bool]]:
    """Files named by paths, folders (recursively) and globs; the flag says it was named directly.
    A named path that is not a readable file or folder is an InputError; what cannot be read inside
    a folder (a subfolder, a fifo or device, a broken link) is said in `problems`, one line each."""
    found: list[tuple[Path, bool]] = []
    for p in paths:
        if any(ch in p for ch in "*?["):
            matches = sorted(glob.glob(p, recursive=True))
            if not matches:
                raise InputError(f"no files match {p}")
            found += [(Path(m), False) for m in matches if os.path.isfile(m)]
        elif os.path.isdir(p):
            found += _walk(p, problems if problems is not None else [])
        elif os.path.isfile(p):
            found.append((Path(p), True))
        else:
            raise InputError(_not_a_file(p))
    return found


def _walk(folder: str, problems: list[str]) -> list[tuple[Path, bool]]:
    found, unreadable = [], []
    for root, dirs, files in os.walk(folder, onerror=unreadable.append):
        dirs.sort()
        for name in sorted(files):
            if name.startswith(".") or name.endswith(_OWN_FILES):
                continue
            path = os.path.join(root, name)
            if os.path.isfile(path):
                found.append((Path(path), False))
            else:  # never opened: a fifo would block the read until someone writes to it
                problems.append(_not_a_file(path))
    for e in unreadable:
        if e.filename == folder:
            raise InputError(f"cannot read the folder {folder}: {e.strerror}")
        problems.append(f"cannot read the folder {e.filename}: {e.strerror}")
    return found


def _not_a_file(path: str) -> str:
    """Why a path that is neither a file nor a folder cannot be read."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return f"no such file or folder: {path}" + (" (a link to nothing)" if os.path.islink(path) else "")
    except OSError as e:
        return f"cannot read {path}: {e.strerror}"
    kind = ("a fifo (a named pipe)" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file")
    return (f"{path} is {kind}, not a file or folder: trace-join reads files, so that it can resume "
            f"them where it stopped; save the stream to a file first")


class GzipContent:
    """The decompressed bytes of a gzip file. Where the stream ends early (the file is still being
    written, or was cut short) or turns corrupt, reading ends there and `cut_short` says why: the
    complete lines before it are stored. (gzip's own read() raises there, losing what it had
    decompressed of that read; read1() hands each piece over as it comes.)"""

    def __init__(self, path: Path):
        self._file = gzip.open(path, "rb")
        self.cut_short: str | None = None

    def read(self, n: int) -> bytes:
        pieces = []
        while n > 0 and self.cut_short is None:
            try:
                piece = self._file.read1(n)
            except EOFError:
                self.cut_short = "its gzip stream ends early (the file is still being written, or was cut short)"
                break
            except (gzip.BadGzipFile, zlib.error) as e:
                self.cut_short = f"its gzip stream is corrupt ({e})"
                break
            if not piece:
                break
            pieces.append(piece)
            n -= len(piece)
        return b"".join(pieces)

    def rewind(self) -> None:
        self._file.seek(0)
        self.cut_short = None

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "GzipContent":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _open(path: Path):
    """Binary reader over the file's bytes, decompressing gzip (recognized by its magic)."""
    f = open(path, "rb")
    if f.read(2) == b"\x1f\x8b":
        f.close()
        return GzipContent(path), True
    f.seek(0)
    return f, False


def _head_lines(head: bytes) -> list[bytes]:
    """The complete non-empty lines at the start of a file (a cut-off last line is left out)."""
    lines = head.split(b"\n")
    if len(head) == HEAD and len(lines) > 1:
        lines.pop()
    return [ln for ln in lines[:SNIFF_LINES] if ln.strip()]


class Ingester:
    """Reads files into one store; `progress(bytes_done)` is called as bytes are consumed.
    `batch_records`: records per transaction (the collector commits smaller batches, more often;
    by default BATCH_RECORDS, or BULK_BATCH_RECORDS for lines read in bulk).
    `worker`: the process the files come from, for formats that do not name it; `tz`: the zone of
    the servers' local times, for formats that write them without one (local_time.py).
    The requests tables are not built here but when a reader needs them (requests.build_requests),
    so ingest stores records at the pace it reads them."""

    def __init__(self, store: Store, progress: Callable[[int], None] | None = None,
                 batch_records: int | None = None, worker: str | None = None, keep_content: bool = False,
                 tz: str | None = None):
        self.store = store
        self.progress = progress or (lambda n: None)
        self.batch_records = batch_records or BATCH_RECORDS
        self.worker = worker  # the process the files come from, for formats that name none
        self.keep_content = keep_content  # prompt and reply text, for formats that would store it
        self.tz = tz  # the zone of local times, for formats whose times have none
        self._batch = BatchBuilder()  # what was read line by line and is not committed yet, of one file or many
        self._bulk = bulk.BulkReader(store, self._reached)  # what was staged to be read in bulk
        self._kept = line_blocks.Keeper()  # the bytes read, kept in the store with their records
        self._bulk_lines = batch_records or BULK_BATCH_RECORDS
        self._aliases: dict[str, str] = {}  # other names of workers, learned since the last commit
        self._states: dict[int, dict] = {}  # what parsers learned of their files (state()), by origin
        self.clocks: dict[str, set[str]] = {}  # how the files read had their local times read, by source

    def ingest_paths(self, paths: list[str]) -> IngestResult:
        """Read the files the paths name (expand_paths)."""
        problems: list[str] = []
        return self.ingest_files(expand_paths(paths, problems), problems)

    def ingest_files(self, files: list[tuple[Path, bool]], problems: list[str]) -> IngestResult:
        """Read the files expand_paths found, many small ones into one transaction; `problems`, what
        it could not read, is reported with the errors. StoreFull when the disk fills up,
        OutOfMemory when DuckDB's memory budget runs out: what was committed until then stays, with
        each file's position, and the same call goes on from there."""
        result = IngestResult(errors=list(problems))
        with store_errors_named(self.store.path), self.store.ids_merged_at_end():
            for path, named in files:
                try:
                    self._read_file(path, result, named=named)
                except OSError as e:
                    result.errors.append(f"{path}: {e.strerror or e}")
            self._commit(result)
            self.store.settle_workers()
        result.clocks = self.clocks
        return result

    def ingest_file(self, path: Path, result: IngestResult, *, named: bool = True,
                    max_bytes: int | None = None) -> bool:
        """Read the file from where its origin stopped, and commit what was read. `max_bytes`:
        stop after the batch that passes this many bytes (the collector's writer takes turns);
        True when it stopped early."""
        with store_errors_named(self.store.path):
            more = self._read_file(path, result, named=named, max_bytes=max_bytes)
            self._commit(result)
        return more

    def _read_file(self, path: Path, result: IngestResult, *, named: bool, max_bytes: int | None = None) -> bool:
        f, compressed = _open(path)
        with f:
            try:
                head = f.read(HEAD)
            except OSError as e:
                result.errors.append(f"{path}: unreadable ({e})")
                return False
            if not head:
                if compressed and f.cut_short:
                    result.errors.append(f"{path}: {f.cut_short}, before any line")
                return False
            module = sources.detect(str(path), _head_lines(head))
            if module is None:
                if named:
                    result.errors.append(f"{path}: not a format trace-join reads (see docs/formats.md)")
                else:
                    result.skipped.append(str(path))
                return False
            if self._bulk.holds_head(head):
                self._commit(result)  # how far a staged file that starts so was read is known once its lines are
            origin = self._origin_for(path, module.NAME, head, compressed)
            result.by_source.setdefault(module.NAME, SourceSummary()).files += 1
            if compressed:
                f.rewind()
                _skip(f, origin.consumed)
            else:
                f.seek(origin.consumed)
            parser = self._parser(module, path, origin)
            settings = _bulk_settings(module, parser)
            if settings is not None:
                return self._read_in_bulk(f, path, origin, module, parser, settings, result, max_bytes)
            return self._read(f, path, origin, module, parser, result, max_bytes)

    def _parser(self, module, path: Path, origin: Origin):
        given = {"worker": self.worker} if self.worker and getattr(module, "WORKER_FROM_USER", False) else {}
        if self.keep_content and getattr(module, "CONTENT_FROM_USER", False):
            given["keep_content"] = True
        if self.tz and getattr(module, "LOCAL_TIMES", False):
            given["tz"] = self.tz
        parser = module.LineParser(str(path), **given)
        if origin.worker:
            parser.worker, parser.role = origin.worker, origin.role
        state = self.store.parser_state(origin.origin_id) if hasattr(parser, "restore") else None
        if state is not None:
            parser.restore(state)
        return parser

    def _origin_for(self, path: Path, source: str, head: bytes, compressed: bool) -> Origin:
        store = self.store
        size = None if compressed else path.stat().st_size
        for head_len in sorted({len(head), *store.head_lengths()}, reverse=True):
            if head_len > len(head):
                continue
            fingerprint = hashlib.sha256(head[:head_len]).hexdigest()
            origin = store.find_origin(head_len, fingerprint, size)
            if origin is None:
                continue
            if head_len < len(head):  # the file grew: recognize it by its longer head from now on
                store.recognize_by(origin, len(head), hashlib.sha256(head).hexdigest())
            origin.path = str(path)
            return origin
        return store.new_origin(str(path), source, len(head), hashlib.sha256(head).hexdigest())

    def _read(self, f, path: Path, origin: Origin, module, parser, result: IngestResult, max_bytes: int | None) -> bool:
        if self._bulk:
            self._commit(result)  # the lines staged before come first, in record order
        batch = self._batch
        batch.reading(module.NAME, origin)
        line_no = origin.lines
        start = consumed = flushed = origin.consumed
        max_line = getattr(module, "MAX_LINE", MAX_LINE)
        try:
            keep = partial(self._kept.add, origin.origin_id)
            for offset, line, length, terminated in iter_lines(f, origin.consumed, max_line, on_piece=keep):
                line_no += 1
                if read_line(batch, parser, str(path), line_no, offset, line, length, terminated,
                             getattr(f, "cut_short", None), max_line) is not None:
                    result.held_back.append(f"{path}:{line_no} (byte {offset})")
                    line_no -= 1
                    break
                consumed = offset + length + (1 if terminated else 0)
                if len(batch) >= self.batch_records or consumed - flushed >= FLUSH_BYTES:
                    self._reached(origin, parser, consumed, line_no)
                    self._commit(result)
                    batch.reading(module.NAME, origin)
                    flushed = consumed
                    if max_bytes is not None and consumed - start >= max_bytes:
                        return True
        finally:  # what the batch holds of this file is what it read up to here, even on an error
            self._reached(origin, parser, consumed, line_no)
        self._cut_short(f, path, consumed, result)
        return False

    def _read_in_bulk(self, f, path: Path, origin: Origin, module, parser, settings: dict[str, str],
                      result: IngestResult, max_bytes: int | None) -> bool:
        """Stage the file's lines for bulk.py, which reads them with the module's BULK rules, and
        read the stage whenever it is full."""
        if len(self._batch) or not self._bulk.takes(module.BULK):
            self._commit(result)  # what was read before comes first, in record order
        file = self._bulk.open(str(path), module.NAME, module.BULK, settings, origin, parser,
                               getattr(module, "MAX_LINE", MAX_LINE))
        start = origin.consumed
        for offset, data, length, terminated in read_pieces(f, origin.consumed, file.max_line, bulk.CHUNK_BYTES):
            self._bulk.add(file, offset, data, length, terminated, getattr(f, "cut_short", None))
            self._kept.add(origin.origin_id, offset, data)
            if self._bulk.bytes >= FLUSH_BYTES or self._bulk.lines >= self._bulk_lines:
                self._commit(result)
                if max_bytes is not None and file.consumed - start >= max_bytes:
                    return True
        if getattr(f, "cut_short", None):
            self._commit(result)  # how far the file was read is known once its staged lines are
        self._cut_short(f, path, file.consumed, result)
        return False

    @staticmethod
    def _cut_short(f, path: Path, consumed: int, result: IngestResult) -> None:
        if getattr(f, "cut_short", None):
            result.errors.append(f"{path}: {f.cut_short} after {consumed:,} bytes of its content: the lines "
                                 f"before are stored, and ingesting it again reads on from there")

    def _reached(self, origin: Origin, parser, consumed: int, line_no: int) -> None:
        """The batch holds the origin's records up to `consumed`: its position moves there, with
        what the parser learned of the file, to be written with the batch."""
        self.progress(consumed - origin.consumed)
        self._kept.reached(origin.origin_id, consumed)
        origin.consumed, origin.lines = consumed, line_no
        origin.worker, origin.role = parser.worker, parser.role
        origin.clock = getattr(parser, "clock", None)
        if origin.clock:
            self.clocks.setdefault(origin.source, set()).add(origin.clock)
        self._aliases.update(getattr(parser, "aliases", {}))
        state = parser.state() if hasattr(parser, "state") else None
        if state is not None:
            self._states[origin.origin_id] = state

    def _commit(self, result: IngestResult) -> None:
        """Write what was read: the staged lines, or the batch read line by line."""
        if self._bulk:
            staged = self._bulk.flush()
            result.held_back += staged.held_back
            self._write(staged.batch, result, staged.rows)
            self._bulk.release()
        if len(self._batch) or self._batch.origins:
            self._write(self._batch, result)

    def _write(self, batch: BatchBuilder, result: IngestResult, rows: BulkRows | None = None) -> None:
        for source, (records, quarantined) in batch.counts_by_source().items():
            summary = result.by_source.setdefault(source, SourceSummary())
            summary.records += records
            summary.quarantined += quarantined
        for source, records in (rows.records_by_source.items() if rows else ()):
            result.by_source.setdefault(source, SourceSummary()).records += records
        result.unread += batch.unread
        result.unread_samples += batch.unread_samples[:5 - len(result.unread_samples)]
        aliases, states, self._aliases, self._states = self._aliases, self._states, {}, {}
        try:
            quarantined = self.store.write_batch(batch, bulk=rows, aliases=aliases, parser_states=states,
                                                 blocks=self._kept.take(batch.origins))
        except BaseException:
            self._kept.forget()  # read again from the positions stored, with the lines' records
            raise
        for i in range(min(quarantined.num_rows, 5 - len(result.quarantine_samples))):
            q = quarantined.slice(i, 1).to_pylist()[0]
            result.quarantine_samples.append(f"{q['path']}:{q['line_no']} (byte {q['offset']}): {q['reason']}")


def _bulk_settings(module, parser) -> dict[str, str] | None:
    """The values of the module's BULK select for this file's parser; None when the file is read
    line by line (the module has no BULK, or the parser says its file cannot be read so)."""
    if getattr(module, "BULK", None) is None:
        return None
    return parser.bulk_settings() if hasattr(parser, "bulk_settings") else {}


def _skip(f, n: int) -> None:
    while n > 0:
        chunk = f.read(min(n, 1 << 22))
        if not chunk:
            break
        n -= len(chunk)
