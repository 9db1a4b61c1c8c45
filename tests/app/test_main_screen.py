"""The main screen's panes and keys, driven by Pilot over a real SQLite store: the trace
tree's shape and marks, the block, candidates and inspector panes, labelling from the
tree, live blocks arriving, help, footer, palette, the labelling screen, and a snapshot.

The store is the deterministic one of tests/app/snapshot_apps/main_app.py (the snapshot's
own), or a realistic generated session (tests/support/traces.py).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.color import Color
from rich.console import Console
from rich.text import Text
from textual.command import CommandList, CommandPalette
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets import Footer, Static

from agents import blocks
from agents.events import EvaluationRecorded
from agents.runtime.results import RUNTIME_TEXT_CHARS, clip, result_text
from agents.sandbox import CallResult
from agents.settings import Settings
from agents.tasks import builtin_names
from app.console import ConsoleApp
from app.screens.help import HelpScreen
from app.screens.label import LabelScreen
from app.screens.main import MainCommands, MainScreen
from app.widgets.block_view import Candidates
from app.widgets.results import DETAIL_HEAD, DETAIL_LINES, capped_lines, readable_row
from app.widgets.trace_tree import GROUP_OVER, LOSING, TICK_GROUP, BlockEntry
from storage import (
    Author,
    EvaluationKind,
    LabelValue,
    NewNode,
    Node,
    NodeStatus,
    TraceStore,
    Verdict,
)
from tests.app.snapshot_apps.main_app import (
    LOGIT_QUESTION,
    MainTrace,
    build_main_trace,
)
from tests.app.test_console import (
    SIZE,
    Notes,
    expand_first_session,
    inspected,
    move_to,
    plain,
    select,
    settle,
    shown,
    tick_node,
    tree,
    tree_node,
    visible,
)
from tests.support.traces import build_session

SNAPSHOT_APP = Path(__file__).parent / "snapshot_apps" / "main_app.py"
LIVE_KEYS = {"s", "S", "c", "p", "x"}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    with TraceStore(tmp_path / "traces.db") as opened:
        yield opened


@pytest.fixture
def built(store: TraceStore) -> MainTrace:
    return build_main_trace(store)


def console_app(store: TraceStore) -> ConsoleApp:
    return ConsoleApp(store=store, settings=Settings(backend="none"))


async def open_tick(app: ConsoleApp, pilot: Pilot[None], session_id: int, tick: int) -> None:
    """Move to a tick's line and expand it with space."""
    node = tick_node(app, session_id, tick)
    await move_to(app, pilot, node.line)
    if not node.is_expanded:
        await pilot.press("space")
        await settle(app, pilot)
    assert node.is_expanded


async def open_block(app: ConsoleApp, pilot: Pilot[None], block: Node) -> None:
    """Select a block and unfold the candidates that lost to it."""
    await select(app, pilot, block)
    await pilot.press("space")
    await settle(app, pilot)
    assert tree_node(app, block).is_expanded


def spans_at(text: Text, fragment: str) -> set[str]:
    """The styles of the spans that cover the start of `fragment` in a label."""
    start = text.plain.index(fragment)
    return {str(s.style) for s in text.spans if s.start <= start < s.end}


def footer_keys(screen: Screen[None]) -> dict[str, bool]:
    """What the footer shows, "key Description" -> greyed out. Its key widgets are found
    by type name (Textual does not export the class) and read through `render`."""
    keys: dict[str, bool] = {}
    for widget in screen.query_one(Footer).query("FooterKey"):
        keys[str(widget.render()).strip()] = widget.has_class("-disabled")
    return keys


def tick_text(app: ConsoleApp, session_id: int, tick: int) -> str:
    return str(tick_node(app, session_id, tick).label)


def label_of_line(app: ConsoleApp, node: Node) -> Text:
    label = tree_node(app, node).label
    assert isinstance(label, Text)
    return label


# -- the tree's shape ---------------------------------------------------------------------


async def test_alternates_and_edited_originals_sit_under_the_block_that_won(
    store: TraceStore, built: MainTrace
) -> None:
    app = console_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await expand_first_session(app, pilot)
        session = built.session.id
        assert visible(app) == [
            f"#{session} fix the config test  completed",
            "  tick 0  1 blocks",
            "  tick 1 ·  1/3 checks passed, 1 error  6 blocks",
            "  tick 2 ·  2 blocks",
            "  tick 3 ✘ !  3 blocks",
            "    ✘ action  def action_reset(subagent):",
            "    observation  The operator rejected the action: keep my changes.",
            "    ! action  def action_patch(subagent):",
            f"#{built.empty.id} an empty session  running",
        ]
        await open_tick(app, pilot, session, 1)
        await open_tick(app, pilot, session, 2)
        # losers are folded under the winner until it is opened
        assert tree_node(app, built.action).allow_expand
        assert not tree_node(app, built.action).is_expanded
        await open_block(app, pilot, built.action)
        await open_block(app, pilot, built.edit)
        assert visible(app)[2:14] == [
            "  tick 1 ·  1/3 checks passed, 1 error  6 blocks",
            "    orientation  The test loads settings.toml: read it first.",
            "    action ✗ +0.4  def action_read_config(subagent):",
            "      ⋯ action +0.3  def action_list_files(subagent):",
            "      ⋯ action -0.2  def action_run_tests(subagent):",
            "    expectation  The action succeeds if it returns the text of settings.toml ",
            "    observation  [database]",
            "  tick 2 ·  2 blocks",
            "    action  def action_run_suite(subagent):",
            "      ✎ action  def action_run_suite(subagent):",
            "  tick 3 ✘ !  3 blocks",
            "    ✘ action  def action_reset(subagent):",
        ]
        for loser, winner in (
            (built.first_alternate, built.action),
            (built.second_alternate, built.action),
            (built.slow, built.edit),
        ):
            parent = tree_node(app, loser).parent
            assert parent is not None and isinstance(parent.data, BlockEntry)
            assert parent.data.node.id == winner.id
        # a block that won nothing has nothing to unfold
        assert not tree_node(app, built.orientation).allow_expand


