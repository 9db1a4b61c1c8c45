"""Run model-written block code in a long-lived sandboxed kernel, one per agent session.

The kernel (`kernel`, standard library only) runs in a separate process under bubblewrap,
with rlimits set before any model code runs, a seccomp filter built once per console
process and, for a root console, a pids and a memory cgroup per kernel; it keeps a
namespace across calls. Requests and answers are length-prefixed JSON on two dedicated
pipes, never stdout. Importing this package is cheap: the probe and the seccomp filter are
built on first use.

- `probe`: whether this machine can run the sandbox and what protects it (`sandbox_status`).
- `host`: what the probe found out about this machine.
- `confine`: bwrap's command line, the sandbox's environment, the kernel's cgroups.
- `client`: `Kernel`, the console's side of one kernel: start, calls, close.
- `answers`: `CallResult` and the answer frames, read trusting nothing.
- `process`: the kernel's process started, its tree killed, why it died.
- `limits`: `Limits` and the sandbox's errors.
- `workdir`: the session's work dir, bounded in bytes and in files.
- `python_inside`: where the sandbox's Python lives inside.
- `kernel`: the script that runs inside the sandbox.
"""

from __future__ import annotations

from agents.sandbox.answers import CallResult
from agents.sandbox.client import Kernel
from agents.sandbox.confine import KERNEL_SCRIPT, WORKDIR_INSIDE
from agents.sandbox.limits import Limits, SandboxError, SandboxUnavailable
from agents.sandbox.probe import SandboxStatus, sandbox_status

__all__ = [
    "KERNEL_SCRIPT",
    "WORKDIR_INSIDE",
    "CallResult",
    "Kernel",
    "Limits",
    "SandboxError",
    "SandboxStatus",
    "SandboxUnavailable",
    "sandbox_status",
]
