-- KV-cache transfer from the context (prefill) to the generation (decode) worker, per interval: only
-- disaggregated requests report one (TensorRT-LLM perf metrics, kv_cache_transfer_start to _end).
WITH transfers AS (
    SELECT fromUnixTimestamp64Nano(assumeNotNull(start_ns)) AS start, kv_transfer_ms
    FROM requests FINAL
    WHERE kv_transfer_ms IS NOT NULL AND start_ns IS NOT NULL
)
SELECT $__timeInterval(start) AS time,
       quantileExactInclusive(0.5)(kv_transfer_ms) AS kv_transfer_p50,
       quantileExactInclusive(0.99)(kv_transfer_ms) AS kv_transfer_p99,
       max(kv_transfer_ms) AS kv_transfer_max
FROM transfers
WHERE $__timeFilter(start)
GROUP BY time
ORDER BY time