async def test_a_realistic_session_folds_every_loser_under_its_winner(
    store: TraceStore,
) -> None:
    """A generated session with picked alternates, operator edits, rejections and failed
    actions (seed 3 has them all): every block is in the tree exactly once, and every
    candidate that lost hangs under the block that took its place."""
    session_id = build_session(store, blocks=300, seed=3)
    nodes = {n.id: n for n in store.tree(session_id)}
    decisions = store.session_decisions(session_id)
    verdicts = {d.verdict for d in decisions}
    assert {Verdict.PICK_ALTERNATE, Verdict.EDIT, Verdict.REJECT} <= verdicts
    assert any(n.status is NodeStatus.FAILED for n in nodes.values())

    app = console_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await expand_first_session(app, pilot)
        trace = tree(app).traces[session_id]
        for tick in sorted(trace.tree_ticks):
            trace.tree_ticks[tick].expand()
        await settle(app, pilot)
        assert trace.filled == set(trace.tree_ticks)
        assert set(trace.tree_blocks) == set(nodes)

        for node in nodes.values():
            tree_node_ = trace.tree_blocks[node.id]
            parent = tree_node_.parent
            assert parent is not None
            if node.status not in LOSING:
                assert parent is trace.tree_ticks[node.tick]
                continue
            assert isinstance(parent.data, BlockEntry), f"{node.id} is not under a block"
            winner = parent.data.node
            assert winner.status not in LOSING
            assert (winner.parent_id, winner.kind, winner.tick) == (
                node.parent_id,
                node.kind,
                node.tick,
            )
        for decision in decisions:
            if decision.verdict in (Verdict.EDIT, Verdict.PICK_ALTERNATE):
                parent = trace.tree_blocks[decision.node_id].parent
                assert parent is not None and isinstance(parent.data, BlockEntry)
                assert parent.data.node.id == decision.result_node_id
        originals = [nodes[n.edited_from_id] for n in nodes.values() if n.edited_from_id]
        assert originals
        for original in originals:
            assert label_of_line(app, original).plain.startswith("✎ action")


async def test_a_long_session_shows_its_ticks_in_groups(store: TraceStore) -> None:
    """Over GROUP_OVER ticks, the ticks sit in groups of TICK_GROUP, each made when opened;
    the last group and its last tick open with the session, and so does the group a live
    session's new tick starts."""
    session_id = build_session(store, blocks=2700, seed=1)
    last = max(n.tick for n in store.tree(session_id))
    assert last > GROUP_OVER
    app = console_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await expand_first_session(app, pilot)
        trace = tree(app).traces[session_id]
        groups = [f"ticks {g * TICK_GROUP} to {g * TICK_GROUP + TICK_GROUP - 1}" for g in range(3)]
        session_node = tree(app).session_nodes[session_id]
        assert [str(child.label) for child in session_node.children] == groups
        assert [child.is_expanded for child in session_node.children] == [False, False, True]
        # only the last group's tick lines exist, and only the last tick's blocks
        assert set(trace.tree_ticks) == set(range(2 * TICK_GROUP, last + 1))
        assert trace.filled == {last}
        assert tick_node(app, session_id, last).is_expanded

        await move_to(app, pilot, 1)  # "ticks 0 to 99"
        await pilot.press("space")
        await settle(app, pilot)
        assert set(range(TICK_GROUP)) <= set(trace.tree_ticks)
        assert str(session_node.children[0].children[0].label).startswith("tick 0 ")
        assert trace.filled == {last}  # the ticks themselves still wait to be opened
        await move_to(app, pilot, 2)  # "tick 0"
        await pilot.press("space")
        await settle(app, pilot)
        assert 0 in trace.filled
        assert visible(app)[3].startswith("      genesis  ")

        # the agent moves on past the open group: the new group and its tick open
        next_tick = 3 * TICK_GROUP
        (block,) = store.add_nodes(
            session_id, [NewNode("observation", "a new group starts", tick=next_tick)]
        )
        tree(app).add_live_nodes(session_id, [block])
        await pilot.pause()
        assert [str(child.label) for child in session_node.children][-1] == (
            f"ticks {next_tick} to {next_tick + TICK_GROUP - 1}"
        )
        assert session_node.children[-1].is_expanded
        assert tick_node(app, session_id, next_tick).is_expanded
        assert visible(app)[-2:] == [
            f"    tick {next_tick}  1 blocks",
            "      observation  a new group starts",
        ]


