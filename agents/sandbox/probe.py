"""Whether this machine can run the sandbox, and what protects block code there: probed
once per console process, on first use, and cached.

The probe finds bwrap and the options it has, builds the seccomp filter (syscalls that fail
with EPERM inside, set-user-ID modes, new namespaces, sockets other than AF_UNIX), compiles
the kernel script once, finds where a root console can make a pids and a memory cgroup per
kernel, and whether the work dir can be a sized tmpfs and the Python shown through
overlays; then it starts a trivial sandboxed Python the way a kernel starts. What it found
is a `_Host`; `sandbox_status()` says it in words, with a fix where the sandbox cannot run.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import logging
import os
import py_compile
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from agents.sandbox.confine import (
    _HOST_SIDE_ENV,
    _KERNEL_INSIDE,
    KERNEL_SCRIPT,
    WORKDIR_INSIDE,
    _Cgroup,
    _sandbox_argv,
    _wrapped,
)
from agents.sandbox.host import _Host
from agents.sandbox.limits import _UNSAFE_HINT, Limits, SandboxUnavailable
from agents.sandbox.process import _alive
from agents.sandbox.python_inside import overlay_script, python_layout, stage
from agents.sandbox.workdir import can_mount

log = logging.getLogger("agents.sandbox")


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
class SandboxStatus:
    """Whether block code can run sandboxed here, what protects it, or why not."""

    ok: bool
    detail: str
    fix: str | None


_probe_lock = threading.Lock()
_probed: tuple[SandboxStatus, _Host | None] | None = None


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


#: The start of a process's static folder (its passwd, seccomp filter, kernel) in the temp
#: folder; the process's pid follows. The folder goes at exit; one killed outright leaves
#: it, and a later probe removes it (`_remove_orphaned_static_dirs`).
STATIC_PREFIX = "agent-console-sandbox-"
#: A folder left by a pid that is gone is removed once it is this old (seconds): a process
#: of another PID namespace sharing the temp folder may still use a younger one.
ORPHAN_AGE_S = 3600.0


def _remove_orphaned_static_dirs(tmp: Path, now: float | None = None) -> list[Path]:
    """Remove the static folders whose process is gone (killed outright, so its exit
    handler never ran) and which nobody touched for `ORPHAN_AGE_S`; returns them."""
    now = time.time() if now is None else now
    removed = []
    for folder in tmp.glob(f"{STATIC_PREFIX}*-*"):
        pid = folder.name.removeprefix(STATIC_PREFIX).split("-", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        with contextlib.suppress(OSError):
            if now - folder.stat().st_mtime < ORPHAN_AGE_S:
                continue
            shutil.rmtree(folder)
            removed.append(folder)
    return removed


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
    _remove_orphaned_static_dirs(Path(tempfile.gettempdir()))
    static_dir = Path(tempfile.mkdtemp(prefix=f"{STATIC_PREFIX}{os.getpid()}-"))
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
        cpu_cgroup=_find_cgroup("cpu") if os.geteuid() == 0 else None,
        mount_problem=can_mount(),
        python_binds=python_layout().mounts,
        proc_hidden=_root_only_proc_files() if os.geteuid() == 0 else (),
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
    if host.cpu_cgroup:
        parts.append("CPU quota by cpu cgroup")
    else:
        warnings.append(
            "no CPU quota for a kernel's processes (no writable cpu cgroup): what a call "
            "leaves running is killed when it returns"
        )
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


def _root_only_proc_files() -> tuple[str, ...]:
    """The files at the top of /proc that only their owner, root, may read."""
    hidden = []
    for entry in sorted(os.scandir("/proc"), key=lambda e: e.name):
        if entry.name.isdigit():
            continue
        try:
            mode = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(mode.st_mode) and mode.st_uid == 0 and not mode.st_mode & 0o044:
            hidden.append(entry.name)
    return tuple(hidden)


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
_LIMIT_FILES = {
    "pids": ("pids.max", "pids.max"),
    "memory": ("memory.max", "memory.limit_in_bytes"),
    "cpu": ("cpu.max", "cpu.cfs_quota_us"),
}
#: A value each limit file takes in the probe's test (pids.max refuses more than the
#: kernel's pid limit).
_TEST_VALUES = {
    "pids.max": "8",
    "memory.max": "16777216",
    "memory.limit_in_bytes": "16777216",
    "cpu.max": "100000 100000",
    "cpu.cfs_quota_us": "100000",
}


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
        (test / limit_file).write_text(_TEST_VALUES[limit_file])
        test.rmdir()
    except OSError:
        with contextlib.suppress(OSError):
            test.rmdir()
        return False
    return True


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


def _trial_run(host: _Host) -> str | None:
    """Start a trivial sandboxed Python the way a kernel starts; say what went wrong."""
    argv, pass_fds, cleanup = _sandbox_argv(host, Limits(), host.static_dir / "probe")
    python = python_layout().executable
    try:
        done = subprocess.run(
            _wrapped(
                host, [*argv, python, "-I", "-S", "-c", "import os; os.getuid()"], [], Limits()
            ),
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
