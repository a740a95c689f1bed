-- Requests per second at the entry servers (router, frontend, disaggregated server, proxy), by
-- route and status. Only replies count: startup lines and a worker's orphaned records form
-- requests of their own in the store, but no client sent them.
WITH replies AS (
    SELECT fromUnixTimestamp64Nano(assumeNotNull(start_ns)) AS start,
           coalesce(route, endpoint, 'unknown') AS route,
           -- The HTTP status the client got; where no end record says, the outcome.
           coalesce(http_status, multiIf(ifNull(disconnected, false), 'disconnected', error, 'error', 'unknown')) AS status
    FROM requests FINAL
    WHERE has_entry AND start_ns IS NOT NULL
)
SELECT $__timeInterval(start) AS time,
       route,
       status,
       count() / $__interval_s AS requests_per_s
FROM replies
WHERE $__timeFilter(start)
GROUP BY time, route, status
ORDER BY time, route, status
