"""A session's work dir bounded in bytes and in files.

Where the console may mount (root, with CAP_SYS_ADMIN), the work dir is a tmpfs of that
size and inode count for as long as its kernel lives, mounted over the folder on disk: a
write past either limit fails inside the sandbox with ENOSPC, the host disk never sees it,
and the console reads the files where they always are. What the folder on disk held is
copied in at the start; when the kernel closes, the tmpfs's files are written back below
it and the tmpfs goes. Without that privilege the work dir stays on disk, and the kernel
checks its size after every call and every second during one (`usage`, `Kernel`): a
strong check, not a bound, which `agent-console doctor` says.

The write back takes regular files, folders and symbolic links (as links, never
followed), keeps hard links as links and stops at the byte limit. It walks the tree
through folder descriptors, without recursion and with a bounded number of them open:
what it cannot take (fifos, sockets, device nodes, a folder more than `MAX_DEPTH` deep, a
path the host could not name in PATH_MAX bytes, an entry it cannot read) is left out
with a warning naming it, and the tmpfs is unmounted whatever happens, except when the
disk below refuses the files (full, or read-only): then it stays mounted, whole, until a
later write back succeeds.

Each tmpfs names its console (pid and start time) as its mount source, so a console
killed with the tmpfs mounted is known to be gone: `write_back_stranded` finds such work
dirs with one read of the mount table and writes them back (at the console's start,
`agent-console doctor --repair`, or the work dir's next use).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import itertools
import logging
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("agents.workdir")

_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_BIND = 0x1000
_MNT_DETACH = 0x2
_COPY_CHUNK = 1 << 20
#: Folders deeper than this are left out of a copy: the walk holds two descriptors per
#: level, well under the usual limit of 1,024 open files.
MAX_DEPTH = 128
#: The longest path the host can name, its final NUL included.
_PATH_MAX = 4096
#: The mount source of a work dir's tmpfs: this, the console's pid and its start time.
MOUNT_SOURCE = "agent-console-workdir"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: The disk below refuses the files: the write back stops and the tmpfs stays.
_REFUSED = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)

_libc: ctypes.CDLL | None = None


class WorkdirError(Exception):
    """The work dir could not be mounted, filled or written back; `str()` is one line."""


class _Refused(Exception):
    """The folder being filled refused a write (full or read-only): the copy stops."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error.strerror or str(error))


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
        dead console left there is written back and unmounted first."""
        if self.mounted:
            return
        with _locked(self.path.parent):
            if _top_mount(self.path) is not None:
                log.warning("the work dir %s was left mounted: writing it back first", self.path)
                _write_back_left(self.path)
            below = os.open(self.path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                _mount_tmpfs(self.path, self.max_bytes, self.max_files, _own_source())
            except WorkdirError:
                os.close(below)
                raise
            self._below = below
            try:
                with _opened(_fd_path(below)) as source, _opened(self.path) as target:
                    _copy_tree(source, target, self.max_bytes, self.path)
            except _Refused:
                self.unmount(write_back=False)
                raise WorkdirError(
                    f"the work dir {self.path} holds more than its limits "
                    f"({_size(self.max_bytes)}, {self.max_files:,} files)"
                ) from None
            except Exception as exc:
                self.unmount(write_back=False)
                raise WorkdirError(f"could not fill the work dir {self.path}: {exc}") from None

    def unmount(self, write_back: bool = True) -> None:
        """Write the tmpfs's files back to the folder below (unless told not to) and
        unmount the tmpfs. Idempotent. Raises WorkdirError only when the disk below
        refused the files: the tmpfs then stays mounted, whole, for the next `mount` or
        `write_back_stranded` to write back."""
        below, self._below = self._below, -1
        if below < 0:
            return
        try:
            if write_back:
                _write_back(self.path, below, self.max_bytes)
            else:
                _unmount(self.path)
        finally:
            os.close(below)


def write_back_stranded(under: Path) -> list[tuple[Path, str | None]]:
    """Write back and unmount every work dir under `under` that a console no longer
    running left mounted: each with None, or why it stays mounted. One read of the mount
    table when there is none."""
    done: list[tuple[Path, str | None]] = []
    for path in stranded(under):
        try:
            with _locked(path.parent):
                if path not in stranded(path):  # another console wrote it back meanwhile
                    continue
                log.warning("the work dir %s was left mounted: writing it back", path)
                _write_back_left(path)
        except (OSError, WorkdirError) as exc:
            log.warning("the work dir %s stays mounted: %s", path, exc)
            done.append((path, str(exc)))
        else:
            done.append((path, None))
    return done


def stranded(under: Path) -> list[Path]:
    """The work dirs at or under `under` whose tmpfs a console that is no longer running
    mounted (its mount source names the console)."""
    root = Path(under).resolve()
    found = []
    for point, source in _tmpfs_mounts().items():
        path = Path(point)
        if not path.is_relative_to(root) or not source.startswith(MOUNT_SOURCE + ":"):
            continue
        _, pid, started = [*source.split(":"), "", ""][:3]
        if not pid.isdigit() or _start_time(int(pid)) != started:
            found.append(path)
    return found


def _write_back_left(path: Path) -> None:
    """Write back the tmpfs a dead console left on `path` and unmount it: the folder it
    hides is reached through its parent folder bound elsewhere (a bind does not carry
    the mounts below it), so the tmpfs stays where it is until its files are on disk."""
    below = _folder_below(path)
    try:
        info = os.statvfs(path)
        _write_back(path, below, info.f_blocks * info.f_frsize)
    finally:
        os.close(below)


def _write_back(path: Path, below: int, max_bytes: int) -> None:
    """Make the folder `below` (a descriptor) hold what the tmpfs on `path` holds, then
    unmount the tmpfs, whatever the copy met, unless the disk below refused the files."""
    try:
        with _opened(path) as source, _opened(_fd_path(below)) as target:
            _clear(target, path)
            _copy_tree(source, target, max_bytes, path)
    except _Refused as exc:
        raise WorkdirError(
            f"the disk below the work dir {path} refused its files ({exc}): the work dir "
            "stays mounted, its files whole, and is written back on its next use"
        ) from None
    except Exception:
        log.exception("the work dir %s was written back in part", path)
    _unmount(path)


def _folder_below(path: Path) -> int:
    """An O_PATH descriptor of the folder a mount on `path` hides."""
    staging = tempfile.mkdtemp(prefix="agent-console-below-")
    try:
        _bind(path.parent, Path(staging))
        try:
            return os.open(
                os.path.join(staging, path.name),
                os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
            )
        finally:
            _unmount(staging)
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(staging)


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """An exclusive lock on `folder` (a session's): one console at a time writes back
    or mounts the work dir in it."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def _opened(folder: Path | str) -> Iterator[int]:
    fd = os.open(folder, _DIR_FLAGS & ~os.O_NOFOLLOW)
    try:
        yield fd
    finally:
        os.close(fd)


# --- the mount table ------------------------------------------------------------------


def _tmpfs_mounts() -> dict[str, str]:
    """Mount point -> source of each tmpfs on top of its mount point, from mountinfo
    (the fifth field is the mount point, octal-escaped; type and source follow " - ")."""
    try:
        lines = Path("/proc/self/mountinfo").read_bytes().splitlines()
    except OSError:
        return {}
    top: dict[str, str] = {}
    for line in lines:
        left, _, right = line.partition(b" - ")
        fields, kind = left.split(), right.split()
        if len(fields) < 5 or len(kind) < 2:
            continue
        point = os.fsdecode(_unescape(fields[4]))
        # a later line is a mount on top of an earlier one at the same point
        top.pop(point, None)
        if kind[0] == b"tmpfs":
            top[point] = os.fsdecode(_unescape(kind[1]))
    return top


def _top_mount(path: Path) -> str | None:
    """The source of the tmpfs mounted on `path`, or None."""
    if not os.path.ismount(path):
        return None
    return _tmpfs_mounts().get(str(path.resolve()))


def _unescape(text: bytes) -> bytes:
    return re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), text)


