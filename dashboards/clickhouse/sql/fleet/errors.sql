-- Replies in the range that failed, were refused (4xx) or that the client left before the end,
-- newest first, with the first error a record of theirs states. `id` links to the request lookup
-- dashboard (the same id as in the slowest requests).
WITH failed AS (
    SELECT *
    FROM requests FINAL
    WHERE has_entry
      AND (error OR ifNull(disconnected, false) OR toInt32OrZero(ifNull(http_status, '')) >= 400)
      AND start_ns IS NOT NULL AND $__timeFilter(fromUnixTimestamp64Nano(start_ns))
), first_error AS (
    SELECT request_id,
           argMin(concat(ifNull(name, ''), if(name IS NULL OR error_text IS NULL, '', ': '), ifNull(error_text, '')),
                  (isNull(time_ns), ifNull(time_ns, 0), record_id)) AS first_error
    FROM request_records FINAL
    WHERE request_id IN (SELECT request_id FROM failed)
      AND (ifNull(failed, false) OR ifNull(disconnected, false) OR toInt32OrZero(ifNull(status, '')) >= 400)
    GROUP BY request_id
)
SELECT fromUnixTimestamp64Nano(f.start_ns) AS time,
       arrayConcat(f.reply_ids, f.internal_ids, f.disagg_request_ids, f.x_request_ids, f.trace_ids)[1] AS id,
       f.http_status AS status,
       f.error,
       f.disconnected,
       e.first_error,
       coalesce(f.route, f.endpoint) AS route,
       f.entry_worker,
       arrayStringConcat(f.workers, ', ') AS workers,
       f.duration_ms
FROM failed AS f
LEFT JOIN first_error AS e ON e.request_id = f.request_id
ORDER BY f.start_ns DESC
LIMIT 100
SETTINGS join_use_nulls = 1
