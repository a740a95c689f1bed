"""`trace-join proxy`: a streaming reverse proxy for servers that cannot be changed (Dynamo, trtllm-serve).

    serve_proxy("http://127.0.0.1:8000", listen="127.0.0.1:8080", log="proxy.jsonl")

It is `ReverseProxy` wrapped in TraceJoinMiddleware with role `proxy`, so each request gets what the
middleware gives any request (internal id, span, `request.start`/`request.end`, the reply id seen
as the reply passes). The proxy adds:

- it passes the method, path, query, headers (less hop-by-hop ones), body and status through, and
  relays each chunk of the reply the moment the upstream sends it: nothing is buffered;
- the upstream request carries `traceparent` (the upstream continues the proxy's trace) and the
  ids (outgoing.py); a client's own traceparent is continued by the proxy's span, not forwarded;
- deprecated id headers (`x-dynamo-request-id`, `request-id`) go through as sent: the proxy
  watches the upstream, it does not change how it behaves (the middleware warns about them);
- when the client leaves, the upstream request is closed, so the upstream can stop generating;
- one `proxy.tap` record per upstream reply ties the reply id to the trace the proxy propagated and
  to what the upstream revealed: its `x-request-id` echo, and the internal id in a Dynamo
  `chatcmpl-<uuid>` reply id.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import uvicorn

from .asgi import TraceJoinMiddleware
from .ids import X_REQUEST_ID, clean_label, internal_id_in_reply_id
from .outgoing import inject_tracejoin_headers
from .request_state import ServedRequest, current_request

Message = dict[str, Any]

# RFC 9110 §7.6.1: meaningful for one connection only. Headers a Connection header names are too.
HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"proxy-connection", b"te",
     b"trailer", b"transfer-encoding", b"upgrade"}
)
# Not forwarded: httpx names the upstream host, and the trace is the proxy's to continue
# (outgoing.py sets traceparent). Everything else goes through as the client sent it, deprecated id
# headers included: the proxy watches a server, it does not change how it behaves, so a Dynamo that
# takes a client's x-dynamo-request-id as its internal id still does, and trace-join reports the
# collision that follows (the middleware has warned about the header).
NOT_FORWARDED = frozenset({b"host", b"traceparent", b"tracestate"})

# A generation may pause for minutes (queueing, long prompts); only connecting has a deadline.
UPSTREAM_TIMEOUT = httpx.Timeout(None, connect=10.0)


class ReverseProxy:
    """A pure ASGI app that forwards every HTTP request to `upstream` (a base URL).

    It runs inside TraceJoinMiddleware (create_proxy_app), whose served request it records into.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = _upstream_url(upstream)
        self.client = httpx.AsyncClient(
            timeout=UPSTREAM_TIMEOUT,
            # LLM streams are long: a pool limit would queue requests behind them.
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=100),
            event_hooks={"request": [inject_tracejoin_headers]},
        )

    async def __call__(self, scope: Message, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._forward(scope, receive, send)
        # WebSocket scopes are not proxied: returning without accepting makes the server refuse it.

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _forward(self, scope: Message, receive: Any, send: Any) -> None:
        request_headers = _end_to_end(scope["headers"])
        has_body = any(name in (b"content-length", b"transfer-encoding") for name, _ in scope["headers"])
        upstream_request = self.client.build_request(
            scope["method"],
            self._upstream_url(scope),
            headers=[(name, value) for name, value in request_headers if name not in NOT_FORWARDED],
            content=_request_body(receive) if has_body else None,
        )
        upstream_url = str(upstream_request.url.copy_with(query=None))  # a query may hold a secret: not logged
        served = current_request()
        try:
            upstream = await self.client.send(upstream_request, stream=True)
        except httpx.HTTPError as error:
            _log_upstream_failure(served, upstream_url, error)
            await _send_bad_gateway(send, upstream_url)
            return
        try:
            response_headers = _end_to_end(upstream.headers.raw)
            await send({"type": "http.response.start", "status": upstream.status_code, "headers": response_headers})
            cut_short = await _relay_until_client_leaves(upstream, receive, send)
            if cut_short is not None:
                _log_upstream_failure(served, upstream_url, cut_short)
        finally:
            await upstream.aclose()
            _write_tap(served, upstream_url, upstream)

    def _upstream_url(self, scope: Message) -> httpx.URL:
        path = scope.get("raw_path") or scope["path"].encode()
        if scope.get("query_string"):
            path += b"?" + scope["query_string"]
        return self.upstream.copy_with(raw_path=self.upstream.raw_path.rstrip(b"/") + path)


def _upstream_url(upstream: str) -> httpx.URL:
    try:
        url = httpx.URL(upstream)
    except httpx.InvalidURL as e:
        raise ValueError(f"upstream must be an http:// or https:// URL, not {upstream!r} ({e})") from None
    if url.scheme not in ("http", "https") or not url.host or (url.port or 0) > 65535:
        raise ValueError(f"upstream must be an http:// or https:// URL, not {upstream!r}")
    return url


async def _relay_until_client_leaves(upstream: httpx.Response, receive: Any, send: Any) -> httpx.HTTPError | None:
    """Relay the reply chunk by chunk; stop reading the upstream as soon as the client has gone.

    ASGI 2.3 servers (uvicorn) drop what is sent after the client left and say so only through
    receive(), so one task relays while another waits for `http.disconnect`; the first to finish
    stops the other. Returns the error that cut the upstream's reply short, if one did: the reply
    is then left incomplete, and the server closes the connection, so the client sees it cut too.
    """
    cut_short: httpx.HTTPError | None = None
    async with anyio.create_task_group() as tasks:

        async def relay() -> None:
            nonlocal cut_short
            try:
                async for chunk in upstream.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except OSError:  # ASGI 2.4 servers raise it when the client has gone
                pass
            except httpx.HTTPError as error:
                cut_short = error
            tasks.cancel_scope.cancel()

        async def watch_for_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            tasks.cancel_scope.cancel()

        tasks.start_soon(relay)
        tasks.start_soon(watch_for_disconnect)
    return cut_short


def _log_upstream_failure(served: ServedRequest | None, upstream_url: str, error: httpx.HTTPError) -> None:
    if served is None:  # a health probe, which the middleware leaves unrecorded
        return
    served.error("proxy.upstream_failed", upstream=upstream_url, error=f"{type(error).__name__}: {error}")


def _write_tap(served: ServedRequest | None, upstream_url: str, upstream: httpx.Response) -> None:
    if served is None:  # a health probe, which the middleware leaves unrecorded
        return
    # the raw bytes: clean_label reads UTF-8 where httpx would guess an encoding
    upstream_x_request_id = next((v for k, v in upstream.headers.raw if k.lower() == X_REQUEST_ID.encode()), None)
    revealed = {  # the reply id is among the request's ids already
        "upstream_x_request_id": clean_label(upstream_x_request_id) if upstream_x_request_id else None,
        "upstream_internal_id": internal_id_in_reply_id(served.reply_id),
    }
    served.info(
        "proxy.tap",
        upstream=upstream_url,
        upstream_status=upstream.status_code,
        **{key: value for key, value in revealed.items() if value is not None},
    )


def _end_to_end(raw_headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    named_by_connection = {
        token.strip().lower()
        for name, value in raw_headers
        if name.lower() == b"connection"
        for token in value.split(b",")
    }
    dropped = HOP_BY_HOP | named_by_connection
    return [(name.lower(), value) for name, value in raw_headers if name.lower() not in dropped]


async def _request_body(receive: Any) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return  # the client left before sending all of it
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return


async def _send_bad_gateway(send: Any, upstream_url: str) -> None:
    body = json.dumps(
        {"error": {"message": f"trace-join proxy could not reach the upstream {upstream_url}", "type": "bad_gateway"}}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 502,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


def create_proxy_app(upstream: str, **middleware_options: Any) -> TraceJoinMiddleware:
    """The proxy as an ASGI app; `middleware_options` are TraceJoinMiddleware's keywords."""
    return TraceJoinMiddleware(ReverseProxy(upstream), role="proxy", **middleware_options)


def proxy_config(upstream: str, listen: str = "127.0.0.1:8080", **middleware_options: Any) -> uvicorn.Config:
    host, port = parse_listen(listen)
    return uvicorn.Config(
        create_proxy_app(upstream, **middleware_options),
        host=host,
        port=port,
        # The upstream's Date and Server headers pass through; uvicorn adding its own would double them.
        date_header=False,
        server_header=False,
        # request.start/request.end are the access log.
        access_log=False,
        lifespan="on",
    )


class ListenError(Exception):
    """The proxy cannot listen where it was told: the port is taken, the address is not this
    host's, or the host name does not resolve."""


def serve_proxy(upstream: str, listen: str = "127.0.0.1:8080", log: str | None = None, otlp: str | None = None) -> None:
    """Run `trace-join proxy` until interrupted. `log`: a JSONL path (default stderr); `otlp`: an
    OTLP/HTTP endpoint for the spans. ValueError for a bad `upstream` or `listen`, ListenError when
    the address cannot be listened on."""
    config = proxy_config(upstream, listen, log=log, otlp_endpoint=otlp)
    # Bound here, not by uvicorn: uvicorn would report a taken port among its start-up and
    # shutdown lines, then exit on its own.
    uvicorn.Server(config).run(sockets=[listening_socket(config.host, config.port)])


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket listening on host:port (IPv6 for an address with a colon; port 0 picks a free
    one), for a server to serve on; ListenError, in one line, when it cannot be had."""
    try:
        return socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as e:  # create_server's strerror adds the address; the errno's own text is shorter
        reason = os.strerror(e.errno) if e.errno else str(e)
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        raise ListenError(f"cannot listen on {address}: {reason[:1].lower()}{reason[1:]}") from None


def parse_listen(listen: str) -> tuple[str, int]:
    """`host:port`, `[v6 address]:port`, or `:port` (loopback)."""
    host, separator, port = listen.rpartition(":")
    if not separator or not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise ValueError(f"listen address must be HOST:PORT, not {listen!r}")
    return host.strip("[]") or "127.0.0.1", int(port)
