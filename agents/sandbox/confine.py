"""How a kernel is confined: bubblewrap's command line, the sandbox's environment, and the
cgroups that cap a root console's kernels.

Under bubblewrap every namespace is unshared (no network, its own PID namespace, so killing
it kills every process it started, `setsid` daemons included), uid 65534 in a fresh user
namespace that cannot make more, no capabilities, a read-only root and system folders, the
session's work dir, a size-capped tmpfs `/tmp` and `/dev/shm` the only writable places, an
empty environment. bwrap's options go through a pipe and its small files through fds, so no
host path shows inside. When the console runs as root, uid 65534 inside maps to root
outside, where the kernel does not enforce RLIMIT_NPROC: a pids cgroup per kernel bounds
its processes instead (and a memory cgroup the whole tree's memory).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from agents.sandbox import kernel as kernel_module
from agents.sandbox.host import _Host
from agents.sandbox.limits import Limits
from agents.sandbox.python_inside import BIN_INSIDE, hidden_inside, python_layout

log = logging.getLogger("agents.sandbox")


KERNEL_SCRIPT = Path(kernel_module.__file__)
WORKDIR_INSIDE = "/workspace"
_KERNEL_INSIDE = "/opt/agent-console/kernel.pyc"
_SANDBOX_UID = 65534


_cgroup_names = itertools.count()


class _Cgroup:
    """One kernel's cgroup of one controller: caps its tasks (pids) or their memory, and
    can kill all of them."""

    def __init__(self, base: Path, limits: dict[str, str]) -> None:
        """A new cgroup in `base` with each limit file written (`pids.max`, ...)."""
        self.path = base / f"agent-console-{os.getpid()}-{next(_cgroup_names)}"
        self.path.mkdir()
        try:
            for name, value in limits.items():
                (self.path / name).write_text(str(value))
        except OSError:
            self.remove()
            raise

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def kill_all(self) -> None:
        self.kill_path(self.path)

    def remove(self) -> None:
        self.remove_path(self.path)

    @staticmethod
    def kill_path(path: Path) -> None:
        try:
            pids = (path / "cgroup.procs").read_text().split()
        except OSError:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(pid), signal.SIGKILL)

    @staticmethod
    def remove_path(path: Path) -> None:
        for _ in range(100):
            try:
                path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:  # busy until its last process is reaped
                _Cgroup.kill_path(path)
                time.sleep(0.01)
        log.warning("could not remove the cgroup %s", path)


def _wrapped(
    host: _Host, argv: list[str], cgroup_procs: list[str], limits: Limits | None = None
) -> list[str]:
    """`argv` run by a shell that first joins the cgroups (nothing escapes them), mounts
    the Python's overlays, in a mount namespace of its own where it mounts any, and sets
    `limits`' rlimits, so that bwrap and its init (PID 1 inside) hold them too."""
    steps = [f'echo $$ > "${i}"' for i in range(1, len(cgroup_procs) + 1)]
    if host.python_script is not None:
        steps.append(host.python_script)
    if limits is not None:
        steps += _ulimits(limits)
    if not steps:
        return argv
    script = " && ".join([*steps, f"shift {len(cgroup_procs)}", 'exec "$@"'])
    command = ["/bin/sh", "-c", script, "sh", *cgroup_procs, *argv]
    if host.python_script is not None:
        command = [host.unshare, "--mount", "--propagation", "private", *command]
    return command


def _ulimits(limits: Limits) -> list[str]:
    """The shell's `ulimit` commands for the kernel's per-process limits (hard and soft),
    and a soft CPU limit the kernel re-arms per call. Not RLIMIT_NPROC: outside the
    sandbox it counts every process of the console's user."""
    return [
        f"ulimit -v {limits.memory_bytes // 1024}",  # KiB
        f"ulimit -f {limits.file_size_bytes // 512}",  # 512-byte blocks
        f"ulimit -n {limits.open_files}",
        "ulimit -c 0",
        f"ulimit -S -t {limits.cpu_seconds}",
    ]


#: bwrap's own environment (PID 1 inside reads it): no host path in it.
_HOST_SIDE_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


