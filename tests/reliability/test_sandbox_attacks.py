"""More attacks a model-written action might try on the sandbox, each attempted and blocked.

tests/agents/test_sandbox.py covers the basic ones (writes outside the work dir, host
secrets and environment, TCP/UDP, fork bombs, memory, CPU, disk, daemons, signals,
namespaces). These are the rest: links out of the work dir, the trace store, host
processes and sysctls through /proc, set-user-ID files left for the host, terminal
injection, inherited fds, unix sockets, DNS, privilege syscalls, the console's own code,
/dev, garbage on the kernel protocol and time bombs in callbacks.

Every test runs the attack as block code in a real bubblewrap kernel, which records what
each attempt got (an errno name, an exception, what it saw) so the test proves it reached
the syscall; then the host checks from outside that nothing happened (the file is
unchanged, the listener got nothing, the kernel's limits still hold). Skips without bwrap
unless AGENT_CONSOLE_REQUIRE_SANDBOX=1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import tty
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.approval import Answer
from agents.sandbox import CallResult, Kernel, Limits, SandboxError
from agents.sandbox import workdir as workdir_module
from agents.sandbox.python_inside import path_inside, python_layout
from storage import Author, NodeStatus, SessionStatus, TraceStore
from tests.agents.test_sandbox import (  # noqa: F401 (_bwrap_present: autouse)
    FAST,
    _bwrap_present,
    everything,
    ok,
)
from tests.support.answer_task import TASK
from tests.support.runs import make_runtime

pytestmark = [pytest.mark.cli]

# The block code's helper: `attempt(name, fn)` stores fn's repr'd result, or the name of
# the exception (and errno name) it raised, in `tried`.
ATTEMPT = (
    "import errno, os\n"
    "tried = {}\n"
    "def attempt(name, fn):\n"
    "    try:\n"
    "        result = fn()\n"
    "        tried[name] = 'allowed' if result is None else result\n"
    "    except BaseException as exc:\n"
    "        code = errno.errorcode.get(getattr(exc, 'errno', None) or 0)\n"
    "        tried[name] = code or type(exc).__name__\n"
    "self.add_action('tried', lambda s: tried)\n"
)


@pytest.fixture
def kernel(workdir: Path) -> Iterator[Kernel]:
    with Kernel(workdir, limits=FAST) as opened:
        yield opened


def attack(kernel: Kernel, code: str) -> tuple[dict[str, Any], CallResult]:
    """Run `code` after the ATTEMPT helper; what each attempt got, and the call itself."""
    done = ok(kernel.exec_block(ATTEMPT + code, name="attack"))
    tried = ok(kernel.call_action("tried")).value
    assert isinstance(tried, dict)
    return tried, done


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- the file system ------------------------------------------------------------------


def test_attack_symlinks_and_hardlinks_out_of_the_work_dir(
    kernel: Kernel, workdir: Path, tmp_path: Path
) -> None:
    canary = tmp_path / "canary.txt"
    secret = f"CANARY-{uuid.uuid4().hex}"
    canary.write_text(secret)
    tried, done = attack(
        kernel,
        f"canary, folder = {str(canary)!r}, {str(tmp_path)!r}\n"
        "attempt('symlink', lambda: os.symlink(canary, 'link'))\n"
        "attempt('read through it', lambda: open('link').read())\n"
        "attempt('write through it', lambda: open('link', 'w').write('pwned'))\n"
        "attempt('api read', lambda: self.read_file('link'))\n"
        "attempt('api write', lambda: self.write_file('link', 'pwned'))\n"
        "attempt('folder symlink', lambda: os.symlink(folder, 'up'))\n"
        "attempt('create through it', lambda: open('up/planted.txt', 'w').write('pwned'))\n"
        "attempt('hardlink host file', lambda: os.link(canary, 'hard'))\n"
        "attempt('hardlink system file', lambda: os.link('/etc/passwd', 'hard2'))\n",
    )
    assert tried == {
        "symlink": "allowed",
        "read through it": "ENOENT",  # the host's path does not exist inside
        "write through it": "ENOENT",
        "api read": "PermissionError",  # and the API refuses to follow it at all
        "api write": "PermissionError",
        "folder symlink": "allowed",
        "create through it": "ENOENT",
        "hardlink host file": "ENOENT",
        "hardlink system file": "EXDEV",  # a read-only bind is another mount
    }, done
    # The links really are in the work dir, pointing out of it; the host files are intact.
    assert os.readlink(workdir / "link") == str(canary)
    assert os.readlink(workdir / "up") == str(tmp_path)
    assert canary.read_text() == secret
    assert not (tmp_path / "planted.txt").exists()
    assert not (workdir / "hard").exists() and not (workdir / "hard2").exists()
    assert secret not in everything(done)


def test_attack_the_trace_store(kernel: Kernel, tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    with TraceStore(db) as store:
        store.create_session("a task the agent must not rewrite", title="kept")
        before = digest(db)
        tried, done = attack(
            kernel,
            "import sqlite3\n"
            f"db = {str(db)!r}\n"
            "def rewrite():\n"
            "    conn = sqlite3.connect(f'file:{db}?mode=rw', uri=True)\n"
            "    conn.execute(\"update session set title = 'pwned'\")\n"
            "    conn.commit()\n"
            "attempt('sqlite', rewrite)\n"
            "attempt('raw read', lambda: open(db, 'rb').read(16))\n"
            "attempt('truncate', lambda: open(db, 'r+b').truncate(0))\n"
            "attempt('unlink', lambda: os.unlink(db))\n"
            "attempt('list its folder', lambda: os.listdir(os.path.dirname(db)))\n",
        )
        assert tried == {
            "sqlite": "OperationalError",  # unable to open database file
            "raw read": "ENOENT",
            "truncate": "ENOENT",
            "unlink": "ENOENT",
            "list its folder": "ENOENT",
        }, done
        assert digest(db) == before
        assert [s.title for s in store.list_sessions()] == ["kept"]
        assert "SQLite format 3" not in everything(done)


def test_attack_set_user_id_files_left_for_the_host(kernel: Kernel, workdir: Path) -> None:
    """The sandbox's uid is the console's uid outside (root, when the console is root): a
    set-user-ID copy of a shell left in the work dir would hand that identity to whoever
    runs it on the host. The seccomp filter refuses the S_ISUID and S_ISGID mode bits."""
    tried, done = attack(
        kernel,
        "import ctypes, shutil, stat\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "def raw(nr, *args):\n"
        "    if libc.syscall(nr, *args) == -1:\n"
        "        return errno.errorcode[ctypes.get_errno()]\n"
        "    return 'allowed'\n"
        "attempt('copy a shell', lambda: shutil.copy('/bin/sh', 'sh'))\n"
        "attempt('chmod u+s', lambda: os.chmod('sh', 0o4755))\n"
        "attempt('chmod g+s', lambda: os.chmod('sh', 0o2755))\n"
        "def fchmod():\n"
        "    with open('sh', 'rb') as f:\n"
        "        os.fchmod(f.fileno(), 0o6755)\n"
        "attempt('fchmod', fchmod)\n"
        "attempt('open O_CREAT 4755', lambda: os.close(os.open('new', os.O_CREAT | os.O_WRONLY, 0o4755)))\n"
        "attempt('mknod 4755', lambda: os.mknod('node', stat.S_IFREG | 0o4755))\n"
        "attempt('fchmodat2', lambda: raw(452, -100, b'sh', 0o4755, 0))\n"
        "attempt('openat2', lambda: raw(437, -100, b'sh', 0, 0))\n"
        "attempt('plain chmod', lambda: os.chmod('sh', 0o700))\n"
        "attempt('exec bit kept', lambda: oct(os.stat('sh').st_mode & 0o7777))\n"
        "status = open('/proc/self/status').read().splitlines()\n"
        "attempt('privileges', lambda: sorted(l for l in status if l.startswith(('NoNewPrivs', 'CapEff', 'CapBnd'))))\n",
    )
    assert tried == {
        "copy a shell": "sh",
        "chmod u+s": "EPERM",
        "chmod g+s": "EPERM",
        "fchmod": "EPERM",
        "open O_CREAT 4755": "EPERM",
        "mknod 4755": "EPERM",
        "fchmodat2": tried["fchmodat2"],
        "openat2": "ENOSYS",  # its mode lies in memory, out of the filter's sight
        "plain chmod": "allowed",  # the filter is about those two bits only
        "exec bit kept": "0o700",
        "privileges": [
            "CapBnd:\t0000000000000000",
            "CapEff:\t0000000000000000",
            "NoNewPrivs:\t1",
        ],
    }, done
    # fchmodat2 exists from Linux 6.6: refused by the filter there, unknown before.
    assert tried["fchmodat2"] in {"EPERM", "ENOSYS"}
    for entry in workdir.iterdir():
        mode = entry.lstat().st_mode
        assert not mode & (stat.S_ISUID | stat.S_ISGID), f"{entry.name}: {oct(mode)}"
    assert (workdir / "sh").stat().st_mode & 0o7777 == 0o700
    assert not (workdir / "new").exists() and not (workdir / "node").exists()


def test_attack_the_consoles_own_code_models_and_caches(kernel: Kernel) -> None:
    import sysconfig

    import agents

    host_site = sysconfig.get_paths()["purelib"]
    site = path_inside(host_site)
    source = Path(agents.__file__).resolve().parent
    hf_cache = Path.home() / ".cache" / "huggingface"
    planted = [Path(site) / f"pwned_{uuid.uuid4().hex}.py", source / "pwned.py"]
    tried, done = attack(
        kernel,
        f"site, source, hf = {site!r}, {str(source)!r}, {str(hf_cache)!r}\n"
        f"planted = {[str(p) for p in planted]!r}\n"
        "attempt('plant in site-packages', lambda: open(planted[0], 'w').write('import os'))\n"
        "attempt('plant in the source', lambda: open(planted[1], 'w').write('import os'))\n"
        "attempt('read the source', lambda: os.listdir(source))\n"
        "attempt('read the HF cache', lambda: os.listdir(hf))\n"
        f"attempt('overwrite the stdlib', lambda: open({path_inside(os.__file__)!r}, 'ab'))\n"
        "attempt('site-packages readable', lambda: 'torch' in os.listdir(site))\n",
    )
    # Site-packages and Python are bound read-only (block code may import numpy); the
    # console's source, its models and the Hugging Face cache are not there at all, unless
    # the source lies inside the venv (an installed, not editable, package).
    assert tried["plant in site-packages"] == "EROFS", done
    assert tried["overwrite the stdlib"] == "EROFS"
    assert tried["read the HF cache"] == "ENOENT"
    if not str(source).startswith(host_site):
        assert tried["plant in the source"] == "ENOENT"
        assert tried["read the source"] == "ENOENT"
    assert tried["site-packages readable"] in (True, False)
    for path in planted:
        assert not path.exists()


def test_attack_dev_and_shared_memory(workdir: Path) -> None:
    limits = Limits(wall_seconds=10, tmp_bytes=2 << 20, file_size_bytes=8 << 20)
    with Kernel(workdir, limits=limits) as kernel:
        tried, done = attack(
            kernel,
            "def fill(folder):\n"
            "    written = 0\n"
            "    try:\n"
            "        for i in range(16):\n"
            "            with open(f'{folder}/fill{i}', 'wb') as f:\n"
            "                f.write(b'x' * (1 << 20))\n"
            "            written += 1 << 20\n"
            "    finally:\n"
            "        tried[folder + ' written'] = written\n"
            "attempt('/dev/shm', lambda: fill('/dev/shm'))\n"
            "attempt('/dev', lambda: open('/dev/planted', 'w').write('x'))\n"
            "attempt('/dev/null still works', lambda: open('/dev/null', 'w').write('x'))\n"
            "attempt('devices', lambda: sorted(os.listdir('/dev')))\n"
            "attempt('a pty still works', lambda: len(os.openpty()))\n",
        )
    assert tried["/dev/shm"] == "ENOSPC", done
    assert tried["/dev/shm written"] <= limits.tmp_bytes
    assert tried["/dev"] == "EROFS"
    assert tried["/dev/null still works"] == 1
    assert tried["a pty still works"] == 2
    # No disk, memory or kernel-log device: only the harmless ones bwrap makes.
    assert set(tried["devices"]) <= {"console", "core", "fd", "full", "null", "ptmx", "pts",
                                     "random", "shm", "stderr", "stdin", "stdout", "tty",
                                     "urandom", "zero"}  # fmt: skip


def test_attack_memory_spread_over_many_processes(workdir: Path) -> None:
    """RLIMIT_AS caps each process; five children of 100 MiB each stay under it one by one
    but not together: the kernel tree's memory cgroup (root consoles) ends the biggest."""
    if os.geteuid() != 0:
        pytest.skip("the memory cgroup is made by a root console; others cap each process")
    from agents.sandbox.probe import _host

    memory_cgroup = _host().memory_cgroup
    assert memory_cgroup is not None, "root, but no writable memory cgroup was found"
    assert _host().pids_cgroup is not None, "root, but no writable pids cgroup was found"
    limits = Limits(wall_seconds=30, memory_bytes=512 << 20, total_memory_bytes=256 << 20)
    with Kernel(workdir, limits=limits) as kernel:
        tried, _ = attack(
            kernel,
            "import subprocess, sys\n"
            "hog = \"b = b'x' * (100 << 20); print('held', flush=True); "
            'import time; time.sleep(4)"\n'
            "children = [subprocess.Popen([sys.executable, '-c', hog], stdout=subprocess.PIPE)\n"
            "            for _ in range(5)]\n"
            "tried['codes'] = [child.wait() for child in children]\n"
            "tried['held'] = sum(b'held' in child.stdout.read() for child in children)\n",
        )
        made = list(memory_cgroup.parent.glob(f"agent-console-{os.getpid()}-*"))
        assert made, "the kernel runs in a memory cgroup of its own"
        assert kernel.alive and ok(kernel.exec_block("print(1)")).ok
    assert tried["held"] >= 1, tried  # a child really allocated and touched 100 MiB
    assert tried["codes"].count(-9) >= 2, tried  # 500 MiB asked, 256 MiB allowed: OOM-killed
    assert all(code in (0, -9) for code in tried["codes"]), tried
    assert not any(p.exists() for p in made), "the cgroup is removed with the kernel"


