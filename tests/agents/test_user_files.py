"""`read_user_file`: a regular file (or a symlink to one), at most its limit, whatever the
size it claims; anything else refused before a byte is read."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from agents.user_files import UserFileError, read_user_file, size_words


def test_a_regular_file_and_a_symlink_to_one_are_read(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_bytes(b"x = 1\n")
    (tmp_path / "link.toml").symlink_to(tmp_path / "a.toml")
    assert read_user_file(tmp_path / "a.toml", 6) == b"x = 1\n"
    assert read_user_file(tmp_path / "link.toml", 6) == b"x = 1\n"


def test_a_file_over_the_limit_is_refused_by_its_size(tmp_path: Path) -> None:
    path = tmp_path / "big.toml"
    with path.open("wb") as sparse:
        sparse.truncate(3 << 30)
    with pytest.raises(UserFileError) as caught:
        read_user_file(path, 1 << 20, "task file")
    assert str(caught.value) == "3,221,225,472 bytes is too large for a task file (at most 1 MiB)"


def test_a_file_that_claims_no_size_is_still_read_only_to_its_limit() -> None:
    """/proc files say 0 bytes and hold more: the read stops one byte past the limit."""
    with pytest.raises(UserFileError) as caught:
        read_user_file("/proc/self/maps", 10, "config file")
    assert str(caught.value) == "too large for a config file (more than 10 bytes)"


@pytest.mark.timeout(30)
def test_what_is_not_a_regular_file_is_refused_unread(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "zero").symlink_to("/dev/zero")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / "sock"))
        refused = {}
        for name in ("fifo", "zero", "sock", "."):
            with pytest.raises(OSError) as caught:
                read_user_file(tmp_path / name, 1 << 20, "tasks file")
            refused[name] = str(caught.value)
    assert refused == {
        "fifo": "is a FIFO; a tasks file must be a regular file",
        "zero": "is a character device; a tasks file must be a regular file",
        "sock": f"[Errno 6] No such device or address: '{tmp_path / 'sock'}'",
        ".": "is a folder; a tasks file must be a regular file",
    }


def test_limits_are_named_in_their_unit() -> None:
    assert [size_words(n) for n in (16 << 20, 1 << 30, 512 << 10, 1000)] == [
        "16 MiB",
        "1 GiB",
        "512 KiB",
        "1,000 bytes",
    ]