def _sandbox_argv(
    host: _Host, limits: Limits, workdir: Path, *, read_only: bool = False
) -> tuple[list[str], list[int], Callable[[], None]]:
    """bwrap's command line up to `--`, the fds it must inherit, and a cleanup to run once
    it has started. The options go through a pipe (`--args`) and the small files through
    `--file`: bwrap is PID 1 inside, and its command line is readable there; binds would
    name their host paths in the mount table."""
    pass_fds: list[int] = []

    def fd_of(path: Path) -> str:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        pass_fds.append(fd)
        return str(fd)

    argv = [
        "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
        "--cap-drop", "ALL", "--uid", str(_SANDBOX_UID), "--gid", str(_SANDBOX_UID),
        "--hostname", "sandbox",
    ]  # fmt: skip
    if host.disable_userns:
        argv.append("--disable-userns")
    argv += ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/", name)
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
    for etc in ("/etc/ld.so.cache", "/etc/alternatives", "/etc/localtime"):
        argv += ["--ro-bind-try", etc, etc]
    # /tmp first: a later mount covers an earlier one, and the Python (a venv in a clone
    # under /tmp, say) is bound at its own path, which may lie below /tmp.
    if host.sized_tmpfs:
        argv += ["--size", str(limits.tmp_bytes)]
    argv += ["--tmpfs", "/tmp"]
    argv += [
        "--perms", "0444", "--file", fd_of(host.static_dir / "passwd"), "/etc/passwd",
        "--perms", "0444", "--file", fd_of(host.static_dir / "group"), "/etc/group",
        *(arg for source, inside in host.python_binds for arg in ("--ro-bind", source, inside)),
        "--symlink", python_layout().executable, f"{BIN_INSIDE}/python",
        "--symlink", python_layout().executable, f"{BIN_INSIDE}/python3",
        "--perms", "0444", "--file", fd_of(host.kernel), _KERNEL_INSIDE,
        "--proc", "/proc", "--dev", "/dev",
        # The sandbox's uid is the console's outside: as root, it could write the host's
        # sysctls (kernel.core_pattern, say) through a writable /proc/sys.
        "--ro-bind", "/proc/sys", "/proc/sys",
    ]  # fmt: skip
    # A benchmark's tests and answers, installed beside the packages: shown empty.
    for folder in hidden_inside():
        argv += ["--tmpfs", folder, "--remount-ro", folder]
    # ... and read what only root may (kernel memory's layout, the kernel's log): hidden.
    for name in host.proc_hidden:
        argv += ["--ro-bind", "/dev/null", f"/proc/{name}"]
    # All of /proc read-only: nothing inside can write another process's memory through
    # /proc/PID/mem (bwrap's init, PID 1, runs as the sandbox's uid).
    argv += ["--remount-ro", "/proc"]
    # /dev is a tmpfs of its own: read-only, with a size-capped /dev/shm in it.
    if host.sized_tmpfs:
        argv += ["--size", str(limits.tmp_bytes)]
    argv += ["--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    bind = "--ro-bind" if read_only else "--bind"
    argv += [bind, str(workdir), WORKDIR_INSIDE, "--chdir", WORKDIR_INSIDE]
    # bwrap's root is a tmpfs with no size cap: read-only once everything is mounted, so
    # the work dir, /tmp and /dev/shm are the only places block code can write.
    argv += ["--remount-ro", "/"]
    argv += ["--clearenv"]
    for key, value in _sandbox_env(WORKDIR_INSIDE, inside=True).items():
        argv += ["--setenv", key, value]
    if host.seccomp_file is not None:
        argv += ["--seccomp", fd_of(host.seccomp_file)]
    options_r, options_w = os.pipe()
    pass_fds.append(options_r)
    try:
        # a few kB, well under a pipe's buffer: written whole before bwrap reads it
        os.write(options_w, b"".join(os.fsencode(arg) + b"\0" for arg in argv))
    finally:
        os.close(options_w)

    def cleanup() -> None:
        for fd in pass_fds:
            os.close(fd)

    return [host.bwrap, "--args", str(options_r), "--"], pass_fds, cleanup


def _sandbox_env(home: str, *, inside: bool) -> dict[str, str]:
    """Block code's environment: `inside` the sandbox, its Python by the paths it has
    there (`python` runs the kernel's interpreter with the venv's packages)."""
    path = "/usr/local/bin:/usr/bin:/bin"
    env = {"HOME": home, "LANG": "C.UTF-8", "TMPDIR": "/tmp", "PYTHONDONTWRITEBYTECODE": "1"}
    if not inside:
        if sys.prefix != sys.base_prefix:
            path = f"{sys.prefix}/bin:{path}"
        return {"PATH": path, **env}
    layout = python_layout()
    env["PATH"] = f"{BIN_INSIDE}:{path}"
    env["PYTHONPATH"] = ":".join(layout.sys_path)
    if layout.library_path is not None:
        env["LD_LIBRARY_PATH"] = layout.library_path
    return env
