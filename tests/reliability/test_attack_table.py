"""The table of attacks on the sandbox (docs/reliability.md) and the tests that attempt
them agree: every attack test is in the table once, and every test the table names
exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ATTACK_FILES = (
    ROOT / "tests" / "agents" / "test_sandbox.py",
    ROOT / "tests" / "reliability" / "test_sandbox_attacks.py",
    ROOT / "tests" / "reliability" / "test_workdir_write_back.py",
    ROOT / "tests" / "reliability" / "test_verdict_integrity.py",
    ROOT / "tests" / "reliability" / "test_terminal_escapes.py",
    ROOT / "tests" / "reliability" / "test_channel_fuzz.py",
)


def attack_tests() -> list[str]:
    names = []
    for path in ATTACK_FILES:
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            fuzz = path.name == "test_channel_fuzz.py"
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                names += [node.name] if "attack" in node.name or fuzz else []
    return names


def test_the_docs_name_every_attack_test_once_and_no_other() -> None:
    doc = (ROOT / "docs" / "reliability.md").read_text(encoding="utf-8")
    table = re.findall(r"^\| [^|]+ \| [^|]+ \| `(test_\w+)` \|$", doc, re.M)
    tests = attack_tests()
    assert len(tests) >= 30
    assert sorted(table) == sorted(tests)
