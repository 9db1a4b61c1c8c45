"""Run model-written block code in a long-lived sandboxed kernel, one per agent session.

The kernel (`agents/kernel.py`) keeps a namespace across calls, because weave-agent
callbacks are closures over state that earlier blocks set up. It runs under bubblewrap:
every namespace unshared (no network, its own PID namespace, so killing it kills every
process it started, `setsid` daemons included), uid 65534 in a fresh user namespace that
cannot make more, no capabilities, a read-only root and system folders, the session's work
dir, a size-capped tmpfs `/tmp` and `/dev/shm` the only writable places, an empty
environment; plus rlimits set in the kernel before any model code runs, and a seccomp
filter built once per console process. When the console runs as root, uid 65534 inside
maps to root outside, where the kernel does not enforce RLIMIT_NPROC: a pids cgroup per
kernel bounds its processes instead.

Requests and answers are length-prefixed JSON on two dedicated pipes, never stdout (block
code owns that), and answers are size-capped. Importing this module is cheap: the probe
and the seccomp filter are built on first use.
"""

from __future__ import annotations

import atexit
import errno
import itertools
import json
import logging
import os
import py_compile
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

import contextlib

from agents import kernel as kernel_module
from agents.python_inside import (
    BIN_INSIDE,
    overlay_script,
    python_layout,
    site_packages,
    stage,
)
from agents.workdir import BoundedWorkdir, WorkdirError, can_mount, usage

log = logging.getLogger("agents.sandbox")

KERNEL_SCRIPT = Path(kernel_module.__file__)
WORKDIR_INSIDE = "/workspace"
_KERNEL_INSIDE = "/opt/agent-console/kernel.pyc"
_SANDBOX_UID = 65534
_START_TIMEOUT = 15.0
#: Seconds between checks of a work dir no tmpfs bounds, during a call.
_CHECK_EVERY = 1.0
_HEADER = struct.Struct(">I")
_UNSAFE_HINT = "or run with --unsafe-no-sandbox (model code then runs with no isolation at all)"
_KINDS = kernel_module.KINDS
_PASSWD = "nobody:x:65534:65534:sandbox:{home}:/usr/sbin/nologin\n"
_GROUP = "nogroup:x:65534:\n"

# Syscalls that fail with EPERM inside the sandbox. Namespaces and dropped capabilities
# already stop most of them; the filter shrinks the kernel surface model code can reach.
_BLOCKED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root",
    "chroot", "unshare", "setns", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "bpf", "perf_event_open", "userfaultfd", "keyctl",
    "add_key", "request_key", "acct", "swapon", "swapoff", "reboot", "personality",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "open_by_handle_at",
    "name_to_handle_at", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
    "mount_setattr", "quotactl", "syslog", "kcmp", "lookup_dcookie", "vhangup", "iopl",
    "ioperm", "uselib", "fanotify_init", "settimeofday", "clock_settime", "clock_adjtime",
    "adjtimex", "sethostname", "setdomainname",
)  # fmt: skip
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
_CLONE_NEW_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000,
                    0x40000000)  # fmt: skip
_AF_UNIX = 1
_TIOCSTI = 0x5412
_TIOCLINUX = 0x541C
# The argument that holds a file mode, per syscall that sets one. The sandbox's uid maps to
# the console's own uid outside, so a set-user-ID file left in the work dir would run as the
# operator (as root, if the console is root) for anyone who can reach it: such modes fail.
_MODE_ARGUMENT = {"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "creat": 1, "open": 2,
                  "openat": 3, "mknod": 1, "mknodat": 2}  # fmt: skip
_SET_ID_BITS = (0o4000, 0o2000)  # S_ISUID, S_ISGID


@dataclass(frozen=True)
class Limits:
    """What one kernel may use. Times are per call; the rest hold for the kernel's life."""

    wall_seconds: float = 30.0
    """Wall-clock time of one call; past it the whole kernel tree is killed."""
    cpu_seconds: int = 20
    """CPU time of one call (RLIMIT_CPU, re-armed per call)."""
    memory_bytes: int = 1 << 30
    """Address space of each process (RLIMIT_AS)."""
    total_memory_bytes: int = 2 << 30
    """Memory of the whole kernel tree, page cache and tmpfs included (a memory cgroup when
    the console is root and may make one): past it the kernel's OOM killer ends the
    biggest process of the tree, never one of the host's."""
    processes: int = 64
    """Processes and threads (RLIMIT_NPROC, or a pids cgroup when the console is root)."""
    file_size_bytes: int = 64 << 20
    """Largest file a process may write (RLIMIT_FSIZE)."""
    open_files: int = 256
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    tmp_bytes: int = 64 << 20
    """Size of the tmpfs /tmp."""
    workdir_bytes: int = 1 << 30
    """Bytes the work dir may hold in all (`agents.workdir`: a sized tmpfs where the
    console may mount one, else checked after and during every call)."""
    workdir_files: int = 100_000
    """Files, folders and links the work dir may hold in all (the same)."""
    output_bytes: int = 64 << 10
    """Captured stdout, and stderr, kept per call; the rest is counted and dropped."""
    result_bytes: int = 256 << 10
    """Largest JSON answer to one call."""

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value <= 0:
                raise ValueError(f"Limits.{name} must be positive, not {value}")
        if self.result_bytes < 4096:
            raise ValueError(f"Limits.result_bytes must be at least 4096, not {self.result_bytes}")


