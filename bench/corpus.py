"""Benchmark data: a fleet's Dynamo JSONL logs, written fast.

`Corpus` writes what a disaggregated Dynamo fleet (F frontends, P prefill and D decode workers)
logs for n requests. Its lines are collector/dynamo_sample.py's, byte for byte: the generator
renders one request there, finds its ids in the text, and re-emits that text with each request's
own ids (a thousand times faster than rendering every request). Ids are a pure function of the
request number (request_ids), so a benchmark knows what to look up and what it must find.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tracejoin.cli.demo.dynamo_formats import DynamoSample

VERSION = 1  # bump when the lines change, so cached corpora are rebuilt
FRONTENDS, PREFILLS, DECODES = 4, 6, 6  # 16 workers
REQUESTS_PER_SECOND = 1000  # spreads request times over the corpus
_TEMPLATE_X_REQUEST_ID = "XREQUESTIDTEMPLATE"


@dataclass(frozen=True)
class RequestIds:
    internal_id: str
    trace_id: str
    spans: tuple[str, ...]  # http, to_prefill, to_decode, prefill, decode (DynamoSample's order)
    x_request_id: str

    @property
    def reply_id(self) -> str:
        return "chatcmpl-" + self.internal_id


def request_ids(k: int) -> RequestIds:
    """Request k's ids."""
    u = hashlib.md5(f"u{k}".encode()).hexdigest()
    s = hashlib.sha256(f"s{k}".encode()).hexdigest() + hashlib.md5(f"v{k}".encode()).hexdigest()
    return RequestIds(
        internal_id=f"{u[:8]}-{u[8:12]}-{u[12:16]}-{u[16:20]}-{u[20:]}",
        trace_id=hashlib.md5(f"t{k}".encode()).hexdigest(),
        spans=tuple(s[16 * i:16 * i + 16] for i in range(5)),
        x_request_id=f"xr-{k}",
    )


_ID_COLUMNS = ("internal_id", "trace_id", "s0", "s1", "s2", "s3", "s4", "x_request_id")


def _id_values(ids: RequestIds) -> tuple[str, ...]:
    return (ids.internal_id, ids.trace_id, *ids.spans, ids.x_request_id)


def workers_of(k: int) -> tuple[int, int, int]:
    """The frontend, prefill and decode worker that serve request k."""
    return k % FRONTENDS, k % PREFILLS, k % DECODES


class _Template:
    """One request as DynamoSample writes it, cut into literal text and the places its ids go."""

    def __init__(self):
        sample = DynamoSample()
        req = sample.add(x_request_id=_TEMPLATE_X_REQUEST_ID)
        with tempfile.TemporaryDirectory() as tmp:
            files = sample.write(tmp)
            lines = {role: files[role].read_bytes().splitlines(keepends=True)
                     for role in ("frontend", "prefill", "decode")}
        self.second = dt.datetime.fromtimestamp(req.start_ns // 10**9, dt.timezone.utc)
        self.prefill_instance, self.decode_instance = sample.prefill_instance, sample.decode_instance
        names = {req.request_id: "internal_id", req.trace_id: "trace_id", _TEMPLATE_X_REQUEST_ID: "x_request_id",
                 **{span: f"s{i}" for i, span in enumerate(req.spans.values())},
                 sample.prefill_instance: "prefill", sample.decode_instance: "decode",
                 _iso_second(self.second): "second"}
        pattern = re.compile(b"|".join(re.escape(v.encode()) for v in sorted(names, key=len, reverse=True)))
        self.headers: dict[str, bytes] = {}
        self.blocks: dict[str, list] = {}
        for role, role_lines in lines.items():
            mine = [ln for ln in role_lines if req.request_id.encode() in ln]
            self.headers[role] = b"".join(ln for ln in role_lines if ln not in mine)
            parts = pattern.split(b"".join(mine))
            found = pattern.findall(b"".join(mine))
            # literal, name, literal, name, ..., literal: rendering fills in the names' values
            self.blocks[role] = [parts[0]] + [x for name, lit in zip(found, parts[1:])
                                              for x in (names[name.decode()], lit)]

    def render(self, role: str, values: dict[str, bytes]) -> bytes:
        block = self.blocks[role]
        return b"".join(part if i % 2 == 0 else values[part] for i, part in enumerate(block))


def _iso_second(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S")


class Corpus:
    """n requests' logs in 16 files (one per worker), written once and reused while n matches."""

    def __init__(self, folder: Path, requests: int):
        self.folder = Path(folder)
        self.requests = requests
        self._marker = self.folder / "corpus.json"

    def files(self) -> list[Path]:
        return ([self.folder / f"frontend-{i}.stderr.jsonl" for i in range(FRONTENDS)]
                + [self.folder / f"prefill-{i}.stderr.jsonl" for i in range(PREFILLS)]
                + [self.folder / f"decode-{i}.stderr.jsonl" for i in range(DECODES)])

    def bytes(self) -> int:
        return sum(f.stat().st_size for f in self.files())

    def lines(self) -> int:
        return json.loads(self._marker.read_text())["lines"]

    def ensure(self) -> "Corpus":
        expected = self._made_of()
        if self._marker.exists() and {k: v for k, v in json.loads(self._marker.read_text()).items()
                                      if k in expected} == expected:
            return self
        template = self._template()  # before the folder goes: making it may fail
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        lines = self._write(template)
        self._marker.write_text(json.dumps({**expected, "lines": lines}))
        return self

    def _made_of(self) -> dict:
        """What the files are made of: files made otherwise are made again."""
        return {"version": VERSION, "requests": self.requests}

    def _template(self) -> _Template:
        return _Template()

    def _write(self, t: _Template) -> int:
        outs = [open(f, "wb", buffering=1 << 20) for f in self.files()]
        frontends, prefills, decodes = outs[:FRONTENDS], outs[FRONTENDS:-DECODES], outs[-DECODES:]
        prefill_ids = [str(int(t.prefill_instance) + 10 * i).encode() for i in range(PREFILLS)]
        decode_ids = [str(int(t.decode_instance) + 10 * i).encode() for i in range(DECODES)]
        lines = 0
        for i, f in enumerate(frontends):
            f.write(t.headers["frontend"].replace(b"127.0.0.1:8000", f"127.0.0.1:{8000 + i}".encode()))
        for role, files, ids, template_id in (("prefill", prefills, prefill_ids, t.prefill_instance),
                                              ("decode", decodes, decode_ids, t.decode_instance)):
            for f, instance in zip(files, ids):
                f.write(t.headers[role].replace(template_id.encode(), instance))
        lines += sum(t.headers[r].count(b"\n") * n for r, n in (("frontend", FRONTENDS), ("prefill", PREFILLS),
                                                                 ("decode", DECODES)))
        seconds: dict[int, bytes] = {}
        for k in range(self.requests):
            f, p, d = workers_of(k)
            offset = k // REQUESTS_PER_SECOND
            if offset not in seconds:
                seconds[offset] = _iso_second(t.second + dt.timedelta(seconds=offset)).encode()
            values = dict(zip(_ID_COLUMNS, (v.encode() for v in _id_values(request_ids(k)))))
            values.update(second=seconds[offset], prefill=prefill_ids[p], decode=decode_ids[d])
            frontends[f].write(t.render("frontend", values))
            prefills[p].write(t.render("prefill", values))
            decodes[d].write(t.render("decode", values))
        lines += self.requests * sum(t.render(r, values).count(b"\n") for r in ("frontend", "prefill", "decode"))
        for f in outs:
            f.close()
        return lines
