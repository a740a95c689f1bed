"""Values that parse but do not fit the store: a time after 2262 (the last second 64-bit ns hold), a
duration of 1e300 ms, an id nested 300 levels deep. Each such line is quarantined with its reason
and position, and everything around it, in its file and in the other files, is stored."""

from __future__ import annotations

import json

from tests.collector.otlp_senders import json_traces

DEEP = 300  # levels; JSON text is written up to 254


def nested(levels: int):
    value: object = "bottom"
    for _ in range(levels):
        value = [value]
    return value


def dumps(obj) -> bytes:
    return json.dumps(obj).encode()  # orjson writes no deeper than 254 levels: these lines go deeper


def tracejoin_line(ts: str, internal_id: str, **fields) -> bytes:
    return dumps({"schema": "tracejoin.log.v1", "ts": ts, "level": "info", "event": "request.start",
                         "role": "router", "worker": "gw:8000", "internal_id": internal_id, **fields})


def dynamo_line(time: str, request_id: str, **fields) -> bytes:
    return dumps({
        "time": time, "level": "INFO", "target": "dynamo_runtime::pipeline::network::ingress::push_handler",
        "message": "request received", "instance_id": "7587888880384150231", "request_id": request_id, **fields,
    })


def write_lines(path, lines: list[bytes]):
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_values_that_do_not_fit_are_quarantined_and_everything_else_stored(tj, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    ok = "2026-11-30T10:40:30.123456Z"
    # (file, its lines, the 1-based numbers of the poisoned ones)
    cases = {
        "router.jsonl": [
            tracejoin_line(ok, "good-tj-1"),
            tracejoin_line("2300-01-01T00:00:00Z", "poison-tj-year-2300"),
            tracejoin_line("9999-12-31T23:59:59.999999Z", "poison-tj-year-9999"),
            tracejoin_line(ok, "poison-tj-duration", duration_ms=1e300),
            tracejoin_line(ok, "poison-tj-nested", app_field=nested(DEEP)),
            tracejoin_line(ok, "good-tj-2"),
        ],
        "worker.stderr.jsonl": [
            dynamo_line(ok, "good-dyn-1"),
            dynamo_line("9999-12-31T23:59:59.999999Z", "poison-dyn-year"),
            dynamo_line(ok, "poison-dyn-duration", **{"time.duration_us": 2**62}),
            dynamo_line(ok, "good-dyn-2"),
        ],
        "spans.otlp.jsonl": [
            json_traces("chatcmpl-good-otlp", "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"),
            json_traces("chatcmpl-poison-otlp", "4bf92f3577b34da6a3ce929d0e0e4737", "00f067aa0ba902b8")
            .replace(b'"1787307302481000000"', b'"18446744073709551615"'),
        ],
        "trtllm-serve.log": [
            b"[07/09/2025-23:07:49] [TRT-LLM] [I] Starting TensorRT-LLM init.",
            b"[12/31/9999-23:59:59] [TRT-LLM] [I] a line from the far future",
            b"[07/09/2025-23:07:50] [TRT-LLM] [I] still reading",
        ],
    }
    poisoned = {
        "router.jsonl": {2: "time", 3: "time", 4: "duration", 5: "nested more than 254 levels"},
        "worker.stderr.jsonl": {2: "time", 3: "duration"},
        "spans.otlp.jsonl": {2: "time"},
        "trtllm-serve.log": {2: "time"},
    }
    for name, lines in cases.items():
        write_lines(logs / name, lines)
    write_lines(logs / "clean.jsonl", [tracejoin_line(ok, "good-tj-clean-file")])

    first = tj("ingest", logs, "--json")
    assert first.code == 2, first.err  # lines were quarantined
    summary = first.json()
    assert sum(s["quarantined"] for s in summary["sources"].values()) == 8
    assert sum(s["records"] for s in summary["sources"].values()) >= 8

    rows = tj("quarantine", "--json").json()
    found = {(row["path"].rsplit("/", 1)[-1], row["line"]): row["reason"] for row in rows}
    expected = {(name, n): what for name, lines in poisoned.items() for n, what in lines.items()}
    assert found.keys() == expected.keys()
    for where, what in expected.items():
        assert what in found[where] and "64-bit" in found[where] or what.startswith("nested"), (where, found[where])
    for row in rows:  # the byte offset is the poisoned line's own
        name = row["path"].rsplit("/", 1)[-1]
        assert (logs / name).read_bytes()[row["offset"]:].startswith(cases[name][row["line"] - 1])

    for good in ("good-tj-1", "good-tj-2", "good-tj-clean-file", "good-dyn-1", "good-dyn-2", "chatcmpl-good-otlp"):
        assert tj("lookup", good, "--json").code == 0, good
    for poison in ("poison-tj-year-2300", "poison-dyn-duration", "chatcmpl-poison-otlp"):
        assert tj("lookup", poison, "--json").code == 1, poison

    again = tj("ingest", logs, "--json")
    assert again.code == 0, again.err
    assert all(s["records"] == 0 and s["quarantined"] == 0 for s in again.json()["sources"].values())


# -- every field of every format -------------------------------------------------------------------

HOSTILE = [
    2**64, 2**63, -(2**63) - 1, 10**40, 1e300, -1e300, "18446744073709551615", "9999-12-31T23:59:59.999999Z",
    "2300-01-01T00:00:00Z", "0001-01-01T00:00:00Z", "-1", "", None, True, [], {}, "\x1b]0;x\x07", nested(DEEP),
]
TEXT_TIMES = [b"[12/31/9999-23:59:59]", b"[01/01/0001-00:00:00]", b"[02/30/2026-25:61:61]"]
MUTATIONS_PER_FILE = 300


def leaf_paths(value, path=()):
    if isinstance(value, dict):
        for key, v in value.items():
            yield from leaf_paths(v, (*path, key))
    elif isinstance(value, list) and value:
        for i, v in enumerate(value):
            yield from leaf_paths(v, (*path, i))
    else:
        yield path


def replaced(value, path, new):
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: replaced(value[head], rest, new)}
    return [replaced(v, rest, new) if i == head else v for i, v in enumerate(value)]


