-- Of the replies that started in each interval, the share joined to the records of both their
-- workers (context and generation, or prefill and decode), of one of them, of an aggregated worker,
-- of none: what `trace-join coverage` reports (collector/coverage.py), over time.
WITH replies AS (
    SELECT make_timestamp(start_ns // 1000) AS start,
           list_has_any(roles, ['ctx', 'prefill']) AS first_phase,
           list_has_any(roles, ['gen', 'decode']) AS second_phase,
           list_has_any(roles, ['agg', 'worker']) AS aggregated
    FROM requests
    WHERE has_entry
)
SELECT time_bucket(to_milliseconds(CAST($__interval_ms AS BIGINT)), start) AS time,
       count(*) AS replies,
       avg(CAST(first_phase AND second_phase AS INTEGER)) AS both_workers,
       avg(CAST(first_phase <> second_phase AS INTEGER)) AS one_worker,
       avg(CAST(aggregated AND NOT first_phase AND NOT second_phase AS INTEGER)) AS aggregated_worker,
       avg(CAST(NOT (first_phase OR second_phase OR aggregated) AS INTEGER)) AS no_worker
FROM replies
WHERE $__timeFilter(start)
GROUP BY ALL
ORDER BY time
