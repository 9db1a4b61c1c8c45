"""Script-form blocks and chat prompts: what the kernel runs for a script or a whole file
(the real sandbox), what a chat model is asked (the tiny model's real chat template), and
a whole session in that form on the tiny model with the operator's script as the action."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agents import blocks, forms, prompting, ranking
from agents.approval import Answer
from agents.sandbox import CallResult, Kernel, Limits
from storage import Author, JobKind, NewNode, NodeStatus, SessionStatus, TraceStore
from tests.support.runs import make_runtime
from training.datasets import iter_rows, write_jsonl
from training.job_dataset import load_rows

pytestmark = pytest.mark.timeout(300)

FAST = Limits(wall_seconds=10, cpu_seconds=10)

FENCED = """Here is the script:
```python
# Count the rows of data.csv
rows = open("data.csv").read().splitlines()[1:]
print(len(rows))
open("count.txt", "w").write(str(len(rows)))
```
It prints the count."""


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "data.csv").write_text("name\nAna\nBen\nCleo\n")
    with Kernel(workdir, limits=FAST) as opened:
        yield opened


def run_action(kernel: Kernel, body: str) -> tuple[str, CallResult]:
    kernel.clear("action")
    code = forms.kernel_code(blocks.ACTION, forms.SCRIPT, body, timeout=5)
    defined = kernel.exec_block(code, name="action")
    assert defined.ok, defined.error
    (title,) = defined.registered["action"]
    return title, kernel.call_action(title)


def test_a_fenced_script_runs_in_the_work_directory(kernel: Kernel) -> None:
    script = forms.read_script(blocks.ACTION, FENCED)
    assert script.path is None and script.title == "Count the rows of data.csv"
    assert "It prints" not in script.text and "```" not in script.text
    title, result = run_action(kernel, FENCED)
    assert title == "Count the rows of data.csv"
    assert result.ok and result.value == "3\n"
    assert (kernel.workdir / "count.txt").read_text() == "3"


def test_a_failing_script_fails_the_action_with_its_traceback(kernel: Kernel) -> None:
    _, result = run_action(kernel, "# Read a missing file\nopen('missing.txt').read()\n")
    assert not result.ok
    assert "exited with status 1" in (result.error or "")
    assert "FileNotFoundError" in (result.error or "")


def test_a_file_block_writes_the_whole_file(kernel: Kernel) -> None:
    body = "# file: pkg/solution.py\n```python\ndef add(a, b):\n    return a + b\n```"
    script = forms.read_script(blocks.ACTION, body)
    assert (script.path, script.title) == ("pkg/solution.py", "Write pkg/solution.py")
    assert forms.parse_error(blocks.ACTION, forms.SCRIPT, body) is None
    _, result = run_action(kernel, body)
    assert result.ok, result.error
    assert (kernel.workdir / "pkg/solution.py").read_text() == "def add(a, b):\n    return a + b\n"
    # a Python file that does not parse is code that does not parse
    broken = "# file: x.py\ndef add(a, b:\n"
    assert forms.parse_error(blocks.ACTION, forms.SCRIPT, broken) is not None
    # any other file is text
    assert forms.parse_error(blocks.ACTION, forms.SCRIPT, "# file: notes.md\n(( not code") is None


def test_a_listing_of_files_writes_those_it_changes(kernel: Kernel) -> None:
    """The files as the work directory's view lists them, one `# PATH` line each: the
    changed ones are written, one the model only said back is left as it was."""
    body = (
        "# pkg/ops.py\ndef mean(numbers):\n    return sum(numbers) / len(numbers)\n\n"
        "# data.csv\nname\n\nAna\nBen\nCleo\n"
    )
    script = forms.read_script(blocks.ACTION, body)
    assert [path for path, _ in script.files] == ["pkg/ops.py", "data.csv"]
    assert script.title == "Write pkg/ops.py, data.csv"
    _, result = run_action(kernel, body)
    assert result.ok, result.error
    assert result.value == "wrote pkg/ops.py (2 lines); as it was: data.csv"
    assert (kernel.workdir / "pkg/ops.py").read_text().startswith("def mean(numbers):\n")
    assert (kernel.workdir / "data.csv").read_text() == "name\nAna\nBen\nCleo\n"
    # a block that changes nothing fails, so the next try follows
    _, same = run_action(kernel, "# data.csv\nname\nAna\nBen\nCleo\n")
    assert not same.ok
    assert forms.error_report(same.error or "") == "No file changed: data.csv as it was\n"
    # a block the token limit cut does not write its last, cut, file
    cut = "# pkg/a.py\nA = 1\n# data.csv\nname\nAna"
    kernel.clear("action")
    code = forms.kernel_code(blocks.ACTION, forms.SCRIPT, cut, timeout=5, truncated=True)
    assert kernel.exec_block(code, name="action").ok
    assert kernel.call_action("Write pkg/a.py, data.csv").value == "wrote pkg/a.py (1 lines)"
    assert (kernel.workdir / "data.csv").read_text() == "name\nAna\nBen\nCleo\n"
    kernel.clear("action")
    code = forms.kernel_code(blocks.ACTION, forms.SCRIPT, "# data.csv\nx", 5, truncated=True)
    assert kernel.exec_block(code, name="action").ok
    failed = kernel.call_action("Write data.csv")
    assert not failed.ok and "cut before its last file ended" in (failed.error or "")
    # a listing that starts with an empty file is no empty block
    listing = "# pkg/__init__.py (empty)\n# pkg/ops.py\nX = 1\n"
    assert ranking.penalties(blocks.ACTION, listing, [], forms.SCRIPT) == {}
    # a comment that is no path starts a script
    assert forms.read_script(blocks.ACTION, "# Read data.csv\nprint(1)\n").files == ()
    # the file's name said again at the end (as the coder ends a listing) empties nothing
    echoed = forms.read_script(blocks.ACTION, "# solution.py\nX = 2\n\n# solution.py\n")
    assert echoed.files == (("solution.py", "X = 2\n"),)


@pytest.mark.parametrize(
    ("code", "passes"), [("assert 2 + 2 == 4", True), ("assert 2 == 3", False)]
)
def test_an_evaluation_script_passes_by_its_exit_status(
    kernel: Kernel, code: str, passes: bool
) -> None:
    body = f"# Arithmetic holds\n{code}\n"
    defined = kernel.exec_block(
        forms.kernel_code(blocks.EVALUATION, forms.SCRIPT, body, timeout=5), name="evaluation"
    )
    assert defined.registered["evaluation"] == ["Arithmetic holds"]
    result = kernel.call_evaluation("Arithmetic holds")
    assert result.ok and result.value is passes


def test_callback_blocks_run_as_written() -> None:
    body = 'def f(subagent):\n    return 1\nself.add_action("One", f)'
    assert forms.kernel_code(blocks.ACTION, forms.CALLBACK, body, timeout=5) == body
    assert forms.title(blocks.ACTION, forms.CALLBACK, body) == "One"
    assert not forms.registers(blocks.ACTION, forms.CALLBACK, "x = 1")
    assert forms.registers(blocks.ACTION, forms.SCRIPT, "print(1)")


def test_a_chat_reply_loses_copied_headers_and_a_prose_fence() -> None:
    reply = "```\n#startblock type: orientation\n#index 5\nThe task asks for a count.\n```"
    assert prompting.clean(blocks.ORIENTATION, reply) == "The task asks for a count."
    # a code block keeps its fence (the form reads inside it)
    code = "```python\n#startblock type: action\nprint(1)\n```"
    assert prompting.clean(blocks.ACTION, code) == "```python\nprint(1)\n```"


def test_the_document_style_is_the_document(backend: object) -> None:
    prompter = prompting.Prompter(prompting.DOCUMENT, forms.CALLBACK)
    assert prompter.block("CONTEXT", "#startblock type: action\n", blocks.ACTION) == (
        "CONTEXT#startblock type: action\n"
    )
    assert prompter.stop(blocks.ACTION) == blocks.STOP
    assert prompter.meta() == {}


def test_the_chat_style_asks_for_the_block_through_the_template(backend: object) -> None:
    prompter = prompting.Prompter(prompting.CHAT, forms.SCRIPT, backend.render_chat)  # type: ignore[attr-defined]
    prompt = prompter.block("THE TRACE\n", "#startblock type: action\n", blocks.ACTION)
    assert prompt.startswith("<|im_start|>system\n")
    assert "a complete Python program" in prompt
    assert prompt.endswith("<|im_start|>assistant\n```python\n")  # the reply is code
    assert "#startblock" not in prompt  # the reply is the body
    assert prompter.meta() == {"prompt": "chat", "form": "script"}
    question = prompter.question("", "print(1)", "Good?", blocks.ACTION)
    assert "<|im_start|>assistant\n```python\nprint(1)\n```<|im_end|>" in question
    assert question.rstrip().endswith("Good? Answer Yes or No.<|im_end|>\n<|im_start|>assistant")
    with pytest.raises(ValueError, match="chat template"):
        prompting.Prompter(prompting.CHAT, forms.SCRIPT)


SCRIPT_SOLVE = "# Write the answer\nopen('answer.txt', 'w').write('42\\n')\nprint('wrote 42')\n"


def test_a_session_of_script_blocks_through_chat_prompts(
    backend: object, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The tiny model's action fails as a script, the error is the report (no debug block),
    the retry is asked for right after it; the operator's script then solves the task."""
    failing = "# Read a missing file\nopen('missing.txt').read()\n"
    prompts: list[str] = []

    class Recording:
        def __getattr__(self, name: str) -> object:
            return getattr(backend, name)

        def generate(self, prompt: str, **kwargs: object) -> object:
            prompts.append(prompt)
            return backend.generate(prompt, **kwargs)  # type: ignore[attr-defined]

    with TraceStore(tmp_path / "traces.db") as store:
        runtime, _ = make_runtime(
            store,
            Recording(),
            tmp_path,
            [lambda r: Answer.edit(failing), lambda r: Answer.edit(SCRIPT_SOLVE)],
            prompt="chat",
            form="script",
        )
        outcome = runtime.run()
        assert outcome.status is SessionStatus.COMPLETED, outcome
        assert (runtime.workdir / "answer.txt").read_text() == "42\n"
        path = store.path(store.tree(outcome.session_id)[-1].id)
        kinds = [n.kind for n in path]
        assert "a complete Python program run in the work directory" in path[0].text
        view = next(n for n in path if n.kind == blocks.OBSERVATION)
        assert "--- question.txt\nWhat is six times seven?" in view.text
        assert blocks.DEBUG not in kinds and blocks.OPTION not in kinds
        error = kinds.index(blocks.ERROR)
        assert kinds[error + 1] == blocks.ACTION
        model = [n for n in store.tree(outcome.session_id) if n.author is Author.MODEL]
        assert all(n.meta.get("prompt") == "chat" and n.meta.get("form") == "script" for n in model)
        assert all(n.token_ids is None for n in model)
        ran = [n for n in path if n.kind == blocks.ACTION]
        assert [n.status for n in ran] == [NodeStatus.FAILED, NodeStatus.EXECUTED]
        assert ran[-1].meta["title"] == "Write the answer"
        assert ran[-1].author is Author.OPERATOR and ran[-1].meta["prompt"] == "chat"
        # the operator's script is an SFT example, in the turns it was asked for with
        rows = list(iter_rows(store, "sft", session_ids=[outcome.session_id]))
        (row,) = [r for r in rows if r["node_id"] == ran[-1].id]
        reply = f"```python\n{SCRIPT_SOLVE.rstrip()}\n```"
        assert row["completion"] == [{"role": "assistant", "content": reply}]
        turns = row["prompt"]
        assert [t["role"] for t in turns[:2]] == ["system", "user"]
        assert turns[0]["content"].startswith(prompting.SYSTEM)
        assert turns[-1]["role"] == "user" and turns[-1]["content"].startswith("The action failed:")
        assert turns[-1]["content"].endswith(prompting.ask(blocks.ACTION, forms.SCRIPT))
        assert {"role": "assistant", "content": f"```python\n{failing.rstrip()}\n```"} in turns
        # a training job reads it as the text the model saw: the template's turns
        data = tmp_path / "sft.jsonl"
        write_jsonl(store, "sft", data, session_ids=[outcome.session_id])
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    texts = load_rows(data, JobKind.SFT, tmp_path / "cache", tokenizer).to_list()
    text = next(t for t in texts if SCRIPT_SOLVE.rstrip() in t["completion"])
    assert text["prompt"] == backend.render_chat(turns)  # type: ignore[attr-defined]
    assert text["completion"] == f"{reply}<|im_end|>\n"
    # the action after the failure was asked for right after the error, in the same turn
    retry = [p for p in prompts if "The action failed:" in p]
    assert retry and "FileNotFoundError" in retry[0]
    turn = retry[0].rsplit("<|im_start|>user\n", 1)[1]
    assert turn.startswith("The action failed:") and "Write the action: a complete" in turn
    assert all(p.startswith("<|im_start|>system") for p in prompts)


