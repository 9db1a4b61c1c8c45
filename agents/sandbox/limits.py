"""What one kernel may use (`Limits`), and the errors of the sandbox: a kernel that cannot
do what was asked (`SandboxError`), a machine that cannot run the sandbox at all
(`SandboxUnavailable`, with how to make it able to).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

_UNSAFE_HINT = "or run with --unsafe-no-sandbox (model code then runs with no isolation at all)"


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
    cpus: float = 1.0
    """CPUs the whole kernel tree may keep busy at once, between calls too (a cpu cgroup's
    quota when the console is root and may make one; elsewhere what a call leaves running
    is killed when it returns)."""
    processes: int = 64
    """Processes and threads (RLIMIT_NPROC, or a pids cgroup when the console is root)."""
    file_size_bytes: int = 64 << 20
    """Largest file a process may write (RLIMIT_FSIZE)."""
    open_files: int = 256
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    tmp_bytes: int = 64 << 20
    """Size of the tmpfs /tmp."""
    workdir_bytes: int = 1 << 30
    """Bytes the work dir may hold in all (`agents.sandbox.workdir`: a sized tmpfs where the
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