async def test_decision_marks_and_their_colours(store: TraceStore, built: MainTrace) -> None:
    app = console_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await expand_first_session(app, pilot)
        await open_tick(app, pilot, built.session.id, 1)
        await open_tick(app, pilot, built.session.id, 2)
        await open_block(app, pilot, built.action)
        await open_block(app, pilot, built.edit)
        error = app.current_theme.error
        assert error
        marks = {
            built.first_alternate.id: "⋯ ",
            built.slow.id: "✎ ",
            built.rejected.id: "✘ ",
            built.retry.id: "! ",
        }
        for node_id, mark in marks.items():
            node = tree(app).traces[built.session.id].nodes[node_id]
            assert label_of_line(app, node).plain.startswith(mark)
        assert spans_at(label_of_line(app, built.retry), "!") == {error}
        assert spans_at(label_of_line(app, built.rejected), "✘") == {"dim"}
        # losers' kinds are dimmed, winners' actions bold
        assert "dim" in spans_at(label_of_line(app, built.first_alternate), "action")
        assert "bold" in spans_at(label_of_line(app, built.edit), "action")
        # no mark for blocks that ran or were simply chosen
        assert label_of_line(app, built.edit).plain.startswith("action")
        assert label_of_line(app, built.orientation).plain.startswith("orientation")


async def test_a_failed_evaluation_callback_marks_the_block_and_its_tick(
    store: TraceStore,
) -> None:
    session = store.create_session("check it", title="evaluated")
    passing, failing, raising = store.add_nodes(
        session.id,
        [
            NewNode("outcome", "all good", tick=1),
            NewNode("outcome", "not so good", tick=2),
            NewNode("outcome", "broken check", tick=3),
        ],
    )
    store.record_evaluation(passing.id, "writes the file", result=True, passed=True)
    store.record_evaluation(failing.id, "writes the file", result=True, passed=True)
    store.record_evaluation(failing.id, "reads as English", result=False, passed=False)
    store.record_evaluation(raising.id, "key is letters", passed=None, error="NameError: key")
    # a logit question is no callback: it marks nothing, even when it says no
    store.record_evaluation(
        passing.id, LOGIT_QUESTION, kind=EvaluationKind.LOGIT, result=-2.0, passed=False
    )
    app = console_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await expand_first_session(app, pilot)
        for tick in (1, 2):
            await open_tick(app, pilot, session.id, tick)
        error = app.current_theme.error
        assert error and tree(app).error_colour == error

        good = label_of_line(app, passing)
        assert good.plain == "outcome ✓  all good"
        assert spans_at(good, "✓") == {"green"}
        assert tick_text(app, session.id, 1) == "tick 1  1/1 checks passed  1 blocks"

        # one check passed and one failed: counted as checks, not as blocks
        bad = label_of_line(app, failing)
        assert bad.plain == "outcome ✗  not so good"
        assert spans_at(bad, "✗") == {error}
        assert spans_at(bad, "not so good") == {f"dim {error}"}
        tick_label = tick_node(app, session.id, 2).label
        assert isinstance(tick_label, Text)
        assert tick_label.plain == "tick 2  1/2 checks passed  1 blocks"
        assert spans_at(tick_label, "1/2 checks") == {error}

        # a check that raised is not passed, and is named
        assert label_of_line(app, raising).plain == "outcome ✗  broken check"
        assert tick_text(app, session.id, 3) == "tick 3  0/1 checks passed, 1 error  1 blocks"

        # a live check adds to the count (the runtime's evaluation events); a live logit
        # question adds nothing
        def live(passed: bool, kind: EvaluationKind = EvaluationKind.CALLBACK) -> None:
            recorded = EvaluationRecorded(
                session_id=session.id, node_id=passing.id, name="live", kind=kind,
                result=passed, passed=passed, error=None, duration=0.1,
            )  # fmt: skip
            tree(app).set_evaluation(session.id, passing.id, recorded)

        live(False)
        await pilot.pause()
        assert label_of_line(app, passing).plain == "outcome ✗  all good"
        assert tick_text(app, session.id, 1) == "tick 1  1/2 checks passed  1 blocks"
        # ...and a later pass does not clear the mark
        live(True)
        live(True, EvaluationKind.LOGIT)
        await pilot.pause()
        assert label_of_line(app, passing).plain == "outcome ✗  all good"
        assert tick_text(app, session.id, 1) == "tick 1  2/3 checks passed  1 blocks"


# -- the block, candidates and inspector panes --------------------------------------------