def test_a_callback_still_runs_as_one_in_a_session_of_scripts(kernel: Kernel) -> None:
    body = 'def f(subagent):\n    subagent.write_file("x.txt", "1")\n    return 1\nself.add_action("One", f)'
    assert forms.form_of(blocks.ACTION, forms.SCRIPT, body) == forms.CALLBACK
    assert forms.title(blocks.ACTION, forms.SCRIPT, body) == "One"
    title, result = run_action(kernel, body)
    assert title == "One" and result.ok and result.value == 1
    assert (kernel.workdir / "x.txt").read_text() == "1"
    # a script that merely mentions the method is still a script
    script = "# Print a word\nprint('self.add_action is a method')\n"
    assert forms.form_of(blocks.ACTION, forms.SCRIPT, script) == forms.SCRIPT


def test_a_failing_script_reports_its_own_line_and_no_wrapper(kernel: Kernel) -> None:
    """The error the model retries after is the script's: its status, its traceback with
    its own failing line, and none of the runtime's wrapper."""
    _, result = run_action(kernel, "import os\nrows = 3\nprint(undefined_name + rows)\n")
    assert not result.ok
    report = forms.error_report(result.error or "")
    assert report.startswith("The script exited with status 1:\n")
    assert 'File "script.py", line 3, in <module>' in report
    assert "print(undefined_name + rows)" in report
    assert "NameError: name 'undefined_name' is not defined" in report
    assert "done[" not in report and "RuntimeError" not in report and "<string>" not in report
    # a script that does not parse says where, and an error of another kind is kept
    _, broken = run_action(kernel, "x = (1,\n")
    assert 'File "script.py", line 1' in forms.error_report(broken.error or "")
    assert forms.error_report("ValueError: bad\n") == "ValueError: bad\n"


