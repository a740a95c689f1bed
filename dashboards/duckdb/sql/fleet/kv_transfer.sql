-- KV-cache transfer from the context (prefill) to the generation (decode) worker, per interval: only
-- disaggregated requests report one (TensorRT-LLM perf metrics, kv_cache_transfer_start to _end).
WITH transfers AS (
    SELECT make_timestamp(start_ns // 1000) AS start, kv_transfer_ms
    FROM requests
    WHERE kv_transfer_ms IS NOT NULL
)
SELECT time_bucket(to_milliseconds(CAST($__interval_ms AS BIGINT)), start) AS time,
       quantile_cont(kv_transfer_ms, 0.5) AS kv_transfer_p50,
       quantile_cont(kv_transfer_ms, 0.99) AS kv_transfer_p99,
       max(kv_transfer_ms) AS kv_transfer_max
FROM transfers
WHERE $__timeFilter(start)
GROUP BY ALL
ORDER BY time