# --- the work dir's bytes and files ---------------------------------------------------

#: The checkout: a script run with `python -c` imports the project from here.
ROOT = Path(__file__).resolve().parents[2]
#: A work dir small enough to fill in a test: 16 MiB, 2,000 entries.
SMALL_WORKDIR = dataclasses.replace(FAST, workdir_bytes=16 << 20, workdir_files=2_000)


def mountable() -> None:
    """Skip where this console could not mount the work dir's tmpfs (not root, or root
    without CAP_SYS_ADMIN): the check that replaces it has its own test below."""
    problem = workdir_module.can_mount()
    if problem is not None:
        pytest.skip(f"the work dir cannot be a sized tmpfs here: {problem}")


def test_attack_fill_the_work_dir_past_its_bytes(workdir: Path) -> None:
    mountable()
    (workdir / "seed.txt").write_text("seeded")
    with Kernel(workdir, limits=SMALL_WORKDIR) as kernel:
        tried, _ = attack(
            kernel,
            "written = 0\n"
            "def fill():\n"
            "    global written\n"
            "    for i in range(100):\n"
            "        with open(f'fill{i}', 'wb') as f:\n"
            "            f.write(b'x' * ((1 << 20) - 4096))\n"
            "        written += 1\n"
            "attempt('fill', fill)\n"
            "tried['files'] = written\n"
            "attempt('seed', lambda: open('seed.txt').read())\n",
        )
        # each file is under RLIMIT_FSIZE: only the sum stops it, inside, with ENOSPC
        assert tried["fill"] == "ENOSPC" and tried["seed"] == "seeded", tried
        assert kernel.alive
        during = workdir_module.usage(workdir)
        assert during.bytes <= SMALL_WORKDIR.workdir_bytes
        assert "seed.txt" in os.listdir(workdir)  # the console reads it where it always is
    # closed: the files are on the disk below, the tmpfs gone
    assert not os.path.ismount(workdir)
    after = workdir_module.usage(workdir)
    assert 8 << 20 < after.bytes <= SMALL_WORKDIR.workdir_bytes + (1 << 20)
    assert (workdir / "seed.txt").read_text() == "seeded"


