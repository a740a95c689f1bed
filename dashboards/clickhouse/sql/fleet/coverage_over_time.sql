-- Of the replies that started in each interval, the share joined to the records of both their
-- workers (context and generation, or prefill and decode), of one of them, of an aggregated worker,
-- of none: what `trace-join coverage` reports (collector/coverage.py), over time.
WITH replies AS (
    SELECT fromUnixTimestamp64Nano(assumeNotNull(start_ns)) AS start,
           hasAny(roles, ['ctx', 'prefill']) AS first_phase,
           hasAny(roles, ['gen', 'decode']) AS second_phase,
           hasAny(roles, ['agg', 'worker']) AS aggregated
    FROM requests FINAL
    WHERE has_entry AND start_ns IS NOT NULL
)
SELECT $__timeInterval(start) AS time,
       count() AS replies,
       avg(first_phase AND second_phase) AS both_workers,
       avg(first_phase != second_phase) AS one_worker,
       avg(aggregated AND NOT first_phase AND NOT second_phase) AS aggregated_worker,
       avg(NOT (first_phase OR second_phase OR aggregated)) AS no_worker
FROM replies
WHERE $__timeFilter(start)
GROUP BY time
ORDER BY time
