"""What the middleware and the proxy write, read back by `trace-join ingest` and `lookup`."""

from __future__ import annotations

import openai

from tracejoin.middleware.proxy import proxy_config

from .live_servers import WAIT_S, event, running, serve_openai_like_app


def test_a_responses_reply_only_the_proxy_saw_looks_up_to_the_upstream_records(tmp_path, tj):
    proxy_log = tmp_path / "proxy.jsonl"
    with serve_openai_like_app(tmp_path / "upstream.jsonl", service="upstream", role="agg") as upstream:
        with running(proxy_config(upstream.url, "127.0.0.1:0", log=str(proxy_log))) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=WAIT_S)
            reply = client.responses.create(model="m", input="hi", extra_headers={"x-request-id": "lookup-label"})
        upstream.log.wait_for(event("request.end"))

    assert tj("ingest", proxy_log, upstream.log.path).code == 0
    found = tj("lookup", reply.id, "--json")
    assert found.code == 0, found.err
    (request,) = found.json()["requests"]
    assert sorted(worker["role"] for worker in request["workers"]) == ["agg", "proxy"]
    assert request["ids"]["x_request_id"] == ["lookup-label"]
    assert len(request["ids"]["internal_id"]) == 2  # the proxy's and the upstream's, one request
    assert [e["id"] for e in request["ids"]["engine_request_id"]] == ["42"]
