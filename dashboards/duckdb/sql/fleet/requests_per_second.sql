-- Requests per second at the entry servers (router, frontend, disaggregated server, proxy), by
-- route and status. Only replies count: startup lines and a worker's orphaned records form
-- requests of their own in the store, but no client sent them.
WITH replies AS (
    SELECT make_timestamp(start_ns // 1000) AS start,
           coalesce(route, endpoint, 'unknown') AS route,
           -- The HTTP status the client got; where no end record says, the outcome.
           coalesce(http_status, CASE WHEN disconnected THEN 'disconnected'
                                      WHEN error THEN 'error' ELSE 'unknown' END) AS status
    FROM requests
    WHERE has_entry
)
SELECT time_bucket(to_milliseconds(CAST($__interval_ms AS BIGINT)), start) AS time,
       route,
       status,
       count(*) / (CAST($__interval_ms AS BIGINT) / 1000) AS requests_per_s
FROM replies
WHERE $__timeFilter(start)
GROUP BY ALL
ORDER BY time, route, status
