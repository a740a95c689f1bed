-- Replies in the range that failed, were refused (4xx) or that the client left before the end,
-- newest first, with the first error a record of theirs states. `id` links to the request lookup
-- dashboard (the same id as in the slowest requests).
WITH failed AS (
    SELECT *
    FROM requests
    WHERE has_entry
      AND (error OR disconnected OR TRY_CAST(http_status AS INTEGER) >= 400)
      AND $__timeFilter(make_timestamp(start_ns // 1000))
), first_error AS (
    SELECT rr.request_id,
           first(concat_ws(': ', r.name, rf.error_text) ORDER BY r.time_ns NULLS LAST, r.record_id) AS first_error
    FROM failed f
    JOIN request_records rr USING (request_id)
    JOIN records r USING (record_id)
    JOIN record_facts rf USING (record_id)
    WHERE rf.failed OR rf.disconnected OR TRY_CAST(r.status AS INTEGER) >= 400
    GROUP BY rr.request_id
)
SELECT make_timestamp(f.start_ns // 1000) AS time,
       coalesce(f.reply_ids[1], f.internal_ids[1], f.disagg_request_ids[1], f.x_request_ids[1], f.trace_ids[1]) AS id,
       f.http_status AS status,
       f.error,
       f.disconnected,
       e.first_error,
       coalesce(f.route, f.endpoint) AS route,
       f.entry_worker,
       array_to_string(f.workers, ', ') AS workers,
       f.duration_ms
FROM failed f
LEFT JOIN first_error e USING (request_id)
ORDER BY f.start_ns DESC
LIMIT 100
