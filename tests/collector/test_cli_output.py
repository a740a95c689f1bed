"""What the command prints for people: the progress bar on large inputs, the lookup timeline."""

from __future__ import annotations



from tracejoin.cli import render
from tracejoin.cli.demo.dynamo_formats import DynamoSample


def test_progress_bar_only_for_large_inputs_on_a_terminal(tmp_path, monkeypatch):
    files = DynamoSample().write(tmp_path)
    paths = [str(p) for p in files.values()]
    with render.byte_progress(paths) as progress:
        assert progress is None  # small input

    monkeypatch.setattr(render, "PROGRESS_MIN_BYTES", 1)
    with render.byte_progress(paths) as progress:
        assert progress is None  # stderr is not a terminal under pytest

    monkeypatch.setattr(render.sys.stderr, "isatty", lambda: True, raising=False)
    with render.byte_progress(paths) as progress:
        assert callable(progress)
        progress(10)


def test_timeline_shows_every_worker_and_the_gaps_between_stages(tj, tmp_path):
    sample = DynamoSample()
    req = sample.add(x_request_id="tl-1")
    sample.write(tmp_path / "logs")
    assert tj("ingest", tmp_path / "logs").code == 0
    run = tj("lookup", req.reply_id)
    assert run.code == 0
    out = run.out
    assert "names 1 request" in out
    assert f"prefill:{sample.prefill_instance}" in out and f"backend:{sample.decode_instance}" in out
    assert "(decode)" in out and "(prefill)" in out and "(frontend)" in out
    # The decode worker's first record comes 41.5 ms after the request started, 1 ms after the
    # prefill worker's last (DynamoSample's timings).
    assert "41.5" in out
    lines = [ln for ln in out.splitlines() if "request completed" in ln and "(decode)" in ln]
    assert lines and "136.5" in lines[0]
