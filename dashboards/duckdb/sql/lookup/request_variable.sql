-- The `request` variable: every request the id in the `id` text box names, as `trace-join lookup`
-- finds them (any record carrying the id, whatever its kind; for a Dynamo reply id `chatcmpl-<uuid>`
-- also the internal id it is derived from, for `resp_<disagg id>_<hex>` the disaggregated request;
-- collector/ids.py). Newest first. When nothing matches, one sentinel row (no request has id -1)
-- keeps the panels' `IN (...)` lists from being empty, which is not SQL.
-- Ids are found through the store's id index (`id_carriers`, collector/id_index.py), given each
-- value as a constant so that DuckDB reads one row group of each run of the index.
WITH wanted AS (
    SELECT * FROM id_carriers(trim(${id:sqlstring}))
    UNION ALL
    SELECT * FROM id_carriers(lower(regexp_extract(trim(${id:sqlstring}),
        '^(?:chatcmpl|cmpl)-([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$', 1)))
    WHERE kind = 'internal_id'
    UNION ALL
    SELECT * FROM id_carriers(regexp_extract(trim(${id:sqlstring}), '^resp_([0-9]+)_[0-9a-f]{16}$', 1))
    WHERE kind = 'disagg_request_id'
), matched AS (
    SELECT DISTINCT rr.request_id
    FROM wanted i
    JOIN request_records rr USING (record_id)
    WHERE length(i.value) > 0 AND i.kind NOT IN ('span', 'parent_span')
)
SELECT __text, __value
FROM (
    SELECT concat_ws(' · ', strftime(make_timestamp(q.start_ns // 1000), '%Y-%m-%d %H:%M:%S'),
                     coalesce(q.reply_ids[1], q.internal_ids[1], q.disagg_request_ids[1], q.x_request_ids[1], q.trace_ids[1]),
                     q.http_status, q.entry_worker) AS __text,
           q.request_id AS __value,
           q.start_ns
    FROM matched JOIN requests q USING (request_id)
    UNION ALL
    SELECT 'no request matches this id', -1, NULL
    WHERE NOT EXISTS (SELECT 1 FROM matched)
)
ORDER BY start_ns DESC NULLS LAST, __value
LIMIT 200
