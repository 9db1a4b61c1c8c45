"""What the probe found out about this machine: the facts every later sandbox is built from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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
    cpu_cgroup: Path | None
    """Where a root console caps each kernel tree's CPU (None: the processes a call leaves
    behind are killed after it instead)."""
    mount_problem: str | None
    """Why the work dir cannot be a sized tmpfs here (None: it can)."""
    proc_hidden: tuple[str, ...] = ()
    """Files of /proc only root may read, hidden inside when the console is root (the
    sandbox's uid is then root outside)."""
    python_binds: tuple[tuple[str, str], ...] = ()
    """(host folder, path inside) of the Python installation and the venv's packages."""
    python_script: str | None = None
    """Mounts the Python's overlays in the kernel's private mount namespace (None: the
    folders are bound as they are, and the mount table names their host paths)."""
    unshare: str = "unshare"
