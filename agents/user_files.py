"""Reading a file the user named (a task file, a tasks file, a config file, a theme, a
trace to import, an adapter's config): a regular file only, and never more than a limit.

A path can name anything: a FIFO (reading it waits for a writer that never comes), a
device (a symlink to /dev/zero reads without end until the OOM killer steps in), a
socket. The file is opened without blocking, checked with `fstat` on the opened
descriptor (so what is checked is what is read; a symlink to a regular file is fine),
and at most `limit + 1` bytes are read whatever its size claims.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
_CHUNK = 1 << 20


class UserFileError(OSError):
    """A file refused before or while reading it: not a regular file, or too large.
    `str()` is the reason alone (no errno), to follow the path in one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(errno.EINVAL, reason)

    def __str__(self) -> str:
        return str(self.strerror)


def size_words(size: int) -> str:
    """`16 MiB`, `1 GiB`, `512 KiB`: a limit as the error line names it."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size:,} bytes"


def read_user_file(path: str | Path, limit: int, what: str = "file") -> bytes:
    """The bytes of the regular file at `path` (followed if a symlink), at most `limit` of
    them. `UserFileError` if it is not a regular file or holds more (`what` names the kind
    of file in that line: "task file"); any other OSError as the system gave it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a file")
            raise UserFileError(f"is {kind}; a {what} must be a regular file")
        if info.st_size > limit:
            raise UserFileError(
                f"{info.st_size:,} bytes is too large for a {what} (at most {size_words(limit)})"
            )
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        left = limit + 1  # one byte more than allowed tells a file that grew past it
        while left > 0:
            chunk = os.read(fd, min(left, _CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise UserFileError(f"too large for a {what} (more than {size_words(limit)})")
    return data


def json_object_line(line: str, where: str, shape: str, error: type[Exception]) -> dict[str, Any]:
    """One line of a JSON-lines file the user wrote, read as an object; otherwise `error`
    with one line naming `where` (the file and line) and what was expected (`shape`)."""
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise error(f"{where}: not JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(value, dict):
        raise error(f"{where}: expected an object {shape}")
    return value
