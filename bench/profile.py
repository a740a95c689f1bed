"""Summaries of py-spy's collapsed stacks (`py-spy record --format raw`): where the time went."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

_LINE = re.compile(r" \((?P<file>[^()]*?)(?::\d+)?\)$")


def _function(frame: str) -> str:
    """`name (path/to/file.py:12)` as `name (file.py)`: lines of one function add up."""
    m = _LINE.search(frame)
    if not m:
        return frame
    path = Path(m.group("file"))
    return f"{frame[:m.start()]} ({path.parent.name}/{path.name})"


def summarize(raw: Path, top: int = 12) -> str:
    """The functions with the most samples on top of the stack (self) and anywhere in it (total)."""
    own: Counter = Counter()
    total: Counter = Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        frames = [_function(f) for f in stack.split(";") if f]
        samples += n
        if frames:
            own[frames[-1]] += n
        for f in set(frames):
            total[f] += n
    if not samples:
        return f"{raw}: no samples"
    lines = [f"{raw.name}: {samples} samples", "  self%  total%  function"]
    for f, n in own.most_common(top):
        lines.append(f"  {100 * n / samples:5.1f}  {100 * total[f] / samples:6.1f}  {f}")
    lines.append("  (largest totals)")
    for f, n in total.most_common(top + 8):
        if f not in dict(own.most_common(top)):
            lines.append(f"  {'':5}  {100 * n / samples:6.1f}  {f}")
    return "\n".join(lines)
