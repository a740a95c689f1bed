"""The collector's one writer thread: everything `trace-join collect` stores goes through it.

DuckDB lets one process write, and one thread doing all the writing keeps record ids, origin
positions and transactions simple. Receivers, the tailer and scrapers put work on a bounded queue;
the thread takes whatever is queued (up to BATCH_RECORDS records: under load, batches grow to what
arrived during the previous commit; idle, a body is committed as soon as it arrives), commits each
origin's share in one transaction through Store.write_batch, and only then resolves the
submitters' futures. So an acknowledgement always follows a commit, and a crash before the commit
leaves nothing acknowledged. A body the store cannot hold (the receivers reject such spans before,
so this is the last guard) is refused alone, with `Unstorable`, and the bodies beside it are
committed; a failure of the store itself (a full disk, its memory budget) fails the bodies of the
transaction it struck, for their clients to retry, and no others: the other origins' commits and
the jobs of the round go on. A body stored before (a client's retry) is acknowledged and nothing
else is done with it.

The queue is bounded by the records it holds. A receiver that finds it full gets `Busy` at once
(and tells its client to retry later); the tailer and scrapers wait for room. Memory stays bounded
whatever the input rate.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

from ..duckdb_engine import duckdb
from ..records import BatchBuilder, Record, Unstorable
from ..store import Origin, Received, Store, store_errors_named

QUEUE_RECORDS = 50_000  # records waiting to be written, at most (one bigger body may wait alone)
BATCH_RECORDS = 5_000  # records taken into one round of commits
PRUNE_EVERY_S = 600  # how often the digests of bodies no client retries any more are forgotten


class Busy(Exception):
    """The writer's queue is full (or the writer has stopped): try again later."""


@dataclass
class Body:
    """What one received body (an OTLP export, a scraped /perf_metrics answer) adds to the store."""

    origin: str  # the receiver's origin, e.g. "otlp/http" or "perf_metrics:http://host:port/perf_metrics"
    source: str  # the records' `source`
    sha256: str  # of the body as received: a body stored once is not stored again
    records: list[Record] = field(default_factory=list)
    raw: bytes | None = None  # kept in `received.body` until parsed (scraped answers)
    aliases: dict[str, str] = field(default_factory=dict)  # other names of the records' workers: {name: worker}


@dataclass
class _Work:
    item: Body | Callable[[Store], Any]
    weight: int
    future: Future = field(default_factory=Future)


class _BoundedQueue:
    """A FIFO bounded by the total weight (records) of what it holds."""

    def __init__(self, capacity: int):
        self._capacity = capacity
        self._items: deque[_Work] = deque()
        self._weight = 0
        self._closed = False
        self._changed = threading.Condition()

    def put(self, work: _Work, wait: bool) -> None:
        with self._changed:
            # An item heavier than the whole queue is still taken, alone, or it could never go in.
            while self._weight and self._weight + work.weight > self._capacity and not self._closed:
                if not wait:
                    raise Busy("the writer's queue is full")
                self._changed.wait()
            if self._closed:
                raise Busy("the writer has stopped")
            self._items.append(work)
            self._weight += work.weight
            self._changed.notify_all()

    def take(self, max_weight: int) -> list[_Work] | None:
        """At least one item (waiting for it), then more up to max_weight; None once closed and empty."""
        with self._changed:
            while not self._items and not self._closed:
                self._changed.wait()
            taken: list[_Work] = []
            weight = 0
            while self._items and (not taken or weight + self._items[0].weight <= max_weight):
                work = self._items.popleft()
                taken.append(work)
                weight += work.weight
            self._weight -= weight
            self._changed.notify_all()
            return taken or None

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()


