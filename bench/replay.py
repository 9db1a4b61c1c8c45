"""Whether a change kept the agent's behaviour: one `--query --json` session, in this
work tree and in another revision, byte for byte, timings masked.

Run: `.venv/bin/python bench/replay.py [--against REV]` (default HEAD: what the
uncommitted change does). The model is the tests' scripted stand-in for vLLM
(tests/support/scripted_vllm.py, served from this tree): it writes the same blocks for
every prompt, so a session is the same run after run while the runtime is. The session is
`fix_failing_test` in script blocks, two ticks, approval `auto`, memory off; the sampling
progress events (cut by the clock) and every duration are left out of the comparison.
Prints how many event lines differ and the first two pairs; exits 1 when any do.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: What the scripted model writes: a fix, a check, the rest short.
BLOCKS = {
    "orientation": "# Fix the word counter: its regex drops apostrophes.",
    "action": '# textstats/__init__.py\nimport re\n_WORD = re.compile(r"[a-z\']+")\n',
    "expectation": "# The tests pass.",
    "evaluation": "# the tests pass\nimport subprocess, sys\n"
    "sys.exit(subprocess.run([sys.executable, '-m', 'unittest', '-q']).returncode)",
}
#: Fields that hold a time.
TIMES = {"duration", "seconds", "tokens_per_second", "created_at", "updated_at", "elapsed"}


def session_events(tree: Path, url: str, work: Path) -> list[str]:
    """The session's `--json` events, run from `tree`, masked."""
    work.mkdir(parents=True)
    done = subprocess.run(
        [
            sys.executable,
            *("-m", "app", "--db", str(work / "traces.db"), "--backend", "openai"),
            *("--base-url", url, "--model", "scripted", "--task", "fix_failing_test"),
            *("--query", "fix it", "--json", "--memory", "off", "--max-ticks", "2"),
            *("--approval", "auto", "--form", "script"),
        ],
        cwd=tree,
        env={"PATH": "/usr/bin:/bin", "HOME": str(work), "XDG_DATA_HOME": str(work)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        sys.exit(f"no session from {tree}: {done.stderr.strip().splitlines()[-1:]}")
    return [json.dumps(mask(e), sort_keys=True) for e in lines if e.get("event") != "sampling"]


def mask(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: "T" if k in TIMES else mask(v) for k, v in value.items()}
    if isinstance(value, list):
        return [mask(v) for v in value]
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", default="HEAD", help="the revision to compare with")
    args = parser.parse_args()
    from tests.support.scripted_vllm import scripted_vllm

    with (
        tempfile.TemporaryDirectory(prefix="agent-console-replay-") as tmp,
        scripted_vllm(BLOCKS) as url,
    ):
        other = Path(tmp) / "other"
        subprocess.run(
            ["git", "worktree", "add", "--detach", "-q", str(other), args.against],
            cwd=ROOT,
            check=True,
        )
        try:
            before = session_events(other, url, Path(tmp) / "before")
            after = session_events(ROOT, url, Path(tmp) / "after")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=ROOT)
    differ = [(a, b) for a, b in zip(before, after, strict=False) if a != b]
    count = len(differ) + abs(len(before) - len(after))
    print(f"{len(before)} events at {args.against}, {len(after)} here: {count} differ")
    for a, b in differ[:2]:
        print(f"- {a[:300]}\n+ {b[:300]}")
    return 1 if count else 0


if __name__ == "__main__":
    raise SystemExit(main())