async def test_the_inspector_shows_the_ticks_expectation_evaluations_and_observations(
    store: TraceStore, built: MainTrace
) -> None:
    app = console_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await expand_first_session(app, pilot)
        await open_tick(app, pilot, built.session.id, 1)
        await select(app, pilot, built.action)
        assert inspected(app).splitlines() == [
            "tick 1",
            "expectation",
            "The action succeeds if it returns the text of settings.toml with a [database] "
            "section; it fails if",
            "the file is missing.",
            "evaluations  1/3 checks passed, 1 error",
            "pass  database section exists true                 12 ms",
            'fail  url points at postgres  {"url": "sqlite://"} 250 ms',
            "error port is a number        KeyError: 'port'",
            "logit questions",
            "+1.25 Did the action succeed?",
            "+0.30 action: Will this action make progress on the task?",
            "observations",
            "settings.toml: [database]",
            'settings.toml: {"lines": 2}',
        ]
        # the verdicts are coloured: pass green, fail and error in the theme's error colour
        assert app.current_theme.error is not None
        r, g, b = Color.parse(app.current_theme.error).triplet or (0, 0, 0)
        console = Console(width=100, file=io.StringIO(), color_system="truecolor")
        with console.capture() as captured:
            console.print(app.query_one("#inspector", Static).content)
        drawn = captured.get()
        assert "\x1b[1;32mpass" in drawn
        assert f"\x1b[1;38;2;{r};{g};{b}mfail" in drawn
        assert f"\x1b[1;38;2;{r};{g};{b}merror" in drawn

        # the tick's line shows the same tick; a tick without evaluations says so
        await move_to(app, pilot, tick_node(app, built.session.id, 1).line)
        assert inspected(app).splitlines()[0] == "tick 1"
        await select(app, pilot, built.rejected)
        assert inspected(app).splitlines() == [
            "tick 3",
            "expectation",
            "none written",
            "evaluations",
            "none ran",
            "observations",
            "Operator feedback: The operator rejected the action: keep my changes.",
            "1 action(s) raised",
        ]
        # back on a session line, the inspector empties
        await move_to(app, pilot, 0)
        assert inspected(app).startswith("The selected tick's expectation")


#: What a task's failing check returned: a test run.
PYTEST_STDOUT = """\
============ test session starts ============
collected 2 items

tests/test_config.py .F

================= FAILURES ==================
_______________ test_database _______________
>   assert url.startswith("postgres")
E   AssertionError: assert False
tests/test_config.py:9: AssertionError
FAILED tests/test_config.py::test_database
========= 1 failed, 1 passed in 0.03s =======
"""
PYTEST_RESULT = {"stdout": PYTEST_STDOUT, "stderr": "", "returncode": 1}


def store_test_run(store: TraceStore) -> tuple[int, Node]:
    """A session whose tick 1 ran the tests: its outcome block as the runtime writes it
    (the rows' text from `result_text`, so the dict's repr), one check passing and one
    failing with pytest's output."""
    session = store.create_session("Fix the failing config test", title="test run")
    (action,) = store.add_nodes(
        session.id, [NewNode("action", 'run("pytest")', tick=1, status=NodeStatus.EXECUTED)]
    )
    rows = [
        ["action: Run the test suite", "1 failed, 1 passed"],
        ["tests pass", result_text(CallResult(ok=True, value=PYTEST_RESULT))],
        ["settings load", "True"],
    ]
    (outcome,) = store.add_nodes(
        session.id,
        [NewNode("outcome", blocks.outcome_table(rows), tick=1, parent_id=action.id,
                 author=Author.RUNTIME, status=NodeStatus.CHOSEN,
                 meta={"table": rows, "passed": 1, "total": 2})],
    )  # fmt: skip
    store.record_evaluation(
        outcome.id, "tests pass", result=PYTEST_RESULT, passed=False, duration=1.9
    )
    store.record_evaluation(outcome.id, "settings load", result=True, passed=True, duration=0.05)
    store.record_evaluation(
        outcome.id, LOGIT_QUESTION, kind=EvaluationKind.LOGIT, result=-1.5, passed=False
    )
    return session.id, outcome


async def test_the_tree_and_the_inspector_count_the_same_checks_and_show_test_output(
    store: TraceStore,
) -> None:
    """One check passed and one failed, whose result is a test run's stdout in a dict:
    the tree once said "0/1 evaluations passed" there (it counted blocks), and the
    inspector showed the dict on one line with its line breaks escaped."""
    session_id, outcome = store_test_run(store)
    app = console_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await expand_first_session(app, pilot)
        await select(app, pilot, outcome)
        await settle(app, pilot)
        assert tick_text(app, session_id, 1) == "tick 1 ·  1/2 checks passed  2 blocks"
        lines = inspected(app).splitlines()
        heading = lines.index("evaluations  1/2 checks passed")
        stdout = [f"  {line}".rstrip() for line in PYTEST_STDOUT.splitlines()]
        assert lines[heading + 1 :] == [
            "fail tests pass    ========= 1 failed, 1 passed in 0.03s ======= (+11 lines) 1900 ms",
            "pass settings load true                                                      50 ms",
            "tests pass: fail",
            "  returncode: 1",
            "  stdout:",
            *stdout,
            # the logit question, no check, is not in the count
            "logit questions",
            "-1.50 Did the action succeed?",
        ]

        # the outcome block itself: its text holds the dict's repr (what the model
        # reads), the view shows each program's result with its line breaks
        assert "\\n" in outcome.text
        view = [line.rstrip() for line in shown(app).splitlines()]
        assert "\\n" not in "".join(view)
        start = view.index("tests pass")
        assert view[start : start + 3 + len(stdout)] == [
            "tests pass",
            "  returncode: 1",
            "  stdout:",
            *stdout,
        ]
        assert view[view.index("settings load") + 1] == "  True"