class SandboxError(Exception):
    """The kernel cannot do what was asked (not running, closed, failed to start)."""


class SandboxUnavailable(SandboxError):
    """This machine cannot run the sandbox; `fix` says how to make it able to."""

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.fix: str = fix or f"see `agent-console doctor`, {_UNSAFE_HINT}"


@dataclass(frozen=True)
class SandboxStatus:
    """Whether block code can run sandboxed here, what protects it, or why not."""

    ok: bool
    detail: str
    fix: str | None


@dataclass
class CallResult:
    """What one call into the kernel did."""

    ok: bool
    """The code or callback ran without raising and the kernel survived."""
    value: Any = None
    """Its JSON-safe return value (a value JSON cannot hold comes back as its repr())."""
    error: str | None = None
    """The traceback (model code's frames only, capped), or why the kernel died."""
    stdout: str = ""
    """Captured output, capped; a cut one ends with a marker like "[... 98.2 MB dropped]"."""
    stderr: str = ""
    messages: list[str] = field(default_factory=list)
    """`self.tell_operator()` texts sent during the call."""
    duration: float = 0.0
    """Seconds, as the host saw them."""
    killed: str | None = None
    """Why the kernel died during the call ("timeout", "cpu", "memory", "crashed", "disk",
    "output", "closed"); it is then dead until `restart()`."""
    registered: dict[str, list[str]] = field(default_factory=dict)
    """Titles added during the call, by kind: action, evaluation, observation, and
    removed_observation."""
    finished: str | None = None
    """The message, if the code called `self.finish(message)`."""


@dataclass(frozen=True)
class _Host:
    """What the probe found out about this machine, once per console process."""

    bwrap: str
    version: str
    kernel: Path
    """kernel.py compiled once: a kernel then starts ~6 ms sooner."""
    disable_userns: bool
    sized_tmpfs: bool
    static_dir: Path
    seccomp_file: Path | None
    pids_cgroup: Path | None
    memory_cgroup: Path | None
    mount_problem: str | None
    """Why the work dir cannot be a sized tmpfs here (None: it can)."""
    python_binds: tuple[tuple[str, str], ...] = ()
    """(host folder, path inside) of the Python installation and the venv's packages."""
    python_script: str | None = None
    """Mounts the Python's overlays in the kernel's private mount namespace (None: the
    folders are bound as they are, and the mount table names their host paths)."""
    unshare: str = "unshare"


_probe_lock = threading.Lock()
_probed: tuple[SandboxStatus, _Host | None] | None = None
_cgroup_names = itertools.count()
_launcher_lock = threading.Lock()
_launcher: ThreadPoolExecutor | None = None


def sandbox_status(refresh: bool = False) -> SandboxStatus:
    """Whether the sandbox works here: probed once (a trivial sandboxed Python), cached."""
    global _probed
    with _probe_lock:
        if _probed is None or refresh:
            _probed = _probe()
            if _probed[0].ok:
                log.info("sandbox: %s", _probed[0].detail)
        return _probed[0]


def _host() -> _Host:
    sandbox_status()
    assert _probed is not None
    status, host = _probed
    if host is None or not status.ok:
        raise SandboxUnavailable(status.detail, status.fix)
    return host


