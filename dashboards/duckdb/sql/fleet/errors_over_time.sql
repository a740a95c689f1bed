-- Replies per interval that failed (an error record, a 5xx), that the server refused (4xx), and
-- that the client left before the reply was complete.
WITH replies AS (
    SELECT make_timestamp(start_ns // 1000) AS start, error, disconnected,
           TRY_CAST(http_status AS INTEGER) BETWEEN 400 AND 499 AS refused
    FROM requests
    WHERE has_entry
)
SELECT time_bucket(to_milliseconds(CAST($__interval_ms AS BIGINT)), start) AS time,
       count(*) FILTER (WHERE error) AS errors,
       count(*) FILTER (WHERE refused) AS http_4xx,
       count(*) FILTER (WHERE disconnected) AS client_disconnects
FROM replies
WHERE $__timeFilter(start)
GROUP BY ALL
ORDER BY time