class Writer:
    def __init__(self, store: Store, report: Callable[[str], None],
                 queue_records: int = QUEUE_RECORDS, batch_records: int = BATCH_RECORDS):
        self.store = store
        self.report = report  # one line about a failure no submitter hears of
        self.batch_records = batch_records
        self.commits = 0  # rounds that stored something; the snapshot skips a store that did not change
        self.records_stored = 0
        self._queue = _BoundedQueue(queue_records)
        self._origins: dict[str, Origin] = {}
        self._pruned_at = 0.0
        self._thread = threading.Thread(target=self._loop, name="writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Refuse new work, write everything queued, and return when it is committed."""
        self._queue.close()
        self._thread.join()

    def submit(self, body: Body, *, wait: bool) -> Future:
        """Queue a body; the future resolves once it is committed. `wait=False`: Busy when full."""
        work = _Work(body, max(1, len(body.records)))
        self._queue.put(work, wait)
        return work.future

    def run(self, job: Callable[[Store], Any]) -> Future:
        """Run job(store) on the writer thread, in turn with the commits; waits for room."""
        work = _Work(job, 1)
        self._queue.put(work, wait=True)
        return work.future

    def origin(self, key: str, source: str) -> Origin:
        """The origin of a receiver or scraper (writer thread only). It has no file head: its
        fingerprint is its name, and `consumed` numbers the bodies it received."""
        if key not in self._origins:
            self._origins[key] = self.store.find_origin(0, key) or self.store.new_origin(key, source, 0, key)
        return self._origins[key]

    # -- the thread ----------------------------------------------------------------------------

    def _loop(self) -> None:
        while (taken := self._queue.take(self.batch_records)) is not None:
            self._failing_alone(taken, lambda: self._round(taken))
            # The round's records are let go before waiting for the next: a receiver's budget
            # (otlp.IntakeBudget) stops counting them once they are committed.
            del taken

    def _failing_alone(self, works: list[_Work], step: Callable[[], None]) -> None:
        """Run a step of a round. When it fails, the submissions it was for and has not settled
        hear of it, and no others: one origin's failed commit leaves the other origins' commits,
        the jobs and the round's count to go on."""
        try:
            with store_errors_named(self.store.path):
                step()
        except Exception as e:  # noqa: BLE001 - the store failed: its submitters hear of it; go on
            for work in works:
                if not work.future.done():
                    work.future.set_exception(e)
            self.report(f"writer: {type(e).__name__}: {e}")

    def _round(self, taken: list[_Work]) -> None:
        first_record_id = self.store.allocate_record_ids(0)
        bodies: dict[str, list[_Work]] = {}
        for work in taken:
            if isinstance(work.item, Body):
                bodies.setdefault(work.item.origin, []).append(work)
        for group in bodies.values():
            self._failing_alone(group, lambda group=group: self._commit_bodies(group))
        for work in taken:
            if not isinstance(work.item, Body):
                try:
                    work.future.set_result(work.item(self.store))
                except Exception as e:  # noqa: BLE001 - the job's submitter decides what it means
                    work.future.set_exception(e)
        stored = self.store.allocate_record_ids(0) - first_record_id
        if stored:
            self.commits += 1
            self.records_stored += stored
            # As `ingest` does after its files: the roles the entry server names for workers, and
            # every worker name settled again.
            self.store.settle_workers()
        self._prune_received()

    def _commit_bodies(self, group: list[_Work]) -> None:
        """One origin's bodies in one transaction, with their sha256; a body already stored (a
        client's retry of an export whose answer it lost) is acknowledged without storing it again.
        The same body submitted twice meanwhile is stored once, and both hear how it went."""
        first = group[0].item
        origin = self.origin(first.origin, first.source)
        stored = self.store.received_already([w.item.sha256 for w in group])
        bodies: dict[str, list[_Work]] = {}
        for work in group:
            bodies.setdefault(work.item.sha256, []).append(work)
        for digest in stored & bodies.keys():
            _settle(bodies.pop(digest))
        if bodies:  # none when every body of the group is a retry
            self._store(origin, list(bodies.values()))

    def _store(self, origin: Origin, bodies: list[list[_Work]]) -> None:
        """Commit the bodies (each a list of the submissions of one body) in one transaction. A body
        the store cannot hold is refused with Unstorable, for good, and the others are stored
        without it: one is found as its records go into the batch; one whose tables cannot be built
        by halving the group until it is alone. A failure of the store itself (a full disk) fails
        them all, to be retried."""
        source = bodies[0][0].item.source
        batch = BatchBuilder(source, origin)
        kept, offsets, digests, raws, aliases = [], [], [], [], {}
        number = origin.consumed
        for works in bodies:
            body = works[0].item
            offset = self.store.body_offset(number, body.sha256)
            try:
                batch.add(body.records, offset)
            except Unstorable as e:
                _settle(works, e)
                continue
            kept.append(works)
            offsets.append(offset)
            digests.append(body.sha256)
            raws.append(body.raw)
            aliases.update(body.aliases)
            number += 1
        if not kept:
            return
        before = origin.consumed
        origin.consumed = number
        try:
            self.store.write_batch(batch, aliases=aliases, received=Received(origin.origin_id, offsets, digests, raws))
        except BaseException as e:
            origin.consumed = before  # nothing was stored: the numbers are free again
            if not _records_at_fault(e):
                raise
            if len(kept) == 1:
                _settle(kept[0], Unstorable(f"its records cannot be stored: {type(e).__name__}: {e}"))
            else:
                self._store(origin, kept[:len(kept) // 2])
                self._store(origin, kept[len(kept) // 2:])
            return
        for works in kept:
            _settle(works)

    def _prune_received(self) -> None:
        if time.monotonic() - self._pruned_at < PRUNE_EVERY_S:
            return
        self._pruned_at = time.monotonic()
        self.store.forget_received()


def _settle(works: list[_Work], error: Exception | None = None) -> None:
    for work in works:
        if error is None:
            work.future.set_result(None)
        else:
            work.future.set_exception(error)


def _records_at_fault(e: BaseException) -> bool:
    """Whether a failed write was the records' doing (a value Arrow or the store's columns cannot
    take), which no retry mends, rather than the store's own (DuckDB, the disk, memory)."""
    return isinstance(e, (ValueError, TypeError, OverflowError)) and not isinstance(e, duckdb.Error)
