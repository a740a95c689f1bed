-- Per interval: replies that carry a key another request carries too (a collision, reported and
-- split, never merged), and orphans: a worker's records about a request that no reply reaches
-- (collector/coverage.py). Orphans with only steady-clock times have no start and are not counted
-- here; the orphans table lists them.
SELECT time_bucket(to_milliseconds(CAST($__interval_ms AS BIGINT)), make_timestamp(start_ns // 1000)) AS time,
       count(*) FILTER (WHERE has_entry AND collided) AS collided_replies,
       count(*) FILTER (WHERE NOT has_entry AND names_a_request
                          AND list_has_any(roles, ['ctx', 'prefill', 'gen', 'decode', 'agg', 'worker'])) AS orphans
FROM requests
WHERE $__timeFilter(make_timestamp(start_ns // 1000))
GROUP BY ALL
ORDER BY time
