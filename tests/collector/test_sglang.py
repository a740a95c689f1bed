"""SGLang 0.5.23's records: its stamped log lines (request logs in JSON and text, ReqTimeStats,
server_args), its request-metrics exporter, its spans, and a prefill and a decode server joined by
their bootstrap_room; Dynamo's line that names the rid it gave SGLang.

SGLang cannot run here (no GPU): its lines are written by cli/demo/sglang_formats.py as SGLang's
code writes them, its spans with the real OpenTelemetry SDK as `sglang/srt/observability/trace.py`
makes them."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from google.protobuf.json_format import MessageToJson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tracejoin.cli.demo import sglang_formats as sg
from tracejoin.collector import local_time
from tracejoin.collector.ids import BOOTSTRAP_ROOM, REPLY_ID
from tracejoin.collector.sources import detect, otlp_json, sglang_log, sglang_metrics


@pytest.fixture
def db(either_store):
    """Every lookup here answers alike on a DuckDB store and on a ClickHouse one."""
    return either_store

RID_P, RID_D = "0cc54161255d460a88ea1458594b0c25", "6fe306df34c644c3bb7a53f17e26ddaa"
ROOM = 5190375227361583513
AT = datetime(2026, 8, 20, 10, 15, 4, 315702)


@pytest.fixture(autouse=True)
def no_zone(monkeypatch):
    monkeypatch.delenv(local_time.VARIABLE, raising=False)


def parse(lines: list[str], path="/logs/gpu-node-1_0.log", **options):
    parser = sglang_log.LineParser(path, **options)
    return parser, [r for line in lines for r in parser.parse(line.encode())]


def test_request_logs_name_the_reply_by_the_rid_and_keep_no_prompt_text():
    obj = sg.generate_req_input(RID_D, "the secret prompt", 16, None, None, None)
    parser, [received, finished] = parse([
        sg.request_log_line(AT, "request.received", RID_D, obj=obj),
        sg.request_log_line(AT, "request.finished", RID_D, obj=obj,
                            out={"text": "the secret answer", "meta_info": sg.meta_info(RID_D, "stop", 4, 3, 1.834, 0.012)}),
    ])
    assert detect("/logs/gpu-node-1_0.log", [sg.request_log_line(AT, "request.received", RID_D).encode()]) is sglang_log
    assert received.ids == [(REPLY_ID, RID_D, None)] and received.entry
    assert (parser.worker, parser.role) == ("gpu-node-1", "agg")  # the host of <hostname>_<rank 0>
    assert received.time_ns % 10**9 == 315_702_000  # the JSON timestamp's microseconds
    assert (finished.name, finished.status, finished.duration_ns) == ("request.finished", "stop", 1_834_000_000)
    assert finished.attrs["queue_ms"] == 12.0
    assert "secret" not in json.dumps(received.attrs) + json.dumps(finished.attrs)
    assert finished.attrs["content_chars"] == {"text": len('"the secret prompt"')}
    _, [kept] = parse([sg.request_log_line(AT, "request.received", RID_D, obj=obj)], keep_content=True)
    assert kept.attrs["obj"]["text"] == "the secret prompt"


def test_scheduler_lines_say_the_role_the_ranks_and_the_phases():
    parser, records = parse([
        sg.server_args_line(AT, "decode", 30000),
        sg.req_time_stats_line(AT, RID_D, ROOM, "decode", input_len=128, output_len=150, queue_ms=0.8,
                               forward_ms=1790.0, transfer_ms=12.4, entry_time=1787307302.52, ranks=" DP1 TP0"),
        sg.stamp(AT) + "Receive: obj=GenerateReqInput(rid='" + RID_D + "', text='the secret prompt', bootstrap_room="
        + str(ROOM) + ")",
    ], path="/logs/decode-0.log")
    server_args, stats, receive = records
    assert parser.role == "decode" and not receive.entry  # a decode server's request starts at the router
    assert stats.ids == [(REPLY_ID, RID_D, None), (BOOTSTRAP_ROOM, str(ROOM), None)]
    assert (stats.attrs["dp_rank"], stats.attrs["tp_rank"], stats.attrs["queue_ms"], stats.attrs["kv_transfer_ms"]) \
        == (1, 0, 0.8, 12.4)
    assert (stats.kind, stats.time_ns) == ("perf", 1787307302_520_000_000)  # timed at its entry, as perf records are
    assert receive.ids == stats.ids and "secret" not in receive.name + json.dumps(receive.attrs)
    assert parser.worker == "decode-0"


def test_the_metrics_exporter_gives_the_finish_and_the_room():
    line = sg.metrics_line(sg.generate_req_input(RID_P, "a prompt", 1, ROOM, "10.0.0.5", 8998),
                           sg.meta_info(RID_P, "length", 128, 1, 0.09), received_ts=1787307302.5)
    path = f"/m/node-1/{sg.metrics_file_name(AT)}"
    assert detect(path, [line.encode()]) is sglang_metrics
    [record] = sglang_metrics.LineParser(path).parse(line.encode())
    assert (record.worker, record.time_ns, record.duration_ns, record.status) == (
        "node-1", 1787307302_500_000_000, 90_000_000, "length")
    assert record.ids == [(REPLY_ID, RID_P, None), (BOOTSTRAP_ROOM, str(ROOM), None)]
    assert "a prompt" not in json.dumps(record.attrs)


def sglang_spans(role: str, rid: str, room: int | None) -> bytes:
    """One request's root span as SGLang exports it, as an OTLP JSON line."""
    memory = InMemorySpanExporter()
    spans = sg.RequestSpans(f"sglang-{role}", memory)
    spans.record(role, rid, room, 1787307302.5, 1787307304.3, prompt_tokens=128, completion_tokens=150,
                 ttft_s=0.05, queue_s=0.001)
    spans.shutdown()
    return MessageToJson(encode_spans(memory.get_finished_spans()), indent=None).encode() + b"\n"


