-- Every record of the requests chosen in the `request` variable, on one timeline, as
-- `trace-join lookup` shows them: time, ms since the request's first record, worker, role, kind,
-- source and what the record says. The last columns shape the same rows as spans (traceID, spanID,
-- parentSpanID, operationName, serviceName, startTime and duration in ms) for the Traces panel,
-- which reads this panel's result instead of querying again; the table hides them.
WITH settled AS (
    -- request_records names each record's worker as settled in its request (collector/requests.py).
    SELECT request_id, record_id, time_ns, steady_s, kind, source, level, name, status, duration_ns, trace_id,
           span_id, parent_span_id, attrs, ids, origin_id, offset, seq, role, worker AS settled_worker,
           regexpExtract(ifNull(worker, ''), '[^@]*$', 0) AS process
    FROM request_records FINAL
    WHERE request_id IN (${request:csv})
), processes AS (
    -- Records with only steady-clock seconds (TensorRT-LLM perf metrics) go on the wall clock as in
    -- collector/lookup.py: a process's first wall-clock record in the request marks the moment of its
    -- earliest steady-clock arrival. A process without one borrows the entry server's offset.
    SELECT request_id, process,
           min(time_ns) - toInt64(round(minIf(steady_s, time_ns IS NULL) * 1e9)) AS offset_ns,
           max(time_ns IS NULL AND role IN ('router', 'frontend', 'proxy', 'agg')) AS entry_steady
    FROM settled
    GROUP BY request_id, process
), fallback AS (
    SELECT request_id, argMin(offset_ns, (NOT entry_steady, process)) AS borrowed_ns
    FROM processes
    WHERE offset_ns IS NOT NULL
    GROUP BY request_id
), placed AS (
    SELECT s.request_id AS request_id, s.record_id AS record_id, s.time_ns AS time_ns, s.steady_s AS steady_s,
           s.kind AS kind, s.source AS source, s.level AS level, s.name AS name, s.status AS status,
           s.duration_ns AS duration_ns, s.span_id AS span_id, s.parent_span_id AS parent_span_id, s.attrs AS attrs,
           s.ids AS ids, s.origin_id AS origin_id, s.offset AS offset, s.seq AS seq, s.role AS role,
           s.settled_worker AS settled_worker,
           coalesce(s.time_ns, toInt64(round(s.steady_s * 1e9)) + coalesce(p.offset_ns, f.borrowed_ns)) AS at_ns
    FROM settled AS s
    JOIN processes AS p ON p.request_id = s.request_id AND p.process = s.process
    LEFT JOIN fallback AS f ON f.request_id = s.request_id
), spans AS (
    SELECT DISTINCT request_id, span_id FROM settled WHERE kind = 'span'
)
SELECT fromUnixTimestamp64Nano(p.at_ns) AS time,
       (p.at_ns - min(p.at_ns) OVER (PARTITION BY p.request_id)) / 1e6 AS since_start_ms,
       p.settled_worker AS worker,
       p.role,
       p.kind,
       p.source,
       p.name,
       p.level,
       p.status,
       p.duration_ns / 1e6 AS duration_ms,
       p.ids,
       nullIf(arrayStringConcat(arrayMap(kv -> concat(kv.1, '=', if(startsWith(kv.2, '"'), JSONExtractString(kv.2), kv.2)),
                                         arraySort(kv -> kv.1, arrayFilter(kv -> kv.2 != 'null',
                                                   JSONExtractKeysAndValuesRaw(ifNull(p.attrs, '{}'))))), ' · '), '') AS attributes,
       if(p.time_ns IS NULL AND p.steady_s IS NOT NULL,
          printf('steady %.6f s, %s', p.steady_s, if(p.at_ns IS NULL, 'no wall-clock anchor', 'placed by an anchor')),
          NULL) AS clock,
       p.request_id AS request_id,
       if(notEmpty(q.trace_ids), q.trace_ids[1], leftPad(lower(hex(p.request_id)), 32, '0')) AS traceID,
       if(p.kind = 'span', p.span_id, leftPad(lower(hex(p.record_id)), 16, '0')) AS spanID,
       parent.span_id AS parentSpanID,
       coalesce(p.name, p.kind) AS operationName,
       coalesce(p.settled_worker, p.role, p.source) AS serviceName,
       p.at_ns / 1e6 AS startTime,
       ifNull(p.duration_ns, 0) / 1e6 AS duration
FROM placed AS p
JOIN requests AS q FINAL ON q.request_id = p.request_id
-- A span's parent, or the span a log line was written in, when the request holds that span.
LEFT JOIN spans AS parent ON parent.request_id = p.request_id
     AND parent.span_id = if(p.kind = 'span', p.parent_span_id, p.span_id)
ORDER BY p.at_ns NULLS LAST, ifNull(p.steady_s, 0), p.origin_id, p.offset, p.seq
SETTINGS join_use_nulls = 1
