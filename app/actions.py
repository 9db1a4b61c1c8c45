"""Every key and command-palette verb of the console, described once.

A screen's `BINDINGS`, its palette provider's `ENTRIES`, the help screen (it reads the
tooltips of the bindings that apply) and the keys table of docs/reference.md are all made
from the tables below, so what a key is called in one place is what it is called in the
others; tests/app/test_actions.py fails when they drift. `python -m app.actions` prints
the docs table.

Binding ids and keys are what users remap and tests press: change them only on purpose.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from textual.binding import Binding, BindingType

from app.commands import Command


@dataclass(frozen=True)
class Action:
    """One thing the operator can do: a key (`id` and `key`), a palette verb (`palette`),
    or both."""

    #: the binding id the keys setting remaps it by; None: no key, the palette only
    id: str | None
    #: Textual key names, comma-separated (`"question_mark,f1"`); None: the palette only
    key: str | None
    #: what runs: an action of the screen (`step`) or the app (`app.train('sft')`)
    action: str
    #: the footer's word for it
    label: str
    #: what it does, in one line: the binding's tooltip, the palette's help, the help
    #: screen's "does" and the docs' "does"
    help: str
    #: the command palette's "namespace: Verb"; None: a key only
    palette: str | None = None
    #: shown in the footer (a shown key still hides while `check_action` says no)
    show: bool = True
    #: taken before the focused widget sees the key
    priority: bool = False
    #: the footer's text for the key, instead of Textual's own
    key_display: str | None = None

    def __post_init__(self) -> None:
        if (self.id is None) != (self.key is None):
            raise ValueError(f"{self.action}: a key needs an id to remap it by, and only a key")
        if self.key is None and self.palette is None:
            raise ValueError(f"{self.action}: neither a key nor a palette name")
        if self.key is not None and not self.label:
            raise ValueError(f"{self.id}: a key needs a label for the footer")


def command(palette: str, action: str, help: str) -> Action:
    """A palette verb with no key."""
    return Action(None, None, action, "", help, palette=palette)


def bindings(actions: Iterable[Action]) -> list[BindingType]:
    """A screen's `BINDINGS`: its actions that have a key, in table order (the footer's)."""
    return [
        Binding(
            a.key,
            a.action,
            a.label,
            show=a.show,
            key_display=a.key_display,
            priority=a.priority,
            tooltip=a.help,
            id=a.id,
        )
        for a in actions
        if a.key is not None
    ]


def palette(actions: Iterable[Action]) -> tuple[Command, ...]:
    """A palette provider's `ENTRIES`: its actions that have a palette name, in table order."""
    return tuple((a.palette, a.action, a.help) for a in actions if a.palette is not None)


# -- the tables, one per screen (or widget) with keys ------------------------------------------

APP_ACTIONS = (
    Action("app.quit", "q", "quit", "Quit", "Leave the console (a running session is stopped)"),
    Action("app.refresh", "r", "refresh", "Refresh", "Reload sessions from the store"),
    Action(
        "app.messages", "m", "messages", "Messages",
        "The message log: every notification of this session in full; opening it dismisses "
        "the toasts",
    ),
)  # fmt: skip

#: Off the footer (every tree has them), so the screen's own keys fit in 80 columns.
TREE_ACTIONS = (
    Action("tree.home", "home", "first", "First", "Move to the first line", show=False),
    Action("tree.end", "end", "last", "Last", "Move to the last line", show=False),
)

