"""Command palette providers: each screen lists its verbs ("namespace: Verb", the screen
action, a help line; made from its table in app/actions.py) and the palette offers those
the screen's `check_action` allows now."""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import ClassVar

from textual.command import DiscoveryHit, Hit, Hits, Provider

Command = tuple[str, str, str]


class ScreenCommands(Provider):
    #: (palette name, screen action, help)
    ENTRIES: ClassVar[tuple[Command, ...]] = ()

    def entries(self) -> Iterable[Command]:
        return self.ENTRIES

    def available(self) -> Iterable[Command]:
        for name, action, help_text in self.entries():
            if self.screen.check_action(action.partition("(")[0], ()):
                yield name, action, help_text

    async def discover(self) -> Hits:
        for name, action, help_text in self.available():
            yield DiscoveryHit(name, partial(self.screen.run_action, action), help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, action, help_text in self.available():
            score = matcher.match(name)
            if score > 0:
                yield Hit(
                    score,
                    matcher.highlight(name),
                    partial(self.screen.run_action, action),
                    text=name,
                    help=help_text,
                )
