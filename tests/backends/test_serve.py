"""`agent-console serve`: a real vLLM server on the tiny model, found by the console's
backend resolution while it runs, stopped cleanly by Ctrl-C; and one-line exit 3 when
there is nothing to serve."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agents.backends import resolve
from agents.settings import Settings
from tests.backends.vllm_server import free_port, vllm_python_or_skip

pytestmark = [pytest.mark.server, pytest.mark.cli]

SCRIPT = Path(sys.executable).with_name("agent-console")


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_CONSOLE_")}
    env.update(
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_DATA_HOME=str(tmp_path / "data"),
        VLLM_CPU_KVCACHE_SPACE="1",
        HF_HUB_OFFLINE="1",
        VLLM_CACHE_ROOT=str(tmp_path / "vllm-cache"),
        TMPDIR=str(tmp_path),
        HOME=str(tmp_path),
    )
    env.update(extra)
    return env


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("./no-such-folder", "is not a model folder (no config.json)"),
        ("nobody/not-a-model", "is not in the Hugging Face cache and HF_HUB_OFFLINE is set"),
    ],
)
def test_nothing_to_serve_exits_3_in_one_line(tmp_path: Path, model: str, expected: str) -> None:
    result = subprocess.run(
        [str(SCRIPT), "serve", "--model", model], env=_env(tmp_path), cwd=tmp_path,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 3
    (line,) = result.stderr.splitlines()
    assert expected in line and "--model PATH" in line and "--base-url" in line


def test_a_bad_adapter_is_a_usage_error(tmp_path: Path, tiny_model_dir: Path) -> None:
    result = subprocess.run(
        [str(SCRIPT), "serve", "--model", str(tiny_model_dir), "--adapter", f"a1={tmp_path}"],
        env=_env(tmp_path), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert "adapter 'a1'" in line and "not a PEFT adapter folder" in line


def test_gpu_memory_share_reaches_vllm_and_nonsense_is_refused(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    from agents.backends.serving import ServeOptions, vllm_command

    command = vllm_command("python", ServeOptions(str(tiny_model_dir), gpu_memory_utilization=0.4))
    assert command[command.index("--gpu-memory-utilization") + 1] == "0.4"
    assert "--gpu-memory-utilization" not in vllm_command("python", ServeOptions("m"))
    result = subprocess.run(
        [str(SCRIPT), "serve", "--model", str(tiny_model_dir), "--gpu-memory-utilization", "1.5"],
        env=_env(tmp_path), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert "--gpu-memory-utilization 1.5: give a share between 0 and 1" in line


def test_serve_without_vllm_exits_3(tmp_path: Path, tiny_model_dir: Path) -> None:
    result = subprocess.run(
        [str(SCRIPT), "serve", "--model", str(tiny_model_dir)], env=_env(tmp_path),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 3
    assert "--vllm-python PATH" in result.stderr and "Traceback" not in result.stderr


# In the long tier: its own vLLM server takes 1-4 minutes to start on a 2-core machine;
# `make test` keeps the shared server's tests and serve's refusals above.
@pytest.mark.slow
def test_serve_runs_announces_and_stops(
    tmp_path: Path, tiny_model_dir: Path, tiny_adapter_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = vllm_python_or_skip()
    port = free_port()
    # A temp folder too long for a Unix socket path: vLLM's sockets must go elsewhere.
    long_tmp = tmp_path / ("t" * 80)
    long_tmp.mkdir()
    errors = tmp_path / "stderr.log"
    with errors.open("w") as stderr:
        proc = subprocess.Popen(
            [str(SCRIPT), "serve", "--model", str(tiny_model_dir), "--served-name", "tiny",
             "--port", str(port), "--max-model-len", "512", "--dtype", "float32",
             "--max-lora-rank", "8", "--adapter", f"a1={tiny_adapter_dir}",
             "--vllm-python", str(python)],
            env=_env(tmp_path, TMPDIR=str(long_tmp)), stdout=subprocess.PIPE, stderr=stderr,
            text=True,
        )  # fmt: skip
    try:
        assert proc.stdout is not None
        # vLLM logs to the same stdout; our line comes once /health answers.
        line = next((x for x in proc.stdout if x.startswith("serving ")), "")
        # Keep draining, or a full pipe would stall the server's logging.
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        url = f"http://127.0.0.1:{port}/v1"
        assert line.startswith(f"serving tiny at {url}"), errors.read_text()[-3000:]
        info = json.loads((tmp_path / "data" / "agent-console" / "server.json").read_text())
        assert info["url"] == url and info["model"] == "tiny"

        # A console with no --base-url finds the announced server.
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
        assert resolve(Settings()) == ("openai", url, "tiny")
        models = json.loads(_get(f"{url}/models"))
        assert {m["id"] for m in models["data"]} >= {"tiny", "a1"}  # the adapter is served
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    assert code == 0
    assert not (tmp_path / "data" / "agent-console" / "server.json").exists()
    assert not list(long_tmp.iterdir())  # the socket folder went with the server
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
    assert resolve(Settings()) == ("transformers", "", "")


def _get(url: str) -> str:
    import urllib.request

    deadline = time.monotonic() + 10
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                return reply.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
