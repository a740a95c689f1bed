-- Which sources and workers wrote records that no reply reaches (orphans, collector/coverage.py),
-- for the orphans that started in the range and those that cannot be placed in one (only
-- steady-clock times): a worker with many is one whose records do not join (docs/id-model.md).
WITH orphans AS (
    SELECT request_id, start_ns IS NULL AS unplaced
    FROM requests
    WHERE NOT has_entry AND names_a_request
      AND list_has_any(roles, ['ctx', 'prefill', 'gen', 'decode', 'agg', 'worker'])
      AND (start_ns IS NULL OR $__timeFilter(make_timestamp(start_ns // 1000)))
)
SELECT r.source,
       rr.worker,
       rr.role,
       count(DISTINCT o.request_id) AS orphan_requests,
       count(*) AS orphan_records,
       count(DISTINCT o.request_id) FILTER (WHERE o.unplaced) AS without_wall_clock
FROM orphans o
JOIN request_records rr USING (request_id)
JOIN records r USING (record_id)
GROUP BY ALL
ORDER BY orphan_records DESC, r.source, rr.worker
