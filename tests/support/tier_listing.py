"""A pytest plugin for `tests/test_tiers.py`: with `--collect-only`, a line per test
naming its tier, so one collection gives both tiers."""

from __future__ import annotations

import pytest


def pytest_collection_finish(session: pytest.Session) -> None:
    for item in session.items:
        tier = "slow" if item.get_closest_marker("slow") else "make-test"
        print(f"TIER {tier} {item.nodeid}")
