"""TensorRT-LLM's legacy per-request perf metrics: the JSON arrays `GET /perf_metrics` returned from
PR #6985 until PR #16668, saved to files or polled live (`_extract_metrics` and `get_perf_metrics`
in TensorRT-LLM's `tensorrt_llm/serve/openai_server.py`).

The endpoint returns the requests finished since the last call and forgets them (drained on
read), so every poll is a new array. A file holds either
- one array per line, one poll each (`curl -s host:port/perf_metrics >> polls.jsonl`), or
- one pretty-printed array (`curl ... | jq .`, `json.dump(..., indent=2)`): its lines are gathered
  from the `[` line that opens it to the unindented `]` line that closes it, and read then. An
  array cut off before its closing line is not stored; `jq -c` makes any array one line.

Items are worker items (`request_id`, the engine's own id; `ctx_request_id` on disaggregated
workers; `perf_metrics`) or, from the disaggregated server, records pairing the two workers'
items: `ctx_server`, `gen_server` ("host:port"), `ctx_perf_metrics`, `gen_perf_metrics`. They
are read as the post-#16668 JSONL records are (perf_metrics_jsonl.py), with one difference: a
legacy disaggregated record carries the workers' items as polled, so the ctx item's `request_id`
is the ctx worker's engine id (scoped to `ctx_server`), the gen item's the gen worker's (scoped
to `gen_server`), and their `ctx_request_id`, the only link between the two, is scoped to
`ctx_server`.

No item names the process that served it. The worker is the one the caller names (the live
poller knows the URL it polled), else the file's folder or name (`10.0.0.5_8001.perf_metrics.json`,
`…/10.0.0.5:8001/polls.jsonl`; parsing.worker_from_path). A ctx worker's own items name its ctx
request id, but nothing in them says the worker is a ctx worker, so that id is scoped to it (a
key) only when the caller says its role is `ctx`.
"""

from __future__ import annotations

import os
import re

from ..records import Record
from .parsing import Unparseable, load_json, worker_from_path
from .perf_metrics_jsonl import RoleFromVotes, RoleVotes, disagg_record, infer_worker_role, is_disagg_record, worker_record

NAME = "perf_metrics_legacy"
# Nothing in the file names its process: the user can (`trace-join ingest --worker`).
WORKER_FROM_USER = True
# A busy server's poll is one line of up to perf_metrics_max_requests items.
MAX_LINE = 64 << 20
_PERF_KEY = re.compile(rb'"(?:perf_metrics|disagg_server_arrival_time)"\s*:')


def sniff(path: str, head: list[bytes]) -> bool:
    if not head:
        return False
    first = head[0].strip()
    if first == b"[" or first.replace(b" ", b"").startswith(b"[{"):
        return bool(_PERF_KEY.search(b"\n".join(head)))
    # Polls of an idle server are all `[]`: recognizable only by the file's name.
    return "perf_metrics" in os.path.basename(path) and all(line.strip() == b"[]" for line in head)


class LineParser(RoleFromVotes):
    def __init__(self, path: str, worker: str | None = None, role: str | None = None):
        self.worker = worker or worker_from_path(path)
        self.role = role
        self._given_role = role
        self._votes = RoleVotes()
        self._array: list[bytes] | None = None  # lines of a pretty-printed array being gathered
        self._array_bytes = 0

    def parse(self, line: bytes) -> list[Record]:
        if self._array is None:
            if line.strip() == b"[":
                self._array, self._array_bytes = [line], len(line)
                return []
            return self._poll(_load_array(line))
        self._array.append(line)
        self._array_bytes += len(line)
        if line.rstrip() != b"]":
            if self._array_bytes > MAX_LINE:
                self._array = None
                raise Unparseable(f"a pretty-printed array over {MAX_LINE} bytes: compact it with `jq -c`")
            return []
        text, self._array = b"\n".join(self._array), None
        return self._poll(_load_array(text))

    def _poll(self, items: list) -> list[Record]:
        records = _records(items, self.worker, self._given_role, self._votes)
        if self._given_role is None:
            self.role = self._votes.leader
        return records


def records_from_perf_metrics_response(items: list, worker: str | None, role: str | None = None) -> list[Record]:
    """Records of one `GET /perf_metrics` response, for the live poller. `worker`: the server
    polled (`host:port`); `role`: its role when known (`ctx` makes its ctx request ids keys).
    Without a role, worker items take the one most of the response's items suggest."""
    votes = RoleVotes()
    records = _records(items, worker, role, votes)
    for record in records:
        record.role = record.role or votes.leader
    return records


def _records(items, worker: str | None, role: str | None, votes: RoleVotes) -> list[Record]:
    if not isinstance(items, list):
        raise Unparseable(f"expected a JSON array, got {type(items).__name__}")
    records = []
    for item in items:
        if not isinstance(item, dict):
            raise Unparseable(f"array item is {type(item).__name__}, expected an object")
        if is_disagg_record(item):
            records.append(disagg_record(item, phase_ids_are_engine_ids=True, worker=worker))
        else:
            records.append(worker_record(item, worker, role=role, ctx_scope=worker if role == "ctx" else None))
            if role is None:
                votes.vote(infer_worker_role(item))
    return records


def _load_array(text: bytes) -> list:
    return load_json(text, list, "a JSON array (one poll of /perf_metrics)")
