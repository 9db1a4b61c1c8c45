"""The console's side of one session's kernel: `Kernel` starts it, makes calls into it one
at a time, and closes it.

The kernel keeps a namespace across calls, because weave-agent callbacks are closures over
state that earlier blocks set up; rlimits are set in it before any model code runs. A call
sends a request and waits for its answer under the call's wall-clock limit; a timeout, an
oversized or malformed answer, a work dir past its limits or `close()` from another thread
kills the whole kernel tree, and the call says why.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from types import TracebackType
from typing import Any

from agents.sandbox import kernel as kernel_module
from agents.sandbox.answers import _HEADER, CallResult, _parse_frame, _result_from
from agents.sandbox.confine import (
    _HOST_SIDE_ENV,
    _KERNEL_INSIDE,
    KERNEL_SCRIPT,
    WORKDIR_INSIDE,
    _Cgroup,
    _sandbox_argv,
    _sandbox_env,
    _wrapped,
)
from agents.sandbox.host import _Host
from agents.sandbox.limits import Limits, SandboxError
from agents.sandbox.probe import _host
from agents.sandbox.process import (
    _alive,
    _classify_exit,
    _descendants,
    _inner_pid,
    _kill,
    _signal,
    _spawn,
    _stopped,
)
from agents.sandbox.python_inside import python_layout, site_packages
from agents.sandbox.workdir import BoundedWorkdir, WorkdirError, usage

log = logging.getLogger("agents.sandbox")


_START_TIMEOUT = 15.0
#: The cpu cgroup's period (its default on v1 and v2): the quota is a share of it.
_CPU_PERIOD_US = 100_000
#: Rounds of signals to stop or kill processes that may be forking meanwhile.
_ROUNDS = 50
#: Seconds between checks of a work dir no tmpfs bounds, during a call.
_CHECK_EVERY = 1.0
_KINDS = kernel_module.KINDS


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

    def __init__(
        self,
        workdir: Path,
        *,
        limits: Limits = Limits(),  # noqa: B008 (frozen: one shared default is safe)
        unsafe: bool = False,
        read_only: bool = False,
    ) -> None:
        self.workdir = Path(workdir).resolve()
        self.limits = limits
        self.unsafe = unsafe
        self.read_only = read_only
        """The work dir is bound read-only (the task's checks); unsafe mode cannot enforce it."""
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
        self._cpu_bounded = False
        """A cpu cgroup caps the tree; without one, what a call leaves running is killed."""
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
        A bounded work dir's files are written back to the disk below it. Never raises:
        a session whose write back failed must still end."""
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
                except WorkdirError as exc:
                    log.warning("%s", exc)
                except Exception:
                    log.exception("the work dir %s could not be written back", self.workdir)

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
            if not self.read_only:
                self._bound_workdir(host)
            prefix, pass_fds, cleanup = _sandbox_argv(
                host, self.limits, self.workdir, read_only=self.read_only
            )
            sys_path = list(python_layout().sys_path)
            # Not the console's environment: bwrap's init is PID 1 inside, and block code can
            # read /proc/1/environ.
            env = _HOST_SIDE_ENV
            # One cgroup per hierarchy: on cgroup v2 both limits share one folder (a process
            # is in one cgroup there), on v1 each controller has its own.
            wanted: dict[Path, dict[str, str]] = {}
            if host.pids_cgroup is not None:
                # bwrap and its init are in it too (the kernel's threads count, as they do
                # for RLIMIT_NPROC).
                limit = host.pids_cgroup
                wanted.setdefault(limit.parent, {})[limit.name] = str(self.limits.processes + 2)
            if host.memory_cgroup is not None:
                limit = host.memory_cgroup
                wanted.setdefault(limit.parent, {})[limit.name] = str(
                    self.limits.total_memory_bytes
                )
            if host.cpu_cgroup is not None:
                limit = host.cpu_cgroup
                quota = max(1000, round(self.limits.cpus * _CPU_PERIOD_US))
                wanted.setdefault(limit.parent, {})[limit.name] = (
                    f"{quota} {_CPU_PERIOD_US}" if limit.name == "cpu.max" else str(quota)
                )
            self._cpu_bounded = host.cpu_cgroup is not None
            for base, limits_here in wanted.items():
                self._cgroups.append(_Cgroup(base, limits_here))
            argv = _wrapped(
                host,
                [*prefix, python_layout().executable, *flags, _KERNEL_INSIDE],
                [str(cgroup.procs) for cgroup in self._cgroups],
                self.limits,
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
        # no check of the work dir while the kernel starts: one a killed call left past its
        # limit must still get a kernel that can make room (each call is checked)
        self._next_check = float("inf")
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

    def _tree(self) -> list[int]:
        """Host pids of every process of the kernel's tree that runs code: sandboxed, all
        below bwrap (its init, the kernel, what they started); unsafe, the kernel too."""
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return []
        below = _descendants(proc.pid)
        return [proc.pid, *below] if self.unsafe else below

    def _strays(self) -> list[int]:
        """What calls left running: every process of the tree but the kernel (and bwrap's
        init, PID 1 inside, which only waits for it)."""
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return []
        if self.unsafe:
            return [pid for pid in _descendants(proc.pid) if _alive(pid)]
        # Inside its PID namespace bwrap's init is 1 and the kernel, its first child, 2.
        return [pid for pid in self._tree() if _inner_pid(pid) not in (1, 2, None) and _alive(pid)]

    def _kill_strays(self) -> None:
        """Kill every process a call left running (they may fork while being killed: again
        until none is left, or the pids limit has bounded them and the rounds run out)."""
        for _ in range(_ROUNDS):
            strays = self._strays()
            if not strays:
                return
            for pid in strays:
                _kill(pid)
            time.sleep(0.002)  # until the next round, a killed process is still there
        log.warning("processes a call left running outlived %d rounds of SIGKILL", _ROUNDS)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Every process of the kernel's tree stopped (SIGSTOP) while the `with` block runs,
        continued after it: nothing of the model's changes the work dir meanwhile. A tree
        that cannot be stopped is killed (the next call finds the kernel dead)."""
        with self._lock:
            stopped: set[int] = set()
            for _ in range(_ROUNDS):
                running = [pid for pid in self._tree() if pid not in stopped or not _stopped(pid)]
                if not running:
                    break
                for pid in running:
                    _signal(pid, signal.SIGSTOP)
                    stopped.add(pid)
                time.sleep(0.002)  # a stop lands when the process is next scheduled
            else:
                log.warning("the kernel's processes could not all be stopped: killing them")
                self._kill_tree()
            try:
                yield
            finally:
                for pid in stopped:
                    _signal(pid, signal.SIGCONT)

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
                if not self._cpu_bounded:
                    self._kill_strays()
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


def _nothing() -> None:
    pass
