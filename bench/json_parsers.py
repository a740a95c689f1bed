"""`python -m bench.json_parsers`: what reading a Dynamo JSON line costs each way there is to read it,
over lines a real Dynamo run wrote (bench/real_dynamo.py, one file per worker; `--corpus demo` for
the lines `trace-join demo` writes): CPU microseconds a line, and wall seconds.

Ingest needs of a line the fields it lifts into columns and ids and the attributes the record
contract reads (record_contract.ATTRIBUTES); the rest of the line is kept as written (line_blocks.py)
and read again when shown. The ways measured:

- DuckDB's `read_json` of whole lines into a table (the ingest benchmark's baseline);
- the Dynamo source's stage select (dynamo_jsonl.BULK: DuckDB's JSON functions, and the checks
  that DuckDB reads each line as orjson does), on DuckDB's threads;
- the per-line parser (dynamo_jsonl.LineParser), which reads the lines the select leaves;
- msgspec decoding each file into one Struct of exactly those fields (`_Lifted` below): one
  declaration of what a line gives, which a bulk reader and a per-line reader could both read;
- the same, then the record's own rule over each decoded line into Arrow columns (its time, trace
  and span ids, name, entry flag, duration, status: `_columns`), on the main thread;
- that last one while DuckDB runs the stage select on its own threads, as it would while ingest
  writes the stage before: whether the Python reading hides behind DuckDB's work (wall seconds).
"""

from __future__ import annotations

import argparse
import operator
import resource
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from tracejoin.collector import record_contract
from tracejoin.collector.duckdb_engine import connect, with_arrow
from tracejoin.collector.sources import dynamo_jsonl
from tracejoin.collector.sources.bulk_sql import MACROS
from tracejoin.collector.sources.parsing import hex_id
from tracejoin.collector.times import iso_to_ns

from .common import median
from .corpus import Corpus


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _lifted_struct(msgspec):
    """A msgspec Struct of what ingest takes of a Dynamo JSON line: its text fields (text or null,
    as the parser requires), the fields its duration and status come from, and the contract's
    attributes, any JSON value; a field named as its key, a dot written `_`."""
    fields = {key: str | None for key in dynamo_jsonl._TEXT_FIELDS}
    for key in ("error", "error_detail", "time.duration_us", "elapsed_ms", "status", "schema",
                *record_contract.ATTRIBUTES):
        fields.setdefault(key, Any)
    return msgspec.defstruct("_Lifted", [(key.replace(".", "_"), kind, None) for key, kind in fields.items()],
                             rename={key.replace(".", "_"): key for key in fields})


