"""Benchmark data as a real Dynamo deployment writes it: lines its frontend and workers logged.

`capture` runs the real thing once (cli/demo/dynamo.py's deployment: Dynamo's frontend and a
prefill and a decode `mocker` worker) and sends it CAPTURED_REQUESTS requests of every kind it
serves; their lines are kept. `RealDynamoCorpus` then writes n requests into one file per worker
of a fleet (bench/corpus.py's 4 frontends, 6 prefill and 6 decode workers), each request the lines
of a captured one, byte for byte but for its ids (request, trace and span ids, x-request-id, the
workers' instance ids) and its times, made fresh: real lines carry many more fields than the
demo's (source file and line, target, span names, uri, component, instance ids), and what ingest
costs grows with them.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import shutil
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tracejoin.cli.demo.dynamo import DYNAMO_VERSION, MODEL_NAME, DynamoDeployment

from .corpus import DECODES, FRONTENDS, PREFILLS, REQUESTS_PER_SECOND, Corpus

CAPTURED_REQUESTS = 200
VERSION = 2  # bump when what is captured or how it is replicated changes
ROLES = ("frontend", "prefill", "decode")

_REQUEST_ID = re.compile(rb'"request_id":"([0-9a-f-]{36})"')
_UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_HEX_ID = re.compile(rb'"(trace_id|span_id|parent_id)":"([0-9a-f]{16,32})"')
_X_REQUEST_ID = re.compile(rb'"x_request_id":"[^"]*"')
_TIME = re.compile(rb'"time":"([0-9T:.-]+)Z"')
_INSTANCE = re.compile(rb'"instance_id":"([0-9]+)"')


def _body(i: int) -> tuple[str, dict]:
    """Request i of the capture: chat and completions, streamed and not, prompts and lengths that vary."""
    prompt = "hello world " * (i % 7 + 1)
    common = {"model": MODEL_NAME, "max_tokens": 4 + i % 13, "stream": i % 2 == 0}
    if i % 4 == 3:
        return "/v1/completions", {**common, "prompt": prompt}
    return "/v1/chat/completions", {**common, "messages": [{"role": "user", "content": prompt}]}


def capture(folder: Path) -> Path:
    """The logs of a real Dynamo run that served CAPTURED_REQUESTS requests, four at a time (kept
    in `folder` and reused)."""
    import httpx

    marker = folder / "captured.json"
    expected = {"version": VERSION, "dynamo": DYNAMO_VERSION, "requests": CAPTURED_REQUESTS}
    if marker.exists() and json.loads(marker.read_text()) == expected:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with DynamoDeployment(folder, port) as dynamo, httpx.Client(timeout=60) as client:
        def send(i: int) -> int:
            path, body = _body(i)
            return client.post(dynamo.url + path, json=body, headers={"x-request-id": f"bench-{i}"}).status_code

        with ThreadPoolExecutor(4) as pool:
            statuses = set(pool.map(send, range(CAPTURED_REQUESTS)))
    if statuses != {200}:
        raise RuntimeError(f"the captured Dynamo run answered {sorted(statuses)}: see {folder / 'logs'}")
    marker.write_text(json.dumps(expected))
    return folder


class _Captured:
    """The captured run's lines: each request's lines per role, and the lines of no request (a
    process's start) per role."""

    def __init__(self, folder: Path):
        self.requests: dict[bytes, dict[str, list[bytes]]] = {}
        self.headers: dict[str, list[bytes]] = {}
        self.instances: dict[str, bytes] = {}
        for role in ROLES:
            lines = (folder / "logs" / f"{role}.stderr.jsonl").read_bytes().splitlines(keepends=True)
            header = self.headers[role] = []
            serving = False
            for line in lines:
                found = _REQUEST_ID.search(line)
                if found:
                    serving = True
                    self.requests.setdefault(found.group(1), {r: [] for r in ROLES})[role].append(line)
                elif not serving:  # the process starting
                    header.append(line)
            if role != "frontend":
                self.instances[role] = next(m.group(1) for line in lines for m in [_INSTANCE.search(line)] if m)
        self.requests = {k: v for k, v in self.requests.items() if all(v[r] for r in ROLES)}
        # each request's first time, and the whole second before the first request's
        self.starts = {k: min(_time(line) for lines in v.values() for line in lines) for k, v in self.requests.items()}
        self.second = min(self.starts.values()).replace(microsecond=0)


def _time(line: bytes) -> dt.datetime:
    return dt.datetime.fromisoformat(_TIME.search(line).group(1).decode()).replace(tzinfo=dt.timezone.utc)


def _moved(m: re.Match, by: dt.timedelta) -> bytes:
    """A `"time":"…Z"` field moved by `by`."""
    moved = dt.datetime.fromisoformat(m.group(1).decode()) + by
    return b'"time":"%sZ"' % moved.isoformat(timespec="microseconds").encode()


def _instance(role: str, i: int) -> bytes:
    return str(int(hashlib.md5(f"{role}-{i}".encode()).hexdigest()[:15], 16)).encode()


class RealDynamoCorpus(Corpus):
    """n requests of a captured Dynamo run in 16 files (one per worker), written once and reused
    while n matches; the run is captured into `captures` when it is not there yet."""

    def __init__(self, folder: Path, requests: int, captures: Path):
        super().__init__(folder, requests)
        self.captures = captures

    def _made_of(self) -> dict:
        return {"version": VERSION, "dynamo": DYNAMO_VERSION, "requests": self.requests}

    def _template(self) -> _Captured:
        return _Captured(capture(self.captures))

    def _write(self, captured: _Captured) -> int:
        files = self.files()
        outs = {role: [open(f, "wb", buffering=1 << 20) for f in files if f.name.startswith(role + "-")]
                for role in ROLES}
        lines = 0
        for role, role_outs in outs.items():
            for i, out in enumerate(role_outs):
                # each process started a few ms after the one before, as a fleet's do: files that
                # begin alike would be taken for one file under two names
                started = dt.timedelta(milliseconds=7 * i)
                header = _TIME.sub(lambda m: _moved(m, started), b"".join(captured.headers[role]))
                if role != "frontend":
                    header = header.replace(captured.instances[role], _instance(role, i))
                out.write(header)
                lines += len(captured.headers[role])
        templates = list(captured.requests)
        for k in range(self.requests):
            template = captured.requests[templates[k % len(templates)]]
            fresh: dict[bytes, bytes] = {}  # this copy's value of each id the template holds

            def uuid(m: re.Match) -> bytes:
                if m.group(0) not in fresh:
                    h = hashlib.md5(b"%d-%s" % (k, m.group(0))).hexdigest().encode()
                    fresh[m.group(0)] = b"-".join((h[:8], h[8:12], h[12:16], h[16:20], h[20:32]))
                return fresh[m.group(0)]

            def hex_id(m: re.Match) -> bytes:
                value = m.group(2)
                if value not in fresh:
                    fresh[value] = hashlib.sha1(b"%d-%s" % (k, value)).hexdigest()[:len(value)].encode()
                return b'"%s":"%s"' % (m.group(1), fresh[value])

            # the copy starts k / REQUESTS_PER_SECOND seconds after the capture's first second
            shift = (captured.second + dt.timedelta(seconds=k / REQUESTS_PER_SECOND)
                     - captured.starts[templates[k % len(templates)]])

            chosen = {"frontend": k % FRONTENDS, "prefill": k % PREFILLS, "decode": (k * 7) % DECODES}
            x_request_id = b'"x_request_id":"xr-%d"' % k
            for role in ROLES:
                text = b"".join(template[role])
                text = _HEX_ID.sub(hex_id, _UUID.sub(uuid, text))
                text = _TIME.sub(lambda m: _moved(m, shift), _X_REQUEST_ID.sub(x_request_id, text))
                for worker_role in ("prefill", "decode"):
                    text = text.replace(captured.instances[worker_role], _instance(worker_role, chosen[worker_role]))
                outs[role][chosen[role]].write(text)
                lines += len(template[role])
        for role_outs in outs.values():
            for out in role_outs:
                out.close()
        return lines
