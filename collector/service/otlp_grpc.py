"""The OTLP/gRPC receiver: TraceService and LogsService `Export`.

Answers as the OTLP specification (its "OTLP/gRPC Response" section) says: OK once the records are
committed (with `partial_success` when some were rejected), INVALID_ARGUMENT for a request that is
not an export request, of which the store can take nothing, or that is heavier than the whole
intake budget (many tiny items), UNAUTHENTICATED without the bearer token when one is set,
UNAVAILABLE with a RetryInfo when the intake budget has no room for the message, the writer's
queue is full, the commit takes too long or the store fails, and RESOURCE_EXHAUSTED (from gRPC
itself) for a message over the size limit, compressed or not.
"""

from __future__ import annotations

import os
from concurrent import futures
from typing import Iterator

# gRPC's core logs its own errors to stderr (a port in use, say), in several lines; the collector
# reports them in one. GRPC_VERBOSITY=ERROR (or DEBUG) shows them again.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")
import grpc  # noqa: E402
from google.protobuf.duration_pb2 import Duration
from google.protobuf.any_pb2 import Any
from google.rpc import code_pb2, error_details_pb2, status_pb2

from tracejoin.middleware.proxy import parse_listen

from ..records import Unstorable
from .http_server import bearer_matches
from .otlp import LOGS, MAX_BODY, TRACES, Hold, IntakeBudget, Receiver, Signal, TooHeavy, Undecodable, response
from .writer import Busy, Writer

ORIGIN = "otlp/grpc"
ACK_TIMEOUT_S = 5
RETRY_DELAY_S = 1
WORKERS = 16
# More calls than this at once are refused (RESOURCE_EXHAUSTED, which exporters retry) rather than
# left waiting for a worker past their deadline.
MAX_CONCURRENT_CALLS = 32


class OtlpGrpcServer:
    def __init__(self, writer: Writer, listen: str, *, max_body: int = MAX_BODY, token: str | None = None,
                 keep_content: bool = False, budget: IntakeBudget | None = None):
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="otlp-grpc"),
            maximum_concurrent_rpcs=MAX_CONCURRENT_CALLS,
            options=[("grpc.max_receive_message_length", max_body)],
        )
        receiver = Receiver(ORIGIN, keep_content)
        budget = budget or IntakeBudget()
        for signal in (TRACES, LOGS):
            # Requests reach Export as the bytes the client sent: their sha256 recognizes a retry,
            # and bytes that are not an export request are answered INVALID_ARGUMENT. Export takes
            # them as a stream (of the one message a unary call sends) because gRPC then reads the
            # message only when asked: after the budget has room for it.
            handler = grpc.stream_unary_rpc_method_handler(
                _Export(signal, receiver, writer, token, budget, max_body),
                response_serializer=signal.response.SerializeToString,
            )
            service = grpc.method_handlers_generic_handler(signal.service, {"Export": handler})
            self._server.add_generic_rpc_handlers((service,))
        host, port = parse_listen(listen)
        host = f"[{host}]" if ":" in host else host
        port = self._server.add_insecure_port(f"{host}:{port}")  # RuntimeError when it cannot bind
        self.address = f"{host}:{port}"

    def start(self) -> None:
        self._server.start()

    def stop(self, grace_s: float = ACK_TIMEOUT_S + 1) -> None:
        """Refuse new calls; calls in flight get their answer (within the grace period)."""
        self._server.stop(grace_s).wait()


class _Export:
    """`Export` of one signal's service."""

    def __init__(self, signal: Signal, receiver: Receiver, writer: Writer, token: str | None,
                 budget: IntakeBudget, max_body: int):
        self.signal, self.receiver, self.writer, self.token = signal, receiver, writer, token
        self.budget, self.max_body = budget, max_body

    def __call__(self, messages: Iterator[bytes], context: grpc.ServicerContext):
        if not bearer_matches(dict(context.invocation_metadata()).get("authorization"), self.token):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "a bearer token is required")
        with self.budget.hold() as hold:
            try:
                decoded = self._store(messages, hold)
            # Unstorable: the writer could store nothing of it. TooHeavy: no budget holds it, and
            # exporters retry RESOURCE_EXHAUSTED, but never INVALID_ARGUMENT.
            except (Undecodable, Unstorable, TooHeavy) as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            except Busy as e:
                _retry_later(context, f"the collector is busy: {e}")
            except futures.TimeoutError:
                _retry_later(context, f"not committed within {ACK_TIMEOUT_S} s")
            except Exception as e:  # noqa: BLE001 - the store failed: nothing was acknowledged
                _retry_later(context, f"not stored: {type(e).__name__}: {e}")
        return response(self.signal, decoded)

    def _store(self, messages: Iterator[bytes], hold: Hold):
        hold.resize(self.max_body)  # reading the message may take this much; its size is known after
        request = next(messages, None)
        if request is None:
            raise Undecodable("the call sent no export request")
        decoded = self.receiver.decode(self.signal, request, "protobuf", hold)
        if decoded.records:
            hold.committed = self.writer.submit(self.receiver.body(request, decoded), wait=False)
            hold.committed.result(ACK_TIMEOUT_S)
        return decoded


def _retry_later(context: grpc.ServicerContext, text: str) -> None:
    """UNAVAILABLE with a RetryInfo: in the status details (as Go clients read it) and under the
    key the Python exporter reads."""
    retry = error_details_pb2.RetryInfo(retry_delay=Duration(seconds=RETRY_DELAY_S))
    detail = Any()
    detail.Pack(retry)
    status = status_pb2.Status(code=code_pb2.UNAVAILABLE, message=text, details=[detail])
    context.set_trailing_metadata((
        ("grpc-status-details-bin", status.SerializeToString()),
        ("google.rpc.retryinfo-bin", retry.SerializeToString()),
    ))
    context.abort(grpc.StatusCode.UNAVAILABLE, text)
