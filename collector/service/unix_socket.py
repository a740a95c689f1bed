"""Unix sockets at a path, for the collector's query endpoint (server) and the commands that read
through it (client).

A Unix socket's address holds at most 107 bytes of path, and a store may lie deeper than that.
Linux resolves `/proc/self/fd/N/NAME`, where N is an open descriptor of a folder, as NAME in that
folder, so a socket in any folder can be reached through a short address.
"""

from __future__ import annotations

import os
import socket
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

MAX_ADDRESS_BYTES = 107  # sockaddr_un's sun_path, less its closing NUL


@contextmanager
def address_of(path: Path) -> Iterator[str]:
    """An address that reaches `path` for bind() and connect(), valid within the block."""
    if len(os.fsencode(path)) <= MAX_ADDRESS_BYTES:
        yield str(path)
        return
    folder = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{folder}/{path.name}"
    finally:
        os.close(folder)


def owner_only_listener(path: Path) -> socket.socket:
    """A socket listening at `path` that only this user (and root) can connect to: connecting needs
    write permission on the socket's file, which is 0600 before the socket listens. A socket file
    already there is replaced: the caller owns what the path serves (the collector holds its
    store's lock), so one there is left by a server that was killed."""
    if path.is_socket():
        path.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with address_of(path) as address:
            listener.bind(address)  # uvicorn's own `uds` would make the file 0666
    except OSError:
        listener.close()
        raise
    try:
        os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
        listener.listen()
    except OSError:
        listener.close()
        path.unlink(missing_ok=True)
        raise
    return listener