def test_a_script_that_only_defines_a_function_is_inert() -> None:
    defines = "import csv\n\ndef write_out():\n    open('out.csv', 'w').write('x')\n"
    assert forms.inert(blocks.ACTION, forms.SCRIPT, defines)
    assert not forms.inert(blocks.ACTION, forms.SCRIPT, defines + "\nwrite_out()\n")
    assert not forms.inert(blocks.ACTION, forms.SCRIPT, "# file: a.py\ndef f():\n    pass\n")
    assert not forms.inert(blocks.ACTION, forms.CALLBACK, defines)
    parts = ranking.penalties(blocks.ACTION, defines, [], forms.SCRIPT)
    assert parts == {"inert": ranking.INERT_PENALTY}
    assert ranking.penalties(blocks.ACTION, defines + "write_out()\n", [], forms.SCRIPT) == {}


def test_the_work_directory_view_shows_each_file_and_an_empty_one_in_a_line(
    kernel: Kernel,
) -> None:
    (kernel.workdir / "pkg").mkdir()
    (kernel.workdir / "pkg/__init__.py").write_text("")
    assert kernel.exec_block(forms.FILES_VIEW, name="observation-inference").ok
    ((title, shown),) = kernel.render_observations()
    assert title == "Work directory" and shown.ok
    assert shown.value == "--- data.csv\nname\nAna\nBen\nCleo\n--- pkg/__init__.py (empty)"


