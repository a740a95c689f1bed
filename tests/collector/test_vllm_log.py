"""vLLM 0.33's logs and spans: its ids (16-hex bases, engine ids with an 8-hex suffix, completions'
per-prompt and Responses' per-turn external ids), its text and JSON log formats, and a prefill and
a decode server joined by the decode side's remote_request_id.

vLLM cannot run here (no GPU, and its wheel pulls CUDA): its lines are written in its formatter's
format (cli/demo/vllm_formats.py, after `vllm/logger.py`; the messages as `request_logger.py` and
`async_llm.py` write them), its spans with the real OpenTelemetry SDK as `vllm/tracing/otel.py`
makes them."""

from __future__ import annotations

import os
from datetime import datetime, timezone

import orjson
import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags, set_span_in_context

from tracejoin.cli.demo.vllm_formats import log_line as line
from tracejoin.collector import local_time
from tracejoin.collector.ids import ENGINE_REQUEST_ID, INTERNAL_ID, REPLY_ID, derived
from tracejoin.collector.sources import vllm_log
from tracejoin.collector.sources import detect

from tests.collector.test_otlp_json import write_protobuf_json


@pytest.fixture
def db(either_store):
    """Every lookup here answers alike on a DuckDB store and on a ClickHouse one."""
    return either_store