MAIN_ACTIONS = (
    Action(
        "main.step", "s", "step", "Step", "Let the agent write one block",
        palette="session: Step one block",
    ),
    Action(
        "main.step_tick", "S", "step_tick", "Tick", "Let the agent run one tick",
        palette="session: Step one tick",
    ),
    Action(
        "main.run", "c", "run", "Run", "Run until the agent needs you",
        palette="session: Run",
    ),
    Action(
        "main.pause", "p", "pause", "Pause", "Pause the agent at the next block, or resume it",
        palette="session: Pause or resume",
    ),
    Action(
        "main.stop", "x", "stop", "Stop", "Abort the running session",
        palette="session: Stop",
    ),
    Action(
        "main.resume", "R", "resume", "Resume",
        "Go on with the selected stored session, with the settings it was started with",
        palette="session: Resume the selected session", show=False,
    ),
    # Early: a narrow footer cuts the keys at its end, and this one lists them all.
    Action(
        "main.help", "question_mark,f1", "help", "Keys", "Show every key of this screen",
        palette="help: Keys",
    ),
    Action(
        "main.label_good", "g", "label_good", "Good", "Label the selected block good",
        palette="label: Mark good",
    ),
    Action(
        "main.label_bad", "b", "label_bad", "Bad", "Label the selected block bad",
        palette="label: Mark bad",
    ),
    Action(
        "main.undo_label", "u", "undo_label", "Undo", "Take back the last label given here",
        palette="label: Undo",
    ),
    Action(
        "main.label", "l", "label", "Label",
        "Open the labelling queue: label branches one key at a time",
        palette="label: Open the labelling queue",
    ),
    Action(
        "main.similar", "L", "similar", "Similar",
        "List the unlabelled blocks most like the selected labelled one, to give them its label",
        palette="label: Similar branches…",
    ),
    Action(
        "main.search", "slash", "search", "Search",
        "Search every stored block by meaning; enter jumps to it",
        palette="search: Traces…",
    ),
    Action(
        "main.copy", "y", "copy", "Copy", "Copy the selected block's text to the clipboard",
        palette="view: Copy the selected block", show=False,
    ),
    Action(
        "main.chat", "i", "chat", "Chat", "Write to the agent in the chat input",
        palette="chat: Message the agent",
    ),
    Action(
        "main.train", "T", "app.train", "Train",
        "Train an adapter on the labels (a confirm dialog first)",
    ),
    command("train: SFT on the labels", "app.train('sft')", "Confirm, then train an SFT adapter"),
    command("train: DPO on the labels", "app.train('dpo')", "Confirm, then train a DPO adapter"),
    Action(
        "main.jobs", "j", "app.jobs", "Jobs",
        "Training jobs: progress, loss, cancel, resume, load the adapter",
        palette="train: Jobs",
    ),
    Action(
        "main.batches", "B", "app.batches", "Batches",
        "Batch runs: progress, each task's status and result; enter opens a session",
        palette="batch: Batches", show=False,
    ),
    Action(
        "main.improve", "I", "app.improve", "Improve",
        "Improvement runs (agent-console improve): held-out pass rate per round; p promotes "
        "a round's adapter", palette="view: Improvement runs", show=False,
    ),
    command("adapter: Use adapter…", "app.use_adapter", "Sample with a registered LoRA adapter"),
    command("adapter: Base model", "app.base_model", "Sample with the base model again"),
    Action(
        "main.compare", "A", "compare", "A/B",
        "Run the selected session's task on the base model and an adapter, side by side",
        palette="compare: A/B base vs adapter",
    ),
    command(
        "compare: A/B on the held-out set", "compare_held_out",
        "Base and adapter alone on task-family variants never taught, with pass rates",
    ),
    command("view: Jump to the end", "last", "Move to the last line of the tree"),
    command(
        "view: Messages", "app.messages",
        "The message log: every notification of this session in full",
    ),
    Action(
        "main.decide", "d", "decide", "Decide",
        "Back to the action that waits for your decision", palette="main: Decide",
    ),
    Action("main.tree", "escape", "tree", "Tree", "Back to the tree", show=False),
)  # fmt: skip

#: The chat input takes every letter while it has focus: its keys are the ones that still
#: work there, so the footer keeps a way back to the tree (where the letters work) and out.
CHAT_ACTIONS = (
    Action(
        "chat.tree", "escape", "screen.tree", "Tree",
        "Leave the chat input for the tree, where the letter keys (step, run, pause…) work",
    ),
    # Priority, as Textual's own (hidden) ctrl+q is: the footer shows this one.
    Action(
        "chat.quit", "ctrl+q", "app.quit", "Quit",
        "Leave the console (a running session is stopped)", priority=True,
    ),
)  # fmt: skip

