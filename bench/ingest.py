"""1. Ingest of Dynamo JSONL: `trace-join ingest` (the command, and the Ingester it runs) against
DuckDB's own `read_json` loading the same files into a bare table."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import duckdb

from tracejoin.collector import id_index
from tracejoin.collector.duckdb_engine import transaction
from tracejoin.collector.ingest import Ingester
from tracejoin.collector.store import open_store

from .common import TRACE_JOIN, Config, Row, check, median, run_child
from .corpus import Corpus
from .profile import summarize

TARGET_RATIO = 0.5
TARGET_RATE = 200_000


def _fresh(db: Path) -> Path:
    for path in (db, db.with_name(db.name + ".wal")):
        path.unlink(missing_ok=True)
    return db


def read_json_seconds(files: list[Path], db: Path) -> float:
    """The baseline: everything DuckDB needs to store the lines, from connect to close."""
    start = time.perf_counter()
    con = duckdb.connect(str(_fresh(db)))
    listed = ", ".join(f"'{f}'" for f in files)
    con.execute(f"CREATE TABLE lines AS SELECT * FROM read_json([{listed}], format='newline_delimited', "
                f"union_by_name=true)")
    con.close()
    return time.perf_counter() - start


def writing_seconds(written: Path, db: Path) -> float:
    """What writing a store's tables costs, from connect to close, once their rows are made: the
    records and ids of `written` (a store an ingest wrote), read into memory first, then written into
    a new store as ingest writes them (its records, its ids, their id index). With the baseline's
    read of the same files (DuckDB parsing them), it is the floor of ingest into this layout: what
    is left is ingest's own work, reading each source's fields exactly and making the records."""
    source = duckdb.connect(str(written), read_only=True)
    records = source.sql("SELECT * FROM records ORDER BY record_id").to_arrow_table()
    ids = source.sql("SELECT * FROM record_ids ORDER BY record_id").to_arrow_table()
    source.close()
    start = time.perf_counter()
    with open_store(_fresh(db)) as store:
        con = store.con
        con.register("made_records", records)
        con.register("made_ids", ids)
        with transaction(con):
            con.execute("INSERT INTO records SELECT * FROM made_records")
            con.execute("INSERT INTO record_ids SELECT * FROM made_ids")
            id_index.add(con, "made_ids")
        id_index.compact(con)
    return time.perf_counter() - start


def ingest_child(files: list[Path], db: Path):
    """`trace-join ingest` of the files into a new store, as a measured child process."""
    return check(run_child([TRACE_JOIN, "ingest", "--db", str(_fresh(db)), *map(str, files)]), "trace-join ingest")


def ingester_seconds(files: list[Path], db: Path) -> float:
    start = time.perf_counter()
    with open_store(_fresh(db)) as store:
        Ingester(store).ingest_paths([str(f) for f in files])
    return time.perf_counter() - start


def run(cfg: Config, lines: int, small_files_count: int, notes: list[str]) -> list[Row]:
    return (lines_run(cfg, lines, notes) + real_dynamo_run(cfg, lines) + mixed_run(cfg, lines)
            + engine_logs_run(cfg, lines) + many_files_run(cfg, small_files_count))


def lines_run(cfg: Config, lines: int, notes: list[str]) -> list[Row]:
    corpus = Corpus(cfg.data / "ingest-corpus", max(1, lines // 11)).ensure()
    files, n = corpus.files(), corpus.lines()
    db = cfg.data / "ingest.duckdb"
    baseline, cli, library, rss = [], [], [], []
    for _ in range(cfg.runs):  # interleaved, so drifting load on the machine hits all of them alike
        baseline.append(read_json_seconds(files, cfg.data / "read_json.duckdb"))
        child = ingest_child(files, db)
        cli.append(child.seconds)
        rss.append(child.peak_rss_mb)
        library.append(ingester_seconds(files, db))
    base_rate = n / median(baseline)
    size = f"{n:,} lines, {corpus.bytes() / 1e6:.0f} MB, 16 files"
    rows = []
    for metric, seconds in (("`trace-join ingest` (whole command)", cli), ("Ingester (library call)", library)):
        rate = n / median(seconds)
        rows.append(Row("1 ingest", f"{metric}, records/s", rate, "rec/s", base_rate,
                        f"≥ {TARGET_RATIO}× and ≥ {TARGET_RATE // 1000}k/s",
                        rate >= TARGET_RATIO * base_rate and rate >= TARGET_RATE, size))
    rows.append(Row("1 ingest", "`trace-join ingest` peak RSS", median(rss), "MB", note=size))
    rows.append(_floor_row(baseline, cfg, db, n / median(baseline), n, "rec/s", TARGET_RATIO))
    if cfg.profile and not all(r.passed for r in rows if r.passed is not None):
        raw = cfg.data / "profiles" / "ingest.txt"
        run_child([TRACE_JOIN, "ingest", "--db", str(_fresh(db)), *map(str, files)], profile_to=raw)
        notes.append(summarize(raw))
    return rows


# -- lines a real Dynamo deployment wrote ----------------------------------------------------------

TARGET_REAL_RATIO = 0.5


def real_dynamo_run(cfg: Config, lines: int) -> list[Row]:
    """`trace-join ingest` of a real Dynamo run's request lines, made fresh into one file per worker
    (bench/real_dynamo.py), against DuckDB's `read_json` of the same files."""
    from tracejoin.cli.demo.dynamo import DynamoUnavailable

    from .real_dynamo import CAPTURED_REQUESTS, RealDynamoCorpus

    try:
        corpus = RealDynamoCorpus(cfg.data / "real-dynamo-corpus", max(1, lines // 11),
                                  cfg.data / "real-dynamo-capture").ensure()
    except DynamoUnavailable as e:
        return [Row("1 ingest", "real Dynamo lines: not measured", float("nan"), "", note=f"Dynamo cannot run here: {e}")]
    files, n = corpus.files(), corpus.lines()
    db = cfg.data / "real-dynamo.duckdb"
    baseline, cli = [], []
    for _ in range(cfg.runs):
        baseline.append(read_json_seconds(files, cfg.data / "read_json.duckdb"))
        cli.append(ingest_child(files, db).seconds)
    base_rate, rate = n / median(baseline), n / median(cli)
    size = (f"{n:,} lines, {corpus.bytes() / 1e6:.0f} MB, 16 files: {CAPTURED_REQUESTS} requests a real Dynamo "
            f"frontend, prefill and decode worker logged, with fresh ids")
    return [Row("1 ingest", "real Dynamo lines: `trace-join ingest` (whole command), records/s", rate, "rec/s",
                base_rate, f"≥ {TARGET_REAL_RATIO}×", rate >= TARGET_REAL_RATIO * base_rate, size),
            _floor_row(baseline, cfg, db, base_rate, n, "rec/s", TARGET_REAL_RATIO)]


# -- a mixed corpus ----------------------------------------------------------------------------

TARGET_MIXED_RATIO = 0.4
# The formats of the mixed corpus beside Dynamo's, as `trace-join demo` writes them (its simulated
# TensorRT-LLM deployment, in TensorRT-LLM's own formats): its folder, and how DuckDB reads it.
MIXED_FORMATS = {"perf_metrics": "json", "otlp": "json", "logs": "text"}


def _format_bytes(cfg: Config, lines: int) -> tuple[list[Path], int]:
    """A quarter of the Dynamo corpus's files, and their bytes: how many each other format gets."""
    dynamo = Corpus(cfg.data / "ingest-corpus", max(1, lines // 11)).ensure().files()[::4]
    return dynamo, sum(f.stat().st_size for f in dynamo)


def demo_files(folder: Path, demo_args: list[str], kinds, each: int) -> dict[str, list[Path]]:
    """The files of one `trace-join demo` run (with `demo_args`) under each of its folders `kinds`,
    each file's lines repeated so that a kind's files weigh about `each` bytes (repeated ids do not
    change what reading them costs; each file starts differently, so ingest reads each one): made
    once into `folder`, and reused."""
    done = folder / "made"
    if not done.exists():
        shutil.rmtree(folder, ignore_errors=True)
        demo = folder / "demo"
        demo.mkdir(parents=True)
        check(run_child([TRACE_JOIN, "demo", *demo_args, "--db", str(folder / "demo.duckdb"), "--folder", str(demo)]),
              " ".join(["trace-join demo", *demo_args]))
        run = next(demo.iterdir())
        for kind in kinds:
            sources = sorted(p for p in (run / kind).rglob("*") if p.is_file() and p.stat().st_size)
            total = sum(p.stat().st_size for p in sources)
            for i, source in enumerate(sources):
                text = source.read_bytes()
                if not text.endswith(b"\n"):
                    text += b"\n"
                out = folder / kind / f"{i:02d}-{source.name}"
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(text * max(1, each // total))
        shutil.rmtree(demo)
        done.touch()
    return {kind: sorted((folder / kind).iterdir()) for kind in kinds}


def mixed_corpus(cfg: Config, lines: int) -> dict[str, list[Path]]:
    """A quarter of the Dynamo corpus's files, and as many bytes of each other format: the files of
    `trace-join demo`'s run (its simulated TensorRT-LLM deployment)."""
    dynamo, each = _format_bytes(cfg, lines)
    return {**demo_files(cfg.data / f"mixed-corpus-{each}", [], MIXED_FORMATS, each), "dynamo": dynamo}


def duckdb_reading_seconds(files: dict[str, list[Path]], db: Path) -> float:
    """The baseline: DuckDB storing the same files, each format into a bare table of its own
    (`read_json`; text as whole lines with `read_csv`)."""
    start = time.perf_counter()
    con = duckdb.connect(str(_fresh(db)))
    con.execute("SET enable_progress_bar = false")
    for kind, paths in files.items():
        listed = ", ".join(f"'{f}'" for f in paths)
        if MIXED_FORMATS.get(kind, "json") == "json":
            con.execute(f"CREATE TABLE {kind} AS SELECT * FROM read_json([{listed}], format='newline_delimited', "
                        f"union_by_name=true, maximum_object_size=67108864)")
        else:
            con.execute(f"CREATE TABLE {kind} AS SELECT * FROM read_csv([{listed}], columns={{'line': 'VARCHAR'}}, "
                        f"header=false, delim=chr(1), quote='', escape='', strict_mode=false)")
    con.close()
    return time.perf_counter() - start


def _floor_row(baseline: list[float], cfg: Config, written: Path, base_rate: float, amount: float, unit: str,
               target: float) -> Row:
    """The floor of ingest into the store's layout: the baseline's parse, then writing the tables
    that `written`'s ingest made (writing_seconds)."""
    floor = median(baseline) + median([writing_seconds(written, cfg.data / "floor.duckdb") for _ in range(cfg.runs)])
    rate = amount / floor
    return Row("1 ingest", f"… the floor of this layout: the baseline's parse, then writing the same tables, {unit}",
               rate, unit, base_rate, f"≥ {target}×", rate >= target * base_rate,
               "no ingest into the store's layout is faster (bench/ingest.py, writing_seconds)")


def mixed_run(cfg: Config, lines: int) -> list[Row]:
    files = mixed_corpus(cfg, lines)
    every = [f for paths in files.values() for f in paths]
    db = cfg.data / "mixed.duckdb"
    baseline, cli = [], []
    for _ in range(cfg.runs):
        baseline.append(duckdb_reading_seconds(files, cfg.data / "mixed-baseline.duckdb"))
        cli.append(ingest_child(every, db).seconds)
    megabytes = sum(f.stat().st_size for f in every) / 1e6
    base_rate = megabytes / median(baseline)
    kinds = ", ".join(f"{kind} {sum(f.stat().st_size for f in paths) / 1e6:.0f} MB" for kind, paths in files.items())
    return [Row("1 ingest", "mixed corpus: `trace-join ingest` (whole command), MB/s", megabytes / median(cli), "MB/s",
                megabytes / median(baseline), f"≥ {TARGET_MIXED_RATIO}×",
                median(baseline) / median(cli) >= TARGET_MIXED_RATIO,
                f"{kinds}; baseline: DuckDB reading the same files (read_json; read_csv of whole lines for text)"),
            _floor_row(baseline, cfg, db, base_rate, megabytes, "MB/s", TARGET_MIXED_RATIO)]


# -- vLLM's and SGLang's own logs -----------------------------------------------------------------

# The engines whose servers' logs the mixed corpus lacks: their lines are read one at a time by
# their Python readers (TensorRT-LLM's and Dynamo's are read in bulk).
LOG_ENGINES = ("vllm", "sglang")


def engine_logs_run(cfg: Config, lines: int) -> list[Row]:
    """`trace-join ingest` of each engine's servers' logs, as `trace-join demo --engine <engine>`
    writes them in the engine's own formats, as many bytes as each format of the mixed corpus,
    against DuckDB storing the same files as whole lines (`read_csv`)."""
    _, each = _format_bytes(cfg, lines)
    rows = []
    for engine in LOG_ENGINES:
        files = demo_files(cfg.data / f"{engine}-logs-{each}", ["--engine", engine], ["logs"], each)["logs"]
        baseline, cli = [], []
        for _ in range(cfg.runs):
            baseline.append(duckdb_reading_seconds({"logs": files}, cfg.data / f"{engine}-baseline.duckdb"))
            cli.append(ingest_child(files, cfg.data / f"{engine}.duckdb").seconds)
        megabytes = sum(f.stat().st_size for f in files) / 1e6
        rows.append(Row("1 ingest", f"{engine} servers' logs: `trace-join ingest` (whole command), MB/s",
                        megabytes / median(cli), "MB/s", megabytes / median(baseline), "", None,
                        f"{megabytes:.0f} MB, {len(files)} files of the demo's lines in {engine}'s own format, "
                        f"read a line at a time; baseline: read_csv of whole lines"))
    return rows


# -- many small files --------------------------------------------------------------------------

TARGET_MS_A_FILE = 2.0
TARGET_FLAT = 1.5  # the last tenth's cost a file over the first tenth's, at most
TENTHS = 10


def small_files(folder: Path, count: int) -> list[Path]:
    """`count` one-line files in TENTHS folders; made once, reused by later runs."""
    folder = folder / str(count)  # another count, other files
    tenths = [folder / f"tenth-{t}" for t in range(TENTHS)]
    done = folder / "made"
    if not done.exists():
        for t, tenth in enumerate(tenths):
            tenth.mkdir(parents=True, exist_ok=True)
            for i in range(t * count // TENTHS, (t + 1) * count // TENTHS):
                (tenth / f"w{i:07d}.jsonl").write_bytes(
                    b'{"schema":"tracejoin.log.v1","ts":"2026-11-30T10:40:30.123456Z","level":"info",'
                    b'"event":"request.start","role":"router","worker":"gw:8000","internal_id":"req-%d",'
                    b'"x_request_id":"xr-%d"}\n' % (i, i))
        done.touch()
    return tenths


def many_files_run(cfg: Config, count: int) -> list[Row]:
    """`trace-join ingest` of each tenth of `count` one-line files, one command after another into
    one store, against DuckDB's `read_json` of the same files (one call over their glob): the cost
    a file, first while the store is empty and last once it knows nine tenths of them."""
    tenths = small_files(cfg.data / "small-files", count)
    per_tenth = count // TENTHS
    baseline, first, last = [], [], []
    for _ in range(cfg.runs):
        start = time.perf_counter()
        con = duckdb.connect(str(_fresh(cfg.data / "read_json_small.duckdb")))
        con.execute("SET enable_progress_bar = false")
        con.execute(f"CREATE TABLE lines AS SELECT * FROM read_json('{tenths[0].parent}/tenth-*/*.jsonl', "
                    f"format='newline_delimited')")
        con.close()
        baseline.append((time.perf_counter() - start) * 1000 / count)
        db = _fresh(cfg.data / "small-files.duckdb")
        seconds = [check(run_child([TRACE_JOIN, "ingest", "--db", str(db), str(tenth)]), "trace-join ingest").seconds
                   for tenth in tenths]
        first.append(seconds[0] * 1000 / per_tenth)
        last.append(seconds[-1] * 1000 / per_tenth)
    size = f"{count:,} one-line files, in {TENTHS} commands of {per_tenth:,}"
    return [
        Row("1 ingest", "many small files: ms a file, into an empty store", median(first), "ms", median(baseline),
            f"≤ {TARGET_MS_A_FILE:g} ms", median(first) <= TARGET_MS_A_FILE, size + "; baseline: read_json, ms a file"),
        Row("1 ingest", "many small files: ms a file, the last tenth", median(last), "ms", median(first),
            f"≤ {TARGET_MS_A_FILE:g} ms and ≤ {TARGET_FLAT}× the first tenth",
            median(last) <= TARGET_MS_A_FILE and median(last) <= TARGET_FLAT * median(first),
            "baseline: the first tenth's, same run"),
    ]