def write_log(path, lines: list[str], modified=datetime(2026, 8, 21, tzinfo=timezone.utc)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    ns = int(modified.timestamp()) * 10**9
    os.utime(path, ns=(ns, ns))


@pytest.fixture(autouse=True)
def no_zone(monkeypatch):
    monkeypatch.delenv(local_time.VARIABLE, raising=False)


@pytest.mark.parametrize("engine_id, names", [
    ("chatcmpl-952be734a436bcaf-bf02a813", [(REPLY_ID, "chatcmpl-952be734a436bcaf")]),
    ("chatcmpl-job-42-bf02a813", [(REPLY_ID, "chatcmpl-job-42")]),  # an X-Request-Id ending in digits
    ("1_chatcmpl-952be734a436bcaf-bf02a813", [(REPLY_ID, "chatcmpl-952be734a436bcaf")]),  # the 2nd of n samples
    ("cmpl-77ab01c2d3e4f5a6-0-c0ffee12", [(INTERNAL_ID, "cmpl-77ab01c2d3e4f5a6-0"), (REPLY_ID, "cmpl-77ab01c2d3e4f5a6")]),
    ("embd-77ab01c2d3e4f5a6-3-c0ffee12", [(INTERNAL_ID, "embd-77ab01c2d3e4f5a6-3"), (REPLY_ID, "embd-77ab01c2d3e4f5a6")]),
    ("resp_0123456789abcdef_0-c0ffee12", [(INTERNAL_ID, "resp_0123456789abcdef_0"), (REPLY_ID, "resp_0123456789abcdef")]),
    ("6f1c2a8e-3d4b-4c59-9b1e-0a7d2f5e8c11-bf02a813", [(INTERNAL_ID, "6f1c2a8e-3d4b-4c59-9b1e-0a7d2f5e8c11")]),  # Dynamo
    ("6f1c2a8e-3d4b-4c59-9b1e-0a7d2f5e8c11-2-bf02a813", [(INTERNAL_ID, "6f1c2a8e-3d4b-4c59-9b1e-0a7d2f5e8c11")]),
    ("42", []),  # TensorRT-LLM's engine ids name nothing else
])
def test_a_vllm_engine_id_names_its_reply(engine_id, names):
    assert derived(ENGINE_REQUEST_ID, engine_id) == names


def test_each_request_line_gives_its_ids_and_no_reply_text(tmp_path):
    write_log(tmp_path / "vllm-0.log", [])
    parser = vllm_log.LineParser(str(tmp_path / "vllm-0.log"))
    [received] = parser.parse(line("Received request cmpl-77ab01c2d3e4f5a6-0: params: SamplingParams(n=1, "
                                   "max_tokens=16, extra_args=None), lora_request: None.",
                                   where="request_logger.py:66").encode())
    assert received.ids == [(INTERNAL_ID, "cmpl-77ab01c2d3e4f5a6-0", None), (REPLY_ID, "cmpl-77ab01c2d3e4f5a6", None)]
    assert received.entry and received.worker == "vllm-0:4182" and parser.role == "agg"
    [added] = parser.parse(line("Added request cmpl-77ab01c2d3e4f5a6-0-c0ffee12.").encode())
    assert (ENGINE_REQUEST_ID, "cmpl-77ab01c2d3e4f5a6-0-c0ffee12", "vllm") in added.ids
    [generated] = parser.parse(line("Generated response cmpl-77ab01c2d3e4f5a6: output: 'The capital is Paris.', "
                                    "finish_reason: stop", where="request_logger.py:119").encode())
    assert generated.name == "Generated response cmpl-77ab01c2d3e4f5a6" and generated.attrs["finish_reason"] == "stop"
    assert generated.attrs["content_chars"] == {"output": 23} and "Paris" not in str(generated.attrs)
    [aborted] = parser.parse(line("Aborted request(s) cmpl-77ab01c2d3e4f5a6-0-c0ffee12,chatcmpl-a-0123abcd.").encode())
    assert aborted.status == "aborted"
    assert {v for k, v, _ in aborted.ids if k == ENGINE_REQUEST_ID} == {"cmpl-77ab01c2d3e4f5a6-0-c0ffee12",
                                                                         "chatcmpl-a-0123abcd"}
    [body] = parser.parse(line('Request req-1 JSON body: {"prompt": "secret"}', level="DEBUG").encode())
    assert "secret" not in body.name + str(body.attrs)
    kept = vllm_log.LineParser(str(tmp_path / "vllm-0.log"), keep_content=True)
    [generated] = kept.parse(line("Generated response chatcmpl-a: output: 'Paris.', finish_reason: stop").encode())
    assert generated.attrs["output"] == "'Paris.'"


def test_api_servers_are_workers_and_the_engine_cores_lines_are_theirs(tmp_path):
    write_log(tmp_path / "node-3" / "serve.log.gz", [])
    write_log(tmp_path / "serve.log", [])
    parser = vllm_log.LineParser(str(tmp_path / "node-3" / "serve.log.gz"))
    workers = [parser.parse(line(f"Added request chatcmpl-{i}-0123abcd.", process=process, pid=pid).encode())[0].worker
               for i, (process, pid) in enumerate([("ApiServer_0", 11), ("EngineCore_DP0", 20), ("ApiServer_1", 12)])]
    assert workers == ["serve:11", "serve:11", "serve:12"]
    named = vllm_log.LineParser(str(tmp_path / "serve.log"), worker="gpu-node-3")
    assert named.parse(line("Added request chatcmpl-a-0123abcd.").encode())[0].worker == "gpu-node-3:4182"


def test_the_text_format_and_the_json_format_are_both_read(tmp_path):
    text, json_log = tmp_path / "text.log", tmp_path / "json.log"
    write_log(text, [line("Added request chatcmpl-952be734a436bcaf-bf02a813.")])
    write_log(json_log, ['{"asctime": "2026-08-20 10:15:02,481", "levelname": "INFO", "name": "vllm.v1.engine.async_llm", '
                         '"processName": "MainProcess", "process": 4182, "message": "Added request '
                         'chatcmpl-952be734a436bcaf-bf02a813.", "vllm_process_name": "APIServer"}'])
    for path in (text, json_log):
        assert detect(str(path), path.read_bytes().splitlines()) is vllm_log
    [from_text] = vllm_log.LineParser(str(text)).parse(text.read_bytes().rstrip())
    [from_json] = vllm_log.LineParser(str(json_log)).parse(json_log.read_bytes().rstrip())
    assert from_json.time_ns - from_text.time_ns == 481_000_000  # the JSON format's asctime has ms and a year
    assert from_text.ids == from_json.ids
    assert (from_text.worker, from_json.worker) == ("text:4182", "json:4182")


def test_a_message_of_several_lines_is_one_record_of_its_request(tj, tmp_path):
    """vLLM writes a message of several lines (a traceback logged with it) a line each, every one
    with its prefix, the line before ending in \\r."""
    log = tmp_path / "vllm-0.log"
    write_log(log, [
        line("Received request chatcmpl-952be734a436bcaf: params: SamplingParams(n=1), lora_request: None."),
        line("Added request chatcmpl-952be734a436bcaf-bf02a813.", at="08-20 10:15:03"),
        line("Aborted request(s) chatcmpl-952be734a436bcaf-bf02a813.\r", level="ERROR", at="08-20 10:15:04"),
        line("Traceback (most recent call last):\r", level="ERROR", at="08-20 10:15:04"),
        line('  File "async_llm.py", line 12, in generate\r', level="ERROR", at="08-20 10:15:04"),
        line("RuntimeError: CUDA error: an illegal memory access", level="ERROR", at="08-20 10:15:04"),
        line("Added request chatcmpl-0123456789abcdef-bf02a813.", at="08-20 10:15:05"),
    ])
    assert tj("ingest", log).code == 0
    [request] = tj("lookup", "chatcmpl-952be734a436bcaf", "--json").json()["requests"]
    tracebacks = [r for r in request["records"] if r.get("text")]
    assert len(tracebacks) == 1 and tracebacks[0]["lines"] == 4
    assert tracebacks[0]["exception"] == "RuntimeError: CUDA error: an illegal memory access"


def test_times_without_a_year_take_the_files_and_say_so(tj, tmp_path):
    log = tmp_path / "vllm-0.log"
    write_log(log, [line("Added request chatcmpl-952be734a436bcaf-bf02a813.", at="12-31 23:59:59")],
              modified=datetime(2027, 1, 1, 0, 5, tzinfo=timezone.utc))
    run = tj("ingest", log)
    assert "the year 2026 from the file's modification time" in run.err
    [request] = tj("lookup", "chatcmpl-952be734a436bcaf", "--json").json()["requests"]
    assert request["records"][0]["time"] == "2026-12-31T23:59:59Z"
    assert "the year 2026 from the file's modification time" in request["records"][0]["origin"]["local_time"]


def test_a_prefill_and_a_decode_server_join_by_the_decode_sides_remote_request_id(tj, tmp_path):
    """vLLM's own P/D proxy sends one X-Request-Id to both sides; the prefill's reply id is then the
    decode's too. Here the sides got different ids (a proxy that sends none): only the decode side's
    kv_transfer_params, which name the prefill's engine id, join them."""
    prefill = "chatcmpl-aaaaaaaaaaaaaaaa"
    decode = "chatcmpl-bbbbbbbbbbbbbbbb"
    write_log(tmp_path / "prefill-0.log", [
        line(f"Received request {prefill}: params: SamplingParams(n=1, max_tokens=1, extra_args={{'kv_transfer_params': "
             f"{{'do_remote_decode': True, 'do_remote_prefill': False}}}}), lora_request: None.", pid=100),
        line(f"Added request {prefill}-11111111.", pid=100),
    ])
    write_log(tmp_path / "decode-0.log", [
        line(f"Received request {decode}: params: SamplingParams(n=1, max_tokens=64, extra_args={{'kv_transfer_params': "
             f"{{'do_remote_decode': False, 'do_remote_prefill': True, 'remote_engine_id': 'e1', 'remote_request_id': "
             f"'{prefill}-11111111', 'remote_host': '10.0.0.5', 'remote_port': 5600}}}}), lora_request: None.",
             pid=200, at="08-20 10:15:03"),
        line(f"Added request {decode}-22222222.", pid=200, at="08-20 10:15:03"),
        line(f"Generated response {decode}: output: 'hi', finish_reason: stop", pid=200, at="08-20 10:15:04"),
    ])
    assert tj("ingest", tmp_path).code == 0
    for reply in (prefill, decode):
        [request] = tj("lookup", reply, "--json").json()["requests"]
        assert {(w["worker"], w["role"]) for w in request["workers"]} == {("prefill-0:100", "prefill"),
                                                                          ("decode-0:200", "decode")}
        assert len(request["records"]) == 5
        # each engine id on the process that ran it, not on the deployment its ids are unique in
        assert request["ids"]["engine_request_id"] == [{"worker": "prefill-0:100", "id": f"{prefill}-11111111"},
                                                       {"worker": "decode-0:200", "id": f"{decode}-22222222"}]


def test_one_x_request_id_sent_twice_to_one_server_is_two_requests_not_one(tj, tmp_path):
    """vLLM makes the reply id of the X-Request-Id: two clients that send the same get the same reply
    id. Each request's engine id differs; the reply id is a collision, reported, and never merges them."""
    write_log(tmp_path / "vllm-0.log", [
        line("Received request chatcmpl-job-42: params: SamplingParams(n=1), lora_request: None."),
        line("Added request chatcmpl-job-42-11111111."),
        line("Received request chatcmpl-job-42: params: SamplingParams(n=1), lora_request: None.", at="08-20 10:15:03"),
        line("Added request chatcmpl-job-42-22222222.", at="08-20 10:15:03"),
    ])
    assert tj("ingest", tmp_path).code == 0
    for query in ("chatcmpl-job-42", "job-42"):  # the reply id, and the client's own id inside it
        found = tj("lookup", query, "--json").json()
        assert any("collision" in w for w in found["warnings"])
        assert found["matched"] == 2  # each request once, its Received line placed by its time
        added = [[r["name"] for r in request["records"] if r["name"].startswith("Added")] for request in found["requests"]]
        assert added == [["Added request chatcmpl-job-42-11111111."], ["Added request chatcmpl-job-42-22222222."]]
        assert [len(request["records"]) for request in found["requests"]] == [2, 2]
    for engine_id in ("chatcmpl-job-42-11111111", "chatcmpl-job-42-22222222"):
        [request] = tj("lookup", engine_id, "--json").json()["requests"]
        assert [engine_id] == [r["name"].split()[-1].rstrip(".") for r in request["records"] if r["name"].startswith("Added")]


def test_a_client_id_vllm_made_the_reply_id_of_finds_the_request(tj, tmp_path):
    """With an X-Request-Id (or a body request_id), vLLM's reply is `chatcmpl-<it>` and its engine id
    `chatcmpl-<it>-<8 hex>`: no line holds the client's id alone, and a lookup of it finds the request."""
    write_log(tmp_path / "vllm-0.log", [
        line("Received request chatcmpl-order-7731: params: SamplingParams(n=1), lora_request: None."),
        line("Added request chatcmpl-order-7731-0a1b2c3d."),
        line("Received request cmpl-order-7732-0: prompt: 'hi', params: SamplingParams(n=1), lora_request: None."),
        line("Added request cmpl-order-7732-0-4e5f6a7b."),
    ])
    assert tj("ingest", tmp_path).code == 0
    for client_id, reply_id in (("order-7731", "chatcmpl-order-7731"), ("order-7732", "cmpl-order-7732")):
        found = tj("lookup", client_id, "--json").json()
        assert (found["id_kind"], found["matched"]) == ("x_request_id", 1)
        assert found["requests"] == tj("lookup", reply_id, "--json").json()["requests"]
        assert len(found["requests"][0]["records"]) == 2
    assert tj("lookup", "order-7733").code == 1  # nothing found: still said so


def test_a_completion_of_two_prompts_is_one_request_under_the_id_the_client_saw(tj, tmp_path):
    """vLLM logs each prompt of a completion as a request of its own, `cmpl-<id>-0` and `cmpl-<id>-1`,
    both entries of one API server: the client saw one reply, `cmpl-<id>`, and one request."""
    write_log(tmp_path / "vllm-0.log", [
        line("Received request cmpl-77ab01c2d3e4f5a6-0: prompt: 'a', params: SamplingParams(n=1), lora_request: None."),
        line("Received request cmpl-77ab01c2d3e4f5a6-1: prompt: 'b', params: SamplingParams(n=1), lora_request: None."),
        line("Added request cmpl-77ab01c2d3e4f5a6-0-c0ffee12."),
        line("Added request cmpl-77ab01c2d3e4f5a6-1-c0ffee13."),
        line("Finished request cmpl-77ab01c2d3e4f5a6-0-c0ffee12.", at="08-20 10:15:03"),
        line("Finished request cmpl-77ab01c2d3e4f5a6-1-c0ffee13.", at="08-20 10:15:03"),
    ])
    assert tj("ingest", tmp_path).code == 0
    for query in ("cmpl-77ab01c2d3e4f5a6", "cmpl-77ab01c2d3e4f5a6-1", "cmpl-77ab01c2d3e4f5a6-0-c0ffee12"):
        found = tj("lookup", query, "--json").json()
        assert found["matched"] == 1 and not any("collision" in w for w in found["warnings"])
        assert len(found["requests"][0]["records"]) == 6
    [listed] = tj("requests", "--json", "--since", "2000-01-01T00:00:00Z").json()
    assert listed["records"] == 6


def test_vllm_spans_join_its_logs_by_the_external_id(tj, tmp_path):
    """vLLM's `llm_request` span: SERVER, `gen_ai.request.id` the external id, a resource with
    `vllm.process_id` and no host."""
    captured = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "vllm-0", "vllm.process_id": "4182",
                                                        "vllm.instrumenting_module_name": "vllm.llm_engine"}))
    provider.add_span_processor(SimpleSpanProcessor(captured))
    with provider.get_tracer("vllm.tracing.otel").start_as_current_span("llm_request", kind=SpanKind.SERVER) as span:
        span.set_attributes({"gen_ai.request.id": "cmpl-77ab01c2d3e4f5a6-0", "gen_ai.latency.e2e": 1.8,
                             "gen_ai.latency.time_to_first_token": 0.05})
    provider.shutdown()
    write_protobuf_json(tmp_path / "spans.jsonl", list(captured.get_finished_spans()))
    write_log(tmp_path / "vllm-0.log", [line("Added request cmpl-77ab01c2d3e4f5a6-0-c0ffee12.")])
    assert tj("ingest", tmp_path).code == 0
    [request] = tj("lookup", "cmpl-77ab01c2d3e4f5a6", "--json").json()["requests"]
    assert sorted(r["source"] for r in request["records"]) == ["otlp_json", "vllm_log"]
    assert "vllm-0:4182" in {w["worker"] for w in request["workers"]}