def test_a_cut_file_block_runs_the_files_written_whole() -> None:
    listing = "# solution.py\ndef f():\n    return 1\n\n# file: tests/test_f.py\nassert f("
    assert forms.as_run(blocks.ACTION, forms.SCRIPT, listing, True) == (
        "# solution.py\ndef f():\n    return 1\n"
    )
    assert forms.as_run(blocks.ACTION, forms.SCRIPT, listing, False) == listing
    # a single file cut: nothing runs; a cut script or callback runs as it is
    assert forms.as_run(blocks.ACTION, forms.SCRIPT, "# solution.py\ndef f(", True) == ""
    script = "# print it\nprint(1)\n# a.py\nx"
    assert forms.as_run(blocks.ACTION, forms.SCRIPT, script, True) == script
    assert forms.as_run(blocks.ACTION, forms.CALLBACK, listing, True) == listing
    # a cut check runs its whole top-level statements
    check = "# f is one\nfrom solution import f\nassert f() == 1\nfor x in (1, 2):\n    assert f("
    assert forms.as_run(blocks.EVALUATION, forms.SCRIPT, check, True) == (
        "# f is one\nfrom solution import f\nassert f() == 1\n"
    )
    assert forms.as_run(blocks.EVALUATION, forms.SCRIPT, check, False) == check
    assert forms.as_run(blocks.EVALUATION, forms.SCRIPT, "assert f(", True) == ""
    code = forms.kernel_code(blocks.EVALUATION, forms.SCRIPT, check, 5.0, truncated=True)
    assert "for x in" not in code and "assert f() == 1" in code
    # an empty file stays one when the files written are read again
    with_empty = "# pkg/__init__.py (empty)\n# pkg/ops.py\nX = 1\n# cut.py\nx = ("
    ran = forms.as_run(blocks.ACTION, forms.SCRIPT, with_empty, True)
    assert forms.read_script(blocks.ACTION, ran).files == (
        ("pkg/__init__.py", ""),
        ("pkg/ops.py", "X = 1\n"),
    )


