-- The requests chosen in the `request` variable, one row each: when, how long, how it ended, where
-- it ran and every id it carries.
SELECT make_timestamp(start_ns // 1000) AS time,
       request_id,
       duration_ms,
       ttft_ms,
       http_status AS status,
       error,
       disconnected,
       collided,
       coalesce(route, endpoint) AS route,
       entry_worker,
       array_to_string(workers, ', ') AS workers,
       array_to_string(roles, ', ') AS roles,
       array_to_string(reply_ids, ', ') AS reply_ids,
       array_to_string(internal_ids, ', ') AS internal_ids,
       array_to_string(x_request_ids, ', ') AS x_request_ids,
       array_to_string(disagg_request_ids, ', ') AS disagg_request_ids,
       array_to_string(trace_ids, ', ') AS trace_ids,
       records
FROM requests
WHERE request_id IN (${request:csv})
ORDER BY start_ns DESC NULLS LAST