def llm_d_sidecar_spans(request_id: str, prefill: str, decode: str, parent=None) -> list:
    """A request through llm-d's P/D sidecar (llm-d/llm-d-router, `pkg/sidecar/proxy`): its request
    span, with a `prefill` and a `decode` child, and the attributes it sets on each. The sidecar is
    Go and cannot run here; its spans are made with the real SDK as it names them."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource({"service.name": "llm-d-routing-sidecar",
                                                 "k8s.pod.name": "qwen3-decode-7c9d-m4x2z"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("llm-d-routing-sidecar")
    p = "llm_d.pd_proxy."
    with tracer.start_as_current_span("llm_d.pd_proxy.request", kind=SpanKind.SERVER, context=parent) as span:
        span.set_attributes({p + "request_id": request_id, p + "prefill_target": prefill, p + "connector": "nixlv2",
                             p + "total_duration_ms": 412.0, p + "true_ttft_ms": 61.5, p + "prefill_duration_ms": 55.0,
                             p + "decode_duration_ms": 350.0, p + "coordinator_overhead_ms": 7.0})
        with tracer.start_as_current_span("prefill") as leg:
            leg.set_attributes({p + "prefill.status_code": 200, p + "prefill.duration_ms": 55.0})
        with tracer.start_as_current_span("decode") as leg:
            leg.set_attributes({p + "decode.streaming": True, p + "decode.target": decode, p + "decode.duration_ms": 350.0})
    provider.shutdown()
    return memory.get_finished_spans()


def gateway_context(trace_id: int):
    """The gateway's span, in whose trace the endpoint picker and the sidecar both record: the
    gateway exports nothing, so only its context is shared."""
    span_id = trace_id & 0xFFFF_FFFF_FFFF_FFFF
    return set_span_in_context(NonRecordingSpan(SpanContext(trace_id, span_id, is_remote=True,
                                                            trace_flags=TraceFlags(TraceFlags.SAMPLED))))


def llm_d_epp_spans(parent) -> list:
    """llm-d's endpoint picker scheduling one request (gateway-api-inference-extension, its span
    registry `pkg/common/observability/semconv/registry/spans.yaml`): `run_scheduler_profile` with
    `filter_endpoints`, `scoring` and `pick_endpoints`. The picker is Go and cannot run here; its
    spans are made with the real SDK as it names them. None carries an id of the request."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource({"service.name": "llm-d-epp", "k8s.pod.name": "qwen3-epp-5b8f-q7k2l"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("llm-d-inference-scheduler")
    e = "llm_d.epp."
    with tracer.start_as_current_span("run_scheduler_profile", context=parent) as span:
        span.set_attribute(e + "scheduling.profile.name", "decode")
        with tracer.start_as_current_span("filter_endpoints") as step:
            step.set_attributes({e + "filter.candidate_endpoints": 4, e + "filter.filtered_endpoints": 2})
        with tracer.start_as_current_span("scoring") as step:
            step.set_attributes({e + "scorer.count": 3, e + "scoring.candidate_endpoints": 2})
        with tracer.start_as_current_span("pick_endpoints") as step:
            step.set_attributes({e + "picker.candidate_endpoints": 2, e + "picker.top_endpoints": "10.0.0.7:8200",
                                 e + "picker.top_scores": "0.92"})
    provider.shutdown()
    return memory.get_finished_spans()

