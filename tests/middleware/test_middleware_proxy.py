"""`trace-join proxy` in front of an OpenAI-like upstream (itself behind the middleware, role agg)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import httpx
import openai
import pytest
from opentelemetry.trace import format_span_id, format_trace_id

from tracejoin.middleware.proxy import ReverseProxy, parse_listen, proxy_config

from .live_servers import (
    WAIT_S, LogFile, Served, event, first_data_event, running, serve_openai_like_app, streaming_post,
)
from .openai_like_app import TEXT

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@dataclass
class Proxied:
    url: str  # the proxy's
    log: LogFile  # the proxy's
    upstream: Served


@pytest.fixture
def proxied(tmp_path) -> Iterator[Proxied]:
    with serve_openai_like_app(tmp_path / "upstream.jsonl", service="upstream", role="agg") as upstream:
        log = tmp_path / "proxy.jsonl"
        with running(proxy_config(upstream.url, "127.0.0.1:0", log=str(log))) as url:
            yield Proxied(url, LogFile(log), upstream)


def test_the_proxy_relays_the_first_chunk_before_the_upstream_sends_its_last(proxied: Proxied):
    body = {**CHAT, "model": "hold", "stream": True}  # the upstream sends one chunk, then waits for release
    # A proxy that buffered would deliver nothing until the upstream's hold ran out (10 s): read timeout.
    with (
        httpx.Client(timeout=httpx.Timeout(3.0)) as client,
        client.stream("POST", f"{proxied.url}/v1/chat/completions", json=body) as response,
    ):
        chunks = response.iter_raw()
        received = b""
        while b"Hello" not in received:
            received += next(chunks)
        assert b"[DONE]" not in received
        proxied.upstream.release.set()
        received += b"".join(chunks)

    lines = [line for line in received.decode().splitlines() if line.startswith("data: {")]
    assert "".join(json.loads(line[6:])["choices"][0]["delta"].get("content", "") for line in lines) == TEXT
    assert received.endswith(b"data: [DONE]\n\n")


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE"])
def test_the_proxy_passes_method_path_query_headers_body_and_status_through(proxied: Proxied, method: str):
    body = b'{"any": "bytes \xc3\xa9"}' if method in ("POST", "PUT", "PATCH") else b""
    caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    response = httpx.request(
        method,
        f"{proxied.url}/echo/some/path?a=1&b=two%20words&status=201",
        content=body or None,
        headers={
            "x-custom": "kept",
            "connection": "keep-alive, x-hop",  # x-hop is for this connection only
            "x-hop": "dropped",
            "traceparent": f"00-{caller_trace}-00f067aa0ba902b7-01",
            # deprecated, but the upstream gets it as sent: the proxy watches, it does not change it
            "x-dynamo-request-id": "6f1c1a52-58f7-4c53-9d0e-1b2a3c4d5e6f",
        },
    )

    assert response.status_code == 201
    assert response.headers["x-echo-reply"] == "from-upstream"
    seen = response.json()
    assert (seen["method"], seen["path"], seen["query"]) == (method, "/echo/some/path", "a=1&b=two%20words&status=201")
    assert seen["body"].encode() == body
    headers = dict(seen["headers"])
    assert headers["x-custom"] == "kept"
    assert "x-hop" not in headers
    assert headers["x-dynamo-request-id"] == "6f1c1a52-58f7-4c53-9d0e-1b2a3c4d5e6f"
    assert headers["host"] == proxied.upstream.url.removeprefix("http://")
    # the upstream continues the caller's trace under the proxy's span, not the caller's
    _, trace_id, parent_span, flags = headers["traceparent"].split("-")
    assert flags == "01", "only the sampled bit: Dynamo 1.6.1 drops a traceparent with the level-2 random bit"
    proxy_start = proxied.log.wait_for(event("request.start"))[0]
    assert trace_id == caller_trace == proxy_start["trace_id"]
    assert parent_span == proxy_start["span_id"]


def test_a_tap_ties_a_responses_reply_to_the_trace_the_upstream_continued(proxied: Proxied):
    client = openai.OpenAI(base_url=f"{proxied.url}/v1", api_key="unused", max_retries=0, timeout=WAIT_S)
    with client.responses.with_streaming_response.create(
        model="m", input="hi", stream=True, extra_headers={"x-request-id": "via-proxy"}
    ) as response:
        events = list(response.parse())
    reply_id = events[0].response.id
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == TEXT

    tap = proxied.log.wait_for(event("proxy.tap"))[0]
    assert tap["reply_id"] == reply_id
    assert (tap["role"], tap["upstream_status"]) == ("proxy", 200)
    assert tap["upstream"] == f"{proxied.upstream.url}/v1/responses"
    assert tap["upstream_x_request_id"] == "via-proxy"
    assert "upstream_internal_id" not in tap  # a resp_ id does not reveal one
    assert proxied.log.end_of(reply_id=reply_id)["internal_id"] == tap["internal_id"]
    upstream_start = proxied.upstream.log.wait_for(event("request.start"))[0]
    assert (upstream_start["trace_id"], upstream_start["parent_span_id"]) == (tap["trace_id"], tap["span_id"])
    upstream_span = proxied.upstream.span_of(upstream_start["internal_id"])
    assert format_trace_id(upstream_span.context.trace_id) == tap["trace_id"]
    assert format_span_id(upstream_span.parent.span_id) == tap["span_id"]


def test_a_tap_reads_the_upstream_internal_id_in_a_dynamo_reply_id(proxied: Proxied):
    reply = httpx.post(f"{proxied.url}/v1/chat/completions", json={**CHAT, "model": "dynamo-like"}).json()

    tap = proxied.log.wait_for(event("proxy.tap"))[0]
    upstream_end = proxied.upstream.log.end_of(reply_id=reply["id"])
    assert reply["id"] == f"chatcmpl-{upstream_end['internal_id']}"
    assert tap["upstream_internal_id"] == upstream_end["internal_id"]
    assert tap["internal_id"] != upstream_end["internal_id"]  # the proxy mints its own


def test_a_client_leaving_the_proxy_ends_the_upstream_request(proxied: Proxied):
    body = {**CHAT, "model": "endless", "stream": True}
    with streaming_post(f"{proxied.url}/v1/chat/completions", body) as response:
        reply_id = first_data_event(response.iter_lines())["id"]

    # The endless stream ends only if the proxy closes the upstream request when its client leaves.
    assert proxied.upstream.log.end_of(reply_id=reply_id)["disconnected"] is True
    assert proxied.log.end_of(reply_id=reply_id)["disconnected"] is True
    assert proxied.log.wait_for(event("proxy.tap"))[0]["reply_id"] == reply_id


def test_an_upstream_failing_mid_stream_cuts_the_client_stream_too(tmp_path):
    proxy_log = LogFile(tmp_path / "proxy.jsonl")
    with ExitStack() as upstream_running:
        upstream = upstream_running.enter_context(serve_openai_like_app(tmp_path / "upstream.jsonl", role="agg"))
        with running(proxy_config(upstream.url, "127.0.0.1:0", log=str(proxy_log.path))) as url:
            with streaming_post(f"{url}/v1/chat/completions", {**CHAT, "model": "endless", "stream": True}) as response:
                lines = response.iter_lines()
                first_data_event(lines)
                upstream_running.close()  # the upstream goes away mid-stream
                # a clean end of the stream would tell the client the reply was complete
                with pytest.raises(httpx.RemoteProtocolError):
                    for _ in lines:
                        pass

    failure = proxy_log.wait_for(event("proxy.upstream_failed"))[0]
    assert failure["level"] == "error"
    assert failure["upstream"] == f"{upstream.url}/v1/chat/completions"


def test_an_unreachable_upstream_is_a_502(tmp_path, tj):
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed_port = unused.getsockname()[1]
    log = LogFile(tmp_path / "proxy.jsonl")
    with running(proxy_config(f"http://127.0.0.1:{closed_port}", "127.0.0.1:0", log=str(log.path))) as url:
        response = httpx.get(f"{url}/v1/models")

    assert response.status_code == 502
    assert response.json()["error"]["type"] == "bad_gateway"
    failure = log.wait_for(event("proxy.upstream_failed"))[0]
    assert failure["level"] == "error"
    assert log.end_of(status=502)["disconnected"] is False

    # lookup says why: the error the proxy met, in the record and as the request's first error
    assert tj("ingest", log.path).code == 0
    [request] = tj("lookup", failure["internal_id"], "--json").json()["requests"]
    assert failure["error"].startswith("ConnectError") and failure["error"] in request["first_error"]["text"]
    assert any(f"error={failure['error']}" in r["summary"] for r in request["records"])


def test_listen_addresses_and_upstream_urls_are_checked():
    assert parse_listen("0.0.0.0:8080") == ("0.0.0.0", 8080)
    assert parse_listen("[::1]:9000") == ("::1", 9000)
    assert parse_listen(":8080") == ("127.0.0.1", 8080)
    for bad in ("8080", "host:", "host:http", "host:70000"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            parse_listen(bad)
    with pytest.raises(ValueError, match="http"):
        ReverseProxy("ftp://example.invalid")


def test_a_health_probe_through_the_proxy_is_forwarded_and_left_unrecorded(proxied: Proxied, tmp_path):
    import anyio

    from tracejoin.middleware.proxy import create_proxy_app

    # In-process (ASGI transport) so an exception in the proxy reaches the test rather than a log.
    app = create_proxy_app(proxied.upstream.url, log=str(tmp_path / "probe.jsonl"))

    async def probe() -> int:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
            return (await client.get("/health")).status_code

    assert anyio.run(probe) == httpx.get(f"{proxied.upstream.url}/health").status_code
    assert not (tmp_path / "probe.jsonl").exists() or "proxy.tap" not in (tmp_path / "probe.jsonl").read_text()