def _probe() -> tuple[SandboxStatus, _Host | None]:
    bwrap = shutil.which("bwrap") or shutil.which("bwrap", path="/usr/bin:/bin")
    if bwrap is None:
        fix = (
            "install bubblewrap (Debian/Ubuntu: sudo apt install bubblewrap; Fedora: sudo dnf install bubblewrap), "
            + _UNSAFE_HINT
        )
        return SandboxStatus(False, "bubblewrap (bwrap) is not installed", fix), None
    try:
        version = _output([bwrap, "--version"]).split()[-1]
        usage = _output([bwrap, "--help"])
    except (OSError, subprocess.SubprocessError, IndexError) as exc:
        return SandboxStatus(
            False, f"{bwrap} does not run: {exc}", f"reinstall bubblewrap, {_UNSAFE_HINT}"
        ), None
    static_dir = Path(tempfile.mkdtemp(prefix="agent-console-sandbox-"))
    atexit.register(shutil.rmtree, static_dir, ignore_errors=True)
    (static_dir / "passwd").write_text(_PASSWD.format(home=WORKDIR_INSIDE))
    (static_dir / "group").write_text(_GROUP)
    (static_dir / "probe").mkdir()
    seccomp_file = static_dir / "seccomp.bpf"
    seccomp_problem = _build_seccomp(seccomp_file)
    kernel = static_dir / "kernel.pyc"
    py_compile.compile(str(KERNEL_SCRIPT), str(kernel), _KERNEL_INSIDE, doraise=True)
    host = _Host(
        bwrap=bwrap,
        version=version,
        kernel=kernel,
        # bwrap < 0.8 lacks --disable-userns; the seccomp filter then still refuses
        # unshare() and clone() with CLONE_NEWUSER.
        disable_userns="--disable-userns" in usage,
        sized_tmpfs="--size" in usage,
        static_dir=static_dir,
        seccomp_file=None if seccomp_problem else seccomp_file,
        pids_cgroup=_find_cgroup("pids") if os.geteuid() == 0 else None,
        memory_cgroup=_find_cgroup("memory") if os.geteuid() == 0 else None,
        mount_problem=can_mount(),
        python_binds=python_layout().mounts,
    )
    trial: str | None = "not tried"
    overlay = _python_overlay(host)
    if overlay is not None:
        trial = _trial_run(overlay)
        if trial is None:
            host = overlay
        else:
            log.warning("the sandbox's Python cannot be shown through an overlay: %s", trial)
    if trial is not None:
        trial = _trial_run(host)
    if trial is not None:
        return SandboxStatus(
            False, f"bubblewrap {version} cannot start a sandbox: {trial}", _userns_fix()
        ), None
    parts = [f"bubblewrap {version}", "user namespaces"]
    warnings = []
    parts.append("seccomp filter" if host.seccomp_file else "no seccomp filter")
    if seccomp_problem:
        warnings.append(f"no seccomp filter: {seccomp_problem}")
    if not host.disable_userns:
        warnings.append("bwrap < 0.8 has no --disable-userns")
    if not host.sized_tmpfs:
        warnings.append("/tmp is not size-capped (bwrap has no --size)")
    if os.geteuid() != 0:
        parts.append("process limit by RLIMIT_NPROC")
    elif host.pids_cgroup:
        parts.append("process limit by pids cgroup")
    else:
        warnings.append("no process limit: running as root without a writable pids cgroup")
    if host.memory_cgroup:
        parts.append("memory limit by memory cgroup")
    else:
        warnings.append("no total memory limit (no writable memory cgroup): per process only")
    if host.python_script is not None:
        parts.append(f"Python shown at {python_layout().executable} through an overlay")
    elif any(host_path != inside for host_path, inside in host.python_binds):
        warnings.append(
            "the mount table inside names the Python installation's host folders "
            "(an overlay needs root with CAP_SYS_ADMIN, unshare and mount)"
        )
    if host.mount_problem is None:
        parts.append("work dir bounded by a sized tmpfs")
    else:
        warnings.append(
            f"the work dir is checked during and after each call, not bounded "
            f"({host.mount_problem}: a sized tmpfs needs root with CAP_SYS_ADMIN)"
        )
    for warning in warnings:
        log.warning("sandbox weaker than it should be: %s", warning)
    detail = ", ".join(parts) + "".join(f" (warning: {w})" for w in warnings)
    return SandboxStatus(True, detail, None), host


def _output(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=10, check=True).stdout