def test_llm_ds_sidecar_joins_vllms_prefill_and_decode_and_says_where_the_time_went(tj, tmp_path):
    """The sidecar adds its own x-request-id (a UUID) to both legs; vLLM names each leg's reply after
    it (`chatcmpl-<uuid>`). The sidecar's span, the prefill server's lines and the decode server's
    are one request, and the sidecar's times are its phases."""
    uuid = "6f1c2a8e-3d4b-11ef-9b1e-0a7d2f5e8c11"  # uuid.NewUUID(): version 1
    reply = f"chatcmpl-{uuid}"
    write_log(tmp_path / "prefill-0.log", [
        line(f"Received request {reply}: params: SamplingParams(n=1, max_tokens=1), lora_request: None.", pid=100),
        line(f"Added request {reply}-11111111.", pid=100)])
    write_log(tmp_path / "decode-0.log", [
        line(f"Received request {reply}: params: SamplingParams(n=1, max_tokens=64), lora_request: None.", pid=200),
        line(f"Added request {reply}-22222222.", pid=200)])
    write_protobuf_json(tmp_path / "sidecar.otlp.jsonl", llm_d_sidecar_spans(uuid, "10.0.0.5:8000", "localhost:8200"))
    assert tj("ingest", tmp_path).code == 0
    for query in (reply, uuid):
        found = tj("lookup", query, "--json").json()
        assert found["matched"] == 1
        [request] = found["requests"]
        assert sorted(w["worker"] for w in request["workers"]) == ["decode-0:200", "prefill-0:100", "qwen3-decode-7c9d-m4x2z"]
        assert sorted(r["name"] for r in request["records"] if r["kind"] == "span") == [
            "decode", "llm_d.pd_proxy.request", "prefill"]
        phases = {p["phase"]: p["duration_ms"] for p in request["phases"] if p["worker"] == "qwen3-decode-7c9d-m4x2z"}
        assert phases == {"end to end": pytest.approx(phases["end to end"]), "to first token": 61.5, "prefill": 55.0,
                          "decode": 350.0, "coordinator overhead": 7.0}


