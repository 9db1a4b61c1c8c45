"""The work dir's write back never strands a session.

A tree the write back cannot take whole (a folder chain past PATH_MAX, one 1,100 folders
deep) is left out in part with a warning naming it: the tmpfs is unmounted all the same,
`Kernel.close()` does not raise, and the next kernel on the work dir starts. A tmpfs a
console killed with SIGKILL left mounted is written back at the next start of a console
or headless run, and by `agent-console doctor --repair`.

Real bubblewrap kernels on real tmpfs mounts; skips where the work dir cannot be a sized
tmpfs, or without bwrap (unless AGENT_CONSOLE_REQUIRE_SANDBOX=1).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
from pathlib import Path

import pytest

from agents.sandbox import Kernel, Limits
from agents.sandbox.workdir import MAX_DEPTH
from app import exit_codes
from tests.agents.test_sandbox import (  # noqa: F401 (_bwrap_present: autouse)
    _bwrap_present,
    ok,
)
from tests.app.test_cli import _run
from tests.app.test_doctor import _lines
from tests.reliability.test_sandbox_attacks import (
    SMALL_WORKDIR,
    attack,
    leave_a_dead_consoles_work_dir,
    mountable,
)

pytestmark = [pytest.mark.cli]

#: Block code: `chain(name, levels)` makes a chain of folders through folder descriptors
#: (so no path is ever longer than a name), a file at its end.
CHAIN = (
    "def chain(name, levels):\n"
    "    fd = os.open('.', os.O_RDONLY)\n"
    "    for _ in range(levels):\n"
    "        os.mkdir(name, dir_fd=fd)\n"
    "        inner = os.open(name, os.O_RDONLY, dir_fd=fd)\n"
    "        os.close(fd)\n"
    "        fd = inner\n"
    "    os.close(os.open('end.txt', os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))\n"
    "    os.close(fd)\n"
    "    return levels\n"
)


def mounted(path: Path) -> bool:
    """Whether a mount sits on `path`, as the mount table says (no space in the path)."""
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return any(line.split()[4] == str(path) for line in lines)


def levels(folder: Path, name: str) -> tuple[int, bool]:
    """How many `name` folders deep the chain under `folder` goes on the host, and
    whether its end.txt is there, walked through folder descriptors."""
    fd = os.open(folder, os.O_RDONLY)
    depth = 0
    try:
        while True:
            try:
                inner = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                break
            os.close(fd)
            fd, depth = inner, depth + 1
        return depth, "end.txt" in os.listdir(fd)
    finally:
        os.close(fd)


def make_chain(kernel: Kernel, name: str, count: int) -> None:
    tried, _ = attack(
        kernel,
        CHAIN + f"attempt('chain', lambda: chain({name!r}, {count}))\n"
        "open('kept.txt', 'w').write('kept')\n",
    )
    assert tried["chain"] == count, tried


def left_out(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(
        r.getMessage()
        for r in caplog.records
        if r.name == "agents.workdir" and "left out" in r.getMessage()
    )


def chain_then_close(
    workdir: Path, limits: Limits, name: str, depth: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A kernel makes a chain `depth` folders deep, then closes (its warnings captured)."""
    kernel = Kernel(workdir, limits=limits)
    try:
        kernel.start()
        make_chain(kernel, name, depth)
    finally:
        with caplog.at_level(logging.WARNING, logger="agents.workdir"):
            kernel.close()