def test_long_output_keeps_its_first_and_last_lines() -> None:
    text = "\n".join(f"line {i}" for i in range(1, 101))
    lines = capped_lines(text)
    assert len(lines) == DETAIL_LINES + 1
    assert lines[:DETAIL_HEAD] == [f"line {i}" for i in range(1, DETAIL_HEAD + 1)]
    assert lines[DETAIL_HEAD] == f"… {100 - DETAIL_LINES} more lines"
    assert lines[-1] == "line 100"
    assert capped_lines("a\nb") == ["a", "b"]


def test_an_outcome_row_cut_short_still_shows_its_line_breaks() -> None:
    """The runtime clips a row's text, so a long test run's repr no longer parses."""
    value = {"stdout": "\n".join(f"line {i}" for i in range(300)), "stderr": "", "returncode": 1}
    row = clip(result_text(CallResult(ok=True, value=value)), RUNTIME_TEXT_CHARS // 4)
    assert "characters cut" in row and "\\nline 1\\n" in row
    shown = readable_row(row)
    assert "\\n" not in shown
    assert "\nline 1\nline 2\n" in shown and shown.endswith("'returncode': 1}")


async def test_the_candidates_pane_lists_the_siblings_by_score(
    store: TraceStore, built: MainTrace
) -> None:
    app = console_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await expand_first_session(app, pilot)
        await open_tick(app, pilot, built.session.id, 1)
        await open_block(app, pilot, built.action)

        def candidates() -> list[str]:
            return [
                line.rstrip()
                for line in plain(app.query_one(Candidates).content).rstrip().splitlines()
            ]

        def highlighted() -> list[str]:
            console = Console(width=100, file=io.StringIO(), color_system="standard")
            with console.capture() as captured:
                console.print(app.query_one(Candidates).content)
            return [line for line in captured.get().splitlines() if "\x1b[7m" in line]

        assert candidates() == [
            "3 candidates",
            "•  +0.42 def action_read_config(subagent):",
            "⋯  +0.31 def action_list_files(subagent):",
            "⋯  -0.18 def action_run_tests(subagent):",
        ]
        (line,) = highlighted()
        assert "action_read_config" in line
        await select(app, pilot, built.second_alternate)
        assert candidates()[0] == "3 candidates"
        (line,) = highlighted()
        assert "action_run_tests" in line
        assert shown(app).splitlines()[:2] == [
            f"#{built.second_alternate.id} action · tick 1 · alternate · by model",
            "score -0.18   evaluator -0.18",
        ]

        await select(app, pilot, built.orientation)
        assert candidates() == ["no other candidates"]

        await open_tick(app, pilot, built.session.id, 2)
        await open_block(app, pilot, built.edit)
        assert candidates() == [
            "2 candidates",
            "✎  - def action_run_suite(subagent):",
            "•  - def action_run_suite(subagent):",
        ]
        assert shown(app).splitlines()[0] == (
            f"#{built.edit.id} action · tick 2 · executed · by operator · edited from "
            f"#{built.slow.id}"
        )


async def test_the_selected_block_shows_its_header_score_parts_and_code(
    store: TraceStore, built: MainTrace
) -> None:
    app = console_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await expand_first_session(app, pilot)
        await open_tick(app, pilot, built.session.id, 1)
        await select(app, pilot, built.action)
        assert [line.rstrip() for line in shown(app).splitlines()] == [
            f"#{built.action.id} action · tick 1 · executed · by model",
            "score +0.42   evaluator +0.30   length +0.12",
            "",
            "def action_read_config(subagent):",
            '    """Read the settings file the failing test loads."""',
            '    with open("settings.toml") as infile:',
            "        return infile.read()",
            "",
            'self.add_action("Read the settings file", action_read_config)',
        ]
        # y copies it (before, a block's text could not be copied out of the console)
        await pilot.press("y")
        await pilot.pause()
        assert app.clipboard == built.action.text


# -- labelling from the tree --------------------------------------------------------------


async def test_g_and_b_label_the_selected_block_and_u_takes_them_back(
    store: TraceStore, built: MainTrace
) -> None:
    app = console_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await expand_first_session(app, pilot)
        screen = app.screen
        assert isinstance(screen, MainScreen)
        # on a session line there is no block to label: the keys are greyed and do nothing
        assert not screen.active_bindings["g"].enabled
        assert not screen.active_bindings["u"].enabled
        await pilot.press("g", "b", "u")
        await settle(app, pilot)
        assert store.session_labels(built.session.id) == {}

        await select(app, pilot, built.retry)
        assert screen.active_bindings["g"].enabled and screen.active_bindings["b"].enabled
        assert not screen.active_bindings["u"].enabled
        await pilot.press("g")
        await settle(app, pilot)
        good = store.label_of(built.retry.id)
        assert good is not None and good.value is LabelValue.GOOD
        assert label_of_line(app, built.retry).plain.startswith("+ ! action")
        assert spans_at(label_of_line(app, built.retry), "+") == {"bold green"}
        assert tick_text(app, built.session.id, 3) == "tick 3 ✘ !  +1 -0  3 blocks"
        assert shown(app).splitlines()[0].endswith("· failed · by model · labelled good")
        assert screen.active_bindings["u"].enabled

        await pilot.press("b")
        await settle(app, pilot)
        bad = store.label_of(built.retry.id)
        assert bad is not None and bad.value is LabelValue.BAD
        assert label_of_line(app, built.retry).plain.startswith("- ! action")
        assert tick_text(app, built.session.id, 3) == "tick 3 ✘ !  +0 -1  3 blocks"

        await pilot.press("u")  # takes back "bad": the earlier "good" is the label again
        await settle(app, pilot)
        assert store.label_of(built.retry.id) == good
        assert label_of_line(app, built.retry).plain.startswith("+ ! action")
        assert shown(app).splitlines()[0].endswith("labelled good")

        await pilot.press("u")
        await settle(app, pilot)
        assert store.label_of(built.retry.id) is None
        assert label_of_line(app, built.retry).plain.startswith("! action")
        assert tick_text(app, built.session.id, 3) == "tick 3 ✘ !  3 blocks"
        assert not screen.active_bindings["u"].enabled
        assert [lab.retracted_at is not None for lab in store.label_history(built.retry.id)] == [
            True,
            True,
        ]


async def test_undo_follows_the_block_labelled_not_the_cursor(
    store: TraceStore, built: MainTrace
) -> None:
    app = console_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await expand_first_session(app, pilot)
        await select(app, pilot, built.rejected)
        await pilot.press("b")
        await settle(app, pilot)
        await select(app, pilot, built.retry)
        await pilot.press("g")
        await settle(app, pilot)
        await move_to(app, pilot, 0)
        await pilot.press("u", "u")
        await settle(app, pilot)
        assert store.session_labels(built.session.id) == {}
        assert label_of_line(app, built.rejected).plain.startswith("✘ action")
        assert label_of_line(app, built.retry).plain.startswith("! action")


async def test_undo_of_a_label_taken_back_elsewhere_warns_as_the_label_screen_does(
    store: TraceStore, built: MainTrace
) -> None:
    """The main screen and the labelling screen share one labeller: a label taken back
    elsewhere meanwhile is undone either way, with a warning, never an error."""
    notes = Notes()
    app = console_app(store)
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await expand_first_session(app, pilot)
        await select(app, pilot, built.retry)
        await pilot.press("g")
        await settle(app, pilot)
        label = store.label_of(built.retry.id)
        assert label is not None
        store.retract_label(label.id)  # another console took it back meanwhile
        await pilot.press("u")
        await settle(app, pilot)
        said = [(n.severity, n.message) for n in notes.all]
        assert (
            "warning",
            f"label {label.id} is already retracted: nothing more to undo for it",
        ) in said
        assert not [message for severity, message in said if severity == "error"]
        assert not app.screen.active_bindings["u"].enabled
        assert label_of_line(app, built.retry).plain.startswith("! action")


# -- keys, help, footer, palette ------------------------------------------------------------


async def test_end_jumps_to_the_last_line_and_home_back(
    store: TraceStore, built: MainTrace
) -> None:
    app = console_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await expand_first_session(app, pilot)
        await open_tick(app, pilot, built.session.id, 1)
        trace_tree = tree(app)
        assert trace_tree.last_line == len(visible(app)) - 1 > 10
        await pilot.press("end")
        await settle(app, pilot)
        assert trace_tree.cursor_line == trace_tree.last_line
        assert (
            visible(app)[trace_tree.cursor_line] == f"#{built.empty.id} an empty session  running"
        )
        assert shown(app).splitlines()[0] == f"session #{built.empty.id} · running"
        await pilot.press("home")
        await settle(app, pilot)
        assert trace_tree.cursor_line == 0
        assert shown(app).splitlines()[0] == f"session #{built.session.id} · completed"


async def test_help_lists_the_keys_that_apply_with_their_ids(
    store: TraceStore, built: MainTrace
) -> None:
    app = console_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await expand_first_session(app, pilot)
        await pilot.press("question_mark")
        await settle(app, pilot)
        assert isinstance(app.screen, HelpScreen)
        rows = plain(app.screen.query_one("#help-keys", Static).content)
        for binding_id in ("app.quit", "app.refresh", "main.label", "main.help", "tree.end"):
            assert binding_id in rows
        assert "Open the labelling queue" in rows and "Leave the console" in rows
        # the live-session keys are hidden while no session runs, as in the footer
        assert "main.step" not in rows and "main.stop" not in rows
        await pilot.press("escape")
        await settle(app, pilot)
        assert isinstance(app.screen, MainScreen)
        await pilot.press("f1")
        await settle(app, pilot)
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("question_mark")
        await settle(app, pilot)
        assert isinstance(app.screen, MainScreen)


async def test_the_footer_hides_the_session_keys_without_a_live_session(
    store: TraceStore, built: MainTrace
) -> None:
    notes = Notes()
    app = console_app(store)
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await expand_first_session(app, pilot)
        screen = app.screen
        assert isinstance(screen, MainScreen)
        assert screen.live is None
        assert not LIVE_KEYS & set(screen.active_bindings)
        shown_keys = footer_keys(screen)
        assert {"l Label", "i Chat", "q Quit", "r Refresh", "? Keys"} <= set(shown_keys)
        assert not {"Step", "Tick", "Run", "Pause", "Stop"} & {
            key.split(" ", 1)[1] for key in shown_keys
        }
        # no block selected: the labelling keys are shown greyed
        assert shown_keys["g Good"] and shown_keys["b Bad"] and not shown_keys["l Label"]
        await select(app, pilot, built.retry)
        shown_keys = footer_keys(screen)
        assert not shown_keys["g Good"] and not shown_keys["b Bad"]

        await pilot.press(*LIVE_KEYS)  # nothing to step, run or stop: nothing happens
        await settle(app, pilot)
        assert app.is_running and isinstance(app.screen, MainScreen)
        assert notes.of("error") == []


async def test_the_palette_offers_new_sessions_and_the_labelling_queue(
    store: TraceStore, built: MainTrace
) -> None:
    app = console_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        screen = app.screen
        assert isinstance(screen, MainScreen)
        names = [hit.text async for hit in MainCommands(screen).discover()]
        assert "vigenere" in builtin_names()
        for task in builtin_names():
            assert f"session: New {task}" in names
        assert "label: Open the labelling queue" in names
        assert "view: Jump to the end" in names and "help: Keys" in names
        # only what applies now: nothing runs, no block is selected, nothing to undo
        for hidden in ("session: Step one block", "session: Stop", "label: Mark good"):
            assert hidden not in names
        assert "label: Undo" not in names
        searched = [str(hit.text) async for hit in MainCommands(screen).search("vigen")]
        assert searched == ["session: New vigenere"]

        # through the real palette: search, then run the chosen command
        await pilot.press("ctrl+p")
        await pilot.pause()
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"labelling queue")
        await pilot.pause(0.5)
        prompts = [str(option.prompt) for option in app.screen.query_one(CommandList).options]
        assert any("label: Open the labelling queue" in p for p in prompts), prompts
        await pilot.press("down", "enter")
        await settle(app, pilot)
        assert isinstance(app.screen, LabelScreen)


