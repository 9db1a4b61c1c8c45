"""The sandboxed kernel, for real: bubblewrap, rlimits, seccomp, no mocks.

Every attack test has the block code record that it made the attempt and what happened,
and the host checks, from outside, that the effect did not happen. Small limits keep the
suite fast. Without bwrap the tests skip, unless AGENT_CONSOLE_REQUIRE_SANDBOX=1 (CI),
which makes that a failure.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.sandbox import (
    WORKDIR_INSIDE,
    CallResult,
    Kernel,
    Limits,
    SandboxError,
    sandbox_status,
)

REQUIRE_ENV = "AGENT_CONSOLE_REQUIRE_SANDBOX"

FAST = Limits(
    wall_seconds=10,
    cpu_seconds=2,
    memory_bytes=512 << 20,
    processes=32,
    file_size_bytes=1 << 20,
    tmp_bytes=4 << 20,
    output_bytes=16 << 10,
    result_bytes=64 << 10,
)


@pytest.fixture(autouse=True)
def _bwrap_present() -> None:
    if shutil.which("bwrap") is None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but bubblewrap (bwrap) is not installed", pytrace=False)
        pytest.skip("bubblewrap (bwrap) is not installed")


@pytest.fixture
def kernel(workdir: Path) -> Iterator[Kernel]:
    with Kernel(workdir, limits=FAST) as opened:
        yield opened


def ok(result: CallResult) -> CallResult:
    assert result.ok, result.error
    return result


def everything(result: CallResult) -> str:
    """All the text a call returned, to look for leaked secrets in."""
    return repr((result.value, result.error, result.stdout, result.stderr, result.messages))


def processes_in_pid_namespace(namespace: str) -> list[int]:
    """Host pids of the processes in a PID namespace, named as /proc/PID/ns/pid reads."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") == namespace:
                    found.append(int(entry))
            except OSError:
                pass
    return found


