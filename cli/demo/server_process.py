"""One process of the demo deployment (deployment.py starts five):

    python -m tracejoin.cli.demo.server_process router|ctx|gen --fd N --out DIR [--ctx H:P]... [--gen H:P]...
        [--flaky] [--first-request-id N]

It does what a launcher script does for trtllm-serve: it sends its stdout and stderr (TensorRT-LLM's
and uvicorn's log lines) to `logs/<host>-<pid>/trtllm-serve.log`, a folder the collector names the
process after (docs/formats.md), then serves the router or the worker app on the listening socket
`--fd`, which the deployment opened so that every port was known before any process started.
SIGTERM stops it cleanly: in-flight replies finish, then the writers close.
"""

from __future__ import annotations

import argparse
import os
import socket
from pathlib import Path

import uvicorn

from . import router_app, worker_app
from .deployment import process_log
from .serving import GRACEFUL_SHUTDOWN_S, capture_output


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tracejoin.cli.demo.server_process")
    parser.add_argument("role", choices=("router", "ctx", "gen"))
    parser.add_argument("--fd", type=int, required=True, help="a listening socket inherited from the parent")
    parser.add_argument("--out", type=Path, required=True, help="the demo's output folder")
    parser.add_argument("--ctx", action="append", default=[], help="a context worker (router only)")
    parser.add_argument("--gen", action="append", default=[], help="a generation worker (router only)")
    parser.add_argument("--flaky", action="store_true", help="fail context requests that ask for it")
    parser.add_argument("--first-request-id", type=int, default=0, help="the engine's first request id (workers only)")
    args = parser.parse_args(argv)

    capture_output(process_log(args.out, os.getpid()))
    if args.role == "router":
        app = router_app.build_app(args.out, args.ctx, args.gen)
    else:
        app = worker_app.build_app(args.role, args.out, flaky=args.flaky, first_request_id=args.first_request_id)
    config = uvicorn.Config(app, log_level="info", timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
    uvicorn.Server(config).run(sockets=[socket.socket(fileno=args.fd)])


if __name__ == "__main__":
    main()
