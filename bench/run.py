"""`python -m bench`: generate the data, run the benchmarks, print one table.

    python -m bench                # the sizes of issue 8 (lookup on 10 million records)
    python -m bench --quick        # a smoke run: small sizes, fewer repetitions
    python -m bench --only lookup --runs 7 --profile

Data is generated under --data (default $TMPDIR/tracejoin-bench) and reused by later runs of the
same sizes: the 10-million-record corpus and store take a few minutes to build the first time.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from . import fleet, ingest, lookup, memory, middleware, otlp
from .common import Config, Row

BENCHMARKS = ("ingest", "lookup", "middleware", "otlp", "memory", "fleet")
# (default, --quick) sizes
SIZES = {
    "ingest_lines": (200_000, 20_000),
    "small_files": (100_000, 5_000),
    "lookup_records": (10_000_000, 200_000),
    "middleware_seconds": (5, 2),
    "ttfb_requests": (1000, 200),
    "otlp_spans": (5_120, 2_048),  # Phoenix stores ~100 spans/s here: its run dominates
    "memory_mb": (256, 32),
    "fleet_records": (50_000_000, 1_100_000),
    "runs": (3, 2),
}


def _number(value: float) -> str:
    if value is None:
        return ""
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"


def table(rows: list[Row]) -> str:
    """A Markdown table: it reads in a terminal and pastes into docs/performance.md."""
    header = ["benchmark", "metric", "median", "baseline median", "ratio", "target", "result", "notes"]
    lines = [header, ["---"] * len(header)]
    for r in rows:
        result = "" if r.passed is None else ("pass" if r.passed else "**FAIL**")
        ratio = f"{r.ratio:.2f}×" if r.ratio is not None else ""
        baseline = f"{_number(r.baseline)} {r.unit}" if r.baseline is not None else ""
        lines.append([r.benchmark, r.metric, f"{_number(r.median)} {r.unit}", baseline, ratio, r.target, result,
                      r.note])
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


def machine() -> str:
    load = os.getloadavg()
    return (f"{platform.node()}: {os.cpu_count()} cores, {os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} GiB, "
            f"Python {platform.python_version()}, DuckDB {duckdb.__version__}, load average {load[0]:.1f} at the end")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and 2 runs: a smoke run")
    parser.add_argument("--only", action="append", choices=BENCHMARKS, help="run only these (repeatable)")
    parser.add_argument("--runs", type=int, help="repetitions of each measurement (default 3, quick 2)")
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "tracejoin-bench",
                        help="where generated data goes (default: %(default)s)")
    parser.add_argument("--profile", action="store_true",
                        help="record a py-spy profile of the trace-join processes that miss a target")
    parser.add_argument("--phoenix", help="the `phoenix` command (default: .venv-phoenix/bin/phoenix, then PATH)")
    parser.add_argument("--markdown", type=Path, help="also write the table and notes to this file")
    for name, (default, quick) in SIZES.items():
        if name != "runs":
            parser.add_argument(f"--{name.replace('_', '-')}", type=int, help=f"default {default:,}, quick {quick:,}")
    args = parser.parse_args(argv)

    def size(name: str) -> int:
        given = getattr(args, name, None)
        return given if given is not None else SIZES[name][1 if args.quick else 0]

    cfg = Config(args.data, size("runs"), args.quick, args.profile)
    cfg.data.mkdir(parents=True, exist_ok=True)
    selected = args.only or BENCHMARKS
    notes: list[str] = []
    rows: list[Row] = []
    plan = {
        "ingest": lambda: ingest.run(cfg, size("ingest_lines"), size("small_files"), notes),
        "lookup": lambda: lookup.run(cfg, size("lookup_records"), notes),
        "middleware": lambda: middleware.run(cfg, size("middleware_seconds"), size("ttfb_requests"), notes),
        "otlp": lambda: otlp.run(cfg, size("otlp_spans"), args.phoenix, notes),
        "memory": lambda: memory.run(cfg, size("memory_mb"), notes),
        "fleet": lambda: fleet.run(cfg, size("fleet_records"), size("ingest_lines"), notes),
    }
    started = time.monotonic()
    for name in BENCHMARKS:
        if name in selected:
            print(f"bench: {name} ...", file=sys.stderr, flush=True)
            t = time.monotonic()
            try:
                rows += plan[name]()
            except Exception as e:  # noqa: BLE001 - one broken benchmark must not lose the others' results
                rows.append(Row(name, "did not complete", float("nan"), "", passed=False, note=f"{type(e).__name__}: {e}"[:300]))
            print(f"bench: {name} done in {time.monotonic() - t:.0f} s", file=sys.stderr, flush=True)
    report = "\n\n".join([
        table(rows),
        f"{machine()}; {cfg.runs} runs each, medians; {time.monotonic() - started:.0f} s in all.",
        *(f"```\n{note}\n```" for note in notes),
    ])
    print(report)
    if args.markdown:
        args.markdown.write_text(report + "\n")
    if any(r.passed is False for r in rows):
        sys.exit(1)
