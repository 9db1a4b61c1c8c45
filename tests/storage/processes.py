"""Start `store_worker.py` children and release them together."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WORKER = Path(__file__).with_name("store_worker.py")
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Finished:
    returncode: int
    report: dict[str, Any]
    stderr: str

    def describe(self) -> str:
        return f"exit {self.returncode}, report {self.report}, stderr:\n{self.stderr[-3000:]}"


def start(mode: str, *args: object) -> subprocess.Popen[str]:
    """Start a worker and wait until it has imported everything and is ready to go."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), mode, *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"worker {mode} did not start: {line!r}\n{err}")
    return proc


def release(*procs: subprocess.Popen[str]) -> None:
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> Finished:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"worker timed out; stderr:\n{err[-3000:]}") from None
    lines = out.strip().splitlines()
    try:
        report = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        report = {"unparsed stdout": out[-3000:]}
    return Finished(proc.returncode, report, err)
