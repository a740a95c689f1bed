"""`lookup` of an id many requests share (an x-request-id an agent session sends on every call): a
summary of every request first, in the order they started, then the first `--limit` with their
records. Past MANY_CARRIERS records carrying the id, and with the stored requests tables current,
the requests come from those tables and only the shown ones are walked; both ways answer alike."""

from __future__ import annotations

from tracejoin.cli.demo.dynamo_formats import DynamoSample

from tracejoin.collector import lookup as lookup_module
from tracejoin.collector.lookup import MANY_CARRIERS, MOST_SHOWN, lookup
from tracejoin.collector.requests import requests_current, update_requests
from tracejoin.collector.store import open_store

SESSION = "agent-session-many"
SHARED = 120


def _sample(tmp_path, tj) -> list:
    """The session's requests, in the order they started: each logged before the one that started
    before it, so that order is not the order of the lines."""
    sample = DynamoSample()
    sample.add(x_request_id="someone-else")
    shared = [sample.add(x_request_id=SESSION, offset_ms=1000.0 * (SHARED - i)) for i in range(SHARED)]
    sample.add(x_request_id="someone-else-later")
    sample.write(tmp_path / "logs")
    assert tj("ingest", tmp_path / "logs").code == 0
    return shared[::-1]


def _answer(db, **kwargs) -> dict:
    with open_store(db, read_only=True) as store:
        return lookup(store, SESSION, **kwargs)


def test_a_shared_label_counts_its_requests_lists_the_first_then_shows_the_first_in_full(tj, tmp_path, db):
    shared = _sample(tmp_path, tj)
    run = tj("lookup", SESSION, "--limit", "3")
    assert run.code == 0, run.err
    assert run.out.startswith(f"{SESSION} (x_request_id) names {SHARED} requests")
    # the first 20 in the summary, by their ids (Dynamo logs no reply id), and how many more there are
    assert [req.request_id in run.out for req in shared] == [True] * 20 + [False] * (SHARED - 20)
    assert f"and {SHARED - 20} more (--json lists every one)" in run.out
    assert "someone-else" not in run.out.replace(SESSION, "")
    assert "the first 3 with their records" in run.out
    assert [ln for ln in run.out.splitlines() if ln.startswith("request ")] == \
        [f"request {i} of {SHARED} · HTTP 200" for i in (1, 2, 3)]

    data = tj("lookup", SESSION, "--limit", "3", "--json").json()
    assert data["matched"] == SHARED == len(data["summary"])
    assert [row["internal_ids"] for row in data["summary"]] == [[req.request_id] for req in shared]  # as they started
    assert [q["ids"]["internal_id"] for q in data["requests"]] == [[req.request_id] for req in shared[:3]]
    assert [q["request_id"] for q in data["requests"]] == [row["request_id"] for row in data["summary"][:3]]
    every = tj("lookup", SESSION, "--limit", "0", "--json").json()  # all, up to the most one answer shows
    assert (len(every["requests"]), every["requests_cut"]) == (min(SHARED, MOST_SHOWN), SHARED > MOST_SHOWN)


def test_the_stored_requests_and_the_walk_answer_alike(tj, tmp_path, db, monkeypatch):
    _sample(tmp_path, tj)
    with open_store(db, read_only=True) as store:
        assert not requests_current(store)
        walked = lookup(store, SESSION, limit=5)
    with open_store(db) as store:
        update_requests(store)  # as the first `requests` or `coverage` leaves them
        assert requests_current(store)

    seen = []
    original = lookup_module._from_stored_requests
    monkeypatch.setattr(lookup_module, "_from_stored_requests", lambda *a: seen.append(1) or original(*a))
    stored = _answer(db, limit=5)
    assert seen, f"more than {MANY_CARRIERS} records carry the id: read from the stored requests"
    assert stored == walked
    assert len(stored["requests"]) == 5 and stored["matched"] == SHARED
