"""A file's lines as ingest reads them: cut from the stream in pieces of whole lines, and each line
into a batch (its records, or its quarantine row with the reason), whichever way the file is read
(line by line, collector/ingest.py, or in bulk, collector/bulk.py)."""

from __future__ import annotations

from typing import Callable, Iterator

from . import sources
from .records import BatchBuilder, Unstorable

MAX_LINE = 1 << 20  # longer lines are quarantined, not parsed, unless a source allows more


def read_pieces(f, start: int, max_line: int = MAX_LINE,
                chunk_size: int = 1 << 22) -> Iterator[tuple[int, bytes | None, int, bool]]:
    """The stream from `start` in pieces: (offset, bytes, length, terminated) of whole lines, the
    last of which ends without its newline only at the end of the stream; or (offset, None,
    length, terminated) of one line longer than max_line that did not fit a chunk, whose bytes
    are skipped, not held."""
    offset = start
    pending = b""
    too_long = 0  # bytes of an over-long line skipped so far
    while True:
        chunk = f.read(chunk_size)
        if not chunk:
            break
        if too_long:
            nl = chunk.find(b"\n")
            if nl < 0:
                too_long += len(chunk)
                continue
            yield offset, None, too_long + nl, True
            offset += too_long + nl + 1
            too_long = 0
            chunk = chunk[nl + 1:]
        data = pending + chunk if pending else chunk
        cut = data.rfind(b"\n") + 1
        if cut:
            yield offset, data[:cut], cut, True
            offset += cut
        pending = data[cut:]
        if len(pending) > max_line:
            too_long = len(pending)
            pending = b""
    if too_long:
        yield offset, None, too_long, False
    elif pending:
        yield offset, pending, len(pending), False


def iter_lines(f, start: int, max_line: int = MAX_LINE, chunk_size: int = 1 << 22,
               on_piece: Callable[[int, bytes | None], None] | None = None) -> Iterator[tuple[int, bytes | None, int, bool]]:
    """(offset, line or None when longer than max_line, length, newline-terminated) from `start`;
    `on_piece(offset, bytes)` is told each piece (read_pieces) before its lines."""
    for offset, data, length, terminated in read_pieces(f, start, max_line, chunk_size):
        if on_piece is not None:
            on_piece(offset, data)
        if data is None:
            yield offset, None, length, terminated
            continue
        lines = data.split(b"\n")
        last = lines.pop()  # empty when the piece ends with its newline
        for line in lines:
            yield offset, line if len(line) <= max_line else None, len(line), True
            offset += len(line) + 1
        if last:
            yield offset, last, len(last), False


def read_line(batch: BatchBuilder, parser, path: str, line_no: int, offset: int, line: bytes | None, length: int,
              terminated: bool, cut_short: str | None, max_line: int) -> str | None:
    """Read one line (None: over max_line) into the batch: its records, or its quarantine row.
    Returns the reason an unfinished last line (no newline yet) cannot be read: it is left for a
    later ingest, when the file has grown past it (the writer may be in the middle of it)."""
    if line is None:
        reason = f"line of {length} bytes is over the {max_line}-byte limit"
    elif not terminated and cut_short:
        reason = "cut off with its gzip stream"
    elif line.strip():
        reason = _parse_into(batch, parser, line, offset, terminated)
        if isinstance(reason, _Unread):
            batch.note_unread(path, offset, line_no, reason.why)
            reason = None
    else:
        reason = None
    if reason is not None:
        if not terminated:
            return reason
        batch.quarantine(path, offset, line_no, reason, line or b"")
    return None


class _Unread(str):
    """Why a line was stored as text: its format could not read it."""

    @property
    def why(self) -> str:
        return str(self)


def _parse_into(batch: BatchBuilder, parser, line: bytes, offset: int, terminated: bool) -> str | None:
    """Parse a line into the batch; why it cannot be stored, if it cannot. A line of a text log
    its format cannot read is stored as a line of text with the reason (the parser's `unread`;
    returned as _Unread), once it is whole: while it has no newline, the writer may be in the
    middle of it."""
    try:
        batch.add(parser.parse(line), offset)
    except sources.Unparseable as e:
        if not (terminated and hasattr(parser, "unread")):
            return str(e)
        try:
            batch.add(parser.unread(line, str(e)), offset)
        except (sources.Unparseable, Unstorable) as again:
            return str(again)
        return _Unread(e)
    except Unstorable as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - a line no parser expected must not stop the file
        return f"unreadable ({type(e).__name__}: {e})"
    return None
