"""`lookup ID --html FILE`: one self-contained page for a ticket, as a person sees it in a browser.
The page is rendered by headless Chromium (Debian's `chromium`, which .ci/run installs): its DOM
is read back and its screenshot checked for the waterfall's bars and the failed request's red."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser

import orjson
import pytest

CHROMIUM = shutil.which("chromium")
HOSTILE = "<script>alert('x')</script><img src=http://evil.example/x.png>"
SESSION = "ticket-4711"


def _line(ts: str, event: str, **fields) -> bytes:
    return orjson.dumps({"schema": "tracejoin.log.v1", "ts": ts, "level": fields.pop("level", "info"),
                         "event": event, "role": "router", "worker": "gw:8000", "x_request_id": SESSION, **fields})


def _logs(folder):
    """Three requests of one session at a router: the first answered, the second failed with a 500
    after a note whose text is markup, the third answered after its first worker failed."""
    folder.mkdir()
    (folder / "router.jsonl").write_bytes(b"\n".join([
        _line("2026-11-30T10:40:30.000000Z", "request.start", internal_id="req-a", method="POST", route="/v1/chat/completions"),
        _line("2026-11-30T10:40:30.250000Z", "request.end", internal_id="req-a", status=200, duration_ms=250.0,
              ttfb_ms=120.0, reply_id="chatcmpl-page-ok"),
        _line("2026-11-30T10:40:31.000000Z", "request.start", internal_id="req-b", method="POST", route="/v1/chat/completions"),
        _line("2026-11-30T10:40:31.100000Z", HOSTILE, internal_id="req-b", level="warning"),
        _line("2026-11-30T10:40:31.400000Z", "request.end", internal_id="req-b", status=500, duration_ms=400.0,
              ttfb_ms=399.0, reply_id="chatcmpl-page-failed", level="error", error_type="upstream"),
        _line("2026-11-30T10:40:32.000000Z", "request.start", internal_id="req-c", method="POST", route="/v1/chat/completions"),
        _line("2026-11-30T10:40:32.050000Z", "upstream failed, retrying", internal_id="req-c", level="error",
              error_type="ConnectError", error_detail="gen-0:8002 refused"),
        _line("2026-11-30T10:40:32.300000Z", "request.end", internal_id="req-c", status=200, duration_ms=300.0,
              reply_id="chatcmpl-page-recovered"),
    ]) + b"\n")
    return folder


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.attrs = set(), []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.attrs += [value or "" for _, value in attrs]


def test_the_page_holds_the_answer_and_nothing_from_elsewhere(tj, tmp_path):
    assert tj("ingest", _logs(tmp_path / "logs")).code == 0
    page = tmp_path / "ticket.html"
    run = tj("lookup", SESSION, "--html", page)
    assert run.code == 0, run.err
    html = page.read_text()
    tags = _Tags()
    tags.feed(html)
    assert not tags.tags & {"script", "img", "link", "iframe", "object", "embed"}  # the note's markup is text
    assert not [v for v in tags.attrs if "://" in v or "url(" in v]  # no network, no CDN
    assert HOSTILE not in html and "&lt;script&gt;" in html

    bad = tj("lookup", SESSION, "--html", tmp_path / "no-such-folder" / "ticket.html")
    assert bad.code != 0 and "cannot write" in bad.err and "Traceback" not in bad.err


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_chromium_shows_the_requests_the_waterfall_and_the_failure(tj, tmp_path):
    from PIL import Image

    assert tj("ingest", _logs(tmp_path / "logs")).code == 0
    page = tmp_path / "ticket.html"
    assert tj("lookup", SESSION, "--html", page).code == 0
    chromium = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]

    dom = subprocess.run([*chromium, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    for text in (f"{SESSION}", "names 3 requests", "chatcmpl-page-ok", "chatcmpl-page-failed", "Every record on one axis",
                 "request.end · status=500", "error_type", f"{tmp_path / 'logs' / 'router.jsonl'}, byte "):
        assert text in dom, text
    assert "&lt;script&gt;alert" in dom  # shown as the text it was, not run
    # the failure first and largest: what failed, the date and time, the worker; a recovered one apart
    failure = dom.index('<div class="failure">')
    assert dom.index("Failed: request.end · status=500 · upstream", failure) < dom.index("2026-11-30 10:40:31.400000 UTC · on gw:8000 (router) · HTTP 500",
                                                               failure) < dom.index("<table", failure)
    assert dom.count('<div class="failure">') == 1 and dom.count('<div class="recovered">') == 1
    assert "Answered after a failure</b> (HTTP 200): upstream failed, retrying · ConnectError: gen-0:8002 refused" in dom
    # each record as the text's timeline gives it: its time, its offset, its worker
    assert "10:40:31.400000 +400.0 ms · gw:8000 (router) · log · ERROR · request.end · status=500" in dom

    shot = tmp_path / "ticket.png"
    subprocess.run([*chromium, f"--screenshot={shot}", "--window-size=1200,1400", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    colours = {colour for _, colour in Image.open(shot).convert("RGB").getcolors(1 << 24)}
    assert (0x4a, 0x78, 0xc2) in colours  # a bar of the waterfall
    assert (0xb0, 0x00, 0x20) in colours  # the failed request's banner
    assert (0xff, 0xf4, 0xce) in colours  # the recovered one's


def test_a_request_answered_with_an_error_has_no_time_to_first_token(tj, tmp_path):
    """Its client got no token, whatever the time to its error's first byte: `requests` shows none."""
    assert tj("ingest", _logs(tmp_path / "logs")).code == 0
    listed = {r["reply_id"]: r["ttft_ms"] for r in tj("requests", "--json", "--since", "2000-01-01T00:00:00Z").json()}
    assert listed["chatcmpl-page-ok"] == 120.0 and listed["chatcmpl-page-failed"] is None
