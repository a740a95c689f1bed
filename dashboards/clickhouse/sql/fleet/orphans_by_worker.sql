-- Which sources and workers wrote records that no reply reaches (orphans, collector/coverage.py),
-- for the orphans that started in the range: a worker with many is one whose records do not join
-- (docs/id-model.md).
WITH orphans AS (
    SELECT request_id
    FROM requests FINAL
    WHERE NOT has_entry AND names_a_request
      AND hasAny(roles, ['ctx', 'prefill', 'gen', 'decode', 'agg', 'worker'])
      AND start_ns IS NOT NULL AND $__timeFilter(fromUnixTimestamp64Nano(start_ns))
)
SELECT source,
       worker,
       role,
       uniqExact(request_id) AS orphan_requests,
       count() AS orphan_records
FROM request_records FINAL
WHERE request_id IN (SELECT request_id FROM orphans)
GROUP BY source, worker, role
ORDER BY orphan_records DESC, source, worker
