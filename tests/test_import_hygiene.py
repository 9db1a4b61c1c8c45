"""The headless core must not drag in the TUI or the heavy ML stack when imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("textual", "torch", "transformers", "vllm", "openai", "peft")

# Opening a store also imports Alembic (the schema is created), so that path is covered too.
# Every backend module is imported: each loads its library only when it is constructed.
# The runtime, the sandbox and the headless entry point (`--query`) are covered too.
PROBE = """
import json, sys, tempfile, pathlib
import agents, training, storage, storage.store, agents.settings, agents.backends.serving
import agents.backends, agents.backends.transformers_backend, agents.backends.openai_backend
import agents.backends.vllm_backend, agents.backends.lora
import agents.blocks, agents.ranking, agents.approval, agents.runtime, agents.sandbox
import agents.sandbox.kernel, agents.tasks, app.cli.headless, app.cli.doctor
from storage import TraceStore
with tempfile.TemporaryDirectory() as d:
    TraceStore(pathlib.Path(d) / "t.db").close()
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})))
"""


def _python(code: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_core_imports_leave_heavy_and_tui_modules_out() -> None:
    done = _python(PROBE.format(heavy=set(HEAVY)))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_probe_would_notice_a_heavy_import() -> None:
    """The probe itself works: importing textual shows up."""
    done = _python("import textual\n" + PROBE.format(heavy=set(HEAVY)))
    assert done.returncode == 0, done.stderr
    assert "textual" in json.loads(done.stdout.strip().splitlines()[-1])


def test_import_linter_contracts_are_kept() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    assert lint_imports.exists(), f"import-linter is not installed next to {sys.executable}"
    done = subprocess.run(
        [str(lint_imports), "--no-cache", "--no-logo"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "broken" in done.stdout and " 0 broken" in done.stdout
