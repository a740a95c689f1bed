-- Every record of the requests chosen in the `request` variable, on one timeline, as
-- `trace-join lookup` shows them: time, ms since the request's first record, worker, role, kind,
-- source and what the record says. The last columns shape the same rows as spans (traceID, spanID,
-- parentSpanID, operationName, serviceName, startTime and duration in ms) for the Traces panel,
-- which reads this panel's result instead of querying again; the table hides them.
WITH settled AS (
    -- request_records names each record's worker as settled in its request (collector/requests.py).
    SELECT rr.request_id, r.record_id, r.time_ns, r.steady_s, r.kind, r.source, r.level, r.name, r.status,
           r.duration_ns, r.trace_id, r.span_id, r.parent_span_id, r.attrs, r.origin_id, r."offset", r.seq,
           rr.role, rr.worker AS settled_worker
    FROM request_records rr
    JOIN records r USING (record_id)
    WHERE rr.request_id IN (${request:csv})
), processes AS (
    -- Records with only steady-clock seconds (TensorRT-LLM perf metrics) go on the wall clock as in
    -- collector/lookup.py: a process's first wall-clock record in the request marks the moment of its
    -- earliest steady-clock arrival. A process without one borrows the entry server's offset.
    SELECT request_id, regexp_extract(settled_worker, '[^@]*$') AS process,
           min(time_ns) - CAST(round(min(steady_s) FILTER (WHERE time_ns IS NULL) * 1e9) AS BIGINT) AS offset_ns,
           bool_or(time_ns IS NULL AND role IN ('router', 'frontend', 'proxy', 'agg')) AS entry_steady
    FROM settled
    GROUP BY ALL
), fallback AS (
    SELECT request_id, first(offset_ns ORDER BY entry_steady DESC, process) AS offset_ns
    FROM processes
    WHERE offset_ns IS NOT NULL
    GROUP BY request_id
), placed AS (
    SELECT s.*,
           coalesce(s.time_ns, CAST(round(s.steady_s * 1e9) AS BIGINT) + coalesce(p.offset_ns, f.offset_ns)) AS at_ns
    FROM settled s
    JOIN processes p ON p.request_id = s.request_id AND p.process IS NOT DISTINCT FROM regexp_extract(s.settled_worker, '[^@]*$')
    LEFT JOIN fallback f ON f.request_id = s.request_id
), spans AS (
    SELECT DISTINCT request_id, span_id FROM settled WHERE kind = 'span'
)
SELECT make_timestamp(p.at_ns // 1000) AS time,
       (p.at_ns - min(p.at_ns) OVER (PARTITION BY p.request_id)) / 1e6 AS since_start_ms,
       p.settled_worker AS worker,
       p.role,
       p.kind,
       p.source,
       p.name,
       p.level,
       p.status,
       p.duration_ns / 1e6 AS duration_ms,
       (SELECT string_agg(i.kind || '=' || i.value, ' · ' ORDER BY i.kind, i.value)
        FROM record_ids i
        WHERE i.record_id = p.record_id AND i.kind NOT IN ('span', 'parent_span')) AS ids,
       (SELECT string_agg(key || '=' || (value->>'$'), ' · ' ORDER BY key)
        FROM json_each(p.attrs)
        WHERE value->>'$' IS NOT NULL) AS attributes,
       CASE WHEN p.time_ns IS NULL AND p.steady_s IS NOT NULL
            THEN printf('steady %.6f s, %s', p.steady_s,
                        CASE WHEN p.at_ns IS NULL THEN 'no wall-clock anchor' ELSE 'placed by an anchor' END)
       END AS clock,
       p.request_id,
       coalesce(q.trace_ids[1], printf('%032x', p.request_id)) AS traceID,
       CASE WHEN p.kind = 'span' THEN p.span_id ELSE printf('%016x', p.record_id) END AS spanID,
       parent.span_id AS parentSpanID,
       coalesce(p.name, p.kind) AS operationName,
       coalesce(p.settled_worker, p.role, p.source) AS serviceName,
       p.at_ns / 1e6 AS startTime,
       coalesce(p.duration_ns, 0) / 1e6 AS duration
FROM placed p
JOIN requests q USING (request_id)
-- A span's parent, or the span a log line was written in, when the request holds that span.
LEFT JOIN spans parent ON parent.request_id = p.request_id
     AND parent.span_id = CASE WHEN p.kind = 'span' THEN p.parent_span_id ELSE p.span_id END
ORDER BY p.at_ns NULLS LAST, coalesce(p.steady_s, 0), p.origin_id, p."offset", p.seq
