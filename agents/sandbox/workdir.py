"""A session's work dir bounded in bytes and in files.

Where the console may mount (root, with CAP_SYS_ADMIN), the work dir is a tmpfs of that
size and inode count for as long as its kernel lives, mounted over the folder on disk: a
write past either limit fails inside the sandbox with ENOSPC, the host disk never sees it,
and the console reads the files where they always are. What the folder on disk held is
copied in at the start; when the kernel closes, the tmpfs's files are written back below
it and the tmpfs goes (a folder a dead console left mounted is written back on its next
use). Without that privilege the work dir stays on disk, and the kernel checks its size
after every call and every second during one (`usage`, `Kernel`): a strong check, not a
bound, which `agent-console doctor` says.

The write back takes regular files, folders and symbolic links (as links, never
followed), keeps hard links as links and stops at the byte limit: fifos, sockets and
device nodes are left behind, and sparse or hard-linked files cannot make it write more
than the limit.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import logging
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("agents.workdir")

_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_BIND = 0x1000
_MNT_DETACH = 0x2
_COPY_CHUNK = 1 << 20

_libc: ctypes.CDLL | None = None


class WorkdirError(Exception):
    """The work dir could not be mounted, filled or written back; `str()` is one line."""


@dataclass(frozen=True)
class Usage:
    """What a folder holds: bytes on disk (allocated blocks) and entries (files, folders,
    links), the folder itself not counted."""

    bytes: int
    files: int

    def past(self, max_bytes: int, max_files: int) -> str | None:
        """Which limit this usage is past, in words, or None."""
        if self.bytes > max_bytes:
            return f"{_size(self.bytes)}, past its limit of {_size(max_bytes)}"
        if self.files > max_files:
            return f"{self.files:,} files, past its limit of {max_files:,}"
        return None


def usage(folder: Path, stop_after: int | None = None) -> Usage:
    """Bytes and entries under `folder`, links not followed, a hard-linked file's bytes
    counted once; the walk stops once it has counted more than `stop_after` entries (a
    check needs to know it is past, not by how much)."""
    total = files = 0
    linked: set[tuple[int, int]] = set()
    stack = [str(folder)]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                files += 1
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
                    if (info.st_dev, info.st_ino) in linked:
                        continue
                    linked.add((info.st_dev, info.st_ino))
                total += info.st_blocks * 512
                if stat.S_ISDIR(info.st_mode):
                    stack.append(entry.path)
                if stop_after is not None and files > stop_after:
                    return Usage(total, files)
    return Usage(total, files)


def can_mount() -> str | None:
    """None when this process can mount a sized tmpfs (tried once in a temporary folder);
    otherwise why not, in a few words."""
    if os.geteuid() != 0:
        return "the console is not root"
    probe = Path(tempfile.mkdtemp(prefix="agent-console-mount-"))
    try:
        _mount_tmpfs(probe, 1 << 20, 16)
    except WorkdirError as exc:
        return str(exc)
    finally:
        with contextlib.suppress(WorkdirError):
            _unmount(probe)
        with contextlib.suppress(OSError):
            probe.rmdir()
    return None


class BoundedWorkdir:
    """`path` as a tmpfs of `max_bytes` and `max_files` while mounted (`mount`,
    `unmount`); the folder on disk below keeps the files between mounts."""

    def __init__(self, path: Path, max_bytes: int, max_files: int) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.max_files = max_files
        self._below = -1
        """An O_PATH descriptor of the folder under the mount: /proc/self/fd/N reaches it."""

    @property
    def mounted(self) -> bool:
        return self._below >= 0

    def mount(self) -> None:
        """Mount the tmpfs over the folder and copy the folder's files into it. A tmpfs a
        dead console left there is written back and detached first."""
        if self.mounted:
            return
        if _is_tmpfs_mount(self.path):
            log.warning("the work dir %s was left mounted: writing it back first", self.path)
            self._write_back_stale()
        below = os.open(self.path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            _mount_tmpfs(self.path, self.max_bytes, self.max_files)
        except WorkdirError:
            os.close(below)
            raise
        self._below = below
        try:
            _copy_tree(_fd_path(below), self.path, self.max_bytes)
        except OSError as exc:
            self.unmount(write_back=False)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise WorkdirError(
                    f"the work dir {self.path} holds more than its limits "
                    f"({_size(self.max_bytes)}, {self.max_files:,} files)"
                ) from None
            raise WorkdirError(f"could not fill the work dir {self.path}: {exc}") from None

    def unmount(self, write_back: bool = True) -> None:
        """Write the tmpfs's files back to the folder below (unless told not to) and
        detach the tmpfs. Idempotent. A write back that fails leaves the tmpfs mounted,
        its files whole, for the next `mount` to write back as a dead console's."""
        below, self._below = self._below, -1
        if below < 0:
            return
        try:
            if write_back:
                _replace_tree(self.path, _fd_path(below), self.max_bytes)
        finally:
            os.close(below)
        _unmount(self.path)

    def _write_back_stale(self) -> None:
        """The folder is a mount point: a tmpfs whose console died. Its files go to the
        folder under it: the tmpfs is bound to a staging folder, detached from the work
        dir, copied from the staging folder, then detached there. A copy that fails binds
        it back over the work dir, its files whole, to be tried again on the next mount."""
        staging = Path(tempfile.mkdtemp(prefix="agent-console-stale-"))
        try:
            _bind(self.path, staging)
            try:
                _unmount(self.path)
                try:
                    _replace_tree(staging, str(self.path), self.max_bytes)
                except BaseException:
                    _bind(staging, self.path)
                    raise
            finally:
                _unmount(staging)
        finally:
            with contextlib.suppress(OSError):
                staging.rmdir()


