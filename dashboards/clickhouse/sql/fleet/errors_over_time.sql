-- Replies per interval that failed (an error record, a 5xx), that the server refused (4xx), and
-- that the client left before the reply was complete.
WITH replies AS (
    SELECT fromUnixTimestamp64Nano(assumeNotNull(start_ns)) AS start, error, ifNull(disconnected, false) AS disconnected,
           toInt32OrZero(ifNull(http_status, '')) BETWEEN 400 AND 499 AS refused
    FROM requests FINAL
    WHERE has_entry AND start_ns IS NOT NULL
)
SELECT $__timeInterval(start) AS time,
       countIf(error) AS errors,
       countIf(refused) AS http_4xx,
       countIf(disconnected) AS client_disconnects
FROM replies
WHERE $__timeFilter(start)
GROUP BY time
ORDER BY time
