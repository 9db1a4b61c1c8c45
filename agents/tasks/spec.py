"""What a task is, apart from where it comes from: the `Task` record, `TaskError`, and the
checks' validation (`register_checks`), which shipped tasks, task files (`agents.tasks`) and
task families (`agents.tasks.families`) all go through.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

CHECK_PREFIX = "check_"


class TaskError(Exception):
    """A task that cannot be loaded or seeded; `str()` is one line for the user."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


@dataclass(frozen=True)
class Task:
    name: str
    """Short name: the file stem ("vigenere"), or "chat" for a free-text prompt."""
    title: str
    prompt: str
    """What the agent is asked to do, shown to it as the task."""
    files: dict[str, str] = field(default_factory=dict)
    """Relative path -> text, written into the work directory before the first tick."""
    checks: str = ""
    """Python source run in the sandbox kernel: defines the check functions and registers
    each with `self.add_evaluation(title, fn)`. Empty for none."""
    check_names: tuple[str, ...] = ()
    """The titles `checks` registers, in order."""
    max_ticks: int | None = None
    source: str = ""
    """Where it came from: "builtin:NAME", a file path, or "prompt"."""
    asks: dict[str, str] = field(default_factory=dict)
    """Block kind -> how this task asks for that block, in place of the block form's ask
    (a suite's problem asks for solution.py's whole content, `agents.tasks.suites`)."""
    blind: bool = False
    """The checks' verdict is recorded but never shown to the model, which stops on its own
    evaluations instead (a benchmark's hidden tests, `agents.tasks.suites`)."""


def register_checks(
    path: Path, checks: str, file_line: Callable[[int], int | None]
) -> tuple[str, tuple[str, ...]]:
    """Validate the checks source and append an `add_evaluation` line for each `check_*`.

    `file_line` maps a line of the checks to the line of the task file it came from.
    """
    if not checks.strip():
        return "", ()

    def where(lineno: int | None) -> str:
        line = file_line(lineno) if lineno is not None else None
        return f"{path}, line {line}" if line is not None else f"{path}"

    try:
        module = ast.parse(checks)
    except SyntaxError as exc:
        raise TaskError(f"{where(exc.lineno)}: Python syntax error in checks: {exc.msg}") from None
    except (RecursionError, MemoryError):
        raise TaskError(f"{where(None)}: checks nested too deeply to parse") from None
    names: list[str] = []
    registered: set[str] = set()
    defined = _top_level_names(module)
    for node in module.body:
        call = node.value if isinstance(node, ast.Expr) else None
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "add_evaluation"
        ):
            title = call.args[0] if call.args else None
            if not (isinstance(title, ast.Constant) and isinstance(title.value, str)):
                raise TaskError(
                    f"{where(node.lineno)}: add_evaluation needs its title as a string literal"
                )
            names.append(title.value)
            if len(call.args) > 1 and isinstance(call.args[1], ast.Name):
                registered.add(call.args[1].id)
                if call.args[1].id not in defined and "*" not in defined:
                    raise TaskError(
                        f"{where(node.lineno)}: add_evaluation names {call.args[1].id!r}, "
                        "which the checks do not define"
                    )
    auto: list[str] = []
    for node in module.body:
        if isinstance(node, ast.AsyncFunctionDef) and node.name.startswith(CHECK_PREFIX):
            raise TaskError(f"{where(node.lineno)}: {node.name} must be a plain def, not async")
        if not isinstance(node, ast.FunctionDef) or not node.name.startswith(CHECK_PREFIX):
            continue
        if not _takes_one_argument(node.args):
            raise TaskError(
                f"{where(node.lineno)}: {node.name} must take one argument "
                "(the agent API, e.g. `subagent`)"
            )
        if node.name not in registered and node.name not in auto:
            auto.append(node.name)
    duplicate = next((n for n in auto if n in names), None)
    if duplicate:
        raise TaskError(f"{where(None)}: two evaluations are titled {duplicate!r}")
    source_text = checks.rstrip() + "\n"
    if auto:
        source_text += "\n" + "".join(f'self.add_evaluation("{n}", {n})\n' for n in auto)
    return source_text, (*names, *auto)


def _top_level_names(module: ast.Module) -> set[str]:
    """The names the checks' top level binds (defs, classes, assignments, imports), and the
    builtins: what an `add_evaluation(title, name)` may name."""
    import builtins

    names = set(dir(builtins))
    for node in module.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        else:
            for child in ast.walk(node):
                if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                    names.add(child.id)
                elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    names.add(child.name)
                elif isinstance(child, ast.Import | ast.ImportFrom):
                    names.update((a.asname or a.name).split(".")[0] for a in child.names)
    return names


def _takes_one_argument(args: ast.arguments) -> bool:
    """Whether a def can be called as `fn(subagent)`."""
    positional = len(args.posonlyargs) + len(args.args)
    accepts_one = positional >= 1 or args.vararg is not None
    needs_at_most_one = positional - len(args.defaults) <= 1
    kw_required = any(default is None for default in args.kw_defaults)
    return accepts_one and needs_at_most_one and not kw_required
