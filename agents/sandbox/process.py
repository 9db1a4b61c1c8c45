"""The kernel's process: started in a session of its own from one long-lived thread (bwrap's
--die-with-parent follows the thread that forked it), its tree found and killed where no
PID namespace does that (unsafe mode), and why a kernel that exited on its own died.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

from agents.sandbox import kernel as kernel_module
from agents.sandbox.limits import Limits

_launcher_lock = threading.Lock()
_launcher: ThreadPoolExecutor | None = None


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


def _inner_pid(pid: int) -> int | None:
    """`pid`'s number in its own PID namespace (the last of /proc's NSpid), or None once
    it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _alive(pid: int) -> bool:
    """Running or able to run: not gone, not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _stopped(pid: int) -> bool:
    """Stopped by a signal, or gone (a zombie runs nothing either)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("T", "t", "Z", "X")


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
