"""The one table of actions (app/actions.py) against everything that describes a key: each
screen's bindings, its command palette entries, and the keys table of docs/reference.md.
A key described in two places that say different things fails here."""

from __future__ import annotations

import importlib
import pkgutil
import runpy
from pathlib import Path
from typing import Any

import pytest
from textual.binding import Binding, BindingType

import app.screens
import app.widgets
from app import actions
from app.actions import Action, bindings, key_table, palette
from app.commands import ScreenCommands
from app.console import ConsoleApp
from app.dialogs import AdapterPicker, ConfirmScreen
from app.screens.approval import ApprovalCommands, ApprovalScreen
from app.screens.batches import BatchesCommands, BatchesScreen
from app.screens.compare import CompareCommands, CompareScreen
from app.screens.held_out import HeldOutScreen
from app.screens.help import HelpScreen
from app.screens.improve import ImproveCommands, ImproveScreen
from app.screens.jobs import JobsCommands, JobsScreen
from app.screens.label import LabelCommands, LabelScreen
from app.screens.main import MainCommands, MainScreen
from app.screens.messages import MessagesScreen
from app.screens.search import SearchCommands, SearchScreen
from app.screens.similar import SimilarCommands, SimilarScreen
from app.screens.train_confirm import TrainCommands, TrainConfirmScreen
from app.widgets.chat import ChatInput
from app.widgets.trace_tree import TraceTree

REFERENCE = Path(__file__).parents[2] / "docs" / "reference.md"

#: Each class with keys, and the table its keys are made from.
BINDING_OWNERS: dict[type, tuple[Action, ...]] = {
    ConsoleApp: actions.APP_ACTIONS,
    TraceTree: actions.TREE_ACTIONS,
    ChatInput: actions.CHAT_ACTIONS,
    MainScreen: actions.MAIN_ACTIONS,
    ApprovalScreen: actions.APPROVAL_ACTIONS,
    LabelScreen: actions.LABEL_ACTIONS,
    TrainConfirmScreen: actions.TRAIN_CONFIRM_ACTIONS,
    JobsScreen: actions.JOBS_ACTIONS,
    ConfirmScreen: actions.CONFIRM_ACTIONS,
    AdapterPicker: actions.ADAPTER_PICKER_ACTIONS,
    BatchesScreen: actions.BATCHES_ACTIONS,
    ImproveScreen: actions.IMPROVE_ACTIONS,
    CompareScreen: actions.COMPARE_ACTIONS,
    HeldOutScreen: actions.HELD_OUT_ACTIONS,
    SearchScreen: actions.SEARCH_ACTIONS,
    SimilarScreen: actions.SIMILAR_ACTIONS,
    HelpScreen: actions.HELP_ACTIONS,
    MessagesScreen: actions.MESSAGES_ACTIONS,
}

#: Each palette provider, and the table its entries are made from.
PALETTE_OWNERS: dict[type[ScreenCommands], tuple[Action, ...]] = {
    MainCommands: actions.MAIN_ACTIONS,
    ApprovalCommands: actions.APPROVAL_ACTIONS,
    LabelCommands: actions.LABEL_ACTIONS,
    TrainCommands: actions.TRAIN_CONFIRM_ACTIONS,
    JobsCommands: actions.JOBS_ACTIONS,
    BatchesCommands: actions.BATCHES_ACTIONS,
    ImproveCommands: actions.IMPROVE_ACTIONS,
    CompareCommands: actions.COMPARE_ACTIONS,
    SearchCommands: actions.SEARCH_ACTIONS,
    SimilarCommands: actions.SIMILAR_ACTIONS,
}


def described(binding: BindingType) -> tuple[Any, ...]:
    """Everything about a binding the operator can see or rely on."""
    assert isinstance(binding, Binding), binding
    return (
        binding.id,
        binding.key,
        binding.action,
        binding.description,
        binding.tooltip,
        binding.show,
        binding.priority,
        binding.key_display,
    )