async def test_new_session_from_the_palette_without_a_model_says_why(
    store: TraceStore, built: MainTrace
) -> None:
    notes = Notes()
    app = console_app(store)
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await settle(app, pilot)
        await app.screen.run_action("new_task('vigenere')")
        await settle(app, pilot)
        assert notes.of("warning")[-1] == "no model: the backend setting is `none`"
        assert app.is_running
        assert len(store.list_sessions()) == 2  # nothing was started


async def test_l_opens_the_labelling_screen_and_escape_comes_back(
    store: TraceStore, built: MainTrace
) -> None:
    app = console_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await expand_first_session(app, pilot)
        await select(app, pilot, built.retry)
        main = app.screen
        await pilot.press("l")
        await settle(app, pilot)
        label_screen = app.screen
        assert isinstance(label_screen, LabelScreen)
        item = label_screen.current
        assert item is not None
        await pilot.press("g")
        await settle(app, pilot)
        given = store.label_of(item.node.id)
        assert given is not None and given.value is LabelValue.GOOD

        await pilot.press("escape")
        await settle(app, pilot)
        assert app.screen is main
        assert tree(app).has_focus
        cursor = tree(app).cursor_node
        assert cursor is not None and isinstance(cursor.data, BlockEntry)
        assert cursor.data.node.id == built.retry.id
        # the label given there shows here, once the labelled block is on screen
        trace = tree(app).traces[built.session.id]
        assert trace.labels[item.node.id] == given
        labelled = trace.nodes[item.node.id]
        await open_tick(app, pilot, built.session.id, labelled.tick)
        assert label_of_line(app, labelled).plain.startswith("+ ")


