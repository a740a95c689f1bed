"""`coverage`: how many replies join to the engine-side records of their workers, and which
engine-side records no reply reaches (orphans), per source and per worker.

A reply is a request that reached an entry server (router, frontend, proxy). In a disaggregated
deployment it is fully joined when records of both its context/prefill and its generation/decode
worker join it; an aggregated one when records of its worker do.
"""

from __future__ import annotations

from .requests import build_requests
from .store import Store
from .times import window_iso

FIRST_PHASE = ("ctx", "prefill")
SECOND_PHASE = ("gen", "decode")
WORKER_ROLES = (*FIRST_PHASE, *SECOND_PHASE, "agg", "worker")

_SQL = f"""
CREATE OR REPLACE TEMP TABLE coverage_requests AS
SELECT request_id, has_entry, collided, entry_worker, names_a_request,
       list_has_any(roles, {list(FIRST_PHASE)}) AS first_phase,
       list_has_any(roles, {list(SECOND_PHASE)}) AS second_phase,
       list_has_any(roles, ['agg', 'worker']) AS aggregated,
       list_has_any(roles, {list(WORKER_ROLES)}) AS engine_side,
       -- An orphan: a worker's records about a request that no reply reaches.
       NOT has_entry AND names_a_request AND list_has_any(roles, {list(WORKER_ROLES)}) AS orphan,
       -- The rest of a request no reply reaches: a router's or a client's records, no worker's.
       NOT has_entry AND names_a_request AND NOT list_has_any(roles, {list(WORKER_ROLES)}) AS unanswered
FROM request_summary
WHERE ($since IS NULL OR start_ns >= $since) AND ($until IS NULL OR start_ns <= $until)
"""


# What a source's or a worker's records are, each record in one part, so the parts sum to its records:
# in a reply, in an orphan, in another request no reply reaches, or about no request at all (startup
# and background lines).
RECORD_PARTS = ("in_replies", "orphan_records", "unanswered_records", "no_request_records")
_PARTS = ("count(*) FILTER (WHERE c.has_entry), count(*) FILTER (WHERE c.orphan), "
          "count(*) FILTER (WHERE c.unanswered), count(*) FILTER (WHERE NOT c.has_entry AND NOT c.names_a_request)")


def coverage(store: Store, since_ns: int | None = None, until_ns: int | None = None) -> dict:
    """Coverage of the requests that started in the window (of every request without one; a
    request whose records have no wall-clock time has no start, and counts only then)."""
    since_ns, until_ns = store.requests_window(since_ns, until_ns)
    build_requests(store)
    con = store.con
    con.execute(_SQL, {"since": since_ns, "until": until_ns})
    replies, both, one, aggregated, none_, collided = con.execute("""
        SELECT count(*),
               count(*) FILTER (WHERE first_phase AND second_phase),
               count(*) FILTER (WHERE first_phase <> second_phase),
               count(*) FILTER (WHERE aggregated AND NOT first_phase AND NOT second_phase),
               count(*) FILTER (WHERE NOT engine_side),
               count(*) FILTER (WHERE collided)
        FROM coverage_requests WHERE has_entry""").fetchone()
    orphans, orphan_records = con.execute("""
        SELECT count(DISTINCT c.request_id), count(*)
        FROM coverage_requests c JOIN request_members m USING (request_id)
        WHERE c.orphan""").fetchone()
    by_source = {
        source: {"records": records, **dict(zip(RECORD_PARTS, parts))}
        for source, records, *parts in con.execute(f"""
            SELECT r.source, count(*), {_PARTS}
            FROM records r JOIN request_members m USING (record_id) JOIN coverage_requests c USING (request_id)
            GROUP BY r.source ORDER BY r.source""").fetchall()
    }
    by_worker = [
        {"worker": worker, "role": role, "replies": replies_w, "records": records, **dict(zip(RECORD_PARTS, parts))}
        for worker, role, replies_w, records, *parts in con.execute(f"""
            SELECT w.worker, any_value(w.role), count(DISTINCT w.request_id) FILTER (WHERE c.has_entry),
                   count(*), {_PARTS}
            FROM request_workers w JOIN coverage_requests c USING (request_id)
            WHERE w.worker IS NOT NULL
            GROUP BY w.worker ORDER BY w.worker""").fetchall()
    ]
    return {
        "window": window_iso(since_ns, until_ns),
        "replies": replies,
        "joined": {"both_workers": both, "one_worker": one, "aggregated_worker": aggregated, "no_worker": none_},
        "collided_replies": collided,
        "orphans": {"requests": orphans, "records": orphan_records},
        "by_source": by_source,
        "by_worker": by_worker,
    }