def llm_d_request(folder, uuid: str, *, trace_id: int, pid: int) -> str:
    """One request through llm-d: the sidecar's spans and the prefill and decode servers' lines,
    in the trace the gateway started. Its reply id."""
    reply = f"chatcmpl-{uuid}"
    kv = "SamplingParams(n=1, max_tokens={}, extra_args={{'kv_transfer_params': {{{}}}}})"
    write_log(folder / f"prefill-{pid}.log", [
        line(f"Received request {reply}: params: {kv.format(1, repr('do_remote_decode') + ': True')}, "
             "lora_request: None.", pid=pid),
        line(f"Added request {reply}-11111111.", pid=pid)])
    write_log(folder / f"decode-{pid}.log", [
        line(f"Received request {reply}: params: {kv.format(64, repr('do_remote_prefill') + ': True')}, "
             "lora_request: None.", pid=pid + 1),
        line(f"Added request {reply}-22222222.", pid=pid + 1)])
    spans = llm_d_sidecar_spans(uuid, "10.0.0.5:8000", "localhost:8200", parent=gateway_context(trace_id))
    write_protobuf_json(folder / f"sidecar-{pid}.otlp.jsonl", spans)
    return reply


EPP_SPANS = ["filter_endpoints", "pick_endpoints", "run_scheduler_profile", "scoring"]