async def test_i_focuses_the_chat_and_escape_returns_to_the_tree(
    store: TraceStore, built: MainTrace
) -> None:
    notes = Notes()
    app = console_app(store)
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await settle(app, pilot)
        await pilot.press("i")
        await pilot.pause()
        chat = app.screen.query_one("#chat-input")
        assert chat.has_focus
        await pilot.press(*"hello", "enter")  # no model: no session, one warning
        await settle(app, pilot)
        assert notes.of("warning")[-1] == "no model: the backend setting is `none`"
        assert len(store.list_sessions()) == 2
        await pilot.press("escape")
        await pilot.pause()
        assert tree(app).has_focus


# -- live blocks --------------------------------------------------------------------------


async def test_live_blocks_are_added_to_an_open_session(
    store: TraceStore, built: MainTrace
) -> None:
    app = console_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await expand_first_session(app, pilot)
        session = built.session.id
        await select(app, pilot, built.retry)
        trace_tree = tree(app)

        # a block of the open tick is appended in place
        (debug,) = store.add_nodes(
            session,
            [NewNode("debug", "patch() needs a path", tick=3, parent_id=built.retry.id)],
        )
        trace_tree.add_live_nodes(session, [debug])
        await pilot.pause()
        assert visible(app)[5:9] == [
            "    ✘ action  def action_reset(subagent):",
            "    observation  The operator rejected the action: keep my changes.",
            "    ! action  def action_patch(subagent):",
            "    debug  patch() needs a path",
        ]
        assert tick_text(app, session, 3) == "tick 3 ✘ !  4 blocks"

        # an alternate that arrives later lands under the block it lost to
        (alternate,) = store.add_nodes(
            session,
            [NewNode("action", "def action_retry(subagent):\n    pass", tick=3,
                     parent_id=built.feedback.id, status=NodeStatus.ALTERNATE, score=-1.0)],
        )  # fmt: skip
        trace_tree.add_live_nodes(session, [alternate])
        await pilot.pause()
        parent = tree_node(app, alternate).parent
        assert parent is not None and isinstance(parent.data, BlockEntry)
        assert parent.data.node.id == built.retry.id
        # the cursor stays on the block it was on, though the tick's lines were remade
        cursor = trace_tree.cursor_node
        assert cursor is not None and isinstance(cursor.data, BlockEntry)
        assert cursor.data.node.id == built.retry.id
        assert tick_text(app, session, 3) == "tick 3 ✘ !  5 blocks"

        # a status change updates the line (and the tick's marks)
        store.set_node_status(built.rejected.id, NodeStatus.APPROVED)
        trace_tree.add_live_nodes(session, [store.get_node(built.rejected.id)])
        await pilot.pause()
        assert label_of_line(app, built.rejected).plain.startswith("✔ action")
        assert tick_text(app, session, 3) == "tick 3 ✔ !  5 blocks"

        # the agent moved on: its new tick gets a line, opened so its blocks show as they come
        new_tick = store.add_nodes(
            session,
            [
                NewNode("orientation", "Try again with a path.", tick=4, parent_id=debug.id),
                NewNode("action", "def action_patch2(subagent):\n    pass", tick=4,
                        parent_index=0, status=NodeStatus.EXECUTED),
            ],
        )  # fmt: skip
        trace_tree.add_live_nodes(session, new_tick)
        await pilot.pause()
        assert tick_text(app, session, 4) == "tick 4 ·  2 blocks"
        assert tick_node(app, session, 4).is_expanded
        assert visible(app)[-3:] == [
            "    orientation  Try again with a path.",
            "    action  def action_patch2(subagent):",
            f"#{built.empty.id} an empty session  running",
        ]


