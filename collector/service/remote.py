"""Reading through a running collector: the client side of query_server.py.

`trace-join collect` holds its database, and DuckDB then lets no other process open it, not even
read-only. The collector writes the address of its query endpoint and a random token to
`<db>.collector.json` (mode 0600, removed on a clean exit); a read command that finds the database
locked sends its query there and gets the result the query would have given it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..store import StoreError


def endpoint_file(db: Path) -> Path:
    return db.with_name(db.name + ".collector.json")


def query(db: Path, name: str, params: dict) -> Any:
    import httpx  # only reads through a collector need it

    try:
        endpoint = json.loads(endpoint_file(db).read_text())
    except (OSError, ValueError):
        raise StoreError(f"{db} is held by another process, and no collector serves it "
                         f"(no readable {endpoint_file(db).name}); wait for that process to finish") from None
    try:
        answer = httpx.post(f"{endpoint['url']}/query/{name}", json=params, timeout=300,
                            headers={"authorization": f"Bearer {endpoint['token']}"})
    except httpx.HTTPError as e:
        raise StoreError(f"{db} is held by another process, and the collector at {endpoint['url']} "
                         f"does not answer ({type(e).__name__})") from None
    if answer.status_code != 200:
        try:
            reason = answer.json()["error"]
        except (ValueError, KeyError, TypeError):
            reason = f"HTTP {answer.status_code}"
        raise StoreError(f"the collector could not run {name}: {reason}")
    return answer.json()