APPROVAL_ACTIONS = (
    Action(
        "approval.approve", "a", "approve", "Approve", "Run the proposed action as it is",
        palette="approval: Approve",
    ),
    Action(
        "approval.edit", "e", "edit", "Edit", "Edit the action's code, then run your version",
        palette="approval: Edit",
    ),
    Action(
        "approval.reject", "r", "reject", "Reject", "Refuse the action and tell the agent why",
        palette="approval: Reject",
    ),
    Action(
        "approval.pick", "p", "pick", "Pick",
        "Run the highlighted alternate instead of the proposed action",
        palette="approval: Pick alternate",
    ),
    Action(
        "approval.regenerate", "g", "regenerate", "Regenerate",
        "Sample a new action (nothing runs); the proposed one is kept as an alternate",
        palette="approval: Regenerate",
    ),
    # The modal holds every key while it asks: without this, a session whose agent keeps
    # proposing actions could only be stopped by deciding one first.
    Action(
        "approval.stop", "x", "stop_session", "Stop session",
        "Stop the session (stored as aborted); nothing is decided",
        palette="approval: Stop session",
    ),
    Action(
        "approval.copy", "y", "copy", "Copy",
        "Copy the code shown (the proposed action or the highlighted alternate) to the "
        "clipboard", palette="approval: Copy code", show=False,
    ),
    Action(
        "approval.select_all", "ctrl+a", "select_all", "Select all",
        "Select all of the code being edited (to type over it or copy it)", show=False,
        priority=True,  # over the editor's own ctrl+a (line start)
    ),
    Action(
        "approval.accept_edit", "ctrl+s", "accept_edit", "Accept edit",
        "Check the edited code parses as Python and run it",
        palette="approval: Accept edit",
    ),
    # Priority, so the footer shows it over the reason Input's own (hidden) enter.
    Action(
        "approval.confirm_reject", "enter", "confirm_reject", "Confirm",
        "Reject with the reason typed",
        palette="approval: Confirm reject", priority=True,
    ),
    # Priority: the code editor would otherwise take escape to move focus.
    Action(
        "approval.back", "escape", "back", "Back",
        "Leave editing or rejecting; while viewing, close the panel to look around: the "
        "decision waits (d on the main screen comes back to it)",
        palette="approval: Back", priority=True,
    ),
    *(
        Action(
            f"approval.pick_{n}", str(n), f"pick_number({n})", f"Pick {n}",
            f"Run alternate {n} instead", show=False,
        )
        for n in range(1, 10)
    ),
)  # fmt: skip

LABEL_ACTIONS = (
    Action("label.good", "g", "good", "Good", "Label this branch good", palette="label: Good"),
    Action("label.bad", "b", "bad", "Bad", "Label this branch bad", palette="label: Bad"),
    Action(
        "label.confirm", "enter", "confirm", "Confirm", "Give the suggested label",
        palette="label: Confirm suggestion",
    ),
    Action(
        "label.skip", "s", "skip", "Skip", "Leave this branch unlabelled and go to the next",
        palette="label: Skip",
    ),
    Action(
        "label.undo", "u", "undo", "Undo",
        "Take back the last label given here and return to its branch",
        palette="label: Undo",
    ),
    Action(
        "label.note", "n", "note", "Note",
        "Write a note that goes with the next good or bad label",
        palette="label: Note",
    ),
    Action(
        "label.scope", "t", "toggle_scope", "Scope",
        "Label this block, or the whole path to its tick (the next label only)",
        palette="label: Toggle scope",
    ),
    Action(
        "label.similar", "L", "similar", "Similar",
        "List the unlabelled blocks most like the last one labelled here, "
        "to give them the same label",
        palette="label: Similar branches…",
    ),
    Action(
        "label.back", "escape", "back", "Back", "Close the note, or leave the label screen",
        palette="label: Back",
    ),
    Action(
        "label.train", "T", "train", "Train",
        "Train an adapter on the labels (a confirm dialog first)",
    ),
    command("train: SFT on the labels", "train('sft')", "Confirm, then train an SFT adapter"),
    command("train: DPO on the labels", "train('dpo')", "Confirm, then train a DPO adapter"),
    command("train: Jobs", "jobs", "Training jobs: progress, loss, cancel, resume, load"),
)  # fmt: skip