def test_a_file_name_right_after_another_is_the_first_files_opening_comment() -> None:
    """The coder heads a test script "# evaluation.py" then "# solution.py": one file,
    the test, whose first line names what it tests; read as two, the test overwrote the
    solution written above it (HumanEval/4's right answer was lost so)."""
    body = (
        "# solution.py\ndef f():\n    return 1\n\n"
        "# evaluation.py\n# solution.py\nfrom solution import f\nassert f() == 1\n"
    )
    assert forms.read_script(blocks.ACTION, body).files == (
        ("solution.py", "def f():\n    return 1\n"),
        ("evaluation.py", "# solution.py\nfrom solution import f\nassert f() == 1\n"),
    )
    # a file the listing says is empty is one, and the next name is a file of its own
    empty = "# pkg/__init__.py (empty)\n# pkg/ops.py\nX = 1\n"
    assert forms.read_script(blocks.ACTION, empty).files == (
        ("pkg/__init__.py", ""),
        ("pkg/ops.py", "X = 1\n"),
    )


def test_a_cut_file_block_is_said_back_as_the_files_it_wrote(tmp_path: Path) -> None:
    """Shown cut off mid-line inside its fence, the coder took a cut action for how a
    block ends and cut its next check at the same place; its later turns show the files
    the action wrote."""
    cut = "# solution.py\ndef f():\n    return 1\n\n# evaluation.py\nassert f(1, 2,"
    with TraceStore(tmp_path / "traces.db") as store:
        session = store.create_session(task="t")
        first = store.add_node(session.id, NewNode(kind=blocks.GENESIS, text="the task"))
        action = store.add_node(
            session.id,
            NewNode(kind=blocks.ACTION, text=cut, tick=1, parent_id=first.id, truncated=True),
        )
        turns = prompting.chat_turns(store.path(action.id), [], forms.SCRIPT)
    said = [t["content"] for t in turns if t["role"] == "assistant"]
    assert said == ["```python\n# solution.py\ndef f():\n    return 1\n```"]
