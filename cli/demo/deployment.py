"""The demo's disaggregated deployments: server processes on 127.0.0.1, each a process of its own
(so each has its own pid, as real workers do). The TensorRT-LLM one is a router and two context and
two generation workers.

    with Deployment(out, first_engine_request_id) as deployment:
        ... send requests to deployment.router_url ...

Starting: the parent opens every listening socket on an ephemeral port first, so the router can be
told where its workers are before any of them runs and no port can be taken in between, and hands
each to its process (server_process.py). It returns once every process answers `GET /health`.
Stopping: SIGTERM to each process it started, router first, so in-flight replies finish before
their workers go; a process that does not stop in time is killed.

The processes run with TZ=UTC, as servers in containers usually do: TensorRT-LLM logs local time
without a zone, and the collector reads such times as UTC. Settings of the user's environment that
would change what the processes record (TRACEJOIN_*, OTEL_*) are not passed on.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

READY_WITHIN_S = 30
STOP_WITHIN_S = 10
NAMES = ("router", "ctx-0", "ctx-1", "gen-0", "gen-1")
# The router's round robin gives traffic.py's first request, which asks for a failure, to ctx-0.
FLAKY = "ctx-0"
_DROPPED_ENV_PREFIXES = ("TRACEJOIN_", "OTEL_")


class DeploymentError(Exception):
    """The deployment did not work (a process that would not start, no reply that came back); the
    message says where to look."""


class StartsAndStops:
    """`with thing:` starts it and stops it; a start that fails halfway stops what it started."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def process_log(out: Path, pid: int) -> Path:
    """Where a process's stdout and stderr go: a folder named `<host>-<pid>`, after the process."""
    return out / "logs" / f"{socket.gethostname()}-{pid}" / "trtllm-serve.log"


@dataclass
class Server:
    name: str  # its name in the deployment: its role, and its number among servers of that role
    address: str  # 127.0.0.1:port
    process: subprocess.Popen

    @property
    def role(self) -> str:
        return _role(self.name)


class Processes(StartsAndStops):
    """Server processes on loopback, the first the one clients call. A subclass names them
    (`names`, the first the entry), the module each runs (`module`: `python -m MODULE ROLE --fd N
    --out DIR OPTIONS...`) and each one's options, given every address."""

    names: tuple[str, ...]
    module: str

    def __init__(self, out: Path):
        self.out = out
        self.servers: list[Server] = []

    @property
    def router_url(self) -> str:
        return f"http://{self.servers[0].address}"

    def options(self, name: str, addresses: dict[str, str]) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        sockets = {name: _listening_socket() for name in self.names}
        addresses = {name: "%s:%d" % sock.getsockname() for name, sock in sockets.items()}
        for name, sock in sockets.items():
            process = self._spawn(name, sock, self.options(name, addresses))
            self.servers.append(Server(name, addresses[name], process))
            sock.close()  # the process has its own copy; if it dies, its port refuses connections
        self._wait_until_ready()

    def _spawn(self, name: str, sock: socket.socket, options: list[str]) -> subprocess.Popen:
        env = {key: value for key, value in os.environ.items() if not key.startswith(_DROPPED_ENV_PREFIXES)}
        env.update(TZ="UTC", PYTHONUNBUFFERED="1")
        argv = [sys.executable, "-m", self.module, _role(name), "--fd", str(sock.fileno()), "--out", str(self.out),
                *options]
        return subprocess.Popen(argv, pass_fds=[sock.fileno()], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL)

    def log_of(self, server: Server) -> Path:
        """Where a server's process writes its output."""
        return process_log(self.out, server.process.pid)

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + READY_WITHIN_S
        with httpx.Client(timeout=1) as client:
            for server in self.servers:
                while not _answers(client, server):
                    log = self.log_of(server)
                    if server.process.poll() is not None:
                        raise DeploymentError(f"the {server.name} process stopped while starting "
                                              f"(exit code {server.process.returncode}); see {log}")
                    if time.monotonic() > deadline:
                        raise DeploymentError(f"the {server.name} process did not start within {READY_WITHIN_S} s; "
                                              f"see {log}")
                    time.sleep(0.05)

    def stop(self) -> None:
        """The entry first, so in-flight replies finish before the servers behind it go."""
        _stop(self.servers[:1])
        _stop(self.servers[1:])
        self.servers = []


class Deployment(Processes):
    """The TensorRT-LLM deployment: a router, two context and two generation workers."""

    names = NAMES
    module = "tracejoin.cli.demo.server_process"

    def __init__(self, out: Path, first_engine_request_id: int):
        """`first_engine_request_id`: where every worker's engine starts numbering its requests."""
        super().__init__(out)
        self.first_engine_request_id = first_engine_request_id

    def options(self, name: str, addresses: dict[str, str]) -> list[str]:
        if name == "router":
            return [arg for worker in NAMES[1:] for arg in (f"--{_role(worker)}", addresses[worker])]
        return ["--first-request-id", str(self.first_engine_request_id)] + (["--flaky"] if name == FLAKY else [])


def _stop(servers: list[Server]) -> None:
    for server in servers:
        if server.process.poll() is None:
            server.process.send_signal(signal.SIGTERM)
    for server in servers:
        try:
            server.process.wait(STOP_WITHIN_S)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()


def _role(name: str) -> str:
    return name.split("-")[0]


def _listening_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _answers(client: httpx.Client, server: Server) -> bool:
    try:
        return client.get(f"http://{server.address}/health").status_code == 200
    except httpx.TransportError:
        return False
