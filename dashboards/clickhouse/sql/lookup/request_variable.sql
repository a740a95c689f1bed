-- The `request` variable: every published request the id in the `id` text box names, as
-- `trace-join lookup` finds them (any record carrying the id, whatever its kind; for a Dynamo reply
-- id `chatcmpl-<uuid>` also the internal id it is derived from, for `resp_<disagg id>_<hex>` the
-- disaggregated request; collector/ids.py). Newest first; the first column is the value, the second
-- its text. When nothing matches, one sentinel row (no request has id -1) keeps the panels'
-- `IN (...)` lists from being empty, which is not SQL.
WITH trimBoth(${id:sqlstring}) AS typed,
     lower(regexpExtract(typed, '^(?:chatcmpl|cmpl)-([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$', 1)) AS internal,
     regexpExtract(typed, '^resp_([0-9]+)_[0-9a-f]{16}$', 1) AS disagg,
     matched AS (
    SELECT DISTINCT request_id
    FROM request_records FINAL
    WHERE record_id IN (
        SELECT record_id FROM record_ids
        WHERE value IN (typed, internal, disagg) AND length(value) > 0 AND kind NOT IN ('span', 'parent_span')
          AND (value = typed OR (kind = 'internal_id' AND value = internal)
               OR (kind = 'disagg_request_id' AND value = disagg)))
)
SELECT __value, __text
FROM (
    SELECT q.request_id AS __value,
           arrayStringConcat(arrayFilter(x -> x != '', [
               formatDateTime(fromUnixTimestamp64Nano(q.start_ns), '%Y-%m-%d %H:%i:%S'),
               arrayConcat(q.reply_ids, q.internal_ids, q.disagg_request_ids, q.x_request_ids, q.trace_ids)[1],
               ifNull(q.http_status, ''), ifNull(q.entry_worker, '')]), ' · ') AS __text,
           q.start_ns AS start_ns
    FROM requests AS q FINAL
    WHERE q.request_id IN (SELECT request_id FROM matched)
    UNION ALL
    SELECT -1, 'no request matches this id', NULL
    WHERE (SELECT count() FROM matched) = 0
)
ORDER BY start_ns DESC NULLS LAST, __value
LIMIT 200