def _own_source() -> str:
    return f"{MOUNT_SOURCE}:{os.getpid()}:{_start_time(os.getpid())}"


def _start_time(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot), None when it is gone or a
    zombie: with the pid, it names one process even once the pid is reused."""
    try:
        text = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # after the name, in parentheses: the third field (the state) on
    fields = text.rsplit(b")", 1)[-1].decode("ascii", "replace").split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


# --- the walks --------------------------------------------------------------------------


@dataclass
class _Frame:
    """A folder being copied: its descriptors on both sides, its path under the copy's
    root, its depth, and the entries still to copy."""

    source: int
    target: int
    path: str
    depth: int
    entries: Iterator[os.DirEntry[str]]


@dataclass
class _Copy:
    target_root: int
    budget: int
    limit: int
    room: int
    """Bytes a path under the root may take, for the host to name it in PATH_MAX."""
    linked: dict[tuple[int, int], str] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)

    def entry(self, frame: _Frame, entry: os.DirEntry[str]) -> _Frame | None:
        """Copy one entry; a folder comes back as the frame to copy it through."""
        relative = f"{frame.path}/{entry.name}" if frame.path else entry.name
        if len(os.fsencode(relative)) > self.room:
            self.leave(relative, "a path longer than the host's PATH_MAX")
            return None
        try:
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                if frame.depth >= MAX_DEPTH:
                    self.leave(relative, f"a folder more than {MAX_DEPTH} deep")
                    return None
                return self.folder(frame, entry.name, relative, info)
            if stat.S_ISLNK(info.st_mode):
                target = os.readlink(entry.name, dir_fd=frame.source)
                os.symlink(target, entry.name, dir_fd=frame.target)
            elif stat.S_ISREG(info.st_mode):
                self.file(frame, entry.name, relative, info)
            else:
                self.leave(relative, "not a file, folder or link")
        except OSError as exc:
            if exc.errno in _REFUSED:
                raise _Refused(exc) from None
            self.leave(relative, exc.strerror or str(exc))
        return None

    def folder(self, frame: _Frame, name: str, relative: str, info: os.stat_result) -> _Frame:
        os.mkdir(name, (stat.S_IMODE(info.st_mode) & 0o777) | 0o700, dir_fd=frame.target)
        source = os.open(name, _DIR_FLAGS, dir_fd=frame.source)
        try:
            target = os.open(name, _DIR_FLAGS, dir_fd=frame.target)
            try:
                entries = _listing(source)
            except OSError:
                os.close(target)
                raise
        except OSError:
            os.close(source)
            raise
        return _Frame(source, target, relative, frame.depth + 1, iter(entries))

    def file(self, frame: _Frame, name: str, relative: str, info: os.stat_result) -> None:
        key = (info.st_dev, info.st_ino)
        if info.st_nlink > 1 and key in self.linked:
            os.link(
                self.linked[key],
                name,
                src_dir_fd=self.target_root,
                dst_dir_fd=frame.target,
                follow_symlinks=False,
            )
            return
        if info.st_size > self.budget:
            self.leave(relative, f"past the limit of {_size(self.limit)}")
            return
        self.budget -= _copy_file(frame.source, frame.target, name, info, self.budget)
        if info.st_nlink > 1:
            self.linked[key] = relative

    def leave(self, relative: str, why: str) -> None:
        self.left_out.append(f"{_shown(relative)} ({why})")


def _copy_tree(source: int, target: int, max_bytes: int, root: Path) -> None:
    """Copy folders, regular files and links (as links) from the folder `source` into
    the folder `target` (descriptors; `root` is the work dir's path, for PATH_MAX and
    the warning), hard links kept as links, at most `max_bytes` of file data in all;
    anything else is left out with a warning. Raises _Refused when `target` refuses."""
    room = _PATH_MAX - 2 - len(os.fsencode(root))
    copy = _Copy(target_root=target, budget=max_bytes, limit=max_bytes, room=room)
    entries = _listing(source)
    frames = [_Frame(os.dup(source), os.dup(target), "", 0, iter(entries))]
    try:
        while frames:
            frame = frames[-1]
            entry = next(frame.entries, None)
            if entry is None:
                frames.pop()
                os.close(frame.source)
                os.close(frame.target)
                continue
            child = copy.entry(frame, entry)
            if child is not None:
                frames.append(child)
    finally:
        for frame in frames:
            os.close(frame.source)
            os.close(frame.target)
    if copy.left_out:
        log.warning(
            "%d entries of the work dir %s were left out: %s",
            len(copy.left_out),
            root,
            "; ".join(copy.left_out[:5]) + ("; ..." if len(copy.left_out) > 5 else ""),
        )


def _clear(folder: int, root: Path) -> None:
    """Remove everything in the folder `folder` (a descriptor), a tree of any depth,
    with two descriptors open at most: each folder's subfolders are first moved up into
    `folder`, so no walk goes more than one level down."""
    pending = [entry.name for entry in _listing(folder)]
    moved = itertools.count()
    failed: list[str] = []
    while pending:
        name = pending.pop()
        try:
            if not stat.S_ISDIR(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode):
                os.unlink(name, dir_fd=folder)
                continue
            inner = os.open(name, _DIR_FLAGS, dir_fd=folder)
            try:
                for entry in _listing(inner):
                    if entry.is_dir(follow_symlinks=False):
                        up = _free_name(folder, moved)
                        os.rename(entry.name, up, src_dir_fd=inner, dst_dir_fd=folder)
                        pending.append(up)
                    else:
                        os.unlink(entry.name, dir_fd=inner)
            finally:
                os.close(inner)
            os.rmdir(name, dir_fd=folder)
        except FileNotFoundError:
            continue
        except OSError as exc:
            if exc.errno in _REFUSED:
                raise _Refused(exc) from None
            failed.append(f"{_shown(name)} ({exc.strerror or exc})")
    if failed:
        log.warning("the old files of %s could not all be removed: %s", root, "; ".join(failed[:5]))


def _shown(relative: str) -> str:
    """A path under the work dir as a warning shows it: one line, its middle cut out
    past 120 characters (a model names the files)."""
    shown = os.fsencode(relative).decode("utf-8", "backslashreplace")
    shown = re.sub(r"[\x00-\x1f\x7f-\x9f]", lambda m: f"\\x{ord(m[0]):02x}", shown)
    return f"{shown[:50]}…{shown[-50:]}" if len(shown) > 120 else shown


def _free_name(folder: int, counter: Iterator[int]) -> str:
    while True:
        name = f".agent-console-removing-{next(counter)}"
        try:
            os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            return name


def _listing(folder: int) -> list[os.DirEntry[str]]:
    with os.scandir(folder) as entries:
        return list(entries)


def _copy_file(source: int, target: int, name: str, info: os.stat_result, budget: int) -> int:
    """Copy one regular file's data from the folder `source` to the folder `target`, at
    most `budget` bytes; the bytes written. A file that fails half way is removed."""
    written = 0
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    reader = os.open(name, flags, dir_fd=source)
    try:
        creating = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        writer = os.open(name, creating, 0o600, dir_fd=target)
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
            with contextlib.suppress(OSError):
                os.utime(writer, ns=(info.st_atime_ns, info.st_mtime_ns))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=target)
            raise
        finally:
            os.close(writer)
    finally:
        os.close(reader)
    return written


# --- mounts -----------------------------------------------------------------------------


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


def _mount_tmpfs(path: Path, max_bytes: int, max_files: int, source: str = "tmpfs") -> None:
    # the root folder is an inode of its own
    options = f"size={max_bytes},nr_inodes={max_files + 1},mode=0755"
    result = _libc_handle().mount(
        source.encode(), os.fsencode(path), b"tmpfs", _MS_NOSUID | _MS_NODEV, options.encode()
    )
    if result != 0:
        code = ctypes.get_errno()
        raise WorkdirError(f"cannot mount a tmpfs ({os.strerror(code)})")


def _bind(source: Path, target: Path) -> None:
    if _libc_handle().mount(os.fsencode(source), os.fsencode(target), None, _MS_BIND, None):
        code = ctypes.get_errno()
        raise WorkdirError(f"cannot bind {source} to {target} ({os.strerror(code)})")


def _unmount(path: Path | str) -> None:
    """Unmount `path`; one still in use (a process left in it) is detached instead and
    goes once the last user lets go."""
    libc = _libc_handle()
    if libc.umount2(os.fsencode(path), 0) == 0:
        return
    if libc.umount2(os.fsencode(path), _MNT_DETACH) != 0:
        code = ctypes.get_errno()
        raise WorkdirError(f"cannot unmount {path} ({os.strerror(code)})")
