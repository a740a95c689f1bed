-- Time to first token, queueing, end-to-end and KV-transfer time as each worker measured them, by
-- role and worker, over the requests that started in the range. A worker's value for a request is
-- the largest its records of that request state (its request span and its completion line both
-- carry the end-to-end time; a post-processor hook record's duration is its own call's, not the
-- request's); the router's queue is the disaggregated server's dispatch wait.
WITH served AS (
    -- request_records names each record's worker as settled in its request (collector/requests.py).
    SELECT rr.request_id, rr.role, rr.worker, f.*,
           CASE WHEN r.kind <> 'hook' THEN r.duration_ns END AS duration_ns
    FROM requests q
    JOIN request_records rr USING (request_id)
    JOIN records r USING (record_id)
    JOIN record_facts f USING (record_id)
    WHERE q.names_a_request AND $__timeFilter(make_timestamp(q.start_ns // 1000))
), per_worker AS (
    SELECT request_id, role, worker,
           max(coalesce(ttft_ms, ttfb_ms)) AS ttft_ms,
           max(coalesce(queue_ms, router_queue_ms)) AS queue_ms,
           max(coalesce(e2e_ms, duration_ns / 1e6)) AS e2e_ms,
           max(kv_transfer_ms) AS kv_transfer_ms
    FROM served
    GROUP BY ALL
)
SELECT role, worker, metric,
       count(*) AS requests,
       quantile_cont(value, 0.5) AS p50_ms,
       quantile_cont(value, 0.9) AS p90_ms,
       quantile_cont(value, 0.99) AS p99_ms,
       max(value) AS max_ms
FROM per_worker
UNPIVOT (value FOR metric IN (ttft_ms, queue_ms, e2e_ms, kv_transfer_ms))
GROUP BY ALL
ORDER BY role, worker, metric
