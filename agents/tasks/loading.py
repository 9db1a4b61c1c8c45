"""Loading a task: a shipped one by name, a task file, a free-text prompt, or (through
`agents.tasks.families` and `agents.tasks.suites`) a family's variant or a benchmark's
problem; and the work directory it starts from.

A task is a TOML or Python file, or a free-text prompt (a chat with no checks). Its checks
are Python source that runs inside the sandbox kernel, never in the console: a Python task
file is only parsed with `ast` (it may come from anywhere), so nothing in it runs here.
Every top-level `check_*` function becomes an evaluation callback, registered with weave-agent's
`self.add_evaluation(title, fn)`, and takes the agent API object (`subagent`).

In a Python task file the metadata (`TITLE`, `PROMPT`, `FILES`, `MAX_TICKS`) must be
literals; the checks are every other top-level import, assignment, class and function, in
file order (so a check cannot use the metadata names: keep what it needs in constants).

Every problem with a task file is a `TaskError` whose text is one line naming the file,
the line where known, and what is wrong.
"""

from __future__ import annotations

import ast
import re
import textwrap
import tomllib
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from agents.tasks.spec import CHECK_PREFIX, Task, TaskError, register_checks
from agents.user_files import UserFileError, read_user_file

BUILTIN_DIR = Path(__file__).resolve().with_name("shipped")
BUILTIN_PREFIX = "builtin:"
TASK_SUFFIXES = (".toml", ".py")
TOML_KEYS = ("title", "prompt", "max_ticks", "files", "checks")
#: A task file larger than this is refused unread (its files seed a work directory).
MAX_TASK_BYTES = 16 << 20


def builtin_names() -> list[str]:
    """The names of the tasks shipped in the package, sorted."""
    if not BUILTIN_DIR.is_dir():
        return []
    return sorted({p.stem for p in BUILTIN_DIR.iterdir() if p.suffix in TASK_SUFFIXES})


def startable_names() -> list[str]:
    """What `load_task` starts by name: the shipped tasks, then each task family (a variant
    at random)."""
    from agents.tasks.families import FAMILY_PREFIX, family_names

    return [*builtin_names(), *(f"{FAMILY_PREFIX}{name}" for name in family_names())]


def builtin_tasks() -> list[Task]:
    """Every shipped task, sorted by name."""
    return [load_task(name) for name in builtin_names()]


def prompt_task(text: str) -> Task:
    """A free-text task (a chat): no files, no checks."""
    prompt = text.strip()
    if not prompt:
        raise TaskError("the prompt is empty: say what the agent should do")
    first = prompt.splitlines()[0]
    title = first if len(first) <= 60 else first[:57].rstrip() + "..."
    return Task(name="chat", title=title, prompt=prompt, source="prompt")


def load_task(ref: str) -> Task:
    """A shipped task by name ("vigenere" or "builtin:vigenere"), a variant of a task family
    ("family:compute:7", see `agents.tasks.families`), a benchmark's problem ("humaneval:12",
    "jsonl:PATH:TASK_ID", see `agents.tasks.suites`), or a .toml / .py file."""
    if ref.startswith("family:"):
        from agents.tasks.families import load_family_task

        return load_family_task(ref)
    from agents.tasks.suites import is_suite_ref, load_suite_task

    if is_suite_ref(ref):
        return load_suite_task(ref)
    name = ref.removeprefix(BUILTIN_PREFIX)
    looks_like_path = "/" in ref or "\\" in ref or ref.endswith(TASK_SUFFIXES)
    if not looks_like_path or ref.startswith(BUILTIN_PREFIX):
        if name in builtin_names():
            path = next(
                BUILTIN_DIR / f"{name}{suffix}"
                for suffix in TASK_SUFFIXES
                if (BUILTIN_DIR / f"{name}{suffix}").is_file()
            )
            return _load_file(path, source=f"{BUILTIN_PREFIX}{name}")
        known = ", ".join(builtin_names()) or "none"
        raise TaskError(
            f"{ref}: no such task (built-in tasks: {known}; or give a .toml or .py file)"
        )
    path = Path(ref).expanduser()
    try:
        is_dir, exists = path.is_dir(), path.exists()
    except OSError as exc:  # a name too long, a folder we may not look into
        raise TaskError(f"{ref}: cannot read task file: {exc.strerror or exc}") from None
    if is_dir:
        raise TaskError(f"{ref}: is a folder; a task is a .toml or .py file")
    if not exists:
        raise TaskError(f"{ref}: task file does not exist")
    if path.suffix not in TASK_SUFFIXES:
        raise TaskError(f"{ref}: a task file must end in .toml or .py")
    return _load_file(path, source=str(path.resolve()))