@pytest.mark.parametrize("picker_first", [True, False], ids=["picker stored first", "picker stored last"])
def test_the_endpoint_pickers_spans_join_the_one_request_of_their_trace(tj, tmp_path, picker_first):
    """llm-d's endpoint picker records how it chose the decode pod in spans that carry no id of
    the request, only the gateway's trace, which the sidecar's request shares: they are the router's
    hop of that request, in lookup and in requests, whichever was stored first."""
    trace = 0x4BF92F3577B34DA6A3CE929D0E0E4736
    picker, served = tmp_path / "picker", tmp_path / "served"
    picker.mkdir()
    write_protobuf_json(picker / "epp.otlp.jsonl", llm_d_epp_spans(gateway_context(trace)))
    reply = llm_d_request(served, "6f1c2a8e-3d4b-11ef-9b1e-0a7d2f5e8c11", trace_id=trace, pid=100)
    for folder in (picker, served) if picker_first else (served, picker):
        assert tj("ingest", folder).code == 0
    [request] = tj("lookup", reply, "--json").json()["requests"]
    assert sorted(w["role"] for w in request["workers"]) == ["decode", "prefill", "proxy", "router"]
    router = [r["name"] for r in request["records"] if r["worker"] == "qwen3-epp-5b8f-q7k2l"]
    assert sorted(router) == EPP_SPANS
    [listed] = tj("requests", "--json", "--since", "2000-01-01T00:00:00Z").json()
    assert listed["reply_id"] == reply and listed["records"] == len(request["records"])