async def test_live_blocks_for_a_closed_session_wait_until_it_is_opened(
    store: TraceStore, built: MainTrace
) -> None:
    app = console_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        (block,) = store.add_nodes(built.empty.id, [NewNode("observation", "first look")])
        tree(app).add_live_nodes(built.empty.id, [block])
        await pilot.pause()
        assert built.empty.id not in tree(app).traces
        await move_to(app, pilot, 1)
        await pilot.press("space")
        await settle(app, pilot)
        assert visible(app)[-2:] == ["  tick 0  1 blocks", "    observation  first look"]


async def test_a_live_alternate_picked_moves_the_lines_around(
    store: TraceStore, built: MainTrace
) -> None:
    """The operator picks an alternate: the old winner becomes an alternate under it."""
    app = console_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await expand_first_session(app, pilot)
        session = built.session.id
        await open_tick(app, pilot, session, 1)
        store.set_node_status(built.action.id, NodeStatus.ALTERNATE)
        store.set_node_status(built.first_alternate.id, NodeStatus.EXECUTED)
        tree(app).add_live_nodes(
            session, [store.get_node(built.action.id), store.get_node(built.first_alternate.id)]
        )
        await pilot.pause()
        parent = tree_node(app, built.action).parent
        assert parent is not None and isinstance(parent.data, BlockEntry)
        assert parent.data.node.id == built.first_alternate.id
        assert tree_node(app, built.first_alternate).parent is tick_node(app, session, 1)


# -- the snapshot -------------------------------------------------------------------------


async def _select_the_scored_action(pilot: Pilot[None]) -> None:
    """Open the session, then tick 1, select its action and unfold its alternates; drop
    the "no model" toast, which would otherwise sit over the panes for 15 seconds."""
    app = pilot.app
    assert isinstance(app, ConsoleApp)
    await expand_first_session(app, pilot)
    await pilot.press("down", "down", "space")  # tick 1
    await settle(app, pilot)
    await pilot.press("down", "down", "space")  # its action
    await settle(app, pilot)
    app.clear_notifications()
    await pilot.pause()


def test_snapshot_of_the_main_screen(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(SNAPSHOT_APP, terminal_size=SIZE, run_before=_select_the_scored_action)


async def test_the_tree_cursor_shows_without_colour_when_the_tree_has_no_focus(
    store: TraceStore, built: MainTrace
) -> None:
    """Underlined while the chat has the focus: the tint alone is lost on a monochrome
    terminal (NO_COLOR)."""
    app = console_app(store)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        the_tree = tree(app)
        assert app.get_css_variables()["block-cursor-blurred-text-style"] == "underline"
        await pilot.press("i")
        await settle(app, pilot)
        assert not the_tree.has_focus
        line = the_tree.cursor_line - the_tree.scroll_offset.y
        label = [s for s in the_tree.render_line(line) if "fix the config test" in s.text]
        assert label and all(s.style is not None and s.style.underline for s in label), label


def test_a_label_the_checks_gave_is_marked_apart_in_the_tree(store: TraceStore) -> None:
    from app.widgets.trace_tree import block_label
    from storage import CHECKS_SOURCE

    built = build_main_trace(store)
    operator = store.add_label(built.action.id, LabelValue.GOOD)
    automatic = store.add_label(built.retry.id, LabelValue.BAD, source=CHECKS_SOURCE)
    assert block_label(built.action, operator, None, "red").plain.startswith("+ ")
    assert block_label(built.retry, automatic, None, "red").plain.startswith("⚙- ")