def test_attack_more_files_than_the_work_dir_may_hold(workdir: Path) -> None:
    mountable()
    with Kernel(workdir, limits=SMALL_WORKDIR) as kernel:
        tried, _ = attack(
            kernel,
            "made = []\n"
            "def make():\n"
            "    os.mkdir('many')\n"
            "    for i in range(100_000):\n"
            "        open(f'many/{i}', 'w').close()\n"
            "        made.append(i)\n"
            "attempt('files', make)\n"
            "attempt('folder', lambda: os.mkdir('another'))\n"
            "attempt('link', lambda: os.symlink('many', 'link'))\n"
            "os.remove('many/0')\n"
            "attempt('after one is removed', lambda: open('one-more', 'w').close())\n"
            "tried['made'] = len(made)\n",
        )
        assert tried["files"] == "ENOSPC", tried
        assert tried["folder"] == tried["link"] == "ENOSPC", tried
        assert tried["after one is removed"] == "allowed", tried
        # the folder `many` is one of the 2,000 entries
        assert tried["made"] == SMALL_WORKDIR.workdir_files - 1, tried
    assert workdir_module.usage(workdir).files == SMALL_WORKDIR.workdir_files


def test_attack_links_fifos_and_sparse_files_in_the_write_back(workdir: Path) -> None:
    """What the console copies back to the disk: a 4 MiB file hard-linked 200 times stays
    one file, 5 sparse files of 60 MiB (no bytes in the tmpfs) are left out past the byte
    limit instead of writing 300 MiB of zeros, a fifo does not block it, a link stays a
    link."""
    mountable()
    # files up to 64 MiB each: only the work dir's sum limits them
    limits = dataclasses.replace(SMALL_WORKDIR, file_size_bytes=64 << 20)
    with Kernel(workdir, limits=limits) as kernel:
        attack(
            kernel,
            "os.mkdir('links')\n"
            "with open('links/data', 'wb') as f:\n"
            "    f.write(os.urandom(4 << 20))\n"
            "for i in range(200):\n"
            "    os.link('links/data', f'links/{i}')\n"
            "for i in range(5):\n"
            "    with open(f'sparse{i}', 'wb') as f:\n"
            "        f.truncate(60 << 20)\n"
            "attempt('fifo', lambda: os.mkfifo('fifo'))\n"
            "os.symlink('/etc/passwd', 'passwd')\n",
        )
        started = time.monotonic()
    assert time.monotonic() - started < 10
    assert not os.path.ismount(workdir)
    assert os.stat(workdir / "links" / "data").st_nlink == 201
    assert os.path.samefile(workdir / "links" / "7", workdir / "links" / "data")
    assert workdir_module.usage(workdir).bytes <= SMALL_WORKDIR.workdir_bytes
    assert not (workdir / "fifo").exists()
    assert os.readlink(workdir / "passwd") == "/etc/passwd"


