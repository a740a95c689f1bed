"""Files a command writes where the user names them (`lookup --html FILE`)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def replace_file(path: Path, data: bytes) -> None:
    """Put `data` at `path` as a new file in place of whatever stood there. A link planted at
    `path` (to a file of the user's, or to nothing yet) or a hard link is replaced, never written
    through; a reader sees the old file or the new one, never part of it. The data is written to a
    temporary file in the same folder, which is removed if anything fails, then renamed over `path`."""
    partial = path.parent / f".{path.name}.{secrets.token_hex(4)}.partial"  # hidden: a watched folder skips it
    # O_EXCL: a new file, never one a link at this name points to; 0o666 less the umask, as any new file
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # on disk before the name moves to it: a crash leaves the old file whole
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
