-- Time to first token, queueing and end-to-end time of the replies that started in each interval:
-- per request, the largest value any tier reports (the entry server's own, as the client saw it).
WITH replies AS (
    SELECT make_timestamp(start_ns // 1000) AS start, ttft_ms, queue_ms, duration_ms
    FROM requests
    WHERE has_entry
)
SELECT time_bucket(to_milliseconds(CAST($__interval_ms AS BIGINT)), start) AS time,
       quantile_cont(ttft_ms, 0.5) AS ttft_p50,
       quantile_cont(ttft_ms, 0.99) AS ttft_p99,
       quantile_cont(queue_ms, 0.99) AS queue_p99,
       quantile_cont(duration_ms, 0.5) AS e2e_p50,
       quantile_cont(duration_ms, 0.99) AS e2e_p99
FROM replies
WHERE $__timeFilter(start)
GROUP BY ALL
ORDER BY time
