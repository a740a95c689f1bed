"""Following files and folders (`collect --watch`): what `ingest` does, again whenever a file changes.

Every POLL_S the tailer stats the files it watches and hands each one that changed (size, mtime
or inode) to ingest's own reader (Ingester.ingest_file), run on the writer thread. So everything
`ingest` guarantees holds here too: a file is recognized by its first bytes and read from the
position its origin committed, a torn last line waits until it is complete, unreadable lines are
quarantined. Hence:

- a new file in a watched folder is read from its start;
- a rotated file (renamed, say to app.log.1, and a new app.log begun) keeps its first bytes, so it
  is recognized and finished from where it stopped, while the new file starts a new origin;
- a truncated file no longer holds what its origin read, so it starts a new origin;
- after a crash, each file resumes exactly where the committed position says.

A watched file also brings the files next to it whose names extend its own (app.log.1,
app.log-20261130.gz): where a rotated file goes. A long backlog is read in turns of TURN_BYTES,
so receivers' commits are not held up behind it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable

from ..ingest import Ingester, IngestResult, InputError, expand_paths
from .writer import Busy, Writer

POLL_S = 0.5
TURN_BYTES = 8 << 20  # read per turn on the writer thread
BATCH_RECORDS = 5_000


class Tailer:
    def __init__(self, writer: Writer, paths: list[str], report: Callable[[str], None], keep_content: bool = False,
                 tz: str | None = None):
        self.writer = writer
        self.paths = paths
        self.report = report
        # used on the writer thread only
        self._ingester = Ingester(writer.store, batch_records=BATCH_RECORDS, keep_content=keep_content, tz=tz)
        self._seen: dict[Path, tuple[int, int, int]] = {}  # (inode, size, mtime) when last read to its end
        self._reported: set[str] = set()

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.poll(stop)
            except Busy:  # the writer stopped: the collector is shutting down
                return
            stop.wait(POLL_S)

    def poll(self, stop: threading.Event) -> None:
        watched = self.files()
        for path, named in watched.items():
            if stop.is_set():
                return
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            state = (st.st_ino, st.st_size, st.st_mtime_ns)
            if self._seen.get(path) == state:
                continue
            try:
                more = self._read_turn(path, named)
            except Busy:
                raise
            except Exception as e:  # noqa: BLE001 - gone since the stat, unreadable, or not stored: next poll
                self._report_once(f"{path}: {getattr(e, 'strerror', None) or f'{type(e).__name__}: {e}'}")
                continue
            if not more:
                self._seen[path] = state
        for gone in self._seen.keys() - watched.keys():
            del self._seen[gone]

    def _read_turn(self, path: Path, named: bool) -> bool:
        """Read one turn of the file on the writer thread; True when more is left."""
        result = IngestResult()
        more = self.writer.run(
            lambda _store: self._ingester.ingest_file(path, result, named=named, max_bytes=TURN_BYTES)
        ).result()
        self._report(result)
        return more

    def files(self) -> dict[Path, bool]:
        """Every file watched now; True for files named on the command line."""
        found: dict[Path, bool] = {}
        for p in self.paths:
            if os.path.isdir(p) or any(ch in p for ch in "*?["):
                found.update(self._expand(p))
                continue
            if os.path.isfile(p):
                found[Path(p)] = True
            folder, name = os.path.split(p)
            folder = folder or "."
            if os.path.isdir(folder):
                for sibling in sorted(os.listdir(folder)):
                    if sibling.startswith((name + ".", name + "-")):
                        found.update(self._expand(os.path.join(folder, sibling)))
        return found

    @staticmethod
    def _expand(path: str) -> dict[Path, bool]:
        try:
            return {p: False for p, _ in expand_paths([path])}
        except InputError:  # gone since it was listed, or a glob that matches nothing yet
            return {}

    def _report(self, result: IngestResult) -> None:
        for line in result.errors:
            self._report_once(line)
        for sample in result.quarantine_samples:
            self.report(f"quarantined {sample}")
        if result.quarantined > len(result.quarantine_samples):
            self.report(f"({result.quarantined} lines quarantined in all: `trace-join quarantine` lists them)")

    def _report_once(self, line: str) -> None:
        if line not in self._reported:
            self._reported.add(line)
            self.report(line)
