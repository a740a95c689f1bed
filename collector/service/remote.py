"""Reading through a running collector: the client side of query_server.py.

`trace-join collect` holds its database, and DuckDB then lets no other process open it, not even
read-only. The collector serves queries on a Unix socket beside the database, `<db>.collector.sock`
(mode 0600: its user's only; removed on a clean exit); a read command that finds the database
locked sends its query there and gets the result the query would have given it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..store import StoreError
from .unix_socket import address_of


def query_socket(db: Path) -> Path:
    return db.with_name(db.name + ".collector.sock")


def query(db: Path, name: str, params: dict) -> Any:
    import httpx  # only reads through a collector need it

    path = query_socket(db)
    if not path.is_socket():
        raise StoreError(f"{db} is held by another process, and no collector serves it "
                         f"(no {path.name}); wait for that process to finish")
    if not os.access(path, os.W_OK):  # connecting to a Unix socket takes write permission
        raise StoreError(f"{db} is held by a collector that another user runs, and only that user can read "
                         f"through it ({path} is theirs); run the command as that user")
    try:
        with address_of(path) as address, httpx.Client(transport=httpx.HTTPTransport(uds=address)) as client:
            answer = client.post(f"http://collector/query/{name}", json=params, timeout=300)
    except httpx.HTTPError as e:
        raise StoreError(f"{db} is held by another process, and the collector at {path} "
                         f"does not answer ({type(e).__name__})") from None
    if answer.status_code != 200:
        try:
            reason = answer.json()["error"]
        except (ValueError, KeyError, TypeError):
            reason = f"HTTP {answer.status_code}"
        raise StoreError(f"the collector could not run {name}: {reason}")
    return answer.json()
