"""`trace-join demo`: the whole pipeline on data it makes itself, nothing to configure.

It writes what a disaggregated Dynamo deployment (a frontend, a prefill and a decode worker)
records for a handful of requests, in Dynamo's own formats, ingests it, and looks one reply up.
"""

from __future__ import annotations

from pathlib import Path

from tracejoin.collector.dynamo_sample import DynamoSample
from tracejoin.collector.ingest import Ingester
from tracejoin.collector.lookup import lookup
from tracejoin.collector.store import Store
from tracejoin.cli import render


def dynamo_sample(store: Store, folder: str) -> None:
    sample = DynamoSample()
    requests = [
        sample.add(x_request_id="checkout-7f3a"),
        sample.add(offset_ms=12, x_request_id="batch-42", endpoint="completions", stream=False),
        sample.add(offset_ms=25, x_request_id="batch-42"),
        sample.add(offset_ms=31, x_request_id="batch-42", status="error"),
    ]
    files = sample.write(folder)
    print(f"wrote a Dynamo deployment's records for {len(requests)} requests to {Path(folder).resolve()}/")
    result = Ingester(store).ingest_paths([str(p) for p in files.values()])
    render.ingest_summary(result, as_json=False)
    reply = requests[0].reply_id
    print(f"\n$ trace-join lookup {reply}\n")
    render.lookup_text(lookup(store, reply))
    db = store.path
    print(
        f"\nNext:\n"
        f"  trace-join lookup --db {db} batch-42            # an x-request-id three requests share\n"
        f"  trace-join lookup --db {db} {requests[3].request_id}   # the failed one, by internal id\n"
        f"  trace-join lookup --db {db} {reply} --json\n"
        f"  trace-join ingest --db {db} YOUR-LOGS/          # Dynamo JSONL, request traces, OTLP JSON"
    )