def _is_tmpfs_mount(path: Path) -> bool:
    """Whether `path` is the mount point of a tmpfs (mountinfo's fifth field is the mount
    point, octal-escaped; the filesystem type follows the " - ")."""
    if not os.path.ismount(path):
        return False
    wanted = str(path.resolve()).replace("\\", "\\134").replace(" ", "\\040")
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) > 4 and fields[4] == wanted and right.split()[:1] == ["tmpfs"]:
            return True
    return False


def _fd_path(fd: int) -> str:
    return f"/proc/self/fd/{fd}"


def _size(count: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"


def _libc_handle() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc


def _mount_tmpfs(path: Path, max_bytes: int, max_files: int) -> None:
    # the root folder is an inode of its own
    options = f"size={max_bytes},nr_inodes={max_files + 1},mode=0755"
    result = _libc_handle().mount(
        b"tmpfs", os.fsencode(path), b"tmpfs", _MS_NOSUID | _MS_NODEV, options.encode()
    )
    if result != 0:
        code = ctypes.get_errno()
        raise WorkdirError(f"cannot mount a tmpfs ({os.strerror(code)})")


def _bind(source: Path, target: Path) -> None:
    if _libc_handle().mount(os.fsencode(source), os.fsencode(target), None, _MS_BIND, None):
        code = ctypes.get_errno()
        raise WorkdirError(f"cannot bind {source} to {target} ({os.strerror(code)})")


def _unmount(path: Path | str) -> None:
    if _libc_handle().umount2(os.fsencode(path), _MNT_DETACH) != 0:
        code = ctypes.get_errno()
        raise WorkdirError(f"cannot unmount {path} ({os.strerror(code)})")


def _replace_tree(source: Path | str, target: str, max_bytes: int) -> None:
    """Make `target` hold what `source` holds: its entries removed, `source`'s copied."""
    with os.scandir(target) as entries:
        for entry in list(entries):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
    _copy_tree(str(source), target, max_bytes)


def _copy_tree(source: str | Path, target: str | Path, max_bytes: int) -> None:
    """Copy folders, regular files and links (as links) from `source` into `target`,
    hard links kept as links, at most `max_bytes` of file data in all; anything else, or
    past the budget, is left out with a warning."""
    budget = max_bytes
    seen: dict[tuple[int, int], str] = {}
    left_out: list[str] = []
    stack = [(str(source), str(target))]
    while stack:
        here, there = stack.pop()
        with os.scandir(here) as entries:
            for entry in entries:
                info = entry.stat(follow_symlinks=False)
                destination = os.path.join(there, entry.name)
                if stat.S_ISDIR(info.st_mode):
                    os.mkdir(destination, stat.S_IMODE(info.st_mode) | 0o700)
                    stack.append((entry.path, destination))
                elif stat.S_ISLNK(info.st_mode):
                    os.symlink(os.readlink(entry.path), destination)
                elif stat.S_ISREG(info.st_mode):
                    key = (info.st_dev, info.st_ino)
                    if info.st_nlink > 1 and key in seen:
                        os.link(seen[key], destination)
                        continue
                    if info.st_size > budget:
                        left_out.append(entry.name)
                        continue
                    budget -= _copy_file(entry.path, destination, info, budget)
                    seen[key] = destination
                else:
                    left_out.append(entry.name)
    if left_out:
        log.warning(
            "%d entries of %s were not copied (not a file, folder or link, or past %s): %s",
            len(left_out),
            source,
            _size(max_bytes),
            ", ".join(left_out[:5]),
        )


def _copy_file(source: str, destination: str, info: os.stat_result, budget: int) -> int:
    """Copy one regular file's data, at most `budget` bytes; the bytes written."""
    written = 0
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    reader = os.open(source, flags)
    try:
        writer = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            while written < budget:
                chunk = os.read(reader, min(_COPY_CHUNK, budget - written))
                if not chunk:
                    break
                view = memoryview(chunk)
                while view:
                    view = view[os.write(writer, view) :]
                written += len(chunk)
            os.fchmod(writer, stat.S_IMODE(info.st_mode) & 0o777)
        finally:
            os.close(writer)
    finally:
        os.close(reader)
    with contextlib.suppress(OSError):
        os.utime(destination, ns=(info.st_atime_ns, info.st_mtime_ns), follow_symlinks=False)
    return written
