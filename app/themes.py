"""Theme files: the package's themes/ folder and the user's config-dir themes/ folder.

A theme file is TOML with the fields of `textual.theme.Theme`. A broken file is skipped
with a message the app shows as a notification; it never stops the console.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from textual.color import Color, ColorParseError
from textual.theme import Theme

import themes
from agents.user_files import read_user_file

COLOR_FIELDS = ("primary", "secondary", "warning", "error", "success", "accent", "foreground",
                "background", "surface", "panel", "boost")  # fmt: skip
OTHER_FIELDS = {"name": str, "dark": bool, "luminosity_spread": float, "text_alpha": float}


def theme_dirs() -> list[Path]:
    from agents.settings import config_dir

    return [Path(themes.__file__).parent, config_dir() / "themes"]


#: A theme file larger than this is skipped unread (it is a dozen colours).
MAX_THEME_BYTES = 1 << 20


def parse_theme(path: Path) -> Theme:
    """Read one theme file; raise ValueError with a one-line reason."""
    try:
        data = tomllib.loads(read_user_file(path, MAX_THEME_BYTES, "theme file").decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(str(exc)) from None
    unknown = set(data) - set(COLOR_FIELDS) - set(OTHER_FIELDS) - {"variables"}
    if unknown:
        raise ValueError(f"unknown field {sorted(unknown)[0]!r}")
    for field, kind in OTHER_FIELDS.items():
        value = data.get(field, kind())
        accepted = (int, float) if kind is float else (kind,)
        if isinstance(value, bool) is not (kind is bool) or not isinstance(value, accepted):
            raise ValueError(f"{field} must be a {kind.__name__}")
    if not data.get("name") or "primary" not in data:
        raise ValueError("a theme needs at least `name` and `primary`")
    for field in COLOR_FIELDS:
        if field in data:
            try:
                if not isinstance(data[field], str):
                    raise TypeError(field)
                Color.parse(data[field])
            except (ColorParseError, TypeError):
                raise ValueError(f"{field} = {data[field]!r} is not a colour") from None
    variables = data.get("variables", {})
    if not isinstance(variables, dict) or not all(isinstance(v, str) for v in variables.values()):
        raise ValueError("variables must be a table of strings")
    return Theme(**data)


def load_themes(dirs: list[Path] | None = None) -> tuple[list[Theme], list[str]]:
    """Every valid theme file in `dirs`, and one message per broken file."""
    found: list[Theme] = []
    problems: list[str] = []
    for folder in theme_dirs() if dirs is None else dirs:
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.toml")):
            try:
                found.append(parse_theme(path))
            except ValueError as exc:
                problems.append(f"theme file {path} skipped: {exc}")
    return found, problems