def _columns(lines: list) -> pa.Table:
    """The record's rule (as dynamo_jsonl's Reader applies it) over decoded lines, into the columns a
    stage of them needs: the record's, its attributes as JSON text, and what its ids are read from."""
    attributes = record_contract.ATTRIBUTES
    contract = operator.attrgetter(*(key.replace(".", "_") for key in attributes))
    rows = []
    for line in lines:
        message, target, span_name = line.message or "", line.target, line.span_name
        duration, status = line.time_duration_us, line.status
        values = contract(line)
        attrs = None if values.count(None) == len(values) else orjson.dumps(
            {key: value for key, value in zip(attributes, values) if value is not None}).decode()
        rows.append((
            iso_to_ns(line.time), line.level, message or span_name or target,
            duration * 1000 if type(duration) is int else None,
            str(status) if type(status) in (str, int) else None,
            target.startswith(dynamo_jsonl._FRONTEND_TARGET)
            and (message == dynamo_jsonl._ENTRY
                 or (message == dynamo_jsonl._SPAN_ENTERED and span_name == dynamo_jsonl._FRONTEND_SPAN)),
            hex_id(line.trace_id, 32), hex_id(line.span_id, 16), hex_id(line.parent_id, 16), attrs,
            line.request_id or line.x_dynamo_request_id, line.x_dynamo_request_id, line.x_request_id, message,
            line.error if type(line.error) is str else None,
            line.error_detail if type(line.error_detail) is str else None,
        ))
    names = ("time_ns", "level", "name", "duration_ns", "status", "entry", "trace_id", "span_id", "parent_span_id",
             "attrs", "request_id", "x_dynamo_request_id", "x_request_id", "message", "error", "error_detail")
    return pa.table({name: pa.array(column) for name, column in zip(names, zip(*rows))})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=("real", "demo"), default="real")
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "tracejoin-bench")
    args = parser.parse_args()
    requests = max(1, args.lines // 11)
    if args.corpus == "real":
        from tracejoin.cli.demo.dynamo import DynamoUnavailable

        from .real_dynamo import RealDynamoCorpus

        try:
            corpus = RealDynamoCorpus(args.data / "real-dynamo-corpus", requests,
                                      args.data / "real-dynamo-capture").ensure()
        except DynamoUnavailable as e:
            raise SystemExit(f"bench.json_parsers: no real Dynamo lines here ({e}); --corpus demo reads the demo's")
    else:
        corpus = Corpus(args.data / "ingest-corpus", requests).ensure()
    files = corpus.files()
    texts = [f.read_bytes() for f in files]
    lines = corpus.lines()

    with_arrow()
    con = connect(":memory:", read_only=False)
    con.execute(MACROS)
    split = [t.rstrip(b"\n").split(b"\n") for t in texts]
    lines_table = pa.table({
        "f": pa.array([k for k, s in enumerate(split) for _ in s], pa.int32()),
        "idx": pa.array([i for s in split for i in range(len(s))], pa.int32()),
        "start": pa.array([0] * sum(map(len, split)), pa.int32()),
        "line": pa.array([line for s in split for line in s], pa.string()),
    })  # in batches, so that DuckDB scans them on both cores, as ingest's stage does
    con.register("bulk_lines", pa.Table.from_batches(lines_table.to_batches(max_chunksize=8192)))
    stage = dynamo_jsonl.BULK.select.replace("{lines}", "bulk_lines").replace("{{", "{").replace("}}", "}")
    paths = ", ".join(f"'{f}'" for f in files)

    def stage_select():
        con.execute(f"CREATE OR REPLACE TEMP TABLE s AS {stage}")

    def per_line():
        for path, lines_of in zip(files, split):
            read = dynamo_jsonl.LineParser(str(path)).parse
            for line in lines_of:
                read(line)

    parsers = {
        "DuckDB read_json (the baseline: whole lines into a table)":
            lambda: con.execute(f"CREATE OR REPLACE TABLE t AS SELECT * FROM read_json([{paths}], union_by_name = true)"),
        "the Dynamo source's stage select (DuckDB, both cores)": stage_select,
        "the per-line parser (dynamo_jsonl.LineParser)": per_line,
    }
    try:
        import msgspec
    except ImportError:
        print("msgspec is not installed (pip install msgspec): its rows are left out")
    else:
        lifted = _lifted_struct(msgspec)
        decoder = msgspec.json.Decoder(lifted)
        parsers["msgspec into one Struct of the lifted fields, a file a call"] = \
            lambda: [decoder.decode_lines(t) for t in texts]
        rules = lambda: [_columns(decoder.decode_lines(t)) for t in texts]  # noqa: E731
        parsers["… then the record's rule per line into Arrow columns (one core)"] = rules

        def beside_the_select():
            duckdb_work = threading.Thread(target=stage_select)
            duckdb_work.start()
            rules()
            duckdb_work.join()

        parsers["… while DuckDB runs the stage select (wall: does it hide?)"] = beside_the_select
    print(f"{lines:,} Dynamo lines ({args.corpus}), {corpus.bytes() / 1e6:.0f} MB; median of {args.runs}")
    print("  CPU µs a line   wall s")
    for name, run in parsers.items():
        cpu, wall = [], []
        for _ in range(args.runs):
            start, started = _cpu(), time.perf_counter()
            run()
            cpu.append(_cpu() - start)
            wall.append(time.perf_counter() - started)
        print(f"  {median(cpu) / lines * 1e6:14.2f}   {median(wall):6.2f}   {name}")


if __name__ == "__main__":
    main()
