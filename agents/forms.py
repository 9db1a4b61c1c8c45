"""How a code block is written: the forms the model may be asked for, and what the kernel
runs for each.

- `callback` (weave-agent's): the block defines a function of the agent and registers it,
  `self.add_action(title, fn)` or `self.add_evaluation(title, fn)`; the kernel runs the
  block, then calls the function.
- `script`: what a small coder already writes. An action block is either a Python
  script, run as `python3` in the work directory (what it prints is its result; a
  non-zero exit status fails it), or the whole new content of files, each after a line
  `# PATH` or `# file: PATH` (the runtime writes each file whose content it changes, and
  fails the block when it changes none). An evaluation block is a Python script
  that checks the work: exit status 0 passes. A first comment line names the block.

A callback still runs as one in a session of scripts (an operator's habit, a scripted
teacher's block). Either way the block's text is stored as it was written; `kernel_code` turns a
script-form block into the callback the kernel runs, so the sandbox, the approval gate and
the trace are the same for both. A fenced block (```python ... ```), as chat models write
them, runs what is inside the fence.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from agents import blocks

CALLBACK = "callback"
SCRIPT = "script"
FORMS = (CALLBACK, SCRIPT)

#: The kinds whose code the script form changes (observation views stay callbacks).
SCRIPT_KINDS = frozenset({blocks.ACTION, blocks.EVALUATION})

#: A line that starts a file's content in an action block: `# file: PATH` or `# PATH`
#: (a path with an extension, as the work directory's view lists them).
_FILE_LINE = re.compile(
    r"^#\s*(?:file:\s*(\S+)|([\w.-]+(?:/[\w.-]+)*\.[A-Za-z0-9]+)(?:\s*\(empty\))?)\s*$"
)
_FENCE = re.compile(r"^```[\w+-]*\s*$")
#: A script's title: its first comment line, cut to this many characters.
TITLE_CHARS = 80


@dataclass(frozen=True, slots=True)
class Script:
    """A script-form block read: its title, and either its code (a script) or the files
    it writes (a listing: each path and its content; `text` empty)."""

    title: str
    text: str
    files: tuple[tuple[str, str], ...] = ()

    @property
    def path(self) -> str | None:
        """The first file a file block writes; None for a script."""
        return self.files[0][0] if self.files else None


def unfenced(body: str) -> str:
    """The body without a Markdown fence around it: the first fenced part when there is
    one (prose before or after it dropped), else the body itself."""
    lines = body.strip("\n").splitlines()
    starts = [i for i, line in enumerate(lines) if _FENCE.match(line.strip())]
    if not starts:
        return body.strip("\n")
    first = starts[0]
    rest = [i for i in starts if i > first]
    end = rest[0] if rest else len(lines)
    # a comment line right before the fence (a `# file:` line or a title) belongs to it
    head = []
    if first > 0 and lines[first - 1].lstrip().startswith("#"):
        head = [lines[first - 1].strip()]
    return "\n".join(head + lines[first + 1 : end])


def read_script(kind: str, body: str) -> Script:
    """A script-form block of `kind`, read."""
    text = unfenced(body)
    lines = text.splitlines()
    while lines and not lines[0].strip():
        lines.pop(0)
    if kind == blocks.ACTION and lines and _FILE_LINE.match(lines[0].strip()):
        files = _file_sections(lines)
        names = ", ".join(path for path, _ in files)
        return Script(f"Write {names}"[:TITLE_CHARS], "", files)
    title = ""
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#!"):
            continue
        if stripped.startswith("#"):
            title = stripped.lstrip("#").strip()
        break
    title = title[:TITLE_CHARS] or ("the script" if kind == blocks.ACTION else "the check script")
    return Script(title, "\n".join(lines) + "\n" if lines else "")


def as_run(kind: str, form: str, body: str, truncated: bool) -> str:
    """What of a block runs: all of it, but of a block the token limit cut, what is whole.
    A file block writes the files before the cut one (`written`: the coder writes
    solution.py whole, then goes on into a test file that the limit cuts and that would not
    parse); a check script runs its whole top-level statements (`whole_statements`)."""
    if not truncated or kind not in SCRIPT_KINDS or form_of(kind, form, body) != SCRIPT:
        return body
    script = read_script(kind, body)
    if not script.files:
        return whole_statements(script.text) if kind == blocks.EVALUATION else body
    return "".join(
        f"# {path}\n{content}" if content else f"# {path} (empty)\n"
        for path, content in written(script.files, truncated)[0]
    )


def written(
    files: tuple[tuple[str, str], ...], truncated: bool
) -> tuple[tuple[tuple[str, str], ...], bool]:
    """The files a file block writes, and whether a cut last one was left out: of a block
    the token limit cut, all but the last."""
    if not truncated or not files:
        return files, False
    return files[:-1], True


def whole_statements(code: str) -> str:
    """Of a script the token limit cut, its top-level statements that are whole: the
    code up to the last top-level line from which what comes before parses."""
    if _parses(code):
        return code
    lines = code.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.strip() and not line[0].isspace()]
    for start in reversed(starts):
        head = "".join(lines[:start])
        if _parses(head):
            return head
    return ""


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


def _file_sections(lines: list[str]) -> tuple[tuple[str, str], ...]:
    """A file block's files: each `# PATH` line and the lines up to the next one (a
    fence around a file's content read through). A `# PATH` line right after another,
    with nothing between, is the first file's opening comment, not a file of its own (the
    coder writes "# evaluation.py" then "# solution.py" over a test script: read as two
    files, the test overwrote its solution), unless the first said it is `(empty)`. A path
    named again with nothing after it (the 0.5B coder ends a listing so) keeps the
    content it had."""
    sections: list[tuple[str, list[str]]] = []
    empty = False  # the last `# PATH` line said `(empty)`
    for line in lines:
        match = _FILE_LINE.match(line.strip())
        opening = bool(sections) and not empty and not any(s.strip() for s in sections[-1][1])
        if match and not opening:
            sections.append((match[1] or match[2], []))
            empty = line.strip().endswith("(empty)")
        else:
            sections[-1][1].append(line)
    files: dict[str, str] = {}
    for path, body in sections:
        content = "\n".join(unfenced("\n".join(body)).splitlines()).strip("\n")
        if not content and files.get(path):
            continue  # the file's name said again after its content: not an empty file
        files[path] = content + "\n" if content else ""
    return tuple(files.items())


_METHOD = {blocks.ACTION: "add_action", blocks.EVALUATION: "add_evaluation"}


def form_of(kind: str, form: str, body: str) -> str:
    """The form a block is written in: `form`, except that a callback (a block that
    registers one, as an operator used to weave-agent may write) runs as one in a
    session of scripts too."""
    if form == SCRIPT and kind in SCRIPT_KINDS and blocks.registered_titles(body, _METHOD[kind]):
        return CALLBACK
    return form


def title(kind: str, form: str, body: str) -> str | None:
    """The title the block registers (for summaries and the panel), if it shows one."""
    form = form_of(kind, form, body)
    if form == SCRIPT and kind in SCRIPT_KINDS:
        return read_script(kind, body).title
    method = _METHOD.get(kind)
    titles = blocks.registered_titles(body, method) if method else []
    return titles[-1] if titles else None


def parse_error(kind: str, form: str, body: str) -> str | None:
    """None when the block's code parses (a file block's content is not code unless the
    file is a Python file), else the error in one line."""
    form = form_of(kind, form, body)
    if form == SCRIPT and kind in SCRIPT_KINDS:
        script = read_script(kind, body)
        if script.files:  # a Python file's content is code; any other file's is text
            errors = (blocks.parse_error(t) for p, t in script.files if p.endswith(".py"))
            return next((e for e in errors if e is not None), None)
        return blocks.parse_error(script.text)
    return blocks.parse_error(body)


def registers(kind: str, form: str, body: str) -> bool:
    """Whether a code block does what its kind must (a callback block calls its
    registration method; a script block has code, a listing lists a file)."""
    form = form_of(kind, form, body)
    if form == SCRIPT and kind in SCRIPT_KINDS:
        script = read_script(kind, body)
        return bool(script.files) or bool(script.text.strip())
    method = _METHOD.get(kind)
    return method is None or method in body


_QUIET = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Pass)


def inert(kind: str, form: str, body: str) -> bool:
    """Whether a script-form block does nothing when run: it parses, and its top level is
    only imports, definitions and constants (a function written and never called)."""
    if form_of(kind, form, body) != SCRIPT or kind not in SCRIPT_KINDS:
        return False
    script = read_script(kind, body)
    if script.files:
        return False
    try:
        tree = ast.parse(script.text)
    except (SyntaxError, ValueError):
        return False
    return all(
        isinstance(node, _QUIET)
        or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
        for node in tree.body
    )


def kernel_code(kind: str, form: str, body: str, timeout: float, *, truncated: bool = False) -> str:
    """The code the kernel runs for a block: the block itself (callback form), or a
    callback that runs the script (`timeout` seconds at most; of a check the token limit
    cut, its whole statements) or writes the files (`written`)."""
    form = form_of(kind, form, body)
    if form != SCRIPT or kind not in SCRIPT_KINDS:
        return body
    script = read_script(kind, body)
    method = "add_action" if kind == blocks.ACTION else "add_evaluation"
    if script.files:
        files, cut = written(script.files, truncated)
        return (
            f"def _write_files(subagent, _files={files!r}, _cut={cut!r}):\n"
            "    wrote, same = [], []\n"
            "    for path, text in _files:\n"
            "        try:\n"
            "            old = subagent.read_file(path)\n"
            "        except (OSError, ValueError):\n"
            "            old = None\n"
            "        if old is not None and old.split() == text.split():\n"
            "            same.append(path)\n"
            "            continue\n"
            "        subagent.write_file(path, text)\n"
            "        wrote.append(f'{path} ({len(text.splitlines())} lines)')\n"
            "    if not wrote:\n"
            f"        raise RuntimeError({NO_CHANGE!r} + (': ' + ', '.join(same) + ' as it was'\n"
            f"            if same else '') + ('; ' + {CUT_NOTE!r}\n"
            "            if _cut else ''))\n"
            "    return 'wrote ' + ', '.join(wrote) + (\n"
            "        '; as it was: ' + ', '.join(same) if same else '')\n"
            f"self.{method}({script.title!r}, _write_files)\n"
        )
    cut = truncated and kind == blocks.EVALUATION
    code = whole_statements(script.text) if cut else script.text
    verdict = (
        "    if done['returncode'] != 0:\n"
        f"        raise RuntimeError({SCRIPT_FAILED!r} + str(done['returncode'])\n"
        "                           + (':\\n' + done['stderr'] if done['stderr'] else ''))\n"
        "    print(done['stderr'], end='', file=sys.stderr)\n"
        "    return done['stdout'] or '(the script printed nothing)'\n"
        if kind == blocks.ACTION
        else "    print(done['stdout'], end='')\n"
        "    print(done['stderr'], end='', file=sys.stderr)\n"
        "    return done['returncode'] == 0\n"
    )
    return (
        f"def _script(subagent, _code={code!r}):\n"
        "    import sys\n"
        f"    done = subagent.run([sys.executable, '-c', {_RUNNER!r}, _code], timeout={timeout!r})\n"
        f"{verdict}"
        f"self.{method}({script.title!r}, _script)\n"
    )


#: What a failed script's error starts with, after the exception's name.
SCRIPT_FAILED = "the script exited with status "
#: ... and a listing's that changed no file (`CUT_NOTE` added where its last was cut).
NO_CHANGE = "no file changed"
CUT_NOTE = "the block was cut before its last file ended"
#: How a script runs (`python3 -c RUNNER CODE`): as the file `script.py`, so that its
#: traceback shows its own failing lines, and without the runner's frame.
_RUNNER = """import linecache, sys, traceback
_code = sys.argv.pop(1)
sys.argv[0] = "script.py"
linecache.cache["script.py"] = (len(_code), None, _code.splitlines(True), "script.py")
def _report(kind, value, tb):
    traceback.print_exception(kind, value, tb.tb_next if tb is not None else tb)
