"""Reads do not hold up intake: while a crowd of `requests` commands reads through the collector's
query endpoint, an export is answered at once, and every one of those commands gets its answer."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.collector.otlp_senders import protobuf_body, sdk_spans
from tracejoin.collector.service import remote

PROTOBUF = {"content-type": "application/x-protobuf"}
READERS = 40
PROMPT_S = 1.0  # an export's answer, idle, takes some 0.05 s


def test_an_export_is_answered_at_once_while_many_queries_run(collector, db):
    c = collector("--snapshot-interval", "600")
    url = f"{c.http}/v1/traces"
    for k in range(5):  # 10,000 requests: each `requests` query reads for a few tenths of a second
        body = protobuf_body(sdk_spans([f"chatcmpl-{k}-{i}" for i in range(2000)]))
        assert httpx.post(url, headers=PROTOBUF, content=body, timeout=60).status_code == 200

    def read(_) -> str:
        try:
            return f"{len(remote.query(db, 'requests', {}))} requests"
        except Exception as e:  # noqa: BLE001 - the test counts what each command would have said
            return f"{type(e).__name__}: {e}"

    with ThreadPoolExecutor(READERS) as pool:
        reads = list(map(lambda n: pool.submit(read, n), range(READERS)))
        time.sleep(0.5)  # the queries are running
        started = time.monotonic()
        answer = httpx.post(url, headers=PROTOBUF, content=protobuf_body(sdk_spans(["chatcmpl-beside"])), timeout=60)
        waited = time.monotonic() - started
        answers = [r.result() for r in reads]
    assert answer.status_code == 200
    assert waited < PROMPT_S, f"the export waited {waited:.2f} s behind {READERS} queries"
    failed = [a for a in answers if not a.endswith(" requests")]
    assert not failed, f"{len(failed)} of {READERS} queries failed, the first: {failed[0][:300]}"