def seed_workdir(task: Task, workdir: Path) -> None:
    """Write the task's files into `workdir`; nothing is written if any path escapes it."""
    root = workdir.resolve()
    targets: list[tuple[Path, str]] = []
    for rel, text in task.files.items():
        problem = _path_problem(rel)
        if problem is None:
            target = (root / rel).resolve()
            if target == root or not target.is_relative_to(root):
                problem = "leads outside the work directory"
        if problem is not None:
            raise TaskError(f"{task.source or task.name}: file {rel!r} {problem}")
        targets.append((target, text))
    for target, text in targets:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8", newline="")
        except OSError as exc:
            raise TaskError(
                f"{task.source or task.name}: cannot write {target}: {exc.strerror or exc}"
            ) from None


# -- loading -------------------------------------------------------------------------------


def _load_file(path: Path, source: str) -> Task:
    try:
        raw = read_user_file(path, MAX_TASK_BYTES, "task file")
    except UserFileError as exc:
        raise TaskError(f"{path}: {exc}") from None
    except OSError as exc:
        raise TaskError(f"{path}: cannot read task file: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise TaskError(f"{path}, line {line}: not valid UTF-8") from None
    if path.suffix == ".toml":
        return _from_toml(path, text, source)
    return _from_python(path, text, source)


def _from_toml(path: Path, text: str, source: str) -> Task:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        where = re.search(r"\s*\(at line (\d+), column (\d+)\)", message)
        if where:
            message = message.replace(where[0], "")
            raise TaskError(
                f"{path}, line {where[1]}, column {where[2]}: TOML syntax error: {message}"
            ) from None
        raise TaskError(f"{path}: TOML syntax error: {message}") from None

    def fail(key: str, problem: str) -> TaskError:
        line = _toml_line(text, key)
        return TaskError(f"{path}{f', line {line}' if line else ''}: {problem}")

    for key in data:
        if key not in TOML_KEYS:
            known = ", ".join(TOML_KEYS)
            raise fail(key, f"unknown key {key!r} (known: {known})")
    title = _text_field(data.get("title"), "title", lambda p: fail("title", p), required=False)
    prompt = _text_field(data.get("prompt"), "prompt", lambda p: fail("prompt", p))
    max_ticks = _max_ticks(data.get("max_ticks"), lambda p: fail("max_ticks", p))
    files = data.get("files", {})
    if not isinstance(files, dict):
        raise fail("files", "files must be a table of relative path = text")
    for rel, content in files.items():
        if not isinstance(content, str):
            raise fail(rel, f"file {rel!r} must be text, not {_kind(content)}")
        problem = _path_problem(rel)
        if problem:
            raise fail(rel, f"file {rel!r} {problem}")
    checks = data.get("checks", "")
    if not isinstance(checks, str):
        raise fail("checks", f"checks must be Python source text, not {_kind(checks)}")
    line = _toml_line(text, "checks")
    # A ''' or """ that ends its line starts the checks on the next one.
    offset: int | None = None
    if line:
        opening = text.splitlines()[line - 1]
        offset = line if re.search(r"=\s*('''|\"\"\")\s*$", opening) else line - 1

    def file_line(lineno: int) -> int | None:
        return None if offset is None else lineno + offset

    return _task(path, title, prompt, files, checks, file_line, max_ticks, source)


PY_META = ("TITLE", "PROMPT", "FILES", "MAX_TICKS")


def _from_python(path: Path, text: str, source: str) -> Task:
    try:
        module = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        raise TaskError(f"{path}, line {exc.lineno}: Python syntax error: {exc.msg}") from None
    except (RecursionError, MemoryError):
        raise TaskError(f"{path}: Python nested too deeply to parse") from None
    lines = text.splitlines(keepends=True)
    meta: dict[str, Any] = {}
    meta_lines: dict[str, int] = {}
    kept: list[tuple[int, bool, str]] = []  # (first line in the file, is a def, source)
    for node in module.body:
        target = _assigned_name(node)
        if target in PY_META:
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            try:
                meta[target] = ast.literal_eval(value) if value is not None else None
            except (ValueError, TypeError, SyntaxError, RecursionError):
                raise TaskError(
                    f"{path}, line {node.lineno}: {target} must be a literal "
                    "(the console never runs a task file)"
                ) from None
            meta_lines[target] = node.lineno
            continue
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        keep = isinstance(
            node,
            ast.Import
            | ast.ImportFrom
            | ast.FunctionDef
            | ast.AsyncFunctionDef
            | ast.ClassDef
            | ast.Assign
            | ast.AnnAssign,
        )
        if keep:
            decorators = getattr(node, "decorator_list", [])
            start = min([node.lineno, *(d.lineno for d in decorators)])
            while start > 1 and lines[start - 2].startswith("#"):  # its comment comes along
                start -= 1
            end = node.end_lineno or node.lineno
            is_def = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            kept.append((start, is_def, "".join(lines[start - 1 : end]).rstrip() + "\n"))

    def fail(key: str, problem: str) -> TaskError:
        line = meta_lines.get(key)
        return TaskError(f"{path}{f', line {line}' if line else ''}: {problem}")

    title = _text_field(meta.get("TITLE"), "TITLE", lambda p: fail("TITLE", p), required=False)
    prompt = _text_field(meta.get("PROMPT"), "PROMPT", lambda p: fail("PROMPT", p))
    max_ticks = _max_ticks(meta.get("MAX_TICKS"), lambda p: fail("MAX_TICKS", p), "MAX_TICKS")
    files = meta.get("FILES", {})
    if not isinstance(files, dict):
        raise fail("FILES", "FILES must be a dict of relative path -> text")
    for rel, content in files.items():
        if not isinstance(rel, str):
            raise fail("FILES", f"FILES keys must be paths as text, not {_kind(rel)}")
        if not isinstance(content, str):
            raise fail("FILES", f"file {rel!r} must be text, not {_kind(content)}")
        problem = _path_problem(rel)
        if problem:
            raise fail("FILES", f"file {rel!r} {problem}")
    has_check = any(
        isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith(CHECK_PREFIX)
        for n in module.body
    )
    # Without a check the helpers have nothing to serve. Blank lines between the kept
    # statements keep the checks readable in the trace.
    checks = ""
    origin: list[int] = []  # the file's line number of each line of `checks`
    after_def = False
    for start, is_def, segment in kept if has_check else []:
        if checks:
            blank = 2 if is_def or after_def else 0
            blank = blank or (1 if origin[-1] + 1 < start else 0)
            checks += "\n" * blank
            origin.extend([start] * blank)
        checks += segment
        origin.extend(range(start, start + segment.count("\n")))
        after_def = is_def

    def file_line(lineno: int) -> int | None:
        return origin[lineno - 1] if 0 < lineno <= len(origin) else None

    return _task(path, title, prompt, files, checks, file_line, max_ticks, source)


def _task(
    path: Path,
    title: str,
    prompt: str,
    files: dict[str, str],
    checks: str,
    file_line: Callable[[int], int | None],
    max_ticks: int | None,
    source: str,
) -> Task:
    """The task a file describes, its checks validated and registered."""
    source_text, names = register_checks(path, checks, file_line)
    return Task(
        name=path.stem,
        title=title or _default_title(path),
        prompt=prompt,
        files=dict(files),
        checks=source_text,
        check_names=names,
        max_ticks=max_ticks,
        source=source,
    )


def _assigned_name(node: ast.stmt) -> str | None:
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
    elif isinstance(node, ast.AnnAssign):
        target = node.target
    else:
        return None
    return target.id if isinstance(target, ast.Name) else None


def _text_field(value: Any, key: str, fail: Any, required: bool = True) -> str:
    if value is None:
        if required:
            raise fail(f"{key} is missing: say what the agent should do")
        return ""
    if not isinstance(value, str):
        raise fail(f"{key} must be text, not {_kind(value)}")
    cleaned = textwrap.dedent(value).strip()
    if required and not cleaned:
        raise fail(f"{key} is empty: say what the agent should do")
    return cleaned


def _max_ticks(value: Any, fail: Any, key: str = "max_ticks") -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(f"{key} must be a whole number, not {_kind(value)}")
    if value < 1:
        raise fail(f"{key} must be at least 1, not {value}")
    return value


def _path_problem(rel: str) -> str | None:
    """Why `rel` cannot be a file in the work directory, or None when it can."""
    if not rel or not rel.strip():
        return "has an empty path"
    if "\\" in rel or "\0" in rel:
        return "must be a plain relative path with / separators"
    path = PurePosixPath(rel)
    if path.is_absolute():
        return "is an absolute path; use a path relative to the work directory"
    depth = 0
    for part in path.parts:
        depth += -1 if part == ".." else 1
        if depth < 0:
            return "leads outside the work directory"
    if depth == 0 or rel.endswith("/"):
        return "does not name a file"
    return None


def _toml_line(text: str, key: str) -> int | None:
    """The line that sets `key` (bare or quoted) in a TOML file, for error messages."""
    quoted = re.escape(key)
    pattern = re.compile(rf"^\s*(?:{quoted}|\"{quoted}\"|'{quoted}')\s*=", re.MULTILINE)
    match = pattern.search(text)
    return text.count("\n", 0, match.start()) + 1 if match else None


def _default_title(path: Path) -> str:
    return path.stem.replace("_", " ").replace("-", " ").capitalize()


def _kind(value: Any) -> str:
    return {
        bool: "true/false",
        int: "a number",
        float: "a decimal number",
        str: "text",
        list: "a list",
        dict: "a table",
    }.get(type(value), type(value).__name__)
