"""What a source module's BULK is made of: the SQL that reads its lines in DuckDB as its
LineParser reads them (collector/bulk.py runs it), and the helpers such SQL shares: whether DuckDB
reads a JSON line as orjson does, and Python's regular expressions in DuckDB's dialect."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Rules:
    """How DuckDB reads a source's lines (a source module's BULK).

    select: a SELECT over `{lines}` (f, idx, start, line: a piece, a line's index in it, its
        byte offset in it, and its text with its newline) giving one row per line: its f, idx
        and start, `ok` (the row is the line's record, as the LineParser would read it), the
        records' columns (records.RECORDS_SCHEMA but record_id, source, origin_id, offset and
        seq) and whatever `ids` reads. A line the parser reads after a row of the stage is told
        that row's time first (its `carry`): what a line leaves to an untimed line after it is
        its record's time. The select may name settings of the file's parser, `{name}`, which
        its `bulk_settings()` gives as SQL literals: each stands for a column of `{lines}` holding
        its file's value, so the files of one stage may differ in them (a value used past the
        first CTE has to be carried there).
    ids: a SELECT over `{records}` (the rows stored, with their `record_id` and `scope`, the
        parser's scope where it would have read the line) giving each record's ids as
        record_id, kind, value, scope: those Record.add_id and records.py's span edges give.
    json_columns: for JSON lines, the type (read_json's `columns`, a STRUCT) each line is read
        as by DuckDB's JSON reader, parsed once: the select then also reads `{json}` (f, idx, r:
        the line's value) for every line that is not blank. A line the reader cannot read as that
        type (not JSON, a key twice, a field of another shape) makes the whole stage the parser's.
    votes: the select gives each row a `vote`, the role the record suggests for its file, which
        the parser learns (`learn(Counter)`) for the rows stored.
    """

    select: str
    ids: str
    json_columns: str | None = None
    votes: bool = False


# -- JSON read alike ------------------------------------------------------------------------
# DuckDB's JSON reader (yyjson) takes texts orjson refuses, and writes some values otherwise than
# orjson. A JSON-lines source's `select` keeps a line `ok` only when read_as_orjson says DuckDB
# reads it as orjson would, and writes what is stored of it (`written`, the JSON text DuckDB makes
# of the values stored, minified; NULL: none) as orjson would. Read otherwise: a trailing comma
# (yyjson drops it), a key twice (orjson keeps the last value, yyjson the first), NaN or Infinity,
# numbers with an exponent (orjson refuses those beyond a double's range) and integers of 20 digits
# and more, or negative of 19 (orjson reads those beyond 64 bits as floats; a worker id of 19
# digits, as Dynamo's are, is read alike). Written otherwise:
# numbers orjson writes with an exponent (below 1e-5, from 1e16) or yyjson keeps as text (beyond
# 64 bits), control characters yyjson escapes in upper case, nested objects (keys twice inside
# them) and nested arrays (orjson writes no deeper than 254 levels).
_TRAILING_COMMA = r",[ \t\n\r]*[}\]]"
# A value read otherwise, after any of the characters a value follows. Written as one expression for
# each of them: RE2 skips ahead to a literal first character, but tries a class at every byte.
_VALUE_READ_OTHERWISE = r"[ \t]*-?((?i:nan|inf|infinity)[ \t]*[,}\]]|[0-9]+(\.[0-9]+)?[eE]|[0-9]{20}|-[0-9]{19})"
_READ_OTHERWISE = " OR ".join(f"regexp_matches(line, '{before}{_VALUE_READ_OTHERWISE}')" for before in (":", ",", "\\["))
_WRITTEN_OTHERWISE = "|".join([
    r"[:\[,]-?[0-9]+(\.[0-9]+)?[eE]",
    r"[:\[,]-?0\.00000",
    r"[:\[,]-?[0-9]{17,}\.",
    r"[:\[,]-?[0-9]{20}",
    r"[:\[,]-[0-9]{19}",
    r"\\u00[01][A-F]",
    r"[:\[,]\{",
    r"[\[,]\[",
])
MACROS = f"""
CREATE OR REPLACE TEMP MACRO _when(condition, text) AS CASE WHEN condition THEN text ELSE '' END;
CREATE OR REPLACE TEMP MACRO read_as_orjson(line, keys, written) AS
    NOT regexp_matches(line, '{_TRAILING_COMMA}')
    -- no key twice: each key first found where it is (cheaper than counting distinct keys)
    AND len(list_filter(keys, lambda key, i: list_position(keys, key) <> i)) = 0
    AND NOT ({_READ_OTHERWISE})
    AND NOT coalesce(regexp_matches(written, '{_WRITTEN_OTHERWISE}'), false);
"""


def literal(value: str | None) -> str:
    """A text as an SQL literal (a parser's bulk_settings(), a file's path)."""
    return "NULL::VARCHAR" if value is None else "'" + value.replace("'", "''") + "'"


def re2(pattern: re.Pattern) -> str:
    """A Python pattern as DuckDB's regular expressions (RE2) read it, quoted for SQL. `\\d` and
    `\\s` are Unicode classes in Python unless the pattern is compiled with re.ASCII, and RE2 knows
    them only in ASCII (its `\\s` without the vertical tab): such a pattern must be ASCII, and its
    classes are written out. A final `$` also matches before a last newline in Python."""
    if not pattern.flags & re.ASCII and re.search(r"\\[ds]", pattern.pattern):
        raise ValueError(f"{pattern.pattern!r}: \\d and \\s read alike in DuckDB only with re.ASCII")
    text, out, i, in_class = pattern.pattern, [], 0, False
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            written = _RE2_CLASSES.get(text[i + 1])
            out.append(text[i:i + 2] if written is None else written if in_class else f"[{written}]")
            i += 2
            continue
        # inside [...] a class is written without its brackets (a class whose first member is ]
        # is not read so: no pattern here has one)
        in_class = ch == "[" or (in_class and ch != "]")
        out.append("\\n?$" if ch == "$" and i == len(text) - 1 and not in_class else ch)
        i += 1
    return "".join(out).replace("'", "''")


# Python's ASCII classes as RE2 reads them, as members of a class (tests/collector/test_bulk_dynamo.py
# checks every code point).
_RE2_CLASSES = {"d": "0-9", "s": r"\t\n\x0b\f\r "}
