"""scripts/system-packages, which `make run` and `make test` run first: silent when every
system package is there; where one is missing and cannot be installed (here: no apt-get
on the PATH), one line naming the packages and the command, failing `test` but not `run`
(the console browses and labels without the sandbox)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cli, pytest.mark.tmux]

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "system-packages"


def run(purpose: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": path} if path is not None else None
    return subprocess.run(
        ["bash", str(SCRIPT), purpose], capture_output=True, text=True, env=env, timeout=60
    )


def test_silent_when_everything_is_there() -> None:
    for purpose in ("run", "test"):
        done = run(purpose)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_a_missing_package_is_one_line_with_the_command(tmp_path: Path) -> None:
    # a PATH with the shell's tools but no bwrap, tmux or apt-get
    for tool in ("bash", "id", "grep", "ldconfig"):
        found = shutil.which(tool) or shutil.which(tool, path="/sbin:/usr/sbin")
        assert found is not None, tool
        (tmp_path / tool).symlink_to(found)
    done = run("test", str(tmp_path))
    assert done.returncode == 1 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    # (the libraries are found through ldconfig, which this PATH may or may not reach)
    named = re.fullmatch(r"the tests need (.+): sudo apt-get install \1", line)
    assert named is not None, line
    assert {"bubblewrap", "tmux"} <= set(named[1].split()), line
    done = run("run", str(tmp_path))
    assert done.returncode == 0
    (line,) = done.stderr.splitlines()
    assert line.startswith("the sandbox needs bubblewrap") and "apt-get install bubblewrap" in line
    assert "tmux" not in line and "sessions are refused" in line
