from tests.support.screens import console_traceback

#: Lines of a screen captured in CI: the tiny model's action raised in the sandbox.
AGENT_ERROR = """\
 ⭘             agent-console — traces.db
▼ #5 Answer the question  running                    ▎ session #2 · running
│   └── genesis  \"\"\"agent-console session: Answer the▎
    ├── ! action -0.4  _ductationfoype#_actionno▎
    └── error  Traceback (most recent call last):    ▎
▶ #2 Scribe  running                                 ▎
"""


def test_an_error_block_in_the_tree_is_the_agents_own() -> None:
    assert not console_traceback(AGENT_ERROR)


def test_a_traceback_printed_to_the_terminal_is_the_consoles() -> None:
    crashed = AGENT_ERROR + 'Traceback (most recent call last):\n  File "app/main.py", line 3\n'
    assert console_traceback(crashed)