def test_the_endpoint_pickers_spans_in_a_trace_of_two_requests_join_neither(tj, tmp_path):
    """Where two requests started in one trace, a span with no id cannot say which it served: it
    stays apart rather than joining either."""
    trace = 0x5CF92F3577B34DA6A3CE929D0E0E4737
    write_protobuf_json(tmp_path / "epp.otlp.jsonl", llm_d_epp_spans(gateway_context(trace)))
    replies = [llm_d_request(tmp_path, uuid, trace_id=trace, pid=pid) for uuid, pid in
               (("6f1c2a8e-3d4b-11ef-9b1e-0a7d2f5e8c11", 100), ("7a2d3b9f-4e5c-11ef-8c2f-1b8e3a6f9d22", 300))]
    assert tj("ingest", tmp_path).code == 0
    for reply in replies:
        [request] = tj("lookup", reply, "--json").json()["requests"]
        assert sorted(w["role"] for w in request["workers"]) == ["decode", "prefill", "proxy"]


def test_a_line_logged_to_the_second_is_shown_to_the_second_within_its_request(tj, tmp_path):
    """vLLM stamps its lines to the second. Its `Generated response` line of a request a proxy timed
    from 10:15:02.950 to 10:15:03.230 says 10:15:03: it was written between 10:15:03.000 and
    10:15:03.230. It is shown so (never at 10:15:03.000000, nor before the proxy took the request),
    and its `Received request` line of 10:15:02 between the proxy's start and the end of that second."""
    reply = "chatcmpl-0123456789abcdef"
    proxy = [{"schema": "tracejoin.log.v1", "ts": ts, "level": "info", "event": event, "role": "proxy",
              "worker": "gw:8000", "internal_id": "req-1", **fields} for ts, event, fields in (
        ("2026-08-20T10:15:02.950000Z", "request.start", {"route": "/v1/chat/completions"}),
        ("2026-08-20T10:15:03.230000Z", "request.end", {"status": 200, "duration_ms": 280.0, "reply_id": reply}))]
    (tmp_path / "proxy.jsonl").write_text("".join(orjson.dumps(line).decode() + "\n" for line in proxy))
    write_log(tmp_path / "vllm-0.log", [
        line(f"Received request {reply}: params: SamplingParams(n=1, max_tokens=8), lora_request: None.",
             at="08-20 10:15:02"),
        line(f"Generated response {reply}: output: 'hi', finish_reason: stop", at="08-20 10:15:03")])
    assert tj("ingest", tmp_path).code == 0

    [request] = tj("lookup", reply, "--json").json()["requests"]
    lines = {r["name"].split(" chatcmpl")[0]: r for r in request["records"] if r["source"] == "vllm_log"}
    assert (lines["Received request"]["time"], lines["Received request"]["within"]) == (
        "2026-08-20T10:15:02Z", {"from": "2026-08-20T10:15:02.950000Z", "until": "2026-08-20T10:15:03.000000Z"})
    assert (lines["Generated response"]["time"], lines["Generated response"]["within"]) == (
        "2026-08-20T10:15:03Z", {"from": "2026-08-20T10:15:03.000000Z", "until": "2026-08-20T10:15:03.230000Z"})
    assert [r["name"].split(" ")[0] for r in request["records"]] == [
        "request.start", "Received", "Generated", "request.end"]  # ordered by what is known of each

    text = tj("lookup", reply).out
    [received] = [ln for ln in text.splitlines() if "Received request" in ln]
    [generated] = [ln for ln in text.splitlines() if "Generated response" in ln]
    assert received.split()[:2] == ["10:15:02", "0.0…50.0"] and generated.split()[:2] == ["10:15:03", "50.0…280.0"]
    assert "10:15:03.000000" not in text and "-" not in received.split()[1]
    page = tmp_path / "ticket.html"
    assert tj("lookup", reply, "--html", page).code == 0
    html = page.read_text()
    assert html.count("class='bar coarse'") == 2 and "10:15:03.000000" not in html  # drawn as the time they can be in
