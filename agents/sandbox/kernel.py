"""The agent's Python kernel: block code runs here, inside the sandbox, never in the console.

Block code runs with a global `self`, the agent's handle. Callbacks are plain functions
taking that handle (`def check(subagent): ...`); they persist across blocks, so they may
use state that earlier blocks set up. Paths are relative to the work dir; nothing outside
it can be written.

- `self.add_action(title, fn)` — register an action; `fn(self)` runs, its return value is
  the action's result.
- `self.add_evaluation(title, fn)` — register a check of the action; `fn(self)` returns a
  result (True/False or a number).
- `self.add_observation_view(title, fn)` — `fn(self)` is called every tick and its return
  value (text) is shown to you as an observation.
- `self.remove_observation_view(title)` — stop showing that view.
- `self.read_file(path) -> str`, `self.write_file(path, text) -> None`
- `self.list_files(path=".") -> list[str]` — the entries of a folder, sorted; folders end
  with "/".
- `self.run(command, timeout=10) -> dict` — run a shell command (a string) or a program (a
  list of arguments) in the work dir; returns `{"returncode", "stdout", "stderr"}`, output
  capped; raises TimeoutError past `timeout` seconds.
- `self.tell_operator(text)` — send a message to the human operator.
- `self.finish(message="")` — declare the task done.
- `self.workdir` — the work dir's path (str).

Re-adding a title replaces the callback. There is no network; `print` output is captured
(capped) and shown with the result.

Protocol (for the host, `agents.sandbox`): length-prefixed JSON frames (4-byte big-endian
length, UTF-8 JSON) — requests on one inherited pipe fd, responses on another — never on
stdout, which block code owns. Only the standard library is imported.
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import json
import linecache
import os
import resource
import select
import signal
import struct
import sys
import termios
import threading
import time
import traceback

TYPE_CHECKING = False  # typing costs ~10 ms at kernel start: annotations only
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

KINDS = ("action", "evaluation", "observation")
# The name the host compiled this file under (it may run as a .pyc), for traceback filtering.
_KERNEL_FILE = sys._getframe().f_code.co_filename
_ERROR_CAP = 16 << 10
_MESSAGE_CAP = 8 << 10
_MESSAGES_TOTAL_CAP = 32 << 10
_HEADER = struct.Struct(">I")
_RUN_DRAIN_GRACE = 0.5
EXIT_PROTOCOL = 70
EXIT_MEMORY = 71


def human_size(n: int) -> str:
    """`98.2 MB` style sizes for the "dropped" markers."""
    size = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")


def dropped_marker(n: int) -> str:
    return f"\n[... {human_size(n)} dropped]"


class _CappedBuffer:
    """Keeps the first `cap` bytes written to it and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.chunks: list[bytes] = []
        self.kept = 0
        self.dropped = 0

    def add(self, data: bytes) -> None:
        room = self.cap - self.kept
        if room > 0:
            self.chunks.append(data[:room])
            self.kept += min(room, len(data))
        self.dropped += max(0, len(data) - max(room, 0))

    def text(self) -> str:
        text = b"".join(self.chunks).decode("utf-8", "replace")
        return text + dropped_marker(self.dropped) if self.dropped else text