def classes_defining(attribute: str) -> set[type]:
    """Every class of the console's modules that sets `attribute` itself."""
    modules = [importlib.import_module(name) for name in ("app.console", "app.dialogs")]
    for package in (app.screens, app.widgets):
        for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            modules.append(importlib.import_module(info.name))
    return {
        value
        for module in modules
        for value in vars(module).values()
        if isinstance(value, type)
        and value.__module__ == module.__name__
        and attribute in vars(value)
    }


def docs_section() -> str:
    text = REFERENCE.read_text(encoding="utf-8")
    start = "<!-- keys:start -->\n"
    end = "<!-- keys:end -->"
    assert start in text and end in text, "docs/reference.md lost its keys markers"
    return text[text.index(start) + len(start) : text.index(end)]


def test_the_docs_keys_table_is_the_one_the_actions_make() -> None:
    assert docs_section() == key_table(), (
        "docs/reference.md's keys table is out of date: paste `python -m app.actions` "
        "between its keys markers"
    )


def test_python_m_app_actions_prints_the_docs_table(capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_module("app.actions", run_name="__main__")
    assert capsys.readouterr().out == key_table()


def test_every_class_with_keys_has_a_table() -> None:
    assert classes_defining("BINDINGS") == set(BINDING_OWNERS)
    assert classes_defining("ENTRIES") == set(PALETTE_OWNERS)
    assert set(map(id, BINDING_OWNERS.values())) == set(map(id, actions.TABLES.values()))


@pytest.mark.parametrize("owner", BINDING_OWNERS, ids=lambda owner: owner.__name__)
def test_the_bindings_are_the_ones_the_table_makes(owner: type) -> None:
    table = BINDING_OWNERS[owner]
    assert [described(b) for b in owner.BINDINGS] == [described(b) for b in bindings(table)]


@pytest.mark.parametrize("provider", PALETTE_OWNERS, ids=lambda provider: provider.__name__)
def test_every_palette_entry_says_what_its_action_says(provider: type[ScreenCommands]) -> None:
    table = PALETTE_OWNERS[provider]
    assert palette(table) == provider.ENTRIES
    owner = next(o for o, t in BINDING_OWNERS.items() if t is table)
    tooltips = {b.action: b.tooltip for b in owner.BINDINGS if isinstance(b, Binding)}
    by_name = {a.palette: a for a in table}
    for name, action, help_text in provider.ENTRIES:
        assert by_name[name].action == action and by_name[name].help == help_text, name
        if action in tooltips:
            assert tooltips[action] == help_text, f"{name}: the key says {tooltips[action]!r}"


@pytest.mark.parametrize("where", actions.TABLES)
def test_no_two_actions_on_one_screen_share_an_id_a_key_or_a_palette_name(where: str) -> None:
    table = actions.TABLES[where]
    ids = [a.id for a in table if a.id is not None]
    keys = [key for a in table if a.key is not None for key in a.key.split(",")]
    names = [a.palette for a in table if a.palette is not None]
    for kind, values in (("id", ids), ("key", keys), ("palette name", names)):
        twice = sorted({v for v in values if values.count(v) > 1})
        assert not twice, f"{where}: {kind} used twice: {twice}"
    assert all(a.help for a in table)


def test_binding_ids_are_unique_across_the_console() -> None:
    """The keys setting remaps by id across every screen: one id, one key."""
    ids = [a.id for table in actions.TABLES.values() for a in table if a.id is not None]
    assert len(ids) == len(set(ids))
    assert actions.binding_ids() == {
        b.id for owner in BINDING_OWNERS for b in owner.BINDINGS if isinstance(b, Binding)
    }


def test_an_action_needs_a_key_with_an_id_or_a_palette_name() -> None:
    with pytest.raises(ValueError, match="neither"):
        Action(None, None, "nothing", "", "Does nothing")
    with pytest.raises(ValueError, match="needs an id"):
        Action(None, "z", "nothing", "Nothing", "Does nothing")
