"""The store's narrow views (storage/views.py) are parts of `TraceStore`: every method a
view names is the store's, with the same signature, so a consumer typed with a view gets
exactly what the store gives."""

from __future__ import annotations

import inspect

import pytest

from storage import TraceStore
from storage.views import VIEWS


def _declared(view: type) -> list[str]:
    names = []
    for cls in view.__mro__:
        if cls is object or not getattr(cls, "_is_protocol", False):
            continue
        names += [
            n for n, v in vars(cls).items() if inspect.isfunction(v) and not n.startswith("_")
        ]
    return sorted(set(names))


@pytest.mark.parametrize("view", VIEWS, ids=lambda v: v.__name__)
def test_each_view_is_a_part_of_the_store(view: type) -> None:
    names = _declared(view)
    assert names, view
    for name in names:
        wanted = inspect.signature(getattr(view, name))
        has = inspect.signature(getattr(TraceStore, name))
        assert str(wanted) == str(has), (view.__name__, name)