sys.excepthook = _report
exec(compile(_code, "script.py", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
"""


def error_report(error: str) -> str:
    """What a failed block's error says to the model and the operator: for a script, its
    exit status and its own stderr; for a listing, what it left unchanged (the runtime's
    wrapper frame left out)."""
    found = [error.find(f"RuntimeError: {m}") for m in (SCRIPT_FAILED, NO_CHANGE)]
    at = min((i for i in found if i >= 0), default=-1)
    if at < 0:
        return error
    report = error[at + len("RuntimeError: ") :].rstrip()
    return report[0].upper() + report[1:] + "\n"


#: The observation view a session of script blocks starts with: the work directory's
#: files and the text of each (cut), so the model sees what it is to change.
FILES_VIEW = """
def _work_directory(subagent, _total=3000, _each=1200):
    import os
    root = subagent.workdir
    shown, size = [], 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for name in sorted(files):
            path = os.path.relpath(os.path.join(folder, name), root)
            if len(shown) >= 40:
                shown.append("[more files not shown]")
                return "\\n".join(shown)
            try:
                text = subagent.read_file(path)
            except (OSError, ValueError):
                text = "[not readable]"
            if len(text) > _each:
                text = text[:_each] + f"\\n[... {len(text) - _each} more characters]"
            if size + len(text) > _total:
                text = "[text not shown: the view is full]"
            size += len(text)
            if not text.strip():
                shown.append(f"--- {path} (empty)")
                continue
            shown.append(f"--- {path}\\n{text.rstrip()}")
    return "\\n".join(shown) or "(the work directory is empty)"
self.add_observation_view("Work directory", _work_directory)
"""
