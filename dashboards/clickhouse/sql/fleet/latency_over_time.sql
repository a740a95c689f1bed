-- Time to first token, queueing and end-to-end time of the replies that started in each interval:
-- per request, the largest value any tier reports (the entry server's own, as the client saw it).
WITH replies AS (
    SELECT fromUnixTimestamp64Nano(assumeNotNull(start_ns)) AS start, ttft_ms, queue_ms, duration_ms
    FROM requests FINAL
    WHERE has_entry AND start_ns IS NOT NULL
)
SELECT $__timeInterval(start) AS time,
       quantileExactInclusive(0.5)(ttft_ms) AS ttft_p50,
       quantileExactInclusive(0.99)(ttft_ms) AS ttft_p99,
       quantileExactInclusive(0.99)(queue_ms) AS queue_p99,
       quantileExactInclusive(0.5)(duration_ms) AS e2e_p50,
       quantileExactInclusive(0.99)(duration_ms) AS e2e_p99
FROM replies
WHERE $__timeFilter(start)
GROUP BY time
ORDER BY time
