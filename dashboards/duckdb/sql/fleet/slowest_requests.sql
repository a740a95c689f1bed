-- The slowest replies that started in the range, with where their time went. `id` is the id the
-- request is best looked up by (its reply id, else its internal, disaggregated, client or trace id);
-- each one links to the request lookup dashboard.
SELECT make_timestamp(start_ns // 1000) AS time,
       coalesce(reply_ids[1], internal_ids[1], disagg_request_ids[1], x_request_ids[1], trace_ids[1]) AS id,
       duration_ms,
       ttft_ms,
       queue_ms,
       kv_transfer_ms,
       coalesce(route, endpoint) AS route,
       http_status AS status,
       entry_worker,
       array_to_string(workers, ', ') AS workers
FROM requests
WHERE has_entry AND $__timeFilter(make_timestamp(start_ns // 1000))
ORDER BY duration_ms DESC NULLS LAST, start_ns
LIMIT 50