class _FdCapture:
    """Points fd 1 or 2 at a pipe drained by a thread, so that `print`, `os.write(1, ...)`
    and child processes are all captured, capped, and never block on a full pipe."""

    def __init__(self, target_fd: int, cap: int) -> None:
        read_fd, write_fd = os.pipe()
        os.dup2(write_fd, target_fd)
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        self._fd = read_fd
        self._cap = cap
        self._lock = threading.Lock()
        self._buffer = _CappedBuffer(cap)
        threading.Thread(target=self._drain, name=f"capture-{target_fd}", daemon=True).start()

    def _drain(self) -> None:
        while True:
            select.select([self._fd], [], [])
            with self._lock:
                try:
                    data = os.read(self._fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not data:
                    return
                self._buffer.add(data)

    def _pending(self) -> int:
        count = bytearray(4)
        fcntl.ioctl(self._fd, termios.FIONREAD, count)
        return int.from_bytes(count, sys.byteorder)

    def take(self, wait: float = 0.2) -> str:
        """Everything written since the last take. Reads happen under the lock, so an empty
        pipe seen under it means every byte written so far is in the buffer; a background
        process that never stops writing gets `wait` seconds, then is cut off."""
        deadline = time.monotonic() + wait
        while True:
            with self._lock:
                if self._pending() == 0 or time.monotonic() > deadline:
                    text = self._buffer.text()
                    self._buffer = _CappedBuffer(self._cap)
                    return text
            time.sleep(0.001)


class AgentAPI:
    """The `self` of block code (see the module docstring)."""

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel
        self.workdir: str = kernel.workdir

    def __repr__(self) -> str:
        return f"<agent workdir={self.workdir!r}>"

    def add_action(self, title: str, fn: Callable[[Any], Any]) -> None:
        """Register an action: `fn(self)` runs when the runtime executes it."""
        self._kernel.register("action", title, fn)

    def add_evaluation(self, title: str, fn: Callable[[Any], Any]) -> None:
        """Register an evaluation: `fn(self)` returns whether the action worked."""
        self._kernel.register("evaluation", title, fn)

    def add_observation_view(self, title: str, fn: Callable[[Any], Any]) -> None:
        """Register a view: `fn(self)` renders an observation each tick."""
        self._kernel.register("observation", title, fn)

    def remove_observation_view(self, title: str) -> None:
        """Stop rendering the observation view `title`."""
        self._kernel.unregister_observation(title)

    def _path(self, path: str) -> str:
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"path must be a string, not {type(path).__name__}")
        full = os.path.realpath(os.path.join(self.workdir, path))
        root = os.path.realpath(self.workdir)
        if os.path.commonpath([full, root]) != root:
            raise PermissionError(f"{os.fspath(path)!r} is outside the work dir {self.workdir}")
        return full

    def read_file(self, path: str) -> str:
        """The text of a file in the work dir (undecodable bytes become U+FFFD)."""
        with open(self._path(path), encoding="utf-8", errors="replace") as handle:
            return handle.read()

    def write_file(self, path: str, text: str) -> None:
        """Write `text` to a file in the work dir, creating folders as needed."""
        full = self._path(path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as handle:
            handle.write(text)

    def list_files(self, path: str = ".") -> list[str]:
        """The entries of a folder in the work dir, sorted; folders end with "/"."""
        with os.scandir(self._path(path)) as entries:
            return sorted(e.name + "/" if e.is_dir() else e.name for e in entries)

    def run(self, command: str | list[str], timeout: float = 10) -> dict[str, Any]:
        """Run a shell command (str) or a program (list) in the work dir."""
        return self._kernel.run_command(command, timeout)

    def tell_operator(self, text: str) -> None:
        """Send `text` to the human operator."""
        self._kernel.tell_operator(str(text))

    def finish(self, message: str = "") -> None:
        """Declare the task done, with a closing message."""
        self._kernel.finished = str(message)


class Kernel:
    """The request loop: one persistent namespace, one call at a time."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.requests_fd: int = config["requests_fd"]
        self.responses_fd: int = config["responses_fd"]
        self.workdir: str = config["workdir"]
        limits: dict[str, int] = config["limits"]
        self.cpu_seconds = limits["cpu_seconds"]
        self.output_bytes = limits["output_bytes"]
        self.result_bytes = limits["result_bytes"]
        self.pid = os.getpid()
        self.callbacks: dict[str, dict[str, Callable[[Any], Any]]] = {k: {} for k in KINDS}
        self.api = AgentAPI(self)
        self.namespace: dict[str, Any] = {
            "__name__": "__agent__",
            "__builtins__": builtins,
            "self": self.api,
        }
        self.sources: dict[str, str] = {}
        self._reset_call()
        # The host reads the original stderr when the kernel dies: keep it for last words.
        self.fatal_fd = os.dup(2)
        self.stdout = _FdCapture(1, self.output_bytes)
        self.stderr = _FdCapture(2, self.output_bytes)

    def _reset_call(self) -> None:
        self.messages: list[str] = []
        self.messages_size = 0
        self.finished: str | None = None
        self.registered: dict[str, list[str]] = {k: [] for k in (*KINDS, "removed_observation")}

    # --- the API's back end -------------------------------------------------------------

    def register(self, kind: str, title: str, fn: Callable[[Any], Any]) -> None:
        if not isinstance(title, str) or not title.strip():
            raise ValueError(f"a {kind} title must be a non-empty string, not {title!r}")
        if not callable(fn):
            raise TypeError(f"the {kind} {title!r} must be a function, not {type(fn).__name__}")
        self.callbacks[kind][title] = fn
        if title not in self.registered[kind]:
            self.registered[kind].append(title)

    def unregister_observation(self, title: str) -> None:
        if title not in self.callbacks["observation"]:
            known = ", ".join(map(repr, self.callbacks["observation"])) or "none"
            raise KeyError(f"no observation view titled {title!r} (registered: {known})")
        del self.callbacks["observation"][title]
        self.registered["removed_observation"].append(title)

    def tell_operator(self, text: str) -> None:
        if self.messages_size >= _MESSAGES_TOTAL_CAP:
            return
        if len(text) > _MESSAGE_CAP:
            text = text[:_MESSAGE_CAP] + dropped_marker(len(text) - _MESSAGE_CAP)
        self.messages_size += len(text)
        if self.messages_size >= _MESSAGES_TOTAL_CAP:
            text += "\n[further messages in this call were dropped]"
        self.messages.append(text)

    def run_command(self, command: str | list[str], timeout: float) -> dict[str, Any]:
        import subprocess  # only block code that runs commands pays for the import

        if isinstance(command, str):
            argv = ["/bin/sh", "-c", command]
        elif isinstance(command, list | tuple) and command:
            argv = [os.fspath(a) if isinstance(a, os.PathLike) else str(a) for a in command]
        else:
            raise TypeError("command must be a string (shell) or a non-empty list (argv)")
        proc = subprocess.Popen(
            argv,
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        assert proc.stdout is not None and proc.stderr is not None
        buffers = {
            proc.stdout.fileno(): _CappedBuffer(self.output_bytes),
            proc.stderr.fileno(): _CappedBuffer(self.output_bytes),
        }
        open_fds = list(buffers)
        deadline = time.monotonic() + timeout
        timed_out = False
        while open_fds:
            now = time.monotonic()
            if proc.poll() is not None:
                # Grandchildren may hold the pipes open: drain briefly, then stop.
                deadline = min(deadline, now + _RUN_DRAIN_GRACE)
            if now >= deadline:
                timed_out = proc.returncode is None
                break
            ready, _, _ = select.select(open_fds, [], [], min(deadline - now, 0.05))
            for fd in ready:
                data = os.read(fd, 1 << 16)
                if data:
                    buffers[fd].add(data)
                else:
                    open_fds.remove(fd)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        if timed_out:
            raise TimeoutError(f"{command!r} did not finish within {timeout} s and was killed")
        out, err = (buffers[fd].text() for fd in buffers)
        return {"returncode": proc.returncode, "stdout": out, "stderr": err}

    # --- calls ------------------------------------------------------------------------

    def _arm_cpu(self) -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        used = int(usage.ru_utime + usage.ru_stime) + 1
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft = used + self.cpu_seconds
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))

    def _guarded(self, fn: Callable[[], Any]) -> tuple[bool, Any, str | None]:
        """Run model code; a forked child that falls back into the kernel exits here, so
        only the kernel itself ever reads requests or answers."""
        try:
            value = fn()
        except BaseException as exc:
            if os.getpid() != self.pid:
                os._exit(1)
            return False, None, format_error(exc)
        if os.getpid() != self.pid:
            os._exit(0)
        return True, value, None

    def call(self, fn: Callable[[], Any]) -> dict[str, Any]:
        self._reset_call()
        self._arm_cpu()
        ok, value, error = self._guarded(fn)
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            with contextlib.suppress(Exception):  # block code may have replaced or closed it
                if stream is not None:
                    stream.flush()
        return {
            "ok": ok,
            "value": value,
            "error": error,
            "stdout": self.stdout.take(),
            "stderr": self.stderr.take(),
            "messages": self.messages,
            "registered": self.registered,
            "finished": self.finished,
        }

    def exec_block(self, code: str, name: str) -> dict[str, Any]:
        filename = name
        if self.sources.get(filename, code) != code:
            filename = f"{name}#{len(self.sources)}"
        self.sources[filename] = code
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)

        def run() -> None:
            exec(compile(code, filename, "exec", dont_inherit=True), self.namespace)

        return self.call(run)

    def call_callback(self, kind: str, title: str) -> dict[str, Any]:
        fn = self.callbacks.get(kind, {}).get(title)
        if fn is None:
            known = ", ".join(map(repr, self.callbacks.get(kind, {}))) or "none"
            return self.call(_raiser(KeyError(f"no {kind} titled {title!r} (registered: {known})")))
        return self.call(lambda: fn(self.api))

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "exec":
            return self.exec_block(str(request["code"]), str(request.get("name", "<block>")))
        if op == "call":
            return self.call_callback(str(request["kind"]), str(request["title"]))
        if op == "registry":
            return {"ok": True, "value": {k: list(v) for k, v in self.callbacks.items()}}
        if op == "clear":
            self.callbacks[str(request["kind"])].clear()
            return {"ok": True}
        return {"ok": False, "error": f"unknown request {op!r}"}

    # --- framing ----------------------------------------------------------------------

    def read_request(self) -> dict[str, Any] | None:
        header = _read_exactly(self.requests_fd, _HEADER.size)
        if header is None:
            return None
        body = _read_exactly(self.requests_fd, _HEADER.unpack(header)[0])
        if body is None:
            return None
        request = json.loads(body)
        if not isinstance(request, dict):
            raise ValueError("a request must be a JSON object")
        return request

    def send(self, response: dict[str, Any]) -> None:
        body = fit_response(response, self.result_bytes)
        data = _HEADER.pack(len(body)) + body
        while data:
            data = data[os.write(self.responses_fd, data) :]

    def serve(self) -> None:
        self.send({"ready": True, "pid": self.pid})
        while True:
            request = self.read_request()
            if request is None:
                return
            try:
                response = self.handle(request)
                response["id"] = request.get("id")
                self.send(response)
            except MemoryError:
                # Out of memory outside the model's code (building the answer, say).
                os._exit(EXIT_MEMORY)


def _raiser(exc: BaseException) -> Callable[[], Any]:
    def raise_it() -> Any:
        raise exc

    return raise_it


def _read_exactly(fd: int, size: int) -> bytes | None:
    chunks: list[bytes] = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _strip_kernel_frames(te: traceback.TracebackException) -> None:
    seen: set[int] = set()
    pending: list[traceback.TracebackException | None] = [te]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        frames = [f for f in current.stack if f.filename != _KERNEL_FILE]
        current.stack = traceback.StackSummary.from_list(frames)
        pending += [current.__cause__, current.__context__]


def cap_middle(text: str, cap: int) -> str:
    """`text` cut to about `cap` characters, keeping its start and its end (the end of a
    traceback says what went wrong)."""
    if len(text) <= cap:
        return text
    head = cap // 4
    tail = cap - head
    return text[:head] + dropped_marker(len(text) - cap) + "\n" + text[-tail:]


def format_error(exc: BaseException) -> str:
    """The traceback of `exc` without the kernel's own frames, capped."""
    try:
        te = traceback.TracebackException.from_exception(exc, compact=True)
        _strip_kernel_frames(te)
        text = "".join(te.format())
    except Exception as failure:  # a hostile exception whose str() raises, say
        text = f"{type(exc).__name__} (its traceback could not be formatted: {failure!r})\n"
    return cap_middle(text, _ERROR_CAP)


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception as exc:
        return f"<unrepresentable {type(value).__name__}: {exc!r}>"


#: Deepest nesting of lists and objects in an answer: values are data to show and store,
#: and deeper ones would reach Python's recursion limit downstream. The console kills a
#: kernel whose answer is deeper (block code can write frames of its own).
MAX_DEPTH = 64


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether `value` nests lists and objects more than `limit` levels deep (a scalar is
    0 deep, `[1]` 1); found level by level, without recursion."""
    level = [value]
    for _ in range(limit + 1):
        level = [item for item in level if isinstance(item, (dict, list))]
        if not level:
            return False
        level = [c for item in level for c in (item.values() if isinstance(item, dict) else item)]
    return True


def _encoded(obj: Any) -> bytes:
    # A lone surrogate (from a bad file name, say) is not UTF-8: it becomes "?". NaN and
    # the infinities are not JSON: the console refuses them.
    return json.dumps(obj, ensure_ascii=False, allow_nan=False).encode("utf-8", "replace")


def _shrunk(item: Any, target: int) -> Any:
    """`item` cut so that its JSON takes about `target` bytes at most."""
    if isinstance(item, list):
        return item[: len(item) // 2]
    text = item if isinstance(item, str) else _encoded(item).decode()
    size = len(text.encode("utf-8", "replace"))
    keep = max(0, min(len(text), target) - 64)
    return text[:keep] + dropped_marker(size - len(text[:keep].encode("utf-8", "replace")))


def fit_response(response: dict[str, Any], cap: int) -> bytes:
    """The response as JSON of at most `cap` bytes: a value that is not JSON (NaN
    included) or nests deeper than MAX_DEPTH becomes its repr(); the largest of the
    value, the outputs, the error and the messages is cut until it fits."""
    response = dict(response)
    try:
        _encoded(response.get("value"))
        deep = too_deep(response.get("value"))
    except (TypeError, ValueError, RecursionError):
        deep = True
    if deep:
        response["value"] = _safe_repr(response["value"])
    for _ in range(32):
        body = _encoded(response)
        over = len(body) - cap
        if over <= 0:
            return body
        sizes = {
            key: len(_encoded(response[key]))
            for key in ("value", "stdout", "stderr", "error", "messages")
            if response.get(key)
        }
        if not sizes:
            break
        key = max(sizes, key=sizes.__getitem__)
        response[key] = _shrunk(response[key], sizes[key] - over)
    return _encoded({"id": response.get("id"), "ok": False, "error": "the response did not fit"})


def _set_limits(limits: dict[str, int]) -> None:
    for name, key in (
        ("RLIMIT_AS", "memory_bytes"),
        ("RLIMIT_NPROC", "processes"),
        ("RLIMIT_FSIZE", "file_size_bytes"),
        ("RLIMIT_NOFILE", "open_files"),
        ("RLIMIT_CORE", None),
    ):
        value = limits[key] if key else 0
        resource.setrlimit(getattr(resource, name), (value, value))
    # A console started in the background (`nohup`, a script's `&`) ignores SIGHUP, SIGINT
    # or SIGQUIT, and ignored signals are inherited: block code gets the defaults whatever
    # started the console (SIGPIPE stays as Python sets it).
    for number in signal.valid_signals():
        if number != signal.SIGPIPE and signal.getsignal(number) == signal.SIG_IGN:
            with contextlib.suppress(OSError, ValueError):
                signal.signal(number, signal.SIG_DFL)
    if signal.getsignal(signal.SIGINT) == signal.SIG_DFL:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # An oversized write then fails with an OSError instead of killing the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def _close_other_fds(keep: set[int]) -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def main(argv: list[str]) -> int:
    """Entry point: `kernel.py CONFIG_JSON` with the request and response fds inherited."""
    config = json.loads(argv[1])
    _close_other_fds({0, 1, 2, config["requests_fd"], config["responses_fd"]})
    sys.path.extend(config.get("sys_path", []))
    _set_limits(config["limits"])
    kernel = Kernel(config)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    try:
        kernel.serve()
    except (OSError, ValueError, KeyError, TypeError) as exc:
        os.write(kernel.fatal_fd, f"agent kernel: protocol error: {exc!r}\n".encode())
        return EXIT_PROTOCOL
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
