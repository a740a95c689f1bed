"""A real NVIDIA Dynamo deployment on this machine: the frontend and a prefill and a decode worker
(Dynamo's `mocker`, a simulated engine with real scheduling, KV blocks and disaggregation), with
JSONL logs to files and OTLP export to a collector. No GPU is needed; the model is a tokenizer and
a config, made here, without weights.

    with DynamoDeployment(folder, http_port, otlp_grpc="127.0.0.1:4317") as dynamo:
        ... send requests to dynamo.url ...

Dynamo lives in its own virtual environment (its wheels pin their own dependencies, and the model
is built with `transformers`, which trace-join does not need), cached under ~/.cache/trace-join
so later runs start in seconds. The `ai-dynamo` wheel depends on a stub package that downloads
from a host this machine cannot reach, so the two Dynamo wheels are installed with --no-deps and
their real dependencies named here.

Every address Dynamo can be told is 127.0.0.1. Dynamo 1.6.1's ZMQ event-plane sockets bind
0.0.0.0 on a random port whatever it is told (only the address it advertises follows
DYN_EVENT_PLANE_HOST=127.0.0.1, so every peer connects over loopback).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from .deployment import DeploymentError, StartsAndStops

DYNAMO_VERSION = "1.6.1"
DYNAMO_WHEELS = [f"ai-dynamo=={DYNAMO_VERSION}", f"ai-dynamo-runtime=={DYNAMO_VERSION}"]
DYNAMO_DEPENDENCIES = [
    "aiohttp>=3.14.3,<4", "msgspec", "prometheus-client>=0.23.1,<1", "pyzmq", "redis>=6.2,<9", "tqdm",
    "transformers>=4.56", "typing-extensions", "zstandard>=0.23,<1", "kubernetes>=32.0.1,<33",
    "pydantic>=2.10.6,<=2.13.5", "uvloop>=0.21",
]
MODEL_NAME = "mock/tiny-llama"
READY_WITHIN_S = 120  # about 1 s once installed; the first start also fills Dynamo's own caches
STOP_WITHIN_S = 15
# Settings of the user's environment that would change what the processes record or where they
# send it; the deployment sets its own.
_DROPPED_ENV_PREFIXES = ("DYN_", "OTEL_", "TRACEJOIN_")
# Dynamo's exporters batch spans for 5 s and log records for 1 s by default; a demo (and a test)
# wants its records within a second.
_EXPORT_DELAY_MS = "500"


class DynamoUnavailable(Exception):
    """Dynamo cannot be installed here (no network, no wheel for this platform); the message says why."""


def cache_dir() -> Path:
    return Path(os.environ.get("TRACEJOIN_CACHE", Path.home() / ".cache" / "trace-join"))


def dynamo_installed() -> bool:
    return (_venv() / ".ready").exists()


def dynamo_python() -> Path:
    """The Python of a virtual environment with Dynamo installed; made once, then reused."""
    venv = _venv()
    python = venv / "bin" / "python"
    with _locked(cache_dir() / "dynamo.lock"):  # two runs at once install it once
        if dynamo_installed():
            return python
        shutil.rmtree(venv, ignore_errors=True)  # what an interrupted install left
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            [str(python), "-m", "pip", "install", "--quiet", "--no-deps", *DYNAMO_WHEELS],
            [str(python), "-m", "pip", "install", "--quiet", *DYNAMO_DEPENDENCIES],
        ]
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True)
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise DynamoUnavailable(f"installing Dynamo {DYNAMO_VERSION} into {venv} failed: {last}")
        (venv / ".ready").touch()
    return python


def _venv() -> Path:
    return cache_dir() / f"dynamo-{DYNAMO_VERSION}"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


_MAKE_MODEL = r'''
import json, os, sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

out = sys.argv[1]
special = ["<pad>", "<s>", "</s>", "<unk>"]
words = ("hello world the a is are to of and in it for on with you we what how why tell me about "
         "story once upon time cat dog say hi please thanks answer question user assistant : , . ! ?").split()
vocab = {t: i for i, t in enumerate(special + list(dict.fromkeys(words)))}
tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
template = ("{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {% endfor %}"
            "{% if add_generation_prompt %}assistant : {% endif %}")
PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                        pad_token="<pad>", chat_template=template).save_pretrained(out)
# transformers 5 keeps the template in chat_template.jinja and names its own tokenizer class;
# Dynamo's Rust side reads the template inline and knows PreTrainedTokenizerFast.
path = os.path.join(out, "tokenizer_config.json")
config = json.load(open(path))
config.update(chat_template=template, tokenizer_class="PreTrainedTokenizerFast", model_max_length=4096)
json.dump(config, open(path, "w"))
ids = {"bos_token_id": vocab["<s>"], "eos_token_id": vocab["</s>"], "pad_token_id": vocab["<pad>"]}
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": len(vocab),
           "max_position_embeddings": 4096, "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 128, **ids},
          open(os.path.join(out, "config.json"), "w"))
json.dump(ids, open(os.path.join(out, "generation_config.json"), "w"))
'''


def model_dir(python: Path) -> Path:
    """A weightless model (tokenizer and config) the mocker and the frontend can serve; config.json
    is written last, so a folder that has it is complete."""
    folder = cache_dir() / "tiny-llama"
    with _locked(cache_dir() / "tiny-llama.lock"):
        if not (folder / "config.json").exists():
            done = subprocess.run([str(python), "-c", _MAKE_MODEL, str(folder)], capture_output=True, text=True)
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise DeploymentError(f"building the tokenizer in {folder} failed: {last}")
    return folder


@dataclass
class DynamoDeployment(StartsAndStops):
    """`folder` receives logs/<process>.stderr.jsonl (one per process), request-trace/frontend.jsonl
    (the frontend's request-trace rows) and Dynamo's file-based discovery store. Starting returns
    once the frontend serves with both workers; a process that stops or a deployment not ready in
    READY_WITHIN_S is a DeploymentError."""

    folder: Path
    http_port: int
    otlp_grpc: str | None = None  # host:port of an OTLP/gRPC receiver
    processes: dict[str, subprocess.Popen] = field(default_factory=dict, init=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def log_folder(self) -> Path:
        return self.folder / "logs"

    @property
    def request_trace_folder(self) -> Path:
        return self.folder / "request-trace"

    def log(self, name: str) -> Path:
        return self.log_folder / f"{name}.stderr.jsonl"

    def start(self) -> None:
        python = dynamo_python()
        model = model_dir(python)
        self.log_folder.mkdir(parents=True, exist_ok=True)
        self.request_trace_folder.mkdir(parents=True, exist_ok=True)
        env = {key: value for key, value in os.environ.items() if not key.startswith(_DROPPED_ENV_PREFIXES)}
        env.update({
            "DYN_FILE_KV": str(self.folder / "discovery"),
            "DYN_LOGGING_JSONL": "1",
            "DYN_TCP_RPC_HOST": "127.0.0.1", "DYN_TCP_RESPONSE_STREAM_HOST": "127.0.0.1",
            "DYN_EVENT_PLANE_HOST": "127.0.0.1", "DYN_SYSTEM_HOST": "127.0.0.1", "DYN_HTTP_RPC_HOST": "127.0.0.1",
        })
        if self.otlp_grpc:
            env.update(OTEL_EXPORT_ENABLED="1", OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
                       OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"http://{self.otlp_grpc}",
                       OTEL_EXPORTER_OTLP_LOGS_ENDPOINT=f"http://{self.otlp_grpc}",
                       OTEL_BSP_SCHEDULE_DELAY=_EXPORT_DELAY_MS, OTEL_BLRP_SCHEDULE_DELAY=_EXPORT_DELAY_MS)
        # Only the frontend writes request-trace rows (ttft, timings, the workers it used).
        request_trace = {"DYN_REQUEST_TRACE": "1", "DYN_REQUEST_TRACE_RECORDS": "request_end,request_payload",
                         "DYN_REQUEST_TRACE_FILE_FORMAT": "jsonl",
                         "DYN_REQUEST_TRACE_FILE_PATH": str(self.request_trace_folder / "frontend.jsonl")}
        common = ["--discovery-backend", "file", "--request-plane", "tcp", "--event-plane", "zmq"]
        mocker = [str(python), "-m", "dynamo.mocker", "--model-path", str(model), "--model-name", MODEL_NAME, *common]
        self._start("prefill", [*mocker, "--disaggregation-mode", "prefill",
                                "--endpoint", "dyn://dynamo.prefill.generate"],
                    {**env, "OTEL_SERVICE_NAME": "dynamo-worker-prefill"})
        self._start("decode", [*mocker, "--disaggregation-mode", "decode"],
                    {**env, "OTEL_SERVICE_NAME": "dynamo-worker-decode"})
        self._start("frontend", [str(python), "-m", "dynamo.frontend", "--http-host", "127.0.0.1",
                                 "--http-port", str(self.http_port), *common],
                    {**env, **request_trace, "OTEL_SERVICE_NAME": "dynamo-frontend"})
        self._wait_until_ready()

    def _start(self, name: str, argv: list[str], env: dict) -> None:
        with self.log(name).open("wb") as stderr:
            self.processes[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                    stderr=stderr, cwd=self.folder, env=env)

    def _wait_until_ready(self) -> None:
        """Ready once the frontend lists the model and has activated its prefill router: before
        that, it serves requests without a prefill worker."""
        deadline = time.monotonic() + READY_WITHIN_S
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise DeploymentError(f"Dynamo's {name} exited with {process.returncode} while starting: "
                                          f"see {self.log(name)}")
            try:
                listed = MODEL_NAME in httpx.get(f"{self.url}/v1/models", timeout=2).text
            except httpx.HTTPError:
                listed = False
            if listed and b'"Prefill router target activated"' in self.log("frontend").read_bytes():
                return
            time.sleep(0.2)
        raise DeploymentError(f"Dynamo was not ready after {READY_WITHIN_S} s: see {self.log_folder}")

    def instance_id(self, name: str) -> str | None:
        """A worker's discovery id, as it logs it when it starts (`FPM direct publisher started`)."""
        for line in self.log(name).read_text(errors="replace").splitlines():
            if '"FPM direct publisher started"' in line:
                return str(json.loads(line)["worker_id"])
        return None

    def stop(self) -> None:
        """SIGINT, as Ctrl-C: each process flushes its OTLP exporters and exits within a second."""
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for process in self.processes.values():
            try:
                process.wait(STOP_WITHIN_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
