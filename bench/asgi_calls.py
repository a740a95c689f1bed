"""bench/apps.py's app called in-process, as an ASGI server calls it, a given number of times: what
benchmark 3 counts the instructions of under Valgrind. `python -m bench.asgi_calls traced 1500`."""

from __future__ import annotations

import asyncio
import sys

from . import apps
from .middleware import BODY

SCOPE = {
    "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
    "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions", "query_string": b"", "root_path": "",
    "headers": [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
                (b"x-request-id", b"bench-client-1"), (b"content-length", str(len(BODY)).encode())],
    "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000),
}


async def call(app, times: int) -> None:
    async def receive():
        return {"type": "http.request", "body": BODY, "more_body": False}

    async def send(message):
        pass

    for _ in range(times):
        await app(dict(SCOPE), receive, send)


def main() -> None:
    factory, times = sys.argv[1], int(sys.argv[2])
    asyncio.run(call(getattr(apps, factory)(), times))


if __name__ == "__main__":
    main()
