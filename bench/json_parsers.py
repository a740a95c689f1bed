"""`python -m bench.json_parsers`: what reading a Dynamo JSON line costs each parser there is, in
CPU microseconds a line, over the ingest benchmark's corpus (200k lines by default).

Ingest needs two things of a line: the fields it lifts into columns, and the rest of the line as
its attributes' JSON text, written as orjson writes it (what the per-line parser stores). The
figures say which parser could make both within the per-line budget the ingest target leaves
(docs/performance.md): DuckDB's `read_json` (the baseline, whole lines into a table), the Dynamo
source's own stage select (DuckDB's JSON functions), orjson through Python (both outputs), and
pyarrow's and msgspec's readers, which are fast but give only the lifted fields.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.json as pa_json

from tracejoin.collector.duckdb_engine import connect, with_arrow
from tracejoin.collector.sources import dynamo_jsonl
from tracejoin.collector.sources.bulk_sql import MACROS

from .common import median
from .corpus import Corpus

_TEXT = dynamo_jsonl._TEXT_FIELDS
_LIFTED = dynamo_jsonl._LIFTED


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _orjson_columns(data: bytes) -> pa.Table:
    """Both outputs through orjson, as lean as Python gets: each line parsed, its lifted fields
    taken, the rest written back; then a column of each."""
    rows = []
    for line in data.split(b"\n"):
        if not line.startswith(b"{"):
            continue
        obj = orjson.loads(line)
        lifted = tuple(map(obj.get, _TEXT))
        for key in _LIFTED.intersection(obj):
            del obj[key]
        obj["target"] = lifted[1]
        rows.append((*lifted, orjson.dumps(obj)))
    columns = list(zip(*rows))
    return pa.table({**{k: pa.array(c, pa.string()) for k, c in zip(_TEXT, columns)},
                     "attrs": pa.array(columns[-1], pa.binary())})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "tracejoin-bench")
    args = parser.parse_args()
    corpus = Corpus(args.data / "ingest-corpus", max(1, args.lines // 11)).ensure()
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
    fields = pa.schema([(key, pa.string()) for key in _TEXT])
    msgspec = _msgspec_decoder()

    parsers = {
        "DuckDB read_json (the baseline: whole lines into a table)":
            lambda: con.execute(f"CREATE OR REPLACE TABLE t AS SELECT * FROM read_json([{paths}], union_by_name = true)"),
        "the Dynamo source's stage select (DuckDB's JSON functions; both)":
            lambda: con.execute(f"CREATE OR REPLACE TEMP TABLE s AS {stage}"),
        "orjson through Python into Arrow columns (both)": lambda: [_orjson_columns(t) for t in texts],
        "pyarrow.json, explicit schema (lifted fields only)":
            lambda: [pa_json.read_json(pa.BufferReader(t), parse_options=pa_json.ParseOptions(
                explicit_schema=fields, unexpected_field_behavior="ignore")) for t in texts],
    }
    if msgspec:
        parsers["msgspec, a file a call, values raw (lifted fields only)"] = \
            lambda: [msgspec.decode(b"[" + t.rstrip(b"\n").replace(b"\n", b",") + b"]") for t in texts]
    print(f"{lines:,} Dynamo lines, {corpus.bytes() / 1e6:.0f} MB; CPU µs a line, median of {args.runs}")
    for name, run in parsers.items():
        seconds = []
        for _ in range(args.runs):
            start = _cpu()
            run()
            seconds.append(_cpu() - start)
        print(f"  {median(seconds) / lines * 1e6:6.2f}  {name}")


def _msgspec_decoder():
    try:
        import msgspec
    except ImportError:
        print("msgspec is not installed (pip install msgspec): its row is left out")
        return None
    return msgspec.json.Decoder(list[dict[str, msgspec.Raw]])


if __name__ == "__main__":
    main()
