"""SGLang's request-metrics exporter (`--export-metrics-to-file --export-metrics-to-file-dir DIR`,
0.5.23): `sglang-request-metrics-YYYYmmdd_HH.log`, one JSON object per finished request:

    {"request_parameters": "{\\"rid\\": \\"0cc5…\\", \\"sampling_params\\": {…}, \\"stream\\": true}",
     "id": "0cc5…", "finish_reason": {"type": "length", "length": 128}, "prompt_tokens": 128,
     "completion_tokens": 128, "cached_tokens": 0, "e2e_latency": 1.834}

`request_parameters` is the request's non-null fields as a JSON string; the rest is the finish's
`meta_info` (with SGLang's metrics on, `queue_time`, `request_received_ts`, `request_finished_ts`
and more, in seconds). `id` is the rid, the reply id (sglang_log.py), and the parameters'
`bootstrap_room` joins a disaggregated request's prefill and decode. A record is timed by
`request_received_ts` (epoch seconds) when it has one; else it is placed by the other records of
its request (it has no time of its own). The request's text (`text`, `input_ids`, …) is stored as
its length unless `--keep-content`.

The file names no process: `ingest --worker` names it, else its folder's name.
"""

from __future__ import annotations

import os
import re

import orjson

from ..ids import BOOTSTRAP_ROOM, REPLY_ID, bootstrap_room
from ..records import Record
from .parsing import Unparseable, field, load_object
from .sglang_log import CONTENT_FIELDS

NAME = "sglang_metrics"
WORKER_FROM_USER = True
CONTENT_FROM_USER = True

FILE_NAME = re.compile(r"^sglang-request-metrics-\d{8}_\d\d\.log(?:\.gz)?$")


def sniff(path: str, head: list[bytes]) -> bool:
    return bool(FILE_NAME.match(os.path.basename(path))) or (
        bool(head) and all(line.lstrip().startswith(b"{") and b'"request_parameters"' in line for line in head))


class LineParser:
    def __init__(self, path: str, worker: str | None = None, keep_content: bool = False):
        self.worker = worker or os.path.basename(os.path.dirname(os.path.abspath(path)))
        self.role: str | None = None
        self.keep_content = keep_content

    def parse(self, line: bytes) -> list[Record]:
        item = load_object(line)
        rid = field(item, "id", (str,), required=True)
        text = field(item, "request_parameters", (str,))
        try:
            parameters = orjson.loads(text) if text else {}
        except orjson.JSONDecodeError as e:
            raise Unparseable(f"request_parameters is not JSON: {e}") from None
        if not isinstance(parameters, dict):
            raise Unparseable("request_parameters is not a JSON object")
        record = Record(kind="perf", name="request metrics", worker=self.worker)
        received = field(item, "request_received_ts", (int, float))
        if received:
            record.time_ns = round(received * 1e9)
        e2e = field(item, "e2e_latency", (int, float))
        if e2e is not None and e2e >= 0:
            record.duration_ns = round(e2e * 1e9)
        reason = field(item, "finish_reason", (dict,))
        if reason and isinstance(reason.get("type"), str):
            record.status = reason["type"]
        record.add_id(REPLY_ID, rid)
        record.add_id(REPLY_ID, parameters.get("rid") if isinstance(parameters.get("rid"), str) else None)
        record.add_id(BOOTSTRAP_ROOM, bootstrap_room(parameters.get("bootstrap_room")))
        attrs = {k: v for k, v in item.items() if k != "request_parameters"}
        queue = field(item, "queue_time", (int, float))
        if queue is not None and queue >= 0:
            attrs["queue_ms"] = round(queue * 1000, 3)
        content = {k: len(orjson.dumps(v)) for k, v in parameters.items() if k in CONTENT_FIELDS and v is not None}
        if self.keep_content or not content:
            attrs["request_parameters"] = parameters
        else:
            attrs["request_parameters"] = {k: v for k, v in parameters.items() if k not in CONTENT_FIELDS}
            attrs["content_chars"] = content
        record.attrs = attrs
        return [record]
