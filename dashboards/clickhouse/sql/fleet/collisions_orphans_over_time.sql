-- Per interval: replies that carry a key another request carries too (a collision, reported and
-- split, never merged), and orphans: a worker's records about a request that no reply reaches
-- (collector/coverage.py), of the requests `trace-join snapshot` published.
SELECT $__timeInterval(start) AS time,
       countIf(has_entry AND collided) AS collided_replies,
       countIf(NOT has_entry AND names_a_request
               AND hasAny(roles, ['ctx', 'prefill', 'gen', 'decode', 'agg', 'worker'])) AS orphans
FROM (SELECT *, fromUnixTimestamp64Nano(assumeNotNull(start_ns)) AS start FROM requests FINAL WHERE start_ns IS NOT NULL)
WHERE $__timeFilter(start)
GROUP BY time
ORDER BY time
