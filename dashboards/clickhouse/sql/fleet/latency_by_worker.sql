-- Time to first token, queueing, end-to-end and KV-transfer time as each worker measured them, by
-- role and worker, over the requests that started in the range. A worker's value for a request is
-- the largest its records of that request state (its request span and its completion line both
-- carry the end-to-end time; a post-processor hook record's duration is its own call's, not the
-- request's); the router's queue is the disaggregated server's dispatch wait.
WITH served AS (
    -- request_records names each record's worker as settled in its request (collector/requests.py).
    SELECT request_id, role, worker, ttft_ms, ttfb_ms, queue_ms, router_queue_ms, e2e_ms, kv_transfer_ms,
           if(kind != 'hook', duration_ns, NULL) AS duration_ns
    FROM request_records FINAL
    WHERE request_id IN (SELECT request_id FROM requests FINAL
                         WHERE names_a_request AND start_ns IS NOT NULL
                           AND $__timeFilter(fromUnixTimestamp64Nano(start_ns)))
), per_worker AS (
    SELECT request_id, role, worker,
           max(coalesce(ttft_ms, ttfb_ms)) AS ttft_ms,
           max(coalesce(queue_ms, router_queue_ms)) AS queue_ms,
           max(coalesce(e2e_ms, duration_ns / 1e6)) AS e2e_ms,
           max(kv_transfer_ms) AS kv_transfer_ms
    FROM served
    GROUP BY request_id, role, worker
)
SELECT role, worker, metric,
       count() AS requests,
       quantileExactInclusive(0.5)(value) AS p50_ms,
       quantileExactInclusive(0.9)(value) AS p90_ms,
       quantileExactInclusive(0.99)(value) AS p99_ms,
       max(value) AS max_ms
FROM per_worker
ARRAY JOIN ['ttft_ms', 'queue_ms', 'e2e_ms', 'kv_transfer_ms'] AS metric, [ttft_ms, queue_ms, e2e_ms, kv_transfer_ms] AS value
WHERE value IS NOT NULL
GROUP BY role, worker, metric
ORDER BY role, worker, metric