TRAIN_CONFIRM_ACTIONS = (
    Action(
        "train.confirm", "ctrl+s", "confirm", "Queue job",
        "Queue the training job with these options; it trains in a worker process of its own",
        palette="train: Queue the job", priority=True,
    ),
    Action(
        "train.kind", "ctrl+t", "toggle_kind", "SFT/DPO/KTO",
        "Switch the kind of training: SFT, DPO, KTO", priority=True,
    ),
    command("train: SFT", "kind('sft')", "Train on the good blocks"),
    command("train: DPO", "kind('dpo')", "Train on the preferred pairs"),
    command("train: KTO", "kind('kto')", "Train on good and bad blocks, paired or not"),
    Action(
        "train.cancel", "escape", "cancel", "Cancel", "Close the dialog; nothing is queued",
        palette="train: Cancel", priority=True,
    ),
)  # fmt: skip

JOBS_ACTIONS = (
    Action(
        "jobs.cancel", "c", "cancel", "Cancel job",
        "Ask the selected job to stop (yes or no first); it saves a checkpoint to resume from",
        palette="jobs: Cancel",
    ),
    Action(
        "jobs.resume", "r", "resume", "Resume",
        "Continue a failed or cancelled job from its last checkpoint",
        palette="jobs: Resume",
    ),
    Action(
        "jobs.load", "l", "load", "Load adapter",
        "Load the finished job's adapter into the agent's model and use it",
        palette="jobs: Load adapter",
    ),
    Action(
        "jobs.back", "escape", "back", "Back", "Back to the previous screen",
        palette="jobs: Back",
    ),
)  # fmt: skip

CONFIRM_ACTIONS = (
    Action("confirm.yes", "y", "answer(True)", "Yes", "Yes, do it"),
    Action("confirm.no", "n,escape", "answer(False)", "No", "No, leave it"),
)

ADAPTER_PICKER_ACTIONS = (Action("adapters.cancel", "escape", "close", "Cancel", "Pick none"),)

BATCHES_ACTIONS = (
    Action(
        "batches.open", "enter", "open", "Open session",
        "Open the highlighted task's session in the tree (on the batch list: go to its tasks)",
        palette="batches: Open session", priority=True,
    ),
    Action(
        "batches.back", "escape", "back", "Back", "Back to the previous screen",
        palette="batches: Back",
    ),
)  # fmt: skip

IMPROVE_ACTIONS = (
    Action(
        "improve.promote", "p", "promote", "Promote",
        "Use the highlighted round's adapter: the run goes on with it, and so does the console",
        palette="improve: Promote",
    ),
    Action(
        "improve.back", "escape", "back", "Back", "Back to the previous screen",
        palette="improve: Back",
    ),
)  # fmt: skip

COMPARE_ACTIONS = (
    Action(
        "compare.stop", "x", "stop", "Stop",
        "Stop both sessions; they stay in the store as aborted",
        palette="compare: Stop",
    ),
    Action(
        "compare.back", "escape", "back", "Back",
        "Back to the main screen (a running comparison is stopped)",
        palette="compare: Back",
    ),
)  # fmt: skip

HELD_OUT_ACTIONS = (
    Action(
        "held_out.stop", "x", "stop", "Stop",
        "Stop the running session (aborted, not counted) and run no more",
    ),
    Action(
        "held_out.back", "escape", "back", "Back",
        "Back to the main screen (a running set is stopped)",
    ),
)  # fmt: skip

