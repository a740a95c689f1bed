-- The requests chosen in the `request` variable, one row each: when, how long, how it ended, where
-- it ran and every id it carries.
SELECT fromUnixTimestamp64Nano(start_ns) AS time,
       request_id,
       duration_ms,
       ttft_ms,
       http_status AS status,
       error,
       disconnected,
       collided,
       coalesce(route, endpoint) AS route,
       entry_worker,
       arrayStringConcat(workers, ', ') AS workers,
       arrayStringConcat(roles, ', ') AS roles,
       arrayStringConcat(reply_ids, ', ') AS reply_ids,
       arrayStringConcat(internal_ids, ', ') AS internal_ids,
       arrayStringConcat(x_request_ids, ', ') AS x_request_ids,
       arrayStringConcat(disagg_request_ids, ', ') AS disagg_request_ids,
       arrayStringConcat(trace_ids, ', ') AS trace_ids,
       records
FROM requests FINAL
WHERE request_id IN (${request:csv})
ORDER BY start_ns DESC NULLS LAST