def running(pid: int) -> bool:
    """Alive and not a zombie (the host's init reaps orphans when it gets to it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_until_gone(namespace: str, seconds: float = 3.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := processes_in_pid_namespace(namespace)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


# --- status ---------------------------------------------------------------------------


def test_sandbox_status_reports_ok_with_the_protections_in_place() -> None:
    status = sandbox_status(refresh=True)
    assert status.ok, f"{status.detail} / {status.fix}"
    assert status.fix is None
    assert "bubblewrap" in status.detail
    assert "seccomp filter" in status.detail
    assert "process limit" in status.detail
    assert "warning" not in status.detail


def test_limits_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="wall_seconds must be positive"):
        Limits(wall_seconds=0)


# --- calls ----------------------------------------------------------------------------


def test_exec_registers_an_action_and_calling_it_returns_its_value(kernel: Kernel) -> None:
    defined = ok(
        kernel.exec_block(
            "def action_add(subagent):\n"
            "    return {'sum': 1 + 2, 'workdir': subagent.workdir}\n"
            "self.add_action('Add numbers', action_add)\n"
        )
    )
    assert defined.registered["action"] == ["Add numbers"]
    ran = ok(kernel.call_action("Add numbers"))
    assert ran.value == {"sum": 3, "workdir": kernel.workdir_inside}
    assert ran.duration > 0


def test_state_persists_across_calls_and_callbacks_are_closures(kernel: Kernel) -> None:
    ok(
        kernel.exec_block(
            "counter = {'n': 0}\n"
            "def bump(subagent):\n"
            "    counter['n'] += 1\n"
            "    return counter['n']\n"
            "self.add_action('bump', bump)\n"
        )
    )
    assert ok(kernel.call_action("bump")).value == 1
    assert ok(kernel.call_action("bump")).value == 2
    assert ok(kernel.exec_block("counter['n'] += 10")).ok
    assert ok(kernel.call_action("bump")).value == 13


def test_stdout_and_stderr_are_captured_per_call_from_every_source(kernel: Kernel) -> None:
    done = ok(
        kernel.exec_block(
            "import os, sys, subprocess\n"
            "print('from print')\n"
            "os.write(1, b'from os.write\\n')\n"
            "print('to stderr', file=sys.stderr)\n"
            "subprocess.run(['/bin/sh', '-c', 'echo from a child; echo child err >&2'])\n"
        )
    )
    assert done.stdout.splitlines() == ["from print", "from os.write", "from a child"]
    assert done.stderr.splitlines() == ["to stderr", "child err"]
    assert ok(kernel.exec_block("x = 1")).stdout == ""


def test_a_100_mb_print_is_capped_and_the_kernel_lives(kernel: Kernel) -> None:
    done = ok(kernel.exec_block("import sys\nsys.stdout.write('x' * 100_000_000)"))
    assert done.stdout.startswith("x" * 1000)
    assert len(done.stdout) < FAST.output_bytes + 100
    assert done.stdout.endswith(" MB dropped]")
    assert "[... 100.0 MB dropped]" in done.stdout or "[... 99.9 MB dropped]" in done.stdout
    raw = ok(kernel.exec_block("import os\nfor _ in range(100): os.write(1, b'y' * 1_000_000)"))
    assert raw.stdout.endswith(" MB dropped]") and len(raw.stdout) < FAST.output_bytes + 100
    assert kernel.alive
    assert ok(kernel.exec_block("print('still here')")).stdout == "still here\n"


def test_tell_operator_and_finish(kernel: Kernel) -> None:
    done = ok(
        kernel.exec_block(
            "self.tell_operator('halfway there')\n"
            "self.tell_operator('done soon')\n"
            "self.finish('the key is ABC')\n"
        )
    )
    assert done.messages == ["halfway there", "done soon"]
    assert done.finished == "the key is ABC"
    later = ok(kernel.exec_block("x = 1"))
    assert later.messages == [] and later.finished is None


def test_registry_and_clear(kernel: Kernel) -> None:
    ok(
        kernel.exec_block(
            "f = lambda s: True\n"
            "self.add_action('a1', f)\n"
            "self.add_action('a1', f)\n"
            "self.add_evaluation('e1', f)\n"
            "self.add_evaluation('e2', f)\n"
            "self.add_observation_view('o1', f)\n"
        )
    )
    assert kernel.registry() == {
        "action": ["a1"],
        "evaluation": ["e1", "e2"],
        "observation": ["o1"],
    }
    assert ok(kernel.call_evaluation("e2")).value is True
    kernel.clear("action")
    kernel.clear("evaluation")
    assert kernel.registry() == {"action": [], "evaluation": [], "observation": ["o1"]}
    missing = kernel.call_action("a1")
    assert not missing.ok and missing.killed is None
    assert "no action titled 'a1'" in (missing.error or "")
    with pytest.raises(ValueError, match="kind must be one of"):
        kernel.clear("everything")


def test_observation_views_render_in_order_each_on_its_own(kernel: Kernel) -> None:
    ok(
        kernel.exec_block(
            "self.add_observation_view('files', lambda s: sorted(s.list_files()))\n"
            "self.add_observation_view('broken', lambda s: 1 / 0)\n"
            "self.add_observation_view('greeting', lambda s: print('hi') or 'hello')\n"
            "self.write_file('notes.txt', 'n')\n"
        )
    )
    rendered = kernel.render_observations()
    assert [title for title, _ in rendered] == ["files", "broken", "greeting"]
    files, broken, greeting = (result for _, result in rendered)
    assert files.ok and files.value == ["notes.txt"]
    assert not broken.ok and "ZeroDivisionError" in (broken.error or "")
    assert greeting.ok and greeting.value == "hello" and greeting.stdout == "hi\n"
    removed = ok(kernel.exec_block("self.remove_observation_view('broken')"))
    assert removed.registered["removed_observation"] == ["broken"]
    assert kernel.registry()["observation"] == ["files", "greeting"]


def test_syntax_error_is_a_failed_call(kernel: Kernel) -> None:
    done = kernel.exec_block("def broken(:\n    pass\n", name="action 3")
    assert not done.ok and done.killed is None
    assert "SyntaxError" in (done.error or "") and "action 3" in (done.error or "")
    assert kernel.alive


def test_traceback_shows_the_models_frames_not_the_kernels(kernel: Kernel) -> None:
    ok(
        kernel.exec_block(
            "def helper():\n    raise ValueError('bad input')\n"
            "def act(subagent):\n    helper()\n"
            "self.add_action('act', act)\n",
            name="action 7",
        )
    )
    done = kernel.call_action("act")
    assert not done.ok
    error = done.error or ""
    assert error.startswith("Traceback (most recent call last):")
    assert 'File "action 7", line 4, in act' in error
    assert "    helper()" in error and "ValueError: bad input" in error
    assert "kernel.py" not in error and "kernel.pyc" not in error
    escaped = kernel.exec_block("self.read_file('../../etc/hostname')")
    assert "PermissionError" in (escaped.error or "") and "outside the work dir" in (
        escaped.error or ""
    )


def test_a_value_json_cannot_hold_comes_back_as_its_repr(kernel: Kernel) -> None:
    assert ok(kernel.exec_block("self.add_action('s', lambda s: {3, 1})")).ok
    assert ok(kernel.call_action("s")).value == "{1, 3}"
    ok(kernel.exec_block("class Thing:\n    def __repr__(self): return 'Thing()'\n"))
    ok(kernel.exec_block("self.add_action('t', lambda s: [Thing()])"))
    assert ok(kernel.call_action("t")).value == "[Thing()]"


def test_a_huge_return_value_is_capped(kernel: Kernel) -> None:
    ok(kernel.exec_block("self.add_action('big', lambda s: 'z' * 10_000_000)"))
    done = ok(kernel.call_action("big"))
    assert isinstance(done.value, str)
    assert done.value.startswith("zzzz") and done.value.endswith(" MB dropped]")
    assert len(done.value) < FAST.result_bytes
    assert kernel.alive


def test_invalid_utf8_from_a_subprocess_is_replaced(kernel: Kernel) -> None:
    done = ok(
        kernel.exec_block(
            "import os\n"
            "os.write(1, b'raw \\xff\\xfe bytes\\n')\n"
            "out = self.run(\"printf 'bad \\\\377\\\\376 ok'\")\n"
        )
    )
    assert done.stdout == "raw \ufffd\ufffd bytes\n"
    ok(kernel.exec_block("self.add_action('out', lambda s: out)"))
    assert ok(kernel.call_action("out")).value == {
        "returncode": 0,
        "stdout": "bad \ufffd\ufffd ok",
        "stderr": "",
    }


def test_run_commands_and_files(kernel: Kernel, workdir: Path) -> None:
    ok(
        kernel.exec_block(
            "self.write_file('sub/a.txt', 'alpha')\n"
            "results = {\n"
            "  'shell': self.run('cat sub/a.txt; echo oops >&2; exit 3'),\n"
            "  'argv': self.run(['ls', 'sub']),\n"
            "  'files': self.list_files(),\n"
            "  'read': self.read_file('sub/a.txt'),\n"
            "}\n"
            "try:\n"
            "    self.run('sleep 5', timeout=0.3)\n"
            "except TimeoutError as exc:\n"
            "    results['timeout'] = str(exc)\n"
            "self.add_action('results', lambda s: results)\n"
        )
    )
    results = ok(kernel.call_action("results")).value
    assert results["shell"] == {"returncode": 3, "stdout": "alpha", "stderr": "oops\n"}
    assert results["argv"]["stdout"] == "a.txt\n"
    assert results["files"] == ["sub/"]
    assert results["read"] == "alpha"
    assert "did not finish within 0.3 s" in results["timeout"]
    assert (workdir / "sub" / "a.txt").read_text() == "alpha"


def test_timeout_kills_the_kernel_and_restart_gives_a_fresh_one(workdir: Path) -> None:
    with Kernel(workdir, limits=Limits(wall_seconds=1)) as kernel:
        ok(kernel.exec_block("remembered = 42"))
        started = time.monotonic()
        done = kernel.exec_block("import time\ntime.sleep(30)")
        assert time.monotonic() - started < 3
        assert not done.ok and done.killed == "timeout"
        assert "1 s wall-clock limit" in (done.error or "")
        assert not kernel.alive
        with pytest.raises(SandboxError, match="not running"):
            kernel.exec_block("1")
        kernel.restart()
        assert kernel.alive
        fresh = kernel.exec_block("remembered")
        assert not fresh.ok and "NameError" in (fresh.error or "")


def test_close_from_another_thread_interrupts_a_call(workdir: Path) -> None:
    kernel = Kernel(workdir, limits=Limits(wall_seconds=60))
    kernel.start()
    results: list[CallResult] = []
    caller = threading.Thread(
        target=lambda: results.append(kernel.exec_block("import time\ntime.sleep(30)"))
    )
    caller.start()
    time.sleep(0.3)
    closed_at = time.monotonic()
    kernel.close()
    caller.join(5)
    assert time.monotonic() - closed_at < 1.0
    assert results and results[0].killed == "closed" and not results[0].ok
    assert not kernel.alive
    kernel.close()  # idempotent
    with pytest.raises(SandboxError, match="closed"):
        kernel.exec_block("1")


def test_a_kernel_started_from_a_short_lived_thread_outlives_it(workdir: Path) -> None:
    kernel = Kernel(workdir, limits=FAST)
    starter = threading.Thread(target=kernel.start)
    starter.start()
    starter.join()
    time.sleep(0.3)
    try:
        assert kernel.alive
        assert ok(kernel.exec_block("self.add_action('x', lambda s: 5)")).ok
        assert ok(kernel.call_action("x")).value == 5
    finally:
        kernel.close()


def test_a_crash_is_reported_and_the_kernel_can_restart(kernel: Kernel) -> None:
    segfault = kernel.exec_block("import ctypes\nctypes.string_at(0)")
    assert segfault.killed == "crashed" and "SIGSEGV" in (segfault.error or "")
    kernel.restart()
    exited = kernel.exec_block("import os\nos._exit(3)")
    assert exited.killed == "crashed" and "status 3" in (exited.error or "")
    kernel.restart()
    assert ok(
        kernel.exec_block("import sys\ntry:\n    sys.exit(2)\nexcept SystemExit:\n    pass")
    ).ok


def test_a_forged_response_frame_is_a_protocol_error(kernel: Kernel) -> None:
    done = kernel.exec_block("import os\nos.write(self._kernel.responses_fd, b'\\xff' * 8)")
    assert done.killed == "output" and not kernel.alive


def test_unsafe_mode_runs_the_same_kernel_and_warns_loudly(
    workdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="agents.sandbox"),
        Kernel(workdir, limits=Limits(wall_seconds=1), unsafe=True) as kernel,
    ):
        assert any("UNSAFE" in r.getMessage() for r in caplog.records)
        assert kernel.workdir_inside == str(workdir.resolve())
        ok(kernel.exec_block("import os\nself.add_action('cwd', lambda s: os.getcwd())"))
        assert ok(kernel.call_action("cwd")).value == str(workdir.resolve())
        ok(kernel.exec_block("self.write_file('made.txt', 'yes')"))
        assert (workdir / "made.txt").read_text() == "yes"
        sleeper = workdir / "sleeper.pid"
        done = kernel.exec_block(
            f"import subprocess, time\np = subprocess.Popen(['sleep', '60'])\n"
            f"open({str(sleeper)!r}, 'w').write(str(p.pid))\ntime.sleep(30)"
        )
        assert done.killed == "timeout"
        child = int(sleeper.read_text())
        deadline = time.monotonic() + 3
        while running(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not running(child), "a child of the timed-out kernel survived"


# --- attacks --------------------------------------------------------------------------


def test_attack_write_outside_the_work_dir(kernel: Kernel, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("original")
    targets = [str(outside), "/usr/pwned", "/etc/passwd", "/opt/agent-console/kernel.pyc"]
    done = ok(
        kernel.exec_block(
            "import os\n"
            "attempts = {}\n"
            f"for path in {targets!r}:\n"
            "    try:\n"
            "        os.makedirs(os.path.dirname(path), exist_ok=True)\n"
            "        with open(path, 'w') as f:\n"
            "            f.write('pwned')\n"
            "        attempts[path] = 'wrote'\n"
            "    except OSError as exc:\n"
            "        attempts[path] = type(exc).__name__\n"
            "try:\n"
            "    self.write_file('../outside.txt', 'pwned')\n"
            "except PermissionError as exc:\n"
            "    attempts['api'] = str(exc)\n"
            "self.add_action('attempts', lambda s: attempts)\n"
        )
    )
    attempts = ok(kernel.call_action("attempts")).value
    assert done.ok and set(attempts) == {*targets, "api"}
    # The host path does not exist inside: the write lands in the sandbox's own tmpfs /tmp.
    assert attempts[str(outside)] == "wrote"
    assert attempts["/usr/pwned"] in {"OSError", "PermissionError"}
    assert attempts["/etc/passwd"] in {"OSError", "PermissionError"}
    assert attempts["/opt/agent-console/kernel.pyc"] in {"OSError", "PermissionError"}
    assert "outside the work dir" in attempts["api"]
    assert outside.read_text() == "original"
    assert not Path("/usr/pwned").exists()


def test_attack_read_secret_files_of_the_host(kernel: Kernel, tmp_path: Path) -> None:
    secret = f"SECRET-{uuid.uuid4().hex}"
    beside = tmp_path.parent / f"secret-{uuid.uuid4().hex}"
    beside.write_text(secret)
    in_root = Path("/root") / f".agent-console-test-secret-{uuid.uuid4().hex}"
    planted = [beside]
    try:
        in_root.write_text(secret)
        planted.append(in_root)
    except OSError:
        pass
    try:
        paths = [str(p) for p in planted] + [f"/proc/{os.getpid()}/environ", "/proc/1/environ"]
        done = kernel.exec_block(
            "import os\n"
            "tried = {}\n"
            f"for path in {paths!r}:\n"
            "    try:\n"
            "        tried[path] = open(path).read()\n"
            "    except OSError as exc:\n"
            "        tried[path] = type(exc).__name__\n"
            f"for folder in ['/root', {str(tmp_path.parent)!r}, '/']:\n"
            "    try:\n"
            "        tried[folder] = os.listdir(folder)\n"
            "    except OSError as exc:\n"
            "        tried[folder] = type(exc).__name__\n"
            "print(tried)\n"
            "self.add_action('tried', lambda s: tried)\n"
        )
        tried = ok(kernel.call_action("tried")).value
        for path in planted:
            assert tried[str(path)] == "FileNotFoundError"
        # /root exists inside only when Python lives under it (pyenv): then it holds only that.
        assert tried["/root"] in ("FileNotFoundError", [".pyenv"])
        # The root holds the system binds, plus the first folder of each bound Python prefix
        # and of the work dir (a clone under /check or /home brings that one name).
        bound = {Path(p).parts[1] for p in (sys.prefix, sys.base_prefix, os.path.realpath(sys.prefix),
                                            os.path.realpath(sys.base_prefix), WORKDIR_INSIDE)}  # fmt: skip
        assert set(tried["/"]) <= {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32",
                                   "etc", "opt", "proc", "dev", "tmp"} | bound  # fmt: skip
        assert secret not in everything(done)
    finally:
        for path in planted:
            path.unlink()


def test_attack_read_the_hosts_environment(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"SECRET-{uuid.uuid4().hex}"
    monkeypatch.setenv("AGENT_CONSOLE_TEST_SECRET", secret)
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    with Kernel(workdir, limits=FAST) as kernel:
        done = ok(
            kernel.exec_block(
                "import os\n"
                "print(dict(os.environ))\n"
                "print(open('/proc/self/environ', 'rb').read())\n"
                "print(self.run('env; cat /proc/1/environ')['stdout'])\n"
                "self.add_action('env', lambda s: dict(os.environ))\n"
            )
        )
        env = ok(kernel.call_action("env")).value
    assert "PATH" in env and "AGENT_CONSOLE_TEST_SECRET" not in env and "OPENAI_API_KEY" not in env
    assert "PATH=" in done.stdout
    assert secret not in everything(done)


def test_attack_tcp_and_udp_to_a_loopback_listener(kernel: Kernel) -> None:
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with tcp, udp:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        tcp.settimeout(0.5)
        udp.bind(("127.0.0.1", 0))
        udp.settimeout(0.5)
        tcp_port, udp_port = tcp.getsockname()[1], udp.getsockname()[1]
        ok(
            kernel.exec_block(
                "import socket\n"
                "tried = {}\n"
                "def attempt(name, fn):\n"
                "    try:\n"
                "        fn()\n"
                "        tried[name] = 'sent'\n"
                "    except OSError as exc:\n"
                "        tried[name] = type(exc).__name__\n"
                f"attempt('tcp', lambda: socket.create_connection(('127.0.0.1', {tcp_port}), 1).sendall(b'hi'))\n"
                f"attempt('udp', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'hi', ('127.0.0.1', {udp_port})))\n"
                "attempt('tcp6', lambda: socket.socket(socket.AF_INET6))\n"
                "attempt('netlink', lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW))\n"
                "attempt('unix', lambda: socket.socketpair())\n"
                "self.add_action('tried', lambda s: tried)\n"
            )
        )
        tried = ok(kernel.call_action("tried")).value
        assert tried == {
            "tcp": "PermissionError",
            "udp": "PermissionError",
            "tcp6": "PermissionError",
            "netlink": "PermissionError",
            "unix": "sent",
        }
        with pytest.raises(TimeoutError):
            tcp.accept()
        with pytest.raises(TimeoutError):
            udp.recvfrom(100)


def test_attack_fork_bomb_is_bounded(kernel: Kernel) -> None:
    done = ok(
        kernel.exec_block(
            "import os, time\n"
            "children, error = 0, None\n"
            "for _ in range(500):\n"
            "    try:\n"
            "        pid = os.fork()\n"
            "    except OSError as exc:\n"
            "        error = type(exc).__name__\n"
            "        break\n"
            "    if pid == 0:\n"
            "        time.sleep(30)\n"
            "        os._exit(0)\n"
            "    children += 1\n"
            "namespace = os.readlink('/proc/self/ns/pid')\n"
            "self.add_action('bomb', lambda s: [children, error, namespace])\n"
        )
    )
    children, error, namespace = ok(kernel.call_action("bomb")).value
    assert error == "BlockingIOError", done
    assert 0 < children < FAST.processes
    assert len(processes_in_pid_namespace(namespace)) > children
    kernel.close()
    assert wait_until_gone(namespace) == []


def test_attack_exponential_fork_bomb_times_out_and_everything_dies(workdir: Path) -> None:
    with Kernel(workdir, limits=Limits(wall_seconds=2, processes=32)) as kernel:
        namespace = ok(
            kernel.exec_block(
                "import os\nself.add_action('ns', lambda s: os.readlink('/proc/self/ns/pid'))"
            )
        )
        namespace_id = ok(kernel.call_action("ns")).value
        done = kernel.exec_block(
            "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
        )
        assert namespace.ok and done.killed == "timeout"
        assert wait_until_gone(namespace_id) == []
        kernel.restart()
        assert ok(kernel.exec_block("print('recovered')")).stdout == "recovered\n"


def test_attack_allocate_10_gib(kernel: Kernel) -> None:
    done = kernel.exec_block("blob = bytearray(10 << 30)")
    assert not done.ok
    assert "MemoryError" in (done.error or "")
    assert kernel.alive and ok(kernel.exec_block("print(len(bytearray(1 << 20)))")).ok


def test_attack_busy_loop_past_the_cpu_limit(workdir: Path) -> None:
    with Kernel(workdir, limits=Limits(wall_seconds=20, cpu_seconds=1)) as kernel:
        started = time.monotonic()
        done = kernel.exec_block("while True:\n    pass")
        assert done.killed == "cpu", done.error
        assert time.monotonic() - started < 5
        assert "1 s of CPU time" in (done.error or "")
        kernel.restart()
        # The budget is per call: a kernel that worked before still gets its full second.
        ok(
            kernel.exec_block(
                "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass"
            )
        )
        assert ok(
            kernel.exec_block(
                "end = time.process_time() + 0.6\nwhile time.process_time() < end: pass"
            )
        ).ok


def test_attack_fill_the_disk(kernel: Kernel, workdir: Path) -> None:
    ok(
        kernel.exec_block(
            "import os\n"
            "tried = {}\n"
            "try:\n"
            "    with open('big.bin', 'wb') as f:\n"
            "        f.write(b'x' * (2 << 20))\n"
            "    tried['workdir'] = 'wrote'\n"
            "except OSError as exc:\n"
            "    tried['workdir'] = os.strerror(exc.errno)\n"
            "written = 0\n"
            "try:\n"
            "    for i in range(100):\n"
            "        with open(f'/tmp/fill{i}', 'wb') as f:\n"
            "            f.write(b'y' * ((1 << 20) - 1))\n"
            "        written += (1 << 20) - 1\n"
            "    tried['tmp'] = 'wrote'\n"
            "except OSError as exc:\n"
            "    tried['tmp'] = os.strerror(exc.errno)\n"
            "tried['tmp_written'] = written\n"
            "self.add_action('tried', lambda s: tried)\n"
        )
    )
    tried = ok(kernel.call_action("tried")).value
    assert tried["workdir"] == "File too large"
    assert (workdir / "big.bin").stat().st_size <= FAST.file_size_bytes
    assert tried["tmp"] == "No space left on device"
    assert tried["tmp_written"] <= FAST.tmp_bytes
    assert kernel.alive


def test_attack_setsid_daemon_dies_with_the_kernel(kernel: Kernel, workdir: Path) -> None:
    heartbeat = workdir / "heartbeat"
    done = ok(
        kernel.exec_block(
            "import os, time\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            "        while True:\n"
            "            with open('heartbeat', 'a') as f:\n"
            "                f.write('.')\n"
            "            time.sleep(0.02)\n"
            "    os._exit(0)\n"
            "namespace = os.readlink('/proc/self/ns/pid')\n"
            "self.add_action('ns', lambda s: namespace)\n"
            # within the call: without a cpu cgroup, what a call leaves is killed after it
            "time.sleep(0.3)\n"
        )
    )
    namespace = ok(kernel.call_action("ns")).value
    assert heartbeat.exists() and heartbeat.stat().st_size > 3, done
    kernel.close()
    assert wait_until_gone(namespace) == []
    size = heartbeat.stat().st_size
    time.sleep(0.5)
    assert heartbeat.stat().st_size == size


def test_attack_setsid_daemon_dies_when_a_call_times_out(workdir: Path) -> None:
    heartbeat = workdir / "heartbeat"
    with Kernel(workdir, limits=Limits(wall_seconds=1)) as kernel:
        done = kernel.exec_block(
            "import os, time\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            "        while True:\n"
            "            with open('heartbeat', 'a') as f:\n"
            "                f.write('.')\n"
            "            time.sleep(0.02)\n"
            "    os._exit(0)\n"
            "time.sleep(30)\n"
        )
        assert done.killed == "timeout"
        assert heartbeat.stat().st_size > 3
        time.sleep(0.2)
        size = heartbeat.stat().st_size
        time.sleep(0.5)
        assert heartbeat.stat().st_size == size


def test_attack_signal_the_console(kernel: Kernel) -> None:
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        done = ok(
            kernel.exec_block(
                "import os, signal\n"
                "tried = {}\n"
                f"for name, pid in [('console', {os.getpid()}), ('bystander', {bystander.pid}), ('parent', os.getppid()), ('everyone', -1)]:\n"
                "    try:\n"
                "        os.kill(pid, signal.SIGKILL)\n"
                "        tried[name] = 'sent'\n"
                "    except OSError as exc:\n"
                "        tried[name] = type(exc).__name__\n"
                "self.add_action('tried', lambda s: tried)\n"
            )
        )
        tried = ok(kernel.call_action("tried")).value
        assert tried["console"] == "ProcessLookupError", done
        assert tried["bystander"] == "ProcessLookupError"
        # The parent is the PID namespace's init, which ignores SIGKILL from inside; -1
        # reaches only the sandbox's own processes (none here but init).
        assert set(tried) == {"console", "bystander", "parent", "everyone"}
        assert bystander.poll() is None
        assert kernel.alive
        assert ok(kernel.exec_block("print('alive')")).stdout == "alive\n"
    finally:
        bystander.kill()
        bystander.wait()
    os.kill(os.getpid(), 0)


def test_attack_namespaces_mounts_and_ptrace_are_refused(kernel: Kernel) -> None:
    ok(
        kernel.exec_block(
            "import ctypes, os\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "def errno_of(result):\n"
            "    return os.strerror(ctypes.get_errno()) if result == -1 else 'allowed'\n"
            "tried = {\n"
            "    'unshare user': errno_of(libc.unshare(0x10000000)),\n"
            "    'unshare mount': errno_of(libc.unshare(0x00020000)),\n"
            "    'mount': errno_of(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)),\n"
            "    'ptrace': errno_of(libc.ptrace(16, 1, None, None)),\n"
            "    'uid': os.getuid(),\n"
            "}\n"
            "self.add_action('tried', lambda s: tried)\n"
        )
    )
    tried = ok(kernel.call_action("tried")).value
    assert tried == {
        "unshare user": "Operation not permitted",
        "unshare mount": "Operation not permitted",
        "mount": "Operation not permitted",
        "ptrace": "Operation not permitted",
        "uid": 65534,
    }


def test_a_python_installed_under_tmp_still_runs_inside(tmp_path: Path) -> None:
    """The sandbox mounts its own /tmp; a console whose venv lies under the host's /tmp
    (a CI clone, say) must still find its interpreter and the venv's packages there."""
    import sys
    import sysconfig

    venv = Path("/tmp") / f"agent-console-venv-{uuid.uuid4().hex[:8]}"
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        packages = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
        (packages / "site-packages" / "planted_in_the_venv.py").write_text("WHERE = 'venv'\n")
        repo = Path(__file__).resolve().parents[2]
        paths = [str(repo), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
        probe = (
            "import sys; from pathlib import Path; from agents.sandbox import Kernel\n"
            "assert sys.prefix.startswith('/tmp/'), sys.prefix\n"
            f"with Kernel(Path({str(tmp_path)!r})) as k:\n"
            "    k.start(); k.exec_block('import sys, planted_in_the_venv as p\\n'\n"
            "        'self.add_action(\"p\", lambda s: [sys.executable, p.WHERE, p.__file__])')\n"
            "    print(k.call_action('p').value)\n"
        )
        done = subprocess.run(
            [str(venv / "bin" / "python"), "-c", probe],
            env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        executable, where, path = eval(done.stdout)
        assert executable.startswith("/opt/python/bin/python") and where == "venv", done.stdout
        assert path == "/opt/python-packages/planted_in_the_venv.py"
    finally:
        shutil.rmtree(venv, ignore_errors=True)


def test_a_killed_processs_static_folder_is_removed_by_a_later_probe(tmp_path: Path) -> None:
    """The static folder goes at exit; a process killed outright leaves it, named with its
    pid. A later probe removes it once an hour old, and leaves a live process's folder, a
    young one, and a folder not named with a pid."""
    from agents.sandbox.probe import ORPHAN_AGE_S, STATIC_PREFIX, _remove_orphaned_static_dirs

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    script = "import os, signal; from agents.sandbox import sandbox_status; sandbox_status(); "
    script += "os.kill(os.getpid(), signal.SIGKILL)"
    killed = subprocess.run([sys.executable, "-c", script], env=env, timeout=120, check=False)
    assert killed.returncode == -9
    (left,) = tmp_path.glob(f"{STATIC_PREFIX}*")
    assert (left / "seccomp.bpf").exists() or (left / "passwd").exists()
    mine = tmp_path / f"{STATIC_PREFIX}{os.getpid()}-x"
    unnamed = tmp_path / f"{STATIC_PREFIX}x1y2z3"
    for folder in (mine, unnamed):
        folder.mkdir()
    now = time.time()
    assert _remove_orphaned_static_dirs(tmp_path, now) == []  # the killed one is young
    later = now + ORPHAN_AGE_S + 1
    assert _remove_orphaned_static_dirs(tmp_path, later) == [left]
    assert sorted(tmp_path.iterdir()) == sorted([mine, unnamed])
