"""Wall-clock texts to ns: the cached fast path for the common `...T..:..:..<fraction>Z` shape
must give what parsing the whole text gives, and refuse what it refuses."""

from datetime import datetime, timezone

import pytest

from tracejoin.collector.times import BadTime, iso_to_ns


def _by_datetime(text: str) -> int:
    """The reference: seconds from datetime, the fraction's first nine digits as ns."""
    whole, _, rest = text.partition(".")
    digits = rest.rstrip("Z")
    seconds = int(datetime.fromisoformat(whole).replace(tzinfo=timezone.utc).timestamp())
    return seconds * 1_000_000_000 + int(digits[:9].ljust(9, "0"))


@pytest.mark.parametrize("text", [
    "2025-09-02T15:50:01.770028Z",
    "2025-09-02T15:50:01.7Z",
    "2025-09-02T15:50:01.123456789123Z",  # beyond ns: cut, not rounded
    "2024-02-29T23:59:59.000000001Z",
    "1970-01-01T00:00:00.5Z",
    "2025-09-02 15:50:01.5Z",
])
def test_utc_times_with_a_fraction(text):
    assert iso_to_ns(text) == _by_datetime(text)
    assert iso_to_ns(text) == _by_datetime(text)  # again, from the cache of seconds


@pytest.mark.parametrize("text, expected", [
    ("2025-09-02T15:50:01.770028+00:00", 1756828201770028000),
    ("2025-09-02T17:50:01.770028+02:00", 1756828201770028000),
    ("2025-09-02T15:50:01Z", 1756828201000000000),
    ("2025-09-02T15:50:01", 1756828201000000000),
])
def test_other_shapes_take_the_general_path(text, expected):
    assert iso_to_ns(text) == expected


@pytest.mark.parametrize("text", [
    "2025-13-02T15:50:01.770028Z", "2025-09-02T15:50:01.77a028Z", "2025-09-02T15:50:01.-7Z",
    "2025-09-02T15:50:01.\u00b2Z", "yesterday", ".5Z",
])
def test_unreadable_times_are_refused(text):
    with pytest.raises(BadTime):
        iso_to_ns(text)