def test_sglang_spans_name_the_reply_by_the_whole_rid_and_join_by_the_room():
    [record] = otlp_json.LineParser().parse(sglang_spans("decode", f"{RID_D}_3", ROOM).strip())
    assert record.name == "decode Req 3"  # the root names the rid's last `_` part
    assert (REPLY_ID, f"{RID_D}_3", None) in record.ids and (BOOTSTRAP_ROOM, str(ROOM), None) in record.ids
    assert not any(value == "3" for _, value, _ in record.ids)  # its `rid` attribute is no id of the request
    assert record.role == "decode" and record.trace_id.startswith("0" * 16)  # 64-bit trace ids


def test_a_prefill_and_a_decode_server_join_by_their_bootstrap_room(tj, tmp_path):
    """The router sends both servers the same body and no rid: each names the request its own way,
    and only the bootstrap_room they share joins them; the client sees the decode server's rid."""
    for role, rid, transfer in (("prefill", RID_P, None), ("decode", RID_D, 12.4)):
        obj = sg.generate_req_input(rid, "a prompt", 16, ROOM, "10.0.0.5", 8998)
        (tmp_path / f"{role}-0.log").write_text("\n".join([
            sg.server_args_line(AT, role, 30000),
            sg.request_log_line(AT, "request.received", rid, obj=obj),
            sg.req_time_stats_line(AT, rid, ROOM, role, input_len=128, output_len=1, queue_ms=0.8, forward_ms=40.0,
                                   transfer_ms=transfer, entry_time=1787307302.52),
        ]) + "\n")
        (tmp_path / f"sglang-{role}.otlp.jsonl").write_bytes(sglang_spans(role, rid, ROOM))
    metrics = tmp_path / "decode-0" / sg.metrics_file_name(AT)
    metrics.parent.mkdir()
    metrics.write_text(sg.metrics_line(sg.generate_req_input(RID_D, "a prompt", 16, ROOM, "10.0.0.5", 8998),
                                       sg.meta_info(RID_D, "length", 128, 16, 0.09), received_ts=1787307302.5) + "\n")
    assert tj("ingest", tmp_path).code == 0
    [request] = tj("lookup", RID_D, "--json").json()["requests"]
    assert {w["role"] for w in request["workers"]} == {"prefill", "decode"}
    assert request["ids"]["bootstrap_room"] == [str(ROOM)]
    # the prefill server's rid is its own name for the request, not a reply the client saw
    assert request["ids"]["reply_id"] == [RID_D] and RID_P in request["ids"]["internal_id"]
    assert {r["source"] for r in request["records"]} == {"sglang_log", "otlp_json", "sglang_metrics"}
    assert tj("lookup", RID_P, "--json").json()["requests"][0]["ids"] == request["ids"]
    # its request metrics read as a person reads them: the finish reason's type, once
    [summary] = [r["summary"] for r in request["records"] if r["name"] == "request metrics"]
    assert "status=length" in summary and "{" not in summary and "'" not in summary


