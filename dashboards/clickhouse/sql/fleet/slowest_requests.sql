-- The slowest replies that started in the range, with where their time went. `id` is the id the
-- request is best looked up by (its reply id, else its internal, disaggregated, client or trace id);
-- each one links to the request lookup dashboard.
SELECT fromUnixTimestamp64Nano(start_ns) AS time,
       arrayConcat(reply_ids, internal_ids, disagg_request_ids, x_request_ids, trace_ids)[1] AS id,
       duration_ms,
       ttft_ms,
       queue_ms,
       kv_transfer_ms,
       coalesce(route, endpoint) AS route,
       http_status AS status,
       entry_worker,
       arrayStringConcat(workers, ', ') AS workers
FROM requests FINAL
WHERE has_entry AND start_ns IS NOT NULL AND $__timeFilter(fromUnixTimestamp64Nano(start_ns))
ORDER BY duration_ms DESC NULLS LAST, start_ns
LIMIT 50
