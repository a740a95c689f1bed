"""tracejoin.middleware: the emit side of trace-join.

- `TraceJoinMiddleware` (asgi.py): add to any ASGI app (trtllm-serve, vLLM, SGLang are FastAPI).
- helpers the app calls while serving a request: `bind_engine_request_id`,
  `bind_disagg_request_id`, `name_responses_request`, and `inject_tracejoin_headers` (an httpx
  hook) or `outgoing_headers()` for calls to workers.
- `serve_proxy` (proxy.py): `trace-join proxy`, for servers that cannot be changed.

docs/middleware.md tells how to set each up; docs/tracejoin-log-schema.md what they write.
"""

from .asgi import TraceJoinMiddleware
from .ids import name_responses_request
from .outgoing import inject_tracejoin_headers, outgoing_headers
from .request_state import bind_disagg_request_id, bind_engine_request_id, current_request

__all__ = [
    "TraceJoinMiddleware",
    "bind_disagg_request_id",
    "bind_engine_request_id",
    "current_request",
    "inject_tracejoin_headers",
    "name_responses_request",
    "outgoing_headers",
]