def mutations(lines: list[bytes], rng) -> list[bytes]:
    """Lines of a file, each with one value (JSON) or its timestamp (text) made hostile."""
    out = []
    while len(out) < MUTATIONS_PER_FILE:
        line = rng.choice(lines)
        try:
            obj = json.loads(line)
        except ValueError:
            start = line.find(b"]")
            if line.startswith(b"[") and start > 0:
                out.append(rng.choice(TEXT_TIMES) + line[start + 1:])
            else:
                out.append(line + b" " + str(rng.choice(HOSTILE)).encode())
            continue
        paths = list(leaf_paths(obj))
        out.append(dumps(replaced(obj, rng.choice(paths), rng.choice(HOSTILE))))
    return out


def test_no_value_in_any_field_of_any_format_stops_an_ingest(tj, tmp_path):
    """The demo's records (every format trace-join reads but Dynamo's, whose sample writer adds
    those), each file ingested again with hundreds of its lines given one hostile value: every line
    is stored or quarantined, none stops the ingest, and each file is read to its end."""
    import random

    from tracejoin.cli.demo.dynamo_formats import DynamoSample
    from tracejoin.collector.ingest import SNIFF_LINES, Ingester
    from tracejoin.collector.store import open_store

    assert tj("demo", "--folder", tmp_path / "demo").code == 0
    dynamo = DynamoSample()
    for i in range(5):
        dynamo.add(offset_ms=100 * i, x_request_id=f"xr-{i}")
    dynamo.write(tmp_path / "demo" / "dynamo")
    rng = random.Random(17)
    mutated = tmp_path / "mutated"
    files = sorted(p for p in (tmp_path / "demo").rglob("*") if p.is_file())
    for original in files:
        lines = [ln for ln in original.read_bytes().split(b"\n") if ln.strip()]
        target = mutated / original.relative_to(tmp_path / "demo")
        target.parent.mkdir(parents=True, exist_ok=True)
        # The file as it was first (at least the lines a format is recognized by), so it is still
        # recognized as its format.
        write_lines(target, lines * -(-SNIFF_LINES // len(lines)) + mutations(lines, rng))

    with open_store(tmp_path / "mutated.duckdb") as store:
        result = Ingester(store).ingest_paths([str(mutated)])
        assert result.errors == [] and result.skipped == []
        assert result.quarantined > 0
        read_to = dict(store.con.execute("SELECT path, consumed FROM origins").fetchall())
    assert {path: (mutated / path).stat().st_size for path in read_to} == read_to