def test_attack_find_the_host_paths_of_the_work_dir_and_the_python(workdir: Path) -> None:
    """The work dir is a tmpfs of its own and the Python's folders are overlays at /opt:
    no host path of the work dir, the checkout, the venv or the Python installation is in
    a mount table, command line, environment or `sys` inside; the shell's `python` is the
    kernel's, with the venv's packages."""
    mountable()
    with Kernel(workdir, limits=SMALL_WORKDIR) as kernel:
        tried, done = attack(
            kernel,
            "import subprocess, sys\n"
            "attempt('mounts', lambda: open('/proc/self/mountinfo').read())\n"
            "attempt('cmdlines', lambda: [open(f'/proc/{p}/cmdline').read()\n"
            "    for p in os.listdir('/proc') if p.isdigit()])\n"
            "attempt('environ', lambda: [open(f'/proc/{p}/environ').read()\n"
            "    for p in os.listdir('/proc') if p.isdigit()])\n"
            "attempt('cwd', os.getcwd)\n"
            "attempt('sys', lambda: [sys.executable, sys.prefix, sys.base_prefix, sys.path])\n"
            "attempt('shell python', lambda: subprocess.run(\n"
            "    'python -c \"import sys, numpy; print(sys.prefix, numpy.__file__)\"',\n"
            "    shell=True, capture_output=True, text=True).stdout)\n",
        )
    assert " /workspace " in tried["mounts"], tried["mounts"]
    assert " /opt/python ro," in tried["mounts"], tried["mounts"]
    assert tried["cwd"] == "/workspace"
    assert tried["sys"][0] == python_layout().executable, tried["sys"]
    assert tried["shell python"].startswith("/opt/python /opt/python-packages/"), tried
    host_paths = {str(workdir), str(workdir.parent), str(ROOT), sys.prefix, sys.base_prefix}
    host_paths |= {os.path.realpath(path) for path in host_paths}
    for name in host_paths:
        assert name not in everything(done) and name not in repr(tried), name


FILL = """def fill(subagent):
    for i in range(100):
        with open(f"fill{i}", "wb") as f:
            f.write(b"x" * (1 << 20))
self.add_action("Fill the work dir", fill)"""
#: The operator's fix once the work dir is full: make room, then answer.
MAKE_ROOM = """def solve(subagent):
    import glob, os
    for path in glob.glob("fill*"):
        os.remove(path)
    subagent.write_file("answer.txt", "42\\n")
self.add_action("Make room and write the answer", solve)"""


def test_an_action_that_fills_the_work_dir_fails_inside_and_the_session_solves_its_task(
    backend: object, tmp_path: Path
) -> None:
    """The settings' limit reaches the session's kernel: the action's own write fails
    with ENOSPC (the kernel lives), the operator's fix makes room and the checks pass."""
    mountable()
    with TraceStore(tmp_path / "traces.db") as store:
        runtime, _ = make_runtime(
            store,
            backend,
            tmp_path,
            [lambda r: Answer.edit(FILL)] + [lambda r: Answer.edit(MAKE_ROOM)] * 4,
            task=TASK,
            candidates=1,
            escalation=(),
            block_tokens=12,
            max_ticks=2,
            workdir_bytes=4 << 20,
        )
        outcome = runtime.run()
        assert outcome.status is SessionStatus.COMPLETED, outcome
        edits = [n for n in store.tree(outcome.session_id) if n.author is Author.OPERATOR]
        filled = store.get_node(edits[0].id)
        assert filled.status is NodeStatus.FAILED, filled.meta
        assert "No space left on device" in filled.meta["error"], filled.meta
        assert "kernel" not in filled.meta["error"]
    assert workdir_module.usage(runtime.workdir).bytes <= 4 << 20
    assert (runtime.workdir / "answer.txt").read_text() == "42\n"


DEAD_CONSOLE = """
import sys, time
from pathlib import Path
from agents.sandbox import Kernel
kernel = Kernel(Path(sys.argv[1]))
kernel.start()
result = kernel.exec_block("open('written.txt', 'w').write('before the kill')")
assert result.ok, result.error
print("ready", flush=True)
time.sleep(600)
"""


def test_a_work_dir_a_killed_console_left_mounted_is_written_back(workdir: Path) -> None:
    mountable()
    leave_a_dead_consoles_work_dir(workdir)
    with Kernel(workdir, limits=SMALL_WORKDIR) as kernel:
        read = ok(kernel.exec_block("self.add_action('r', lambda s: open('written.txt').read())"))
        assert read.ok and ok(kernel.call_action("r")).value == "before the kill"
    assert not os.path.ismount(workdir)
    assert (workdir / "written.txt").read_text() == "before the kill"


