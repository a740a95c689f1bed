"""TensorRT-LLM post-processor hook records: the `raw_output` lines of the `RawOutputDump` hook
(TensorRT-LLM's `--post_processor_hook`, a prototype; the hook exists only in the fork JunyiXu-nv/TensorRT-LLM,
`tensorrt_llm/executor/raw_output_hook.py`, whose code gives the field names below).

Enabled with `--post_processor_hook tensorrt_llm.executor.raw_output_hook.RawOutputDump` and
`TRTLLM_RAW_OUTPUT_DIR=<dir>`, each process appends to `<dir>/<YYYY-MM-DDTHH>/raw-<pid>.jsonl` (one
folder per UTC hour) one line per (request, output) when it finishes:

    {"event":"raw_output","request_id":"17","disagg_request_id":"1183745023401293842",
     "output_index":0,"finished_at":"2026-09-18T07:12:34.567890+00:00",
     "started_at":"2026-09-18T07:12:33.101010+00:00","streaming":true,"aborted":false,
     "text":"...","frames":["...","..."]}

- `request_id` is the engine's own id (as text): an engine id scoped to the process;
  `disagg_request_id` is the disaggregated server's id, null when serving is aggregated.
- The record starts at `started_at` (the first chunk the hook saw) and lasts until `finished_at`.
- The model's text is not stored (no source stores prompt or reply text unless asked), only its
  length and the number of streamed frames.

The process is `<host>:<pid>`: the pid from the file name, the host from the name of the folder
that holds the hour folders (TRTLLM_RAW_OUTPUT_DIR), so a dump directory named after the host
(`.../raw/$(hostname)`) gives the same worker name as the process's perf-metrics file and their
engine ids join. A file outside an hour folder has host `local`; a file not named `raw-<pid>.jsonl`
is named as parsing.worker_from_path says.
"""

from __future__ import annotations

import os
import re

from ..ids import DISAGG_REQUEST_ID, ENGINE_REQUEST_ID
from ..records import Record
from .parsing import Unparseable, field, iso_to_ns, load_object, worker_from_path
from .perf_metrics_jsonl import RoleFromVotes, RoleVotes

NAME = "trtllm_hook"

_FILE_NAME = re.compile(r"^raw-(\d+)\.jsonl(?:\.gz)?$")
_HOUR_FOLDER = re.compile(r"^\d{4}-\d\d-\d\dT\d\d$")
_EVENT = re.compile(rb'^\s*\{.*"event"\s*:\s*"raw_output"')


def sniff(path: str, head: list[bytes]) -> bool:
    return bool(head) and all(_EVENT.match(line) for line in head)


def worker_of(path: str) -> str:
    m = _FILE_NAME.match(os.path.basename(path))
    if not m:
        return worker_from_path(path)
    hour_folder = os.path.dirname(os.path.abspath(path))
    dump_dir = os.path.basename(os.path.dirname(hour_folder))
    host = dump_dir if _HOUR_FOLDER.match(os.path.basename(hour_folder)) and dump_dir else "local"
    return f"{host}:{m.group(1)}"


class LineParser(RoleFromVotes):
    def __init__(self, path: str):
        self.worker = worker_of(path)
        self.role: str | None = None
        self._votes = RoleVotes()

    def parse(self, line: bytes) -> list[Record]:
        obj = load_object(line)
        if obj.get("event") != "raw_output":
            raise Unparseable("not a raw_output hook record")
        started = iso_to_ns(field(obj, "started_at", (str,), required=True))
        finished = iso_to_ns(field(obj, "finished_at", (str,), required=True))
        aborted = field(obj, "aborted", (bool,))
        text = field(obj, "text", (str,))
        frames = field(obj, "frames", (list,))
        record = Record(kind="hook", name="raw output", time_ns=started, duration_ns=finished - started,
                        status="aborted" if aborted else "complete")
        record.add_id(ENGINE_REQUEST_ID, field(obj, "request_id", (str, int), required=True), self.worker)
        disagg_id = field(obj, "disagg_request_id", (str, int))
        record.add_id(DISAGG_REQUEST_ID, disagg_id)
        record.attrs = {
            "output_index": field(obj, "output_index", (int,)),
            "streaming": field(obj, "streaming", (bool,)),
            "aborted": aborted,
            "text_chars": len(text) if text is not None else None,
            "frames": len(frames) if frames is not None else None,
        }
        # A disaggregated worker's records carry the disagg id; which side it is, the hook does
        # not say (`worker`); an aggregated server's records carry none.
        self.role = self._votes.vote("agg" if disagg_id is None else "worker")
        return [record]
