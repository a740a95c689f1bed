"""Every file's bytes as ingest read them, kept in the store: a record's line as it was written,
available to every reader after the file itself is gone (rotated, deleted, left on a node).

A file's stream is kept in blocks of whole lines, each about BLOCK_BYTES before compression,
compressed with zstd, one row of `line_blocks` each: (origin, offset of its first byte, its length,
its bytes). Blocks are written in the same transaction as the records of their lines and the
position their file reaches, so a store never holds the bytes of a line without its records or the
other way round. A line over the length limit, which ingest skips without holding it, is not kept.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the store imports this module for its schema: every command would import these
    from concurrent.futures import Future, ThreadPoolExecutor

    import pyarrow as pa

BLOCK_BYTES = 256 << 10  # a reader decompresses a whole block for one line: small enough to be quick
LEVEL = 1  # on Dynamo's lines both faster and smaller than 3 (docs/performance.md)

SCHEMA = """
CREATE TABLE IF NOT EXISTS line_blocks (
    origin_id BIGINT NOT NULL,
    "offset"  BIGINT NOT NULL,   -- of the block's first byte in its origin's (decompressed) stream
    length    INTEGER NOT NULL,  -- its bytes before compression
    -- zstd already: stored as it is, since a block DuckDB compressed again is read with its
    -- neighbours, and a lookup reads a few blocks of many
    bytes     BLOB NOT NULL USING COMPRESSION uncompressed
);
"""

def _zstd():
    try:
        from compression import zstd  # Python 3.14 on
    except ImportError:
        from backports import zstd
    return zstd


# zstd lets go of the GIL while it compresses: blocks are compressed beside the parsing and writing.
_compressing: ThreadPoolExecutor | None = None


def _compress(data: memoryview) -> Future:
    global _compressing
    if _compressing is None:
        from concurrent.futures import ThreadPoolExecutor

        _compressing = ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1)), thread_name_prefix="line-blocks")
    return _compressing.submit(_zstd().compress, data, LEVEL)


@dataclass
class _Block:
    origin_id: int
    offset: int
    length: int
    compressed: Future


@dataclass
class Keeper:
    """The bytes of each file read since its position was last stored, and the blocks they make
    once their records are in a batch (`reached`), until that batch is written (`take`)."""

    # origin → pieces not in blocks yet: (offset in the stream of data[begin], data, begin)
    _pending: dict[int, list[tuple[int, bytes, int]]] = field(default_factory=dict)
    _blocks: list[_Block] = field(default_factory=list)

    def add(self, origin_id: int, offset: int, data: bytes | None) -> None:
        """Bytes of the origin's stream from `offset`: whole lines, in the stream's order."""
        if data:
            self._pending.setdefault(origin_id, []).append((offset, data, 0))

    def reached(self, origin_id: int, consumed: int) -> None:
        """The origin's lines before `consumed` are in the batch: their bytes become blocks."""
        pieces = self._pending.pop(origin_id, None)
        if not pieces:
            return
        kept = []
        for offset, data, begin in pieces:
            if offset >= consumed:
                kept.append((offset, data, begin))
                continue
            upto = min(len(data), begin + consumed - offset)
            self._cut(origin_id, offset, data, begin, upto)
            if upto < len(data):
                kept.append((offset + upto - begin, data, upto))
        if kept:
            self._pending[origin_id] = kept

    def _cut(self, origin_id: int, offset: int, data: bytes, begin: int, end_of_data: int) -> None:
        """Blocks of whole lines out of data[begin:end_of_data] (whole lines itself), each
        compressed by the pool."""
        start = begin
        while start < end_of_data:
            end = data.rfind(b"\n", start, min(start + BLOCK_BYTES, end_of_data)) + 1
            if end <= start:  # a line longer than a block: the block is that line
                end = data.find(b"\n", start, end_of_data) + 1 or end_of_data
            if end_of_data - end < BLOCK_BYTES // 8:  # rather than a small block at the end
                end = end_of_data
            self._blocks.append(_Block(origin_id, offset + start - begin, end - start,
                                       _compress(memoryview(data)[start:end])))
            start = end

    def forget(self) -> None:
        """Drop what is pending and the blocks not written (a batch that was not stored)."""
        self._pending.clear()
        self._blocks.clear()

    def take(self, origin_ids) -> pa.Table:
        """The blocks of these origins made so far, as rows of line_blocks: those of the lines
        whose records a batch holds, to be written with it."""
        import pyarrow as pa

        origin_ids = set(origin_ids)
        blocks = [b for b in self._blocks if b.origin_id in origin_ids]
        self._blocks = [b for b in self._blocks if b.origin_id not in origin_ids]
        return pa.table({
            "origin_id": pa.array([b.origin_id for b in blocks], pa.int64()),
            "offset": pa.array([b.offset for b in blocks], pa.int64()),
            "length": pa.array([b.length for b in blocks], pa.int32()),
            "bytes": pa.array([b.compressed.result() for b in blocks], pa.binary()),
        })


def lines_at(con, places: list[tuple[int, int]]) -> dict[tuple[int, int], str]:
    """The line that starts at each (origin, offset), without its newline, as text (invalid UTF-8
    replaced), for the places whose bytes the store (a DuckDB connection) keeps."""
    wanted = sorted(set(places))
    if not wanted:
        return {}
    # Each place's block is found among the blocks' places alone, then each of those blocks is read
    # by its own place: a join that carried the bytes would read every block of the store (hundreds
    # of MB, past DuckDB's memory budget, so from disk on each lookup).
    holding = con.execute(
        'SELECT w.origin_id, w."offset", b."offset" FROM (SELECT unnest($o::BIGINT[]) AS origin_id, '
        'unnest($p::BIGINT[]) AS "offset") w ASOF JOIN (SELECT origin_id, "offset", length FROM line_blocks) b '
        'ON b.origin_id = w.origin_id AND w."offset" >= b."offset" WHERE w."offset" < b."offset" + b.length',
        {"o": [o for o, _ in wanted], "p": [p for _, p in wanted]}).fetchall()
    blocks = sorted({(origin_id, block) for origin_id, _, block in holding})
    if not blocks:
        return {}
    read = con.execute(" UNION ALL ".join(
        'SELECT origin_id, "offset", bytes FROM line_blocks WHERE origin_id = ? AND "offset" = ?' for _ in blocks),
        [n for block in blocks for n in block]).fetchall()
    bytes_of = {(origin_id, offset): data for origin_id, offset, data in read}
    return lines_of_blocks((origin_id, offset, block, bytes_of[(origin_id, block)])
                           for origin_id, offset, block in holding)


def lines_of_blocks(rows) -> dict[tuple[int, int], str]:
    """The lines at (origin, offset) from rows of (origin, offset, the offset of the block that holds
    it, that block's bytes), each block decompressed once."""
    zstd = _zstd()
    blocks: dict[tuple[int, int], bytes] = {}
    found = {}
    for origin_id, offset, block_offset, compressed in rows:
        raw = blocks.get((origin_id, block_offset))
        if raw is None:
            raw = blocks[(origin_id, block_offset)] = zstd.decompress(compressed)
        start = offset - block_offset
        end = raw.find(b"\n", start)
        found[(origin_id, offset)] = raw[start:end if end >= 0 else len(raw)].decode("utf-8", "replace")
    return found
