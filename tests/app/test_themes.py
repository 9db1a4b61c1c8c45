"""Theme files: the shipped one parses; each kind of broken file is refused with a
one-line reason; `load_themes` sorts good files from broken ones."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from textual.color import Color
from textual.theme import Theme

import themes
from app.themes import COLOR_FIELDS, OTHER_FIELDS, load_themes, parse_theme, theme_dirs

SHIPPED = Path(themes.__file__).parent / "agent-console.toml"


def _theme(folder: Path, name: str, text: str | bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _reason(path: Path) -> str:
    with pytest.raises(ValueError) as caught:
        parse_theme(path)
    reason = str(caught.value)
    assert reason and "\n" not in reason, repr(reason)
    return reason


GOOD = 'name = "mine"\nprimary = "#112233"\n'


def test_the_shipped_theme_parses() -> None:
    theme = parse_theme(SHIPPED)
    assert isinstance(theme, Theme)
    assert theme.name == "agent-console"
    assert theme.dark is True
    assert Color.parse(theme.primary) == Color.parse("#4EA1D3")
    assert Color.parse(theme.background) == Color.parse("#14171C")
    assert Color.parse(theme.error) == Color.parse("#E5534B")


def test_the_shipped_light_theme_parses_and_reads_well() -> None:
    theme = parse_theme(SHIPPED.with_name("agent-console-light.toml"))
    assert theme.name == "agent-console-light" and theme.dark is False
    text, ground = Color.parse(theme.foreground), Color.parse(theme.background)
    # WCAG contrast of body text on the background: at least 7:1 (AAA)
    assert text.brightness < ground.brightness
    assert _contrast(theme.foreground, theme.background) >= 7
    assert _contrast(theme.error, theme.background) >= 4.5


def _contrast(a: str, b: str) -> float:
    def luminance(colour: str) -> float:
        def channel(c: int) -> float:
            v = c / 255
            return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

        r, g, b_ = Color.parse(colour).rgb
        return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b_)

    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_a_minimal_theme_with_every_optional_field(tmp_path: Path) -> None:
    path = _theme(
        tmp_path,
        "full.toml",
        GOOD + "dark = false\nluminosity_spread = 1\ntext_alpha = 0.9\n"
        'accent = "red"\n[variables]\n"block-cursor-foreground" = "#ffffff"\n',
    )
    theme = parse_theme(path)
    assert (theme.name, theme.dark, theme.luminosity_spread, theme.text_alpha) == (
        "mine",
        False,
        1,
        0.9,
    )
    assert theme.variables == {"block-cursor-foreground": "#ffffff"}
    assert Color.parse(theme.accent) == Color.parse("red")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD + 'accent = "not-a-colour"\n', "accent = 'not-a-colour' is not a colour"),
        (GOOD + "surface = 12\n", "surface = 12 is not a colour"),
        (GOOD + 'shadow = "#000"\n', "unknown field 'shadow'"),
        ('primary = "#112233"\n', "a theme needs at least `name` and `primary`"),
        ('name = ""\nprimary = "#112233"\n', "a theme needs at least `name` and `primary`"),
        ('name = "mine"\n', "a theme needs at least `name` and `primary`"),
        ("name = 3\nprimary = '#112233'\n", "name must be a str"),
        (GOOD + 'dark = "yes"\n', "dark must be a bool"),
        (GOOD + 'text_alpha = "0.5"\n', "text_alpha must be a float"),
        (GOOD + "luminosity_spread = true\n", "luminosity_spread must be a float"),
        (GOOD + "variables = 3\n", "variables must be a table of strings"),
        (GOOD + "[variables]\nx = 1\n", "variables must be a table of strings"),
    ],
    ids=[
        "bad-colour",
        "colour-not-string",
        "unknown-field",
        "no-name",
        "empty-name",
        "no-primary",
        "name-not-string",
        "dark-not-bool",
        "alpha-not-number",
        "spread-is-bool",
        "variables-not-table",
        "variable-not-string",
    ],
)
def test_broken_theme_files(tmp_path: Path, text: str, expected: str) -> None:
    assert _reason(_theme(tmp_path, "t.toml", text)) == expected


def test_bad_toml(tmp_path: Path) -> None:
    reason = _reason(_theme(tmp_path, "t.toml", 'name = "x"\nprimary = \n'))
    assert "line 2" in reason


def test_not_utf8(tmp_path: Path) -> None:
    reason = _reason(_theme(tmp_path, "t.toml", b'name = "caf\xe9"\nprimary = "red"\n'))
    assert "utf-8" in reason.lower()


def test_unreadable_theme_path(tmp_path: Path) -> None:
    _reason(tmp_path / "missing.toml")


def test_known_fields_match_textual_theme() -> None:
    import inspect

    accepted = set(inspect.signature(Theme).parameters)
    assert set(COLOR_FIELDS) | set(OTHER_FIELDS) | {"variables"} <= accepted


def test_load_themes_keeps_good_files_and_reports_broken_ones(tmp_path: Path) -> None:
    first = tmp_path / "a"
    second = tmp_path / "b"
    _theme(first, "one.toml", GOOD)
    broken = _theme(first, "two.toml", 'name = "two"\nprimary = "nope"\n')
    _theme(first, "notes.txt", "not a theme, not a .toml")
    _theme(second, "three.toml", 'name = "three"\nprimary = "blue"\n')
    bad_toml = _theme(second, "four.toml", "name = \n")
    found, problems = load_themes([first, second, tmp_path / "absent"])
    assert [t.name for t in found] == ["mine", "three"]
    assert len(problems) == 2
    assert problems[0] == f"theme file {broken} skipped: primary = 'nope' is not a colour"
    assert problems[1].startswith(f"theme file {bad_toml} skipped: ")
    assert all("\n" not in p for p in problems)


def test_load_themes_by_default_reads_the_package_and_config_folders(tmp_path: Path) -> None:
    user = tmp_path / "config" / "agent-console" / "themes"
    assert theme_dirs() == [SHIPPED.parent, user]
    found, problems = load_themes()
    assert [t.name for t in found] == ["agent-console-light", "agent-console"]
    assert problems == []
    _theme(user, "mine.toml", GOOD)
    _theme(user, "broken.toml", "oops")
    found, problems = load_themes()
    assert [t.name for t in found] == ["agent-console-light", "agent-console", "mine"]
    assert len(problems) == 1 and str(user / "broken.toml") in problems[0]


@pytest.mark.timeout(60)
def test_a_theme_file_that_is_not_a_regular_file_is_skipped_unread(tmp_path: Path) -> None:
    """A FIFO would wait for a writer, /dev/zero would fill the memory: both are named in
    a problem, unread, and the good theme beside them still loads."""
    folder = tmp_path / "themes"
    _theme(folder, "good.toml", GOOD)
    os.mkfifo(folder / "fifo.toml")
    (folder / "zero.toml").symlink_to("/dev/zero")
    found, problems = load_themes([folder])
    assert [t.name for t in found] == ["mine"]
    assert problems == [
        f"theme file {folder / 'fifo.toml'} skipped: is a FIFO; a theme file must be a "
        "regular file",
        f"theme file {folder / 'zero.toml'} skipped: is a character device; a theme file "
        "must be a regular file",
    ]