def test_a_rid_a_client_sends_again_later_is_two_requests(tj, tmp_path):
    """SGLang refuses a rid already in flight, so a rid seen twice is two requests, one after the other."""
    lines = []
    for second in (4, 9):
        at = AT.replace(second=second)
        lines += [sg.request_log_line(at, "request.received", "client-rid-7", obj={"rid": "client-rid-7"}),
                  sg.request_log_line(at, "request.finished", "client-rid-7",
                                      out={"meta_info": sg.meta_info("client-rid-7", "stop", 3, 2, 0.5)})]
    (tmp_path / "gpu-node-1_0.log").write_text("\n".join(lines) + "\n")
    assert tj("ingest", tmp_path).code == 0
    found = tj("lookup", "client-rid-7", "--json").json()
    assert found["matched"] == 2 and any("collision" in w for w in found["warnings"])


def test_dynamos_sglang_worker_line_joins_the_rid_to_dynamos_request(tj, tmp_path):
    context = "6f1c2a8e-3d4b-4c59-9b1e-0a7d2f5e8c11"
    (tmp_path / "dynamo-decode.jsonl").write_text(json.dumps({
        "time": "2026-08-20T10:15:04.100Z", "level": "INFO", "target": "dynamo_sglang", "message":
        f"Submitted SGLang Request ID: {RID_D}, Context: {context}"}) + "\n")
    (tmp_path / "gpu-node-1_0.log").write_text(sg.request_log_line(AT, "request.received", RID_D) + "\n")
    assert tj("ingest", tmp_path).code == 0
    [request] = tj("lookup", context, "--json").json()["requests"]
    assert {r["source"] for r in request["records"]} == {"dynamo_jsonl", "sglang_log"}


def test_one_server_pod_is_one_worker_whatever_names_it(tj, tmp_path, monkeypatch):
    """An SGLang prefill and a decode pod in Kubernetes: each server's spans name only the service
    (`sglang`, the same for every pod) and, from OTEL_RESOURCE_ATTRIBUTES as a deployment sets it,
    its pod; its request log is `<hostname>_<rank>.log` (the hostname is the pod's); its metrics file
    lies in a folder named after the pod. Each pod is one worker, listed once, in its role."""
    for role, rid in (("prefill", RID_P), ("decode", RID_D)):
        pod = f"qwen3-{role}-0"
        obj = sg.generate_req_input(rid, "a prompt", 16, ROOM, "10.0.0.5", 8998)
        (tmp_path / "logs").mkdir(exist_ok=True)
        (tmp_path / "logs" / f"{pod}_0.log").write_text("\n".join([
            sg.request_log_line(AT, "request.received", rid, obj=obj),
            sg.request_log_line(AT, "request.finished", rid, obj=obj,
                                out={"meta_info": sg.meta_info(rid, "stop", 4, 3, 1.834, 0.012)})]) + "\n")
        (tmp_path / "metrics" / pod).mkdir(parents=True)
        (tmp_path / "metrics" / pod / sg.metrics_file_name(AT)).write_text(sg.metrics_line(
            obj, sg.meta_info(rid, "stop", 4, 3, 1.834), received_ts=1787307302.5) + "\n")
        monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", f"k8s.pod.name={pod},k8s.namespace.name=serving")
        memory = InMemorySpanExporter()
        spans = sg.RequestSpans("sglang", memory)  # the service name SGLang defaults to
        spans.record(role, rid, ROOM, 1787307302.5, 1787307304.3, prompt_tokens=128, completion_tokens=150,
                     ttft_s=0.05, queue_s=0.001)
        spans.shutdown()
        (tmp_path / f"{role}.otlp.jsonl").write_bytes(
            MessageToJson(encode_spans(memory.get_finished_spans()), indent=None).encode() + b"\n")
    assert tj("ingest", tmp_path).code == 0
    [request] = tj("lookup", RID_D, "--json").json()["requests"]
    assert sorted((w["worker"], w["role"], w["records"]) for w in request["workers"]) == [
        ("qwen3-decode-0", "decode", 4), ("qwen3-prefill-0", "prefill", 4)]  # two log lines, a metrics row, a span
    by_worker = tj("coverage", "--json", "--since", "2000-01-01T00:00:00Z").json()["by_worker"]  # the same workers
    assert sorted((w["worker"], w["role"], w["records"]) for w in by_worker) == [
        ("qwen3-decode-0", "decode", 4), ("qwen3-prefill-0", "prefill", 4)]
    assert {r["source"] for r in request["records"]} == {"sglang_log", "sglang_metrics", "otlp_json"}
