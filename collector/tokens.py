"""The id-shaped words of a line: what a user may quote that no source understood.

Every stored line is findable by any id it holds, wherever it stands (message, a tracing span's
scope, exception text, a `key=value` tail). The sources read the ids they understand, as keys or
labels (docs/id-model.md); this scan adds every other id-shaped word of the line as a label of
kind TOKEN, which finds the line and never joins it to another.

A word is a run of ASCII letters, digits, `_` and `-` (so `chatcmpl-…`, `resp_…`, UUIDs, 32-hex rids
and 19-digit bootstrap rooms are each one word; `.`, `:`, `/`, `=`, quotes and brackets end one),
without the `_` and `-` at its ends. It is id-shaped when it has at least MIN_LENGTH characters
and a digit, and is not a date, the fraction of a time (`2025-09-04T07`, `402118733Z`) or part of
a decimal number (`1787307302.520`, an epoch time): ids are random and long; words, paths and
numbers are not. The same rule is written as SQL for the
lines DuckDB reads in bulk (`sql`), and tests hold the two to each other.
"""

from __future__ import annotations

import re

TOKEN = "token"
MIN_LENGTH = 8

# A decimal number, else a run (with the fraction after it, if any: a decimal too).
_RUN = re.compile(rf"[0-9]+\.[0-9]+|[A-Za-z0-9_-]{{{MIN_LENGTH},}}(?:\.[0-9]+)?")
_DIGIT = re.compile(r"[0-9]")
_NOT_IDS = re.compile(r"^(?:[0-9]{2,4}[-/][0-9]{1,2}(?:[-/][0-9]{1,2})?(?:T[0-9]{1,2})?|[0-9]+Z)$")


def tokens(text: str) -> list[str]:
    """The id-shaped words of the text, each once, in the order they first appear."""
    found: list[str] = []
    for run in _RUN.findall(text):
        if "." in run:
            continue
        word = run.strip("_-")
        if len(word) >= MIN_LENGTH and _DIGIT.search(word) and not _NOT_IDS.match(word) and word not in found:
            found.append(word)
    return found


def add_labels(record, text: str) -> None:
    """Add the text's id-shaped words the record does not carry already as an id, as TOKEN labels."""
    words = tokens(text)
    if not words:
        return
    carried = {value for _, value, _ in record.ids}
    for word in words:
        if word not in carried:
            record.ids.append((TOKEN, word, None))


# MIN_LENGTH word characters in a row with a digit among them: a line without such a stretch has
# no id-shaped word. Scanning a line for it costs a fifth of taking its words apart, and most lines
# fail it (a time's fields are too short, as are ports and counts).
_MAY_HOLD_ONE = "|".join(f"[A-Za-z0-9_-]{{{before}}}[0-9][A-Za-z0-9_-]{{{MIN_LENGTH - 1 - before}}}"
                         for before in range(MIN_LENGTH))


def sql(text: str) -> str:
    """SQL for the id-shaped words of `text` (an SQL expression), as a list: `tokens`' words, each
    once, in no particular order."""
    return (f"CASE WHEN regexp_matches({text}, '{_MAY_HOLD_ONE}') THEN list_distinct(list_filter(list_transform("
            f"list_filter(regexp_extract_all({text}, '{_RUN.pattern}'), lambda w: NOT contains(w, '.')), "
            f"lambda w: trim(w, '_-')), lambda w: length(w) >= {MIN_LENGTH} AND regexp_matches(w, '{_DIGIT.pattern}') "
            f"AND NOT regexp_matches(w, '{_NOT_IDS.pattern}'))) ELSE [] END")
