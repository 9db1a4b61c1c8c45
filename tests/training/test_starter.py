"""The starter sessions that ship with the project (training/starter.py): teaching
variants only, read from a copy, and refused when a held-out variant is among them."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from agents.tasks.families import split, variant
from storage import TraceStore
from training import starter
from training.jobs import copy_sqlite
from training.teach import TAUGHT, HeldOutError, Tally, teaching_order


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("model", sorted(starter.SESSIONS_BY_MODEL))
def test_the_shipped_sessions_are_the_first_teaching_variants_and_none_is_held_out(
    model: str,
) -> None:
    path = starter.SESSIONS_BY_MODEL[model]
    before = digest(path)
    found = starter.check_sessions(path)
    assert digest(path) == before  # read from a copy: not even a WAL file
    assert len(found) == starter.COUNT
    assert [(v.family, v.seed) for v in found] == [
        (v.family, v.seed) for v in teaching_order(TAUGHT, starter.COUNT)
    ]
    for v in found:
        assert v.seed not in split(v.family)[1]
    # The operator's work is in them: verdicts, rewrites and labels in every session.
    with TraceStore(_copy(path)) as store:
        tally = Tally.read(store, store.session_ids())
        # made on that model
        assert {Path(s.model or "").name for s in store.list_sessions()} == {model}
    assert tally.edited + tally.approved >= starter.COUNT and tally.labelled > 0


def _copy(path: Path) -> Path:
    import tempfile

    folder = Path(tempfile.mkdtemp())
    copy_sqlite(path, folder / path.name)
    return folder / path.name


def test_a_store_with_a_held_out_or_unknown_session_is_refused(tmp_path: Path) -> None:
    held_out = variant("compute", split("compute")[1][0])
    path = tmp_path / "sessions.db"
    with TraceStore(path) as store:
        taught = variant("compute", split("compute")[0][0])
        store.create_session("t", settings={"task": {"name": taught.task.name}})
        assert [v.seed for v in starter.check_sessions(path)] == [taught.seed]
        store.create_session("h", settings={"task": {"name": held_out.task.name}})
    with pytest.raises(HeldOutError, match=f"compute:{held_out.seed} is a held-out variant"):
        starter.check_sessions(path)

    other = tmp_path / "other.db"
    with TraceStore(other) as store:
        store.create_session("t", settings={"task": {"name": "fix_failing_test"}})
    with pytest.raises(HeldOutError, match="not a family variant"):
        starter.check_sessions(other)