SEARCH_ACTIONS = (
    Action(
        "search.back", "escape", "back", "Back", "Close the search; the tree stays as it was",
        palette="search: Back",
    ),
    Action(
        "search.pick", "enter", "pick", "Jump",
        "Close the search and select the highlighted block in the tree",
        palette="search: Jump to the result",
    ),
    Action("search.next", "down", "move(1)", "Next", "Highlight the next result", show=False),
    Action(
        "search.previous", "up", "move(-1)", "Previous", "Highlight the previous result",
        show=False,
    ),
    Action(
        "search.page_down", "pagedown", "page(1)", "Page down", "Scroll the results a page down",
        show=False,
    ),
    Action(
        "search.page_up", "pageup", "page(-1)", "Page up", "Scroll the results a page up",
        show=False,
    ),
)  # fmt: skip

SIMILAR_ACTIONS = (
    Action(
        "similar.apply", "l", "apply", "Label selected",
        "Give the selected blocks the same label (value and scope)",
        palette="similar: Apply the label",
    ),
    Action(
        "similar.all", "a", "select_all", "All", "Select every block listed",
        palette="similar: Select all",
    ),
    Action(
        "similar.none", "n", "select_none", "None", "Clear the selection",
        palette="similar: Select none",
    ),
    Action(
        "similar.back", "escape", "back", "Back", "Close without labelling",
        palette="similar: Back",
    ),
)  # fmt: skip

HELP_ACTIONS = (Action("help.close", "escape,q,question_mark", "close", "Close", "Close help"),)

MESSAGES_ACTIONS = (
    Action("messages.back", "escape", "back", "Back", "Close the message log"),
    Action(
        "messages.older", "o", "older", "Older",
        "Show the page of messages before the oldest shown (it opens on the newest)",
    ),
)  # fmt: skip

#: Every table, under the name of where its keys apply (the docs' "where" column), in the
#: order the docs list them.
TABLES: dict[str, tuple[Action, ...]] = {
    "anywhere": APP_ACTIONS,
    "tree": TREE_ACTIONS,
    "main screen": MAIN_ACTIONS,
    "chat input": CHAT_ACTIONS,
    "approval": APPROVAL_ACTIONS,
    "labelling": LABEL_ACTIONS,
    "train dialog": TRAIN_CONFIRM_ACTIONS,
    "jobs screen": JOBS_ACTIONS,
    "yes/no question": CONFIRM_ACTIONS,
    "adapter picker": ADAPTER_PICKER_ACTIONS,
    "batches screen": BATCHES_ACTIONS,
    "improvement runs": IMPROVE_ACTIONS,
    "A/B screen": COMPARE_ACTIONS,
    "held-out A/B": HELD_OUT_ACTIONS,
    "search": SEARCH_ACTIONS,
    "similar branches": SIMILAR_ACTIONS,
    "help": HELP_ACTIONS,
    "message log": MESSAGES_ACTIONS,
}


def binding_ids() -> set[str]:
    """Every binding id the keys setting can remap, across the console's screens."""
    return {a.id for actions in TABLES.values() for a in actions if a.id is not None}


# -- the docs table ----------------------------------------------------------------------------

#: Textual key names the docs write as the key's own character.
KEY_SIGNS = {"question_mark": "?", "slash": "/", "up": "↑", "down": "↓"}


def key_table() -> str:
    """The keys table of docs/reference.md, in Markdown: every action with a key."""
    lines = ["| key | binding id | where | does |", "|---|---|---|---|"]
    for where, actions in TABLES.items():
        for a in actions:
            if a.key is None:
                continue
            keys = " ".join(f"`{KEY_SIGNS.get(k, k)}`" for k in a.key.split(","))
            does = a.help.replace("|", "\\|")
            lines.append(f"| {keys} | `{a.id}` | {where} | {does} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(key_table(), end="")