def test_attack_a_folder_chain_past_path_max_for_the_write_back(
    workdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """20 folders of 250-byte names: 5,000 bytes of path, past the host's PATH_MAX."""
    mountable()
    name = "L" * 250
    chain_then_close(workdir, SMALL_WORKDIR, name, 20, caplog)
    assert not mounted(workdir)
    assert (workdir / "kept.txt").read_text() == "kept"
    # the chain as far as the host can name it, the rest left out
    depth, end = levels(workdir, name)
    assert 0 < depth < 20 and not end
    assert len(str(workdir)) + 251 * depth < 4096 <= len(str(workdir)) + 251 * (depth + 1)
    assert "PATH_MAX" in left_out(caplog) and name[:50] in left_out(caplog)
    with Kernel(workdir, limits=SMALL_WORKDIR) as again:
        ok(again.exec_block("self.add_action('r', lambda s: open('kept.txt').read())"))
        assert ok(again.call_action("r")).value == "kept"
    assert not mounted(workdir)


def test_attack_a_folder_chain_1100_deep_for_the_write_back(
    workdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """1,100 one-letter folders: deeper than Python's recursion limit, and than the
    write back goes. A second kernel makes another: its write back also removes the
    first chain from the disk below."""
    mountable()
    limits = dataclasses.replace(SMALL_WORKDIR, workdir_files=10_000)
    for name in ("d", "e"):
        chain_then_close(workdir, limits, name, 1100, caplog)
        assert not mounted(workdir)
        assert (workdir / "kept.txt").read_text() == "kept"
    assert levels(workdir, "d") == levels(workdir, "e") == (MAX_DEPTH, False)
    for name in ("d", "e"):
        assert f"{name}/{name}/{name} (a folder more than {MAX_DEPTH} deep)" in left_out(caplog)
    with Kernel(workdir, limits=limits) as again:
        assert ok(again.exec_block("print(open('kept.txt').read())")).stdout == "kept\n"
    assert not mounted(workdir)


def test_a_chain_1100_deep_already_on_the_disk_is_cut_and_the_kernel_starts(
    workdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What an earlier version wrote back whole: the copy in leaves it out past
    MAX_DEPTH, and the write back removes it from the disk without recursion."""
    mountable()
    fd = os.open(workdir, os.O_RDONLY)
    for _ in range(1100):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    try:
        logged = caplog.at_level(logging.WARNING, logger="agents.workdir")
        with logged, Kernel(workdir, limits=SMALL_WORKDIR) as kernel:
            ok(kernel.exec_block("open('kept.txt', 'w').write('kept')"))
        assert not mounted(workdir)
        assert (workdir / "kept.txt").read_text() == "kept"
        assert levels(workdir, "d") == (MAX_DEPTH, False)
        assert f"(a folder more than {MAX_DEPTH} deep)" in left_out(caplog)
    finally:  # pytest's own clean-up recurses
        subprocess.run(["rm", "-rf", "--one-file-system", str(workdir / "d")], check=False)


def sessions_folder(tmp_path: Path) -> Path:
    """The sessions folder of `_run`'s data folder."""
    return tmp_path / "data" / "agent-console" / "sessions"


def test_a_work_dir_a_killed_console_left_is_written_back_at_the_next_start(
    tmp_path: Path,
) -> None:
    """The headless run's start writes it back and unmounts it (its session is never
    reopened); a work dir whose console still runs is left alone."""
    mountable()
    dead = sessions_folder(tmp_path) / "1" / "work"
    dead.mkdir(parents=True)
    leave_a_dead_consoles_work_dir(dead)
    live = sessions_folder(tmp_path) / "2" / "work"
    live.mkdir(parents=True)
    with Kernel(live, limits=SMALL_WORKDIR) as kernel:
        ok(kernel.exec_block("open('live.txt', 'w').write('live')"))
        result = _run(tmp_path, "--backend", "none", "--query", "hi")
        assert result.returncode == exit_codes.MODEL, result.stderr
        assert mounted(live)
    assert not mounted(dead)
    assert (dead / "written.txt").read_text() == "before the kill"
    assert (live / "live.txt").read_text() == "live"


def test_doctor_says_a_killed_console_left_a_work_dir_and_repair_writes_it_back(
    tmp_path: Path,
) -> None:
    mountable()
    dead = sessions_folder(tmp_path) / "1" / "work"
    dead.mkdir(parents=True)
    leave_a_dead_consoles_work_dir(dead)
    checked = _run(tmp_path, "--backend", "none", "doctor")
    assert checked.returncode == exit_codes.FAILED, checked.stdout + checked.stderr
    line = _lines(checked.stdout).get("work dirs", "")
    assert line.startswith("FAIL ") and str(dead) in line, checked.stdout
    assert "fix: `agent-console doctor --repair`" in checked.stdout
    assert mounted(dead)
    repaired = _run(tmp_path, "--backend", "none", "doctor", "--repair")
    assert repaired.returncode == exit_codes.OK, repaired.stdout + repaired.stderr
    line = _lines(repaired.stdout)["work dir"]
    assert line.startswith("ok ") and str(dead) in line, line
    assert not mounted(dead)
    assert (dead / "written.txt").read_text() == "before the kill"
    assert "work dirs" not in _lines(_run(tmp_path, "--backend", "none", "doctor").stdout)