def _build_seccomp(path: Path) -> str | None:
    """Write the filter as BPF to `path`; on failure, say why instead."""
    try:
        import pyseccomp as seccomp
    except (ImportError, RuntimeError, OSError) as exc:
        return f"pyseccomp/libseccomp unavailable ({exc})"
    try:
        rules = seccomp.SyscallFilter(seccomp.ALLOW)
        # A system call through another ABI (i386's `int 0x80`, x32's numbers) matches no
        # rule of this architecture's: it fails at once with ENOSYS. libseccomp's default
        # kills only the calling thread, which left the kernel hanging to its wall clock.
        rules.set_attr(seccomp.Attr.ACT_BADARCH, seccomp.ERRNO(errno.ENOSYS))
        eperm = seccomp.ERRNO(errno.EPERM)
        for name in _BLOCKED_SYSCALLS:
            with contextlib.suppress(OSError):  # OSError: not a syscall on this architecture
                rules.add_rule(eperm, name)
        # clone3 passes its flags in memory, out of the filter's sight: glibc falls back to
        # clone() on ENOSYS, whose flags the filter can see.
        rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
        # openat2 passes its mode in memory too; glibc does not use it.
        with contextlib.suppress(OSError):
            rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "openat2")
        for name, arg in _MODE_ARGUMENT.items():
            for bit in _SET_ID_BITS:
                with contextlib.suppress(OSError):
                    rules.add_rule(eperm, name, seccomp.Arg(arg, seccomp.MASKED_EQ, bit, bit))
        for flag in _CLONE_NEW_FLAGS:
            rules.add_rule(eperm, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
        rules.add_rule(eperm, "socket", seccomp.Arg(0, seccomp.NE, _AF_UNIX))
        for request in (_TIOCSTI, _TIOCLINUX):
            # The kernel reads the ioctl request as 32 bits: compare only those.
            rules.add_rule(eperm, "ioctl", seccomp.Arg(1, seccomp.MASKED_EQ, 0xFFFFFFFF, request))
        with open(path, "wb") as handle:
            rules.export_bpf(handle)
    except OSError as exc:
        return f"building the filter failed ({exc})"
    return None


#: The file that caps a cgroup of each controller, on cgroup v2 and on v1.
_LIMIT_FILES = {"pids": ("pids.max", "pids.max"), "memory": ("memory.max", "memory.limit_in_bytes")}


def _find_cgroup(controller: str) -> Path | None:
    """A cgroup folder where a root console can make one `controller` cgroup per kernel."""
    try:
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
        own = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    candidates: list[tuple[Path, str]] = []
    v2_file, v1_file = _LIMIT_FILES[controller]
    for line in mounts:
        left, _, right = line.partition(" - ")
        mount_point = Path(left.split()[4])
        fstype, _, options = ([*right.split(), "", "", ""])[:3]
        if fstype == "cgroup2":
            try:
                enabled = (mount_point / "cgroup.subtree_control").read_text().split()
            except OSError:
                continue
            if controller in enabled:
                candidates.insert(0, (mount_point, v2_file))
        elif fstype == "cgroup" and controller in options.split(","):
            for entry in own:
                _, controllers, path = ([*entry.split(":", 2), "", ""])[:3]
                if controller in controllers.split(","):
                    candidates.append((mount_point / path.lstrip("/"), v1_file))
            candidates.append((mount_point, v1_file))
    for base, limit_file in candidates:
        if _sweep_and_test_cgroup(base, limit_file):
            return base / limit_file  # the folder to make cgroups in, and its limit file
    return None


def _sweep_and_test_cgroup(base: Path, limit_file: str) -> bool:
    """Remove cgroups that dead consoles left behind; True when `base` takes new ones."""
    for stale in base.glob("agent-console-*"):
        try:
            owner = int(stale.name.split("-")[2])
            os.kill(owner, 0)
        except (ValueError, IndexError, ProcessLookupError):
            _Cgroup.remove_path(stale)
        except PermissionError:
            pass
    test = base / f"agent-console-{os.getpid()}-probe"
    try:
        test.mkdir()
        # a value each controller takes: pids.max refuses more than the kernel's pid limit
        (test / limit_file).write_text("8" if limit_file == "pids.max" else "16777216")
        test.rmdir()
    except OSError:
        with contextlib.suppress(OSError):
            test.rmdir()
        return False
    return True


class _Cgroup:
    """One kernel's cgroup of one controller: caps its tasks (pids) or their memory, and
    can kill all of them."""

    def __init__(self, base: Path, limits: dict[str, int]) -> None:
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


def _python_overlay(host: _Host) -> _Host | None:
    """`host` with the Python's folders shown through overlays, where it may mount them."""
    layout = python_layout()
    unshare, mount = shutil.which("unshare"), shutil.which("mount")
    if host.mount_problem is not None or not layout.mounts or unshare is None or mount is None:
        return None
    staging = host.static_dir / "python"
    binds = stage(staging, layout)
    return replace(
        host,
        python_binds=tuple(binds),
        python_script=overlay_script(staging, layout, mount),
        unshare=unshare,
    )


def _wrapped(host: _Host, argv: list[str], cgroup_procs: list[str]) -> list[str]:
    """`argv` run by a shell that first joins the cgroups (nothing escapes them) and mounts
    the Python's overlays, in a mount namespace of its own where it mounts any."""
    steps = [f'echo $$ > "${i}"' for i in range(1, len(cgroup_procs) + 1)]
    if host.python_script is not None:
        steps.append(host.python_script)
    if not steps:
        return argv
    script = " && ".join([*steps, f"shift {len(cgroup_procs)}", 'exec "$@"'])
    command = ["/bin/sh", "-c", script, "sh", *cgroup_procs, *argv]
    if host.python_script is not None:
        command = [host.unshare, "--mount", "--propagation", "private", *command]
    return command


#: bwrap's own environment (PID 1 inside reads it): no host path in it.
_HOST_SIDE_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


def _trial_run(host: _Host) -> str | None:
    """Start a trivial sandboxed Python the way a kernel starts; say what went wrong."""
    argv, pass_fds, cleanup = _sandbox_argv(host, Limits(), host.static_dir / "probe")
    python = python_layout().executable
    try:
        done = subprocess.run(
            _wrapped(host, [*argv, python, "-I", "-S", "-c", "import os; os.getuid()"], []),
            env=_HOST_SIDE_ENV,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            pass_fds=pass_fds,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    finally:
        cleanup()
    if done.returncode == 0:
        return None
    lines = done.stderr.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else f"exit status {done.returncode}"


def _read_sysctl(name: str) -> str | None:
    try:
        return Path("/proc/sys", name.replace(".", "/")).read_text().strip()
    except OSError:
        return None


def _userns_fix() -> str:
    if _read_sysctl("kernel.apparmor_restrict_unprivileged_userns") == "1":
        return (
            "AppArmor forbids user namespaces here: add an AppArmor profile for bwrap that "
            "allows userns (or sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0), "
            + _UNSAFE_HINT
        )
    if _read_sysctl("kernel.unprivileged_userns_clone") == "0":
        return (
            "user namespaces are off: sudo sysctl kernel.unprivileged_userns_clone=1, "
            + _UNSAFE_HINT
        )
    if _read_sysctl("user.max_user_namespaces") == "0":
        return (
            "user namespaces are off: sudo sysctl user.max_user_namespaces=15000, " + _UNSAFE_HINT
        )
    return (
        "check that bubblewrap can create user namespaces here (try: bwrap --unshare-user --ro-bind / / true), "
        + _UNSAFE_HINT
    )


def _sandbox_argv(
    host: _Host, limits: Limits, workdir: Path
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
    # /dev is a tmpfs of its own: read-only, with a size-capped /dev/shm in it.
    if host.sized_tmpfs:
        argv += ["--size", str(limits.tmp_bytes)]
    argv += ["--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    argv += ["--bind", str(workdir), WORKDIR_INSIDE, "--chdir", WORKDIR_INSIDE]
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


class _Stop(Exception):
    """A call ended without an answer: "timeout", "closed", "eof" or "output"."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Kernel:
    """One session's sandboxed Python kernel: a persistent namespace, one call at a time.

    `close()` may be called from any thread and interrupts a running call at once. Use as
    a context manager to start and close it.
    """

    def __init__(self, workdir: Path, *, limits: Limits = Limits(), unsafe: bool = False) -> None:
        self.workdir = Path(workdir).resolve()
        self.limits = limits
        self.unsafe = unsafe
        self.workdir_inside = str(self.workdir) if unsafe else WORKDIR_INSIDE
        """The work dir's path as block code sees it."""
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._cgroups: list[_Cgroup] = []
        self._requests_fd = -1
        self._responses_fd = -1
        self._stderr_fd = -1
        self._wake_r, self._wake_w = os.pipe()
        self._closed = False
        self._ids = itertools.count(1)
        self._bounded: BoundedWorkdir | None = None
        """The work dir's sized tmpfs, mounted from the first start to close()."""
        self._checked = False
        """No tmpfs could bound the work dir: its usage is checked instead."""
        self._next_check = 0.0

    def __enter__(self) -> Kernel:
        if self._proc is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def alive(self) -> bool:
        """The kernel process is running and can take calls."""
        proc = self._proc
        return not self._closed and proc is not None and proc.poll() is None

    def start(self) -> None:
        """Launch the kernel; raises SandboxUnavailable when the sandbox cannot run here."""
        with self._lock:
            self._check_open()
            if self._proc is None:
                self._launch()

    def restart(self) -> None:
        """A fresh kernel with an empty namespace (the old one is killed first)."""
        with self._lock:
            self._check_open()
            self._kill_tree()
            self._reap()
            self._launch()

    def close(self) -> None:
        """Kill the kernel and everything it started; idempotent, callable from any
        thread, and a call running in another thread returns at once (killed="closed").
        A bounded work dir's files are written back to the disk below it."""
        self._closed = True
        self._kill_tree()
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        with self._lock:
            self._reap()
            for fd in (self._wake_r, self._wake_w):
                if fd >= 0:
                    os.close(fd)
            self._wake_r = self._wake_w = -1
            bounded, self._bounded = self._bounded, None
            if bounded is not None:
                try:
                    bounded.unmount()
                except (OSError, WorkdirError) as exc:
                    log.warning("the work dir %s was not written back whole: %s", self.workdir, exc)

    def exec_block(self, code: str, *, name: str = "<block>") -> CallResult:
        """Run a block's code in the persistent namespace; `name` shows in tracebacks."""
        return self._call({"op": "exec", "code": code, "name": name})

    def call_action(self, title: str) -> CallResult:
        """Call the registered action `title` as `fn(self)`; value = its return value."""
        return self._call({"op": "call", "kind": "action", "title": title})

    def call_evaluation(self, title: str) -> CallResult:
        """Call the registered evaluation `title` as `fn(self)`."""
        return self._call({"op": "call", "kind": "evaluation", "title": title})

    def render_observations(self) -> list[tuple[str, CallResult]]:
        """Every observation view, in registration order, each with its own time limit.
        Stops after a view that kills the kernel."""
        rendered: list[tuple[str, CallResult]] = []
        for title in self.registry()["observation"]:
            result = self._call({"op": "call", "kind": "observation", "title": title})
            rendered.append((title, result))
            if result.killed:
                break
        return rendered

    def registry(self) -> dict[str, list[str]]:
        """The registered titles by kind: action, evaluation, observation."""
        result = self._call({"op": "registry"})
        if not result.ok or not isinstance(result.value, dict):
            raise SandboxError(
                f"the kernel could not list its callbacks: {result.error or 'a malformed answer'}"
            )
        listed = {kind: result.value.get(kind) for kind in _KINDS}
        return {
            kind: [t for t in titles if isinstance(t, str)] if isinstance(titles, list) else []
            for kind, titles in listed.items()
        }

    def clear(self, kind: str) -> None:
        """Forget every registered callback of one kind ("action", "evaluation", ...)."""
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {', '.join(_KINDS)}, not {kind!r}")
        result = self._call({"op": "clear", "kind": kind})
        if not result.ok:
            why = result.error or "a malformed answer"
            raise SandboxError(f"the kernel could not clear its {kind} callbacks: {why}")

    # --- process ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("the kernel is closed")

    def _launch(self) -> None:
        if not self.workdir.is_dir():
            raise SandboxError(f"the work dir {self.workdir} is not a folder")
        limits = asdict(self.limits)
        flags = ["-I", "-S", "-B"]
        cleanup: Callable[[], None] = _nothing
        pass_fds: list[int] = []
        if self.unsafe:
            log.warning(
                "UNSAFE: model code runs WITHOUT a sandbox in %s (no namespaces, no seccomp, "
                "no filesystem or network isolation); it can do anything this user can",
                self.workdir,
            )
            argv = [sys.executable, *flags, str(KERNEL_SCRIPT)]
            env = _sandbox_env(str(self.workdir), inside=False)
            sys_path = site_packages()
        else:
            host = _host()
            self._bound_workdir(host)
            prefix, pass_fds, cleanup = _sandbox_argv(host, self.limits, self.workdir)
            sys_path = list(python_layout().sys_path)
            # Not the console's environment: bwrap's init is PID 1 inside, and block code can
            # read /proc/1/environ.
            env = _HOST_SIDE_ENV
            # One cgroup per hierarchy: on cgroup v2 both limits share one folder (a process
            # is in one cgroup there), on v1 each controller has its own.
            wanted: dict[Path, dict[str, int]] = {}
            if host.pids_cgroup is not None:
                # bwrap and its init are in it too (the kernel's threads count, as they do
                # for RLIMIT_NPROC).
                limit = host.pids_cgroup
                wanted.setdefault(limit.parent, {})[limit.name] = self.limits.processes + 2
            if host.memory_cgroup is not None:
                limit = host.memory_cgroup
                wanted.setdefault(limit.parent, {})[limit.name] = self.limits.total_memory_bytes
            for base, limits_here in wanted.items():
                self._cgroups.append(_Cgroup(base, limits_here))
            argv = _wrapped(
                host,
                [*prefix, python_layout().executable, *flags, _KERNEL_INSIDE],
                [str(cgroup.procs) for cgroup in self._cgroups],
            )
        requests_r, requests_w = os.pipe()
        responses_r, responses_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        config = {
            "requests_fd": requests_r,
            "responses_fd": responses_w,
            "workdir": self.workdir_inside,
            "limits": limits,
            "sys_path": sys_path,
        }
        try:
            self._proc = _spawn(
                [*argv, json.dumps(config)],
                stderr=stderr_w,
                pass_fds=[requests_r, responses_w, *pass_fds],
                # sandboxed, bwrap changes to the work dir inside; outside, the shell that
                # joins the cgroups would export the host path as PWD to bwrap (PID 1)
                cwd=self.workdir if self.unsafe else Path("/"),
                env=env,
            )
        except OSError as exc:
            for fd in (requests_r, requests_w, responses_r, responses_w, stderr_r, stderr_w):
                os.close(fd)
            self._remove_cgroup()
            raise SandboxError(f"could not start the kernel: {exc}") from exc
        finally:
            cleanup()
        for fd in (requests_r, responses_w, stderr_w):
            os.close(fd)
        for fd in (requests_w, stderr_r):
            os.set_blocking(fd, False)
        self._requests_fd, self._responses_fd, self._stderr_fd = requests_w, responses_r, stderr_r
        try:
            self._read_response(time.monotonic() + _START_TIMEOUT, expected_id=None)
        except _Stop as stop:
            why = self._stderr_tail() or stop.reason
            self._kill_tree()
            self._reap()
            raise SandboxError(f"the kernel did not start: {why}") from None

    def _bound_workdir(self, host: _Host) -> None:
        """Mount the work dir's sized tmpfs (once: restarts keep it), or mark the work
        dir to be checked where no tmpfs can be mounted."""
        if host.mount_problem is not None:
            self._checked = True
            return
        if self._bounded is None:
            bounded = BoundedWorkdir(
                self.workdir, self.limits.workdir_bytes, self.limits.workdir_files
            )
            try:
                bounded.mount()
            except (OSError, WorkdirError) as exc:
                raise SandboxError(f"the work dir could not be bounded: {exc}") from None
            self._bounded = bounded

    def _workdir_past(self) -> str | None:
        """Where the work dir is checked, not bounded: which limit it is past, if any."""
        if not self._checked:
            return None
        used = usage(self.workdir, stop_after=self.limits.workdir_files)
        return used.past(self.limits.workdir_bytes, self.limits.workdir_files)

    def _kill_tree(self) -> None:
        """SIGKILL bwrap's process group; --die-with-parent and the PID namespace take down
        everything inside. Safe to call from any thread, any number of times."""
        proc = self._proc
        if proc is None:
            return
        # Only while it is not reaped: afterwards its pid may belong to someone else.
        if proc.returncode is None:
            if self.unsafe:
                for pid in _descendants(proc.pid):
                    _kill(pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.kill()
        for cgroup in list(self._cgroups):
            cgroup.kill_all()

    def _reap(self) -> None:
        """Wait for the killed kernel and release its fds and cgroup (under the lock)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log.warning("sandbox kernel %d did not exit after SIGKILL", proc.pid)
        for name in ("_requests_fd", "_responses_fd", "_stderr_fd"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)
        self._remove_cgroup()

    def _remove_cgroup(self) -> None:
        cgroups, self._cgroups = self._cgroups, []
        for cgroup in cgroups:
            cgroup.remove()

    def _stderr_tail(self) -> str:
        """The last line bwrap or the kernel wrote to the original stderr (before the
        kernel took fd 2 over for capture)."""
        try:
            data = os.read(self._stderr_fd, 1 << 16)
        except OSError:
            return ""
        lines = data.decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else ""

    # --- calls --------------------------------------------------------------------------

    def _call(self, request: dict[str, Any]) -> CallResult:
        with self._lock:
            self._check_open()
            if self._proc is None:
                raise SandboxError("the kernel is not running: start() or restart() it")
            started = time.monotonic()
            deadline = started + self.limits.wall_seconds
            request_id = next(self._ids)
            self._next_check = started + _CHECK_EVERY
            try:
                self._send(dict(request, id=request_id), deadline)
                result = _result_from(self._read_response(deadline, expected_id=request_id))
                if self._workdir_past() is not None:
                    raise _Stop("disk")
            except _Stop as stop:
                result = self._died(stop.reason)
            except Exception as exc:  # the channel is the kernel's to write: whatever it
                # sends or however it ends, the call fails; nothing else leaves this method
                from agents.backends.base import one_line

                detail = f"{type(exc).__name__}: {one_line(exc, 200)}"
                log.warning("sandbox channel broke: %s", detail)
                result = self._died("broken", detail)
            result.duration = time.monotonic() - started
            return result

    def _send(self, request: dict[str, Any], deadline: float) -> None:
        body = json.dumps(request).encode()
        data = memoryview(_HEADER.pack(len(body)) + body)
        while data:
            self._wait(self._requests_fd, select.POLLOUT, deadline)
            try:
                data = data[os.write(self._requests_fd, data) :]
            except BlockingIOError:
                continue
            except BrokenPipeError:
                raise _Stop("eof") from None

    def _wait(self, fd: int, events: int, deadline: float) -> None:
        """Until `fd` is ready, the deadline passes, or close() wakes us."""
        poller = select.poll()
        poller.register(fd, events | select.POLLHUP | select.POLLERR)
        poller.register(self._wake_r, select.POLLIN)
        while True:
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                raise _Stop("timeout")
            if self._checked:
                if now >= self._next_check:
                    self._next_check = now + _CHECK_EVERY
                    if self._workdir_past() is not None:
                        raise _Stop("disk")
                remaining = min(remaining, max(self._next_check - now, 0.0))
            ready = dict(poller.poll(remaining * 1000))
            if self._closed or self._wake_r in ready:
                raise _Stop("closed")
            if fd in ready:
                return

    def _read_exactly(self, size: int, deadline: float) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            self._wait(self._responses_fd, select.POLLIN, deadline)
            chunk = os.read(self._responses_fd, size - len(chunks))
            if not chunk:
                raise _Stop("eof")
            chunks += chunk
        return bytes(chunks)

    def _read_response(self, deadline: float, expected_id: int | None) -> dict[str, Any]:
        """The next answer with `expected_id`; stray frames are skipped, and an oversized or
        malformed one is a protocol error (block code can write to the response pipe)."""
        while True:
            (size,) = _HEADER.unpack(self._read_exactly(_HEADER.size, deadline))
            if size > self.limits.result_bytes:
                raise _Stop("output")
            response = _parse_frame(self._read_exactly(size, deadline))
            if response is None:
                raise _Stop("output")
            if response.get("id") == expected_id:
                return response

    def _died(self, reason: str, detail: str = "") -> CallResult:
        """Kill what is left of the kernel and say why it ended."""
        proc = self._proc
        if reason == "eof" and proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=2)
        status = proc.returncode if proc is not None else None
        tail = self._stderr_tail()
        self._kill_tree()
        self._reap()
        if reason == "timeout":
            error = (
                f"the call ran past its {self.limits.wall_seconds:g} s wall-clock limit: the "
                "kernel and every process it started were killed"
            )
            return CallResult(ok=False, error=error, killed="timeout")
        if reason == "closed":
            return CallResult(
                ok=False, error="the kernel was closed during the call", killed="closed"
            )
        if reason == "output":
            error = "the kernel's answer was oversized or malformed: the kernel was killed"
            return CallResult(ok=False, error=error, killed="output")
        if reason == "broken":
            error = f"the channel to the kernel broke ({detail}): the kernel was killed"
            return CallResult(ok=False, error=error, killed="output")
        if reason == "disk":
            past = self._workdir_past() or "past its limit"
            error = f"the work dir holds {past}: the kernel was killed"
            return CallResult(ok=False, error=error, killed="disk")
        killed, error = _classify_exit(status, self.limits, self.unsafe)
        if tail:
            error += f" ({tail})"
        return CallResult(ok=False, error=error, killed=killed)


def _spawn(
    argv: list[str], *, stderr: int, pass_fds: list[int], cwd: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """Start the kernel in its own session, from one long-lived thread. bwrap's
    --die-with-parent is PR_SET_PDEATHSIG, which follows the thread that forked it: a
    kernel started from a short-lived worker thread would die with that thread. This
    thread lives as long as the console."""
    global _launcher

    def popen() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            pass_fds=pass_fds,
            start_new_session=True,
            cwd=cwd,
            env=env,
        )

    with _launcher_lock:
        if _launcher is None:
            from concurrent.futures import ThreadPoolExecutor

            _launcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-launcher")
    return _launcher.submit(popen).result()


def _classify_exit(status: int | None, limits: Limits, unsafe: bool) -> tuple[str, str]:
    """("cpu" | "memory" | "crashed", a sentence) for a kernel that exited on its own.
    bwrap reports death by signal N as exit status 128 + N."""
    if status is None:
        return "crashed", "the kernel stopped answering"
    signum = -status if status < 0 else status - 128 if status > 128 and not unsafe else None
    if signum == signal.SIGXCPU:
        return (
            "cpu",
            f"the call used more than its {limits.cpu_seconds} s of CPU time: the kernel was killed",
        )
    if signum == signal.SIGKILL or status == kernel_module.EXIT_MEMORY:
        return "memory", "the kernel was killed, most likely out of memory"
    if signum is not None and signum in signal.valid_signals():
        return "crashed", f"the kernel died of {_signal_name(signum)}"
    return "crashed", f"the kernel exited with status {status}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:  # the real-time signals between SIGRTMIN and SIGRTMAX
        return f"SIGRTMIN+{number - signal.SIGRTMIN}"


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _parse_frame(body: bytes) -> dict[str, Any] | None:
    """One answer frame as an object, or None when it is not one the console takes: not
    UTF-8 JSON, not an object, a lone surrogate, NaN or an infinity, a number of over
    4,300 digits, or nested deeper than the kernel sends (a value `kernel.MAX_DEPTH` deep
    in the answer)."""
    try:
        value = json.loads(body, parse_constant=_reject_constant)
        # a lone surrogate (a "\\ud800" escape) is no text the store can write
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (ValueError, RecursionError):  # UnicodeError is a ValueError
        return None
    if not isinstance(value, dict) or kernel_module.too_deep(value, kernel_module.MAX_DEPTH + 1):
        return None
    return value


def _result_from(response: dict[str, Any]) -> CallResult:
    """A CallResult from the kernel's answer, trusting none of its types (block code can
    forge answers)."""

    def text(value: Any) -> str:
        return value if isinstance(value, str) else ""

    messages = response.get("messages")
    registered = response.get("registered")
    return CallResult(
        ok=response.get("ok") is True,
        value=response.get("value"),
        error=response["error"] if isinstance(response.get("error"), str) else None,
        stdout=text(response.get("stdout")),
        stderr=text(response.get("stderr")),
        messages=[m for m in messages if isinstance(m, str)] if isinstance(messages, list) else [],
        registered={
            str(kind): [t for t in titles if isinstance(t, str)]
            for kind, titles in registered.items()
            if isinstance(titles, list)
        }
        if isinstance(registered, dict)
        else {},
        finished=response["finished"] if isinstance(response.get("finished"), str) else None,
    )


def _nothing() -> None:
    pass


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (unsafe mode has no PID namespace to do this for us)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