def leave_a_dead_consoles_work_dir(workdir: Path) -> None:
    """A console that mounted `workdir`'s tmpfs, wrote to it, and was killed with -9."""
    console = subprocess.Popen(
        [sys.executable, "-c", DEAD_CONSOLE, str(workdir)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert console.stdout is not None and console.stdout.readline().strip() == "ready"
    finally:
        console.kill()
        console.wait()
    assert os.path.ismount(workdir)  # the tmpfs outlives the console that mounted it


def test_a_dead_consoles_work_dir_whose_write_back_fails_stays_mounted_whole(
    tmp_path: Path,
) -> None:
    """The disk below is full: the write back fails, the kernel does not start, and the
    tmpfs stays over the work dir with every file; once there is room, the next start
    writes it back."""
    mountable()
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", disk], check=True)
    try:
        workdir = disk / "work"
        workdir.mkdir()
        leave_a_dead_consoles_work_dir(workdir)
        (workdir / "big").write_bytes(b"x" * (4 << 20))
        with pytest.raises(SandboxError, match=r"could not be bounded.*No space left"):
            Kernel(workdir, limits=SMALL_WORKDIR).start()
        assert os.path.ismount(workdir)
        assert (workdir / "big").stat().st_size == 4 << 20
        assert (workdir / "written.txt").read_text() == "before the kill"
        subprocess.run(["mount", "-o", "remount,size=64m", disk], check=True)
        with Kernel(workdir, limits=SMALL_WORKDIR) as kernel:
            assert (
                ok(kernel.exec_block("import os\nprint(os.path.getsize('big'))")).stdout
                == "4194304\n"
            )
        assert not os.path.ismount(workdir)
        assert (workdir / "big").stat().st_size == 4 << 20
    finally:
        subprocess.run(["umount", "-l", disk], check=False)


CHECKED = """
import json, sys, time
from pathlib import Path
from agents.sandbox import Kernel, Limits, sandbox_status
limits = Limits(wall_seconds=30, workdir_bytes=8 << 20, workdir_files=100)
out = {"status": sandbox_status().detail}
with Kernel(Path(sys.argv[1]), limits=limits) as kernel:
    out["executable"] = kernel.exec_block("import sys\\nprint(sys.executable)").stdout
    for name, code in (
        ("bytes", "with open('big', 'wb') as f:\\n    f.write(b'x' * (12 << 20))\\n"
                  "import time\\ntime.sleep(25)"),
        ("files", "import os\\nos.remove('big')\\n"
                  "for i in range(200):\\n    open(f'f{i}', 'w').close()"),
    ):
        result = kernel.exec_block(code)
        out[name] = [result.ok, result.killed, result.error, result.duration]
        # past the next check's time (a loaded machine's slow restart): the kernel must
        # still start in the over-full work dir, so that a block can make room
        time.sleep(1.2)
        kernel.restart()
print(json.dumps(out))
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root")
def test_without_the_privilege_to_mount_the_work_dir_is_checked_during_each_call(
    workdir: Path,
) -> None:
    """Root without CAP_SYS_ADMIN (a container's default) cannot mount the tmpfs: the
    sandbox says so, and a work dir past a limit kills the kernel within a second or so
    of a call, and at its end."""
    done = subprocess.run(
        ["setpriv", "--bounding-set", "-sys_admin", sys.executable, "-c", CHECKED, str(workdir)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert "the work dir is checked during and after each call, not bounded" in out["status"]
    # the Python's folders are bound as they are: named at /opt, their host paths in the
    # mount table
    assert "the mount table inside names the Python installation's host" in out["status"]
    assert out["executable"] == python_layout().executable + "\n", out
    ok_, killed, error, duration = out["bytes"]
    assert (ok_, killed) == (False, "disk"), out
    assert "12.0 MiB, past its limit of 8.0 MiB" in error and duration < 10, out
    ok_, killed, error, _ = out["files"]
    assert (ok_, killed) == (False, "disk") and "past its limit of 100" in error, out


# --- /proc, sysctls and the terminal --------------------------------------------------


def test_attack_host_processes_and_sysctls_through_proc(kernel: Kernel) -> None:
    console = os.getpid()
    hostname = socket.gethostname()
    core_pattern = Path("/proc/sys/kernel/core_pattern").read_text()
    # Opening for writing is the permission check; nothing is ever written, so a sandbox
    # that failed this test would still leave the host's sysctls alone.
    tried, done = attack(
        kernel,
        "import socket\n"
        "def writable(path):\n"
        "    os.close(os.open(path, os.O_WRONLY))\n"
        "    return 'opened for writing'\n"
        f"console = {console}\n"
        "attempt('pids', lambda: sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
        "attempt('console cmdline', lambda: open(f'/proc/{console}/cmdline').read())\n"
        "attempt('console mem', lambda: open(f'/proc/{console}/mem', 'rb').read(1))\n"
        "attempt('console root', lambda: os.listdir(f'/proc/{console}/root'))\n"
        "status = open('/proc/1/status').read().splitlines()\n"
        "attempt('init', lambda: sorted(l for l in status if l.startswith(('Seccomp:', 'NoNewPrivs', 'CapEff'))))\n"
        "attempt('core_pattern', lambda: writable('/proc/sys/kernel/core_pattern'))\n"
        "attempt('swappiness', lambda: writable('/proc/sys/vm/swappiness'))\n"
        "attempt('hostname sysctl', lambda: writable('/proc/sys/kernel/hostname'))\n"
        "attempt('sethostname', lambda: socket.sethostname('pwned'))\n"
        "attempt('sysrq', lambda: writable('/proc/sysrq-trigger'))\n"
        "attempt('/sys', lambda: os.listdir('/sys'))\n"
        "attempt('hostname', lambda: socket.gethostname())\n",
    )
    # Only the sandbox's own processes: bwrap's init (1) and the kernel.
    assert tried["pids"] == [1, 2], done
    if console > 2:
        assert tried["console cmdline"] == "ENOENT"
        assert tried["console mem"] == "ENOENT"
        assert tried["console root"] == "ENOENT"
    # bwrap's init can be read by the kernel, and it is as confined as the kernel is (the
    # same filter, no capabilities, the same rlimits); nothing can write into it
    # (test_attack_take_over_init_through_proc).
    assert tried["init"] == ["CapEff:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"]
    assert tried["core_pattern"] == "EROFS"
    assert tried["swappiness"] == "EROFS"
    assert tried["hostname sysctl"] == "EROFS"
    assert tried["sethostname"] == "EPERM"
    assert tried["sysrq"] in {"ENOENT", "EROFS", "EACCES"}
    assert tried["/sys"] == "ENOENT"
    assert tried["hostname"] == "sandbox"
    assert socket.gethostname() == hostname
    assert Path("/proc/sys/kernel/core_pattern").read_text() == core_pattern


#: Take over bwrap's init (PID 1 inside, the sandbox's uid) by writing its memory, and read
#: what only root may read in /proc (the sandbox's uid is root outside for a root console).
INIT_AND_ROOT_ONLY = (
    "def write_init():\n"
    "    with open('/proc/1/mem', 'r+b'):\n"
    "        return 'opened for writing'\n"
    "attempt('init mem', write_init)\n"
    "rows = open('/proc/1/limits').read().splitlines()[1:]\n"
    "attempt('init limits', lambda: {r[:26].strip(): r[26:47].strip() for r in rows})\n"
    "def peek(name):\n"
    "    with open('/proc/' + name, 'rb') as f:\n"
    "        return len(f.read(64))\n"
    "for name in ROOT_ONLY:\n"
    "    attempt(name, lambda name=name: peek(name))\n"
)
ROOT_ONLY = ("kpageflags", "kpagecount", "slabinfo", "vmallocinfo", "pagetypeinfo", "timer_list")


def check_init_and_root_only(tried: dict[str, Any], limits: Limits) -> None:
    assert tried["init mem"] == "EROFS", tried  # all of /proc is read-only inside
    assert tried["init limits"] == tried["init limits"] | {
        "Max address space": str(limits.memory_bytes),
        "Max file size": str(limits.file_size_bytes),
        "Max open files": str(limits.open_files),
        "Max cpu time": str(limits.cpu_seconds),
        "Max core file size": "0",
    }, tried
    for name in ROOT_ONLY:
        if Path("/proc", name).exists():
            assert tried[name] in ("EACCES", "EPERM", 0), (name, tried[name])


def test_attack_take_over_init_through_proc(kernel: Kernel) -> None:
    tried, _ = attack(kernel, f"ROOT_ONLY = {ROOT_ONLY!r}\n" + INIT_AND_ROOT_ONLY)
    check_init_and_root_only(tried, FAST)


NO_PRIVILEGE = """
import json, sys
sys.path.insert(0, {root!r})
from agents.sandbox import Kernel, Limits, sandbox_status
with Kernel({work!r}, limits=Limits(**{limits!r})) as kernel:
    defined = kernel.exec_block({code!r})
    tried = kernel.call_action("tried").value if defined.ok else defined.error
    left = kernel.exec_block(
        "import subprocess\\n"
        "subprocess.Popen(['sh', '-c', 'while :; do :; done'], start_new_session=True)\\n"
    )
    strays = kernel._strays()
print(json.dumps({{"tried": tried, "strays": strays, "status": sandbox_status().detail}}))
"""
#: A Python any user can run (the console's may live in root's home).
SYSTEM_PYTHON = Path("/usr/bin/python3")


def test_attack_init_and_strays_without_privilege() -> None:
    """The same attack from a console that is not root (uid 65534, no capabilities, the
    system's Python): no cgroups then, so what a call leaves running is killed when it
    returns."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None or not SYSTEM_PYTHON.exists():
        pytest.skip("needs root, setpriv and /usr/bin/python3 to start a console without privilege")
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"]
    drop += ["--bounding-set=-all", str(SYSTEM_PYTHON), "-I", "-c"]
    work = Path(tempfile.mkdtemp(prefix="no-privilege-"))
    try:
        os.chown(work, 65534, 65534)
        code = ATTEMPT + f"ROOT_ONLY = {ROOT_ONLY!r}\n" + INIT_AND_ROOT_ONLY
        limits = dataclasses.asdict(FAST)
        script = NO_PRIVILEGE.format(root=str(ROOT), work=str(work), code=code, limits=limits)
        done = subprocess.run(
            [*drop, script], capture_output=True, text=True, timeout=120, cwd=work,
            env={"PATH": os.environ["PATH"], "HOME": str(work), "TMPDIR": str(work)},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        found = json.loads(done.stdout.splitlines()[-1])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    check_init_and_root_only(found["tried"], FAST)
    assert found["strays"] == [], found
    assert "no CPU quota" in found["status"], found["status"]


def test_attack_busy_processes_left_behind_by_a_call(workdir: Path) -> None:
    """Processes a call leaves running share the kernel's CPU quota between calls (a cpu
    cgroup); without one they are killed when the call returns."""
    limits = dataclasses.replace(FAST, cpus=0.2)
    with Kernel(workdir, limits=limits) as kernel:
        ok(
            kernel.exec_block(
                "import subprocess\n"
                "for _ in range(4):\n"
                "    subprocess.Popen(['sh', '-c', 'while :; do :; done'], start_new_session=True)\n"
            )
        )
        before = cpu_seconds(kernel._tree())
        time.sleep(2.0)
        used = cpu_seconds(kernel._tree()) - before
    from agents.sandbox.probe import _host

    if _host().cpu_cgroup is not None:
        # 0.2 CPU for 2 s is 0.4 s; four busy processes unbounded would take 2 s or more
        assert used < 0.8, used
    else:
        assert used < 0.1, used  # nothing was left to run


def cpu_seconds(pids: list[int]) -> float:
    """User and system time of `pids`, in seconds."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def test_attack_inject_keystrokes_into_a_terminal(kernel: Kernel) -> None:
    """TIOCSTI pushes bytes into a terminal's input, as if the operator typed them. The
    kernel has no terminal (stdin is /dev/null, a new session, its own devpts), and the
    filter refuses TIOCSTI and TIOCLINUX even on a pty of its own."""
    master, slave = os.openpty()
    try:
        tty.setraw(slave)
        os.set_blocking(slave, False)
        host_pty = os.ttyname(slave)
        tried, done = attack(
            kernel,
            "import fcntl, termios\n"
            "def inject(fd):\n"
            "    fcntl.ioctl(fd, termios.TIOCSTI, b'x')\n"
            f"attempt('host pty', lambda: os.open({host_pty!r}, os.O_RDWR))\n"
            "attempt('/dev/tty', lambda: os.open('/dev/tty', os.O_RDWR))\n"
            "for fd in (0, 1, 2):\n"
            "    attempt(f'fd {fd}', lambda: inject(fd))\n"
            "m, s = os.openpty()\n"
            "attempt('own pty', lambda: inject(s))\n"
            "attempt('TIOCLINUX', lambda: fcntl.ioctl(s, 0x541C, b'\\x0c'))\n"
            "attempt('a plain ioctl', lambda: len(fcntl.ioctl(s, termios.TIOCGWINSZ, b'\\0' * 8)))\n",
        )
        assert tried == {
            "host pty": "ENOENT",  # a devpts of its own: the host's terminals are not there
            "/dev/tty": "ENXIO",  # no controlling terminal
            "fd 0": "EPERM",
            "fd 1": "EPERM",
            "fd 2": "EPERM",
            "own pty": "EPERM",
            "TIOCLINUX": "EPERM",
            "a plain ioctl": 8,
        }, done
        with pytest.raises(BlockingIOError):
            os.read(slave, 100)
    finally:
        os.close(master)
        os.close(slave)


def test_attack_inherited_file_descriptors(kernel: Kernel, workdir: Path, tmp_path: Path) -> None:
    """Only the protocol pipes, the captured std streams and /dev/null are open inside:
    not the console's store, logs or sockets, even ones the console made inheritable."""
    secret = tmp_path / "console.log"
    secret.write_text(f"SECRET-{uuid.uuid4().hex}")
    held = os.open(secret, os.O_RDONLY)
    os.set_inheritable(held, True)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.set_inheritable(True)
    try:
        with TraceStore(tmp_path / "traces.db") as store, Kernel(workdir, limits=FAST) as fresh:
            store.create_session("open while the kernel starts")
            tried, done = attack(
                fresh,
                "fds = {}\n"
                "for name in os.listdir('/proc/self/fd'):\n"
                "    try:\n"
                "        fds[int(name)] = os.readlink(f'/proc/self/fd/{name}')\n"
                "    except OSError:\n"
                "        pass  # the listing's own fd, closed by now\n"
                "tried['fds'] = fds\n"
                f"attempt('read the console fd number', lambda: os.read({held}, 100))\n"
                f"attempt('accept on its socket number', lambda: __import__('socket').socket(fileno={listener.fileno()}).accept())\n",
            )
        targets = tried["fds"].values()
        assert targets, done
        for target in targets:
            assert target == "/dev/null" or target.startswith("pipe:"), tried["fds"]
        assert len(tried["fds"]) <= 10
        assert tried["read the console fd number"] == "EBADF"
        assert tried["accept on its socket number"] == "EBADF"
        assert secret.read_text() not in everything(done)
    finally:
        os.close(held)
        listener.close()


# --- sockets and the network ----------------------------------------------------------


def test_attack_unix_sockets_and_dns(kernel: Kernel, tmp_path: Path) -> None:
    abstract_name = f"\0agent-console-test-{uuid.uuid4().hex}"
    path = tmp_path / "console.sock"
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    on_disk = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with abstract, on_disk:
        abstract.bind(abstract_name)
        abstract.listen()
        abstract.settimeout(0.3)
        on_disk.bind(str(path))
        on_disk.listen()
        on_disk.settimeout(0.3)
        tried, done = attack(
            kernel,
            "import socket\n"
            "def connect(address):\n"
            "    with socket.socket(socket.AF_UNIX) as s:\n"
            "        s.connect(address)\n"
            "        s.sendall(b'hello from the sandbox')\n"
            f"attempt('abstract', lambda: connect({abstract_name!r}))\n"
            f"attempt('on disk', lambda: connect({str(path)!r}))\n"
            "attempt('dns', lambda: socket.getaddrinfo('example.com', 443))\n"
            "attempt('dns by ip', lambda: socket.create_connection(('1.1.1.1', 53), 1))\n"
            "attempt('resolv.conf', lambda: open('/etc/resolv.conf').read())\n"
            "attempt('interfaces', lambda: [l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]])\n",
        )
        assert tried == {
            "abstract": "ECONNREFUSED",  # its own network namespace: another abstract space
            "on disk": "ENOENT",
            "dns": "gaierror",
            "dns by ip": "EPERM",
            "resolv.conf": "ENOENT",
            "interfaces": ["lo"],
        }, done
        for listener in (abstract, on_disk):
            with pytest.raises(TimeoutError):
                listener.accept()


def test_attack_writes_anywhere_but_the_work_dir_tmp_and_dev_shm(kernel: Kernel) -> None:
    # bwrap's root is a tmpfs with no size cap: before it was remounted read-only, block
    # code could fill memory through /x, /home or /opt, past every disk limit
    places = ["/x", "/etc/x", "/opt/x", "/home/x", "/usr/x", "/dev/x", "/run/x", "/var/x",
              "/root/x", "/sbin/x", "/tmp/x", "/dev/shm/x", "/workspace/x"]  # fmt: skip
    code = (
        "def write(path):\n"
        "    os.makedirs(os.path.dirname(path), exist_ok=True)\n"
        "    with open(path, 'w') as handle:\n"
        "        handle.write('x' * 4096)\n"
        f"for place in {places!r}:\n"
        "    attempt(place, lambda: write(place))\n"
    )
    tried, _ = attack(kernel, code)
    writable = {place for place, got in tried.items() if got == "allowed"}
    assert writable == {"/tmp/x", "/dev/shm/x", "/workspace/x"}, tried
    assert set(tried.values()) <= {"allowed", "EROFS"}, tried


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="i386 and x32 are x86-64's ABIs")
def test_attack_system_calls_through_other_abis_fail_at_once(kernel: Kernel) -> None:
    # i386's `int 0x80` and x32's numbers match none of the filter's x86-64 rules: they
    # used to kill only the calling thread, and the call hung to its wall clock
    code = (
        "import ctypes, mmap\n"
        "def run(machine_code):\n"
        "    page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
        "    page.write(machine_code)\n"
        "    address = ctypes.addressof(ctypes.c_char.from_buffer(page))\n"
        "    return ctypes.CFUNCTYPE(ctypes.c_long)(address)()\n"
        # mov eax, 20 (i386 getpid); int 0x80; ret
        "attempt('i386', lambda: run(b'\\xb8\\x14\\x00\\x00\\x00\\xcd\\x80\\xc3'))\n"
        # mov rax, 0x40000000 | 39 (x32 getpid); syscall; ret
        "attempt('x32', lambda: run(b'\\x48\\xc7\\xc0\\x27\\x00\\x00\\x40\\x0f\\x05\\xc3'))\n"
    )
    started = time.monotonic()
    tried, _ = attack(kernel, code)
    assert time.monotonic() - started < 5
    assert tried == {"i386": -38, "x32": -38}  # -ENOSYS, returned in rax
    assert kernel.alive


# --- privileges and limits ------------------------------------------------------------


def test_attack_privilege_syscalls_and_raising_limits(kernel: Kernel) -> None:
    tried, done = attack(
        kernel,
        "import ctypes, resource, stat\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "def raw(nr, *args):\n"
        "    if libc.syscall(nr, *args) == -1:\n"
        "        return errno.errorcode[ctypes.get_errno()]\n"
        "    return 'allowed'\n"
        "unlimited = resource.RLIM_INFINITY\n"
        "attempt('raise RLIMIT_AS', lambda: resource.setrlimit(resource.RLIMIT_AS, (unlimited, unlimited)))\n"
        "attempt('raise RLIMIT_NPROC', lambda: resource.setrlimit(resource.RLIMIT_NPROC, (4096, 4096)))\n"
        "attempt('raise RLIMIT_FSIZE', lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (unlimited, unlimited)))\n"
        "attempt('setuid 0', lambda: os.setuid(0))\n"
        "attempt('setgid 0', lambda: os.setgid(0))\n"
        "attempt('setresuid 0', lambda: os.setresuid(0, 0, 0))\n"
        "attempt('chroot', lambda: os.chroot('/tmp'))\n"
        "attempt('device node', lambda: os.mknod('disk', stat.S_IFBLK | 0o666, os.makedev(8, 0)))\n"
        "x86 = os.uname().machine == 'x86_64'\n"
        "calls = {'keyctl': (250, 0, 0, 0, 0, 0), 'add_key': (248, b'user', b'k', b'v', 1, -4),\n"
        "         'bpf': (321, 0, 0, 0), 'perf_event_open': (298, 0, 0, -1, -1, 0),\n"
        "         'io_uring_setup': (425, 1, 0), 'userfaultfd': (323, 0),\n"
        "         'personality': (135, 0x0040000), 'kexec_load': (246, 0, 0, 0, 0),\n"
        "         'init_module': (175, 0, 0, b''), 'setns': (308, 0, 0),\n"
        "         'pivot_root': (155, b'/', b'/'), 'syslog': (103, 3, 0, 0),\n"
        "         'reboot': (169, 0, 0, 0, 0)}\n"
        "for name, (nr, *args) in calls.items():\n"
        "    attempt(name, (lambda nr=nr, args=args: raw(nr, *args)) if x86 else (lambda: 'EPERM'))\n"
        "attempt('limits now', lambda: [resource.getrlimit(r) for r in (resource.RLIMIT_AS, resource.RLIMIT_NPROC, resource.RLIMIT_FSIZE)])\n"
        "attempt('uid now', lambda: os.getresuid())\n",
    )
    refused = {
        name: "EPERM"
        for name in (
            "keyctl",
            "add_key",
            "bpf",
            "perf_event_open",
            "io_uring_setup",
            "userfaultfd",
            "personality",
            "kexec_load",
            "init_module",
            "setns",
            "pivot_root",
            "syslog",
            "reboot",
            "chroot",
            "device node",
        )
    }
    limits = [[FAST.memory_bytes] * 2, [FAST.processes] * 2, [FAST.file_size_bytes] * 2]
    assert tried == {
        **refused,
        "raise RLIMIT_AS": "ValueError",  # "not allowed to raise maximum limit"
        "raise RLIMIT_NPROC": "ValueError",
        "raise RLIMIT_FSIZE": "ValueError",
        "setuid 0": "EINVAL",  # uid 0 does not exist in the sandbox's user namespace
        "setgid 0": "EINVAL",
        "setresuid 0": "EINVAL",
        "limits now": limits,
        "uid now": [65534, 65534, 65534],
    }, done
    # The limits still hold: 2 GiB cannot be had, and a new kernel process is as confined.
    big = kernel.exec_block("blob = bytearray(2 << 30)")
    assert not big.ok and "MemoryError" in (big.error or "")
    assert kernel.alive


# --- the kernel protocol and the wall clock -------------------------------------------


@pytest.mark.parametrize(
    ("code", "killed"),
    [
        ("os.close(self._kernel.responses_fd)", "crashed"),
        ("os.write(self._kernel.responses_fd, struct.pack('>I', 1 << 30))", "output"),
        ("os.write(self._kernel.responses_fd, b'\\x00\\x00\\x00\\x05[1,2]')", "output"),
        ("os.write(self._kernel.responses_fd, b'\\x00\\x00\\x00\\x40{\"id\": 1')", "output"),
    ],
    ids=["close-responses", "giant-length", "not-an-object", "torn-frame"],
)
def test_attack_garbage_on_the_kernel_protocol(kernel: Kernel, code: str, killed: str) -> None:
    ok(kernel.exec_block("remembered = 1"))
    started = time.monotonic()
    done = kernel.exec_block(f"import os, struct\n{code}\n", name="attack")
    assert time.monotonic() - started < 5, "the console waited on a broken protocol"
    assert not done.ok and done.killed == killed, done
    assert not kernel.alive
    if killed == "crashed":
        assert "protocol error" in (done.error or "")
    kernel.restart()
    fresh = kernel.exec_block("print(remembered)")
    assert not fresh.ok and "NameError" in (fresh.error or "")
    assert ok(kernel.exec_block("print('clean')")).stdout == "clean\n"


def test_attack_forged_and_stolen_protocol_frames(kernel: Kernel) -> None:
    # A frame with another id is skipped: the call still gets the kernel's real answer.
    forged = kernel.exec_block(
        "import os, json, struct\n"
        "body = json.dumps({'id': 10**6, 'ok': True, 'value': 'forged'}).encode()\n"
        "os.write(self._kernel.responses_fd, struct.pack('>I', len(body)) + body)\n"
        "print('real')\n"
    )
    assert ok(forged).stdout == "real\n" and forged.value is None
    assert ok(kernel.exec_block("print('next')")).stdout == "next\n"
    # Closing the request pipe: this call's answer still comes, the next one finds the
    # kernel gone and says so, and a restart recovers.
    closed = ok(kernel.exec_block("import os\nos.close(self._kernel.requests_fd)"))
    assert closed.ok
    started = time.monotonic()
    after = kernel.exec_block("print('lost')")
    assert time.monotonic() - started < 5
    assert after.killed == "crashed" and "protocol error" in (after.error or "")
    kernel.restart()
    assert ok(kernel.exec_block("print('back')")).stdout == "back\n"


def test_attack_time_bombs_in_callbacks(workdir: Path) -> None:
    limits = Limits(wall_seconds=1, cpu_seconds=30)
    with Kernel(workdir, limits=limits) as kernel:
        ok(
            kernel.exec_block(
                "import time\n"
                "def spin(subagent):\n"
                "    while True:\n"
                "        pass\n"
                "def sleep_forever(subagent):\n"
                "    while True:\n"
                "        time.sleep(1)\n"
                "self.add_evaluation('looks fine', spin)\n"
                "self.add_observation_view('first', lambda s: 'rendered')\n"
                "self.add_observation_view('bomb', sleep_forever)\n"
                "self.add_observation_view('after', lambda s: 'never')\n"
            )
        )
        started = time.monotonic()
        evaluation = kernel.call_evaluation("looks fine")
        assert time.monotonic() - started < 4
        assert not evaluation.ok and evaluation.killed == "timeout"
        assert "1 s wall-clock limit" in (evaluation.error or "")
        assert not kernel.alive
        kernel.restart()
        # The namespace died with the kernel: set the views up again in the fresh one.
        ok(
            kernel.exec_block(
                "import time\n"
                "def sleep_forever(subagent):\n"
                "    while True:\n"
                "        time.sleep(1)\n"
                "self.add_observation_view('first', lambda s: 'rendered')\n"
                "self.add_observation_view('bomb', sleep_forever)\n"
                "self.add_observation_view('after', lambda s: 'never')\n"
            )
        )
        started = time.monotonic()
        rendered = kernel.render_observations()
        assert time.monotonic() - started < 4
        assert [title for title, _ in rendered] == ["first", "bomb"]
        assert rendered[0][1].ok and rendered[0][1].value == "rendered"
        assert rendered[1][1].killed == "timeout"
        kernel.restart()
        assert ok(kernel.exec_block("print('recovered')")).stdout == "recovered\n"
