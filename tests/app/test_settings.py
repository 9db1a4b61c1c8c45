"""`agents.settings`: the layers (defaults < file < env < flags) and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.settings import (
    CONFIG_ENV,
    ConfigError,
    Settings,
    config_dir,
    config_path,
    data_dir,
    describe_settings,
    env_overrides,
    load_settings,
)


def _user_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config" / "agent-console" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _file(tmp_path: Path, text: str | bytes, name: str = "named.toml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _error(**kwargs: object) -> str:
    with pytest.raises(ConfigError) as caught:
        load_settings(**kwargs)  # type: ignore[arg-type]
    message = str(caught.value)
    assert "\n" not in message, f"not one line: {message!r}"
    return message


# -- layers -------------------------------------------------------------------------------


def test_defaults_without_any_file_or_variable(tmp_path: Path) -> None:
    settings = load_settings()
    assert settings == Settings()
    assert settings.db == ""
    assert settings.theme == "agent-console"
    assert config_path() == (tmp_path / "config" / "agent-console" / "config.toml", False)


def test_platform_folders_follow_xdg(tmp_path: Path) -> None:
    assert config_dir() == tmp_path / "config" / "agent-console"
    assert data_dir() == tmp_path / "data" / "agent-console"


def test_values_from_the_user_config_file(tmp_path: Path) -> None:
    _user_config(tmp_path, 'db = "/srv/traces.db"\ntheme = "nord"\n')
    settings = load_settings()
    assert settings.db == "/srv/traces.db"
    assert settings.theme == "nord"


def test_a_file_may_set_only_some_settings(tmp_path: Path) -> None:
    _user_config(tmp_path, 'theme = "nord"\n')
    assert load_settings() == Settings(theme="nord")


def test_environment_beats_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _user_config(tmp_path, 'db = "from-file.db"\ntheme = "nord"\n')
    monkeypatch.setenv("AGENT_CONSOLE_THEME", "dracula")
    settings = load_settings()
    assert settings.theme == "dracula"
    assert settings.db == "from-file.db"  # untouched layer shows through


def test_an_explicit_environ_mapping_is_used_instead_of_os_environ(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENT_CONSOLE_THEME", "dracula")
    settings = load_settings(environ={"AGENT_CONSOLE_DB": "x.db"})
    assert settings == Settings(db="x.db")
    assert env_overrides({"AGENT_CONSOLE_THEME": "a", "AGENT_CONSOLE_OTHER": "b"}) == {"theme": "a"}


def test_flags_beat_the_environment_and_none_flags_are_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _user_config(tmp_path, 'db = "from-file.db"\ntheme = "nord"\n')
    monkeypatch.setenv("AGENT_CONSOLE_THEME", "dracula")
    monkeypatch.setenv("AGENT_CONSOLE_DB", "from-env.db")
    settings = load_settings(flags={"theme": "monokai", "db": None})
    assert settings.theme == "monokai"
    assert settings.db == "from-env.db"


def test_config_flag_replaces_the_user_config_file(tmp_path: Path) -> None:
    _user_config(tmp_path, 'theme = "nord"\ndb = "user.db"\n')
    named = _file(tmp_path, 'theme = "gruvbox"\n')
    settings = load_settings(config=named)
    assert settings == Settings(theme="gruvbox")  # the user file is not read at all


def test_config_environment_variable_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    named = _file(tmp_path, 'theme = "gruvbox"\n')
    monkeypatch.setenv(CONFIG_ENV, str(named))
    assert config_path() == (named, True)
    assert load_settings().theme == "gruvbox"
    # --config wins over the variable
    other = _file(tmp_path, 'theme = "nord"\n', name="other.toml")
    assert load_settings(config=other).theme == "nord"


def test_settings_are_frozen() -> None:
    settings = Settings()
    with pytest.raises(ValueError):
        settings.theme = "x"  # type: ignore[misc]


# -- errors -------------------------------------------------------------------------------


def test_a_named_config_file_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "config.toml"
    message = _error(config=missing)
    assert str(missing) in message
    assert "does not exist" in message


def test_a_config_variable_naming_a_missing_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "gone.toml"
    monkeypatch.setenv(CONFIG_ENV, str(missing))
    message = _error()
    assert str(missing) in message
    assert "does not exist" in message


def test_a_missing_default_config_file_is_fine(tmp_path: Path) -> None:
    assert not (tmp_path / "config").exists()
    assert load_settings() == Settings()


def test_malformed_toml_names_file_line_and_problem(tmp_path: Path) -> None:
    path = _file(tmp_path, 'theme = "nord"\ndb = \n')
    message = _error(config=path)
    assert message.startswith(f"{path}, line 2")
    assert "(at line" not in message  # the position is said once, up front
    assert "invalid value" in message.lower()


def test_malformed_toml_in_the_user_config_file(tmp_path: Path) -> None:
    path = _user_config(tmp_path, '\n\ntheme = "unterminated\n')
    message = _error()
    assert str(path) in message
    assert "line 3" in message
    assert "illegal character" in message.lower()


def test_unknown_key_names_its_line_and_the_known_settings(tmp_path: Path) -> None:
    path = _file(tmp_path, '# comment\ntheme = "nord"\ncolour = "red"\n')
    message = _error(config=path)
    assert message.startswith(f"{path}, line 3:")
    assert "unknown setting 'colour'" in message
    for name in Settings.model_fields:
        assert name in message.split("known:")[1]


def test_unknown_table_names_its_header_line(tmp_path: Path) -> None:
    path = _file(tmp_path, 'theme = "nord"\n\n[colours]\nprimary = "red"\n')
    message = _error(config=path)
    assert message.startswith(f"{path}, line 3:")
    assert "unknown setting 'colours'" in message


def test_a_dotted_key_is_found_on_its_line(tmp_path: Path) -> None:
    path = _file(tmp_path, 'db = "a.db"\ntheme.name = "nord"\n')
    message = _error(config=path)
    assert message.startswith(f"{path}, line 2: theme:")


def test_wrong_type_names_file_line_and_field(tmp_path: Path) -> None:
    path = _file(tmp_path, 'db = "x.db"\n\ntheme = 3\n')
    message = _error(config=path)
    assert message.startswith(f"{path}, line 3: theme:")
    assert "string" in message


def test_wrong_type_in_a_file_is_blamed_on_the_file_even_if_env_sets_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _file(tmp_path, "db = 12\n")
    monkeypatch.setenv("AGENT_CONSOLE_THEME", "nord")
    message = _error(config=path)
    assert message.startswith(f"{path}, line 1: db:")


def test_invalid_utf8_names_file_and_line(tmp_path: Path) -> None:
    path = _file(tmp_path, b'db = "x.db"\ntheme = "caf\xe9"\n')
    message = _error(config=path)
    assert message == f"{path}, line 2: not valid UTF-8"


def test_blank_theme_from_the_environment_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENT_CONSOLE_THEME", "   ")
    message = _error()
    assert message == "environment variable AGENT_CONSOLE_THEME: theme: theme must not be empty"


def test_blank_theme_from_a_flag_names_the_command_line() -> None:
    message = _error(flags={"theme": ""})
    assert message.startswith("command line: theme:")
    assert "must not be empty" in message


def test_blank_theme_in_a_file_names_its_line(tmp_path: Path) -> None:
    path = _file(tmp_path, 'db = "a.db"\ntheme = " "\n')
    assert _error(config=path).startswith(f"{path}, line 2: theme:")


def test_theme_is_stripped() -> None:
    assert load_settings(flags={"theme": "  nord \t"}).theme == "nord"


# -- the model ----------------------------------------------------------------------------


def test_every_setting_is_documented() -> None:
    assert Settings.model_fields, "no settings?"
    for name, field in Settings.model_fields.items():
        assert field.description and field.description.strip(), f"{name} has no docstring"
    rows = describe_settings()
    assert [row[0] for row in rows] == list(Settings.model_fields)
    for name, default, doc in rows:
        assert doc and "\n" not in doc and "  " not in doc, name
        assert default == repr(Settings.model_fields[name].default)


def test_default_database_is_in_the_data_folder_which_is_created(tmp_path: Path) -> None:
    folder = tmp_path / "data" / "agent-console"
    assert not folder.exists()
    assert Settings().database() == str(folder / "traces.db")
    assert folder.is_dir()
    assert not (folder / "traces.db").exists()  # only the folder: the store makes the file


def test_a_set_database_is_used_as_given_and_makes_no_folder(tmp_path: Path) -> None:
    assert Settings(db="  sqlite:////x/y.db ").database() == "sqlite:////x/y.db"
    assert Settings(db="   ").database() == str(tmp_path / "data" / "agent-console" / "traces.db")
    assert Settings(db=str(tmp_path / "mine.db")).database() == str(tmp_path / "mine.db")


def test_an_explicit_environ_mapping_also_names_the_config_file(tmp_path: Path) -> None:
    named = _file(tmp_path, 'theme = "from-mapping"\n')
    settings = load_settings(environ={"AGENT_CONSOLE_CONFIG": str(named)})
    assert settings.theme == "from-mapping"


def test_backend_settings_layer_and_validate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _user_config(tmp_path, 'backend = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n')
    monkeypatch.setenv("AGENT_CONSOLE_REQUEST_TIMEOUT", "5")
    settings = load_settings()
    assert settings.backend == "openai"
    assert settings.base_url == "http://127.0.0.1:9/v1"
    assert settings.request_timeout == 5.0
    assert "backend: Input should be 'auto', 'transformers', 'openai', 'vllm' or 'none'" in _error(
        flags={"backend": "llama"}
    )
    monkeypatch.setenv("AGENT_CONSOLE_REQUEST_TIMEOUT", "0")
    assert "AGENT_CONSOLE_REQUEST_TIMEOUT: request_timeout" in _error()


def test_keys_from_a_table_in_the_file(tmp_path: Path) -> None:
    _user_config(tmp_path, '[keys]\n"app.refresh" = "f5,ctrl+r"\n"app.quit" = "ctrl+q"\n')
    assert load_settings().keys == {"app.refresh": "f5,ctrl+r", "app.quit": "ctrl+q"}


def test_keys_from_the_environment_and_a_flag() -> None:
    environ = {"AGENT_CONSOLE_KEYS": "app.refresh=f5; app.quit = ctrl+q ;"}
    assert load_settings(environ=environ).keys == {"app.refresh": "f5", "app.quit": "ctrl+q"}
    flagged = load_settings(flags={"keys": "app.refresh=f6"}, environ=environ)
    assert flagged.keys == {"app.refresh": "f6"}  # the flag replaces the whole map


def test_bad_keys_name_the_source_and_the_problem(tmp_path: Path) -> None:
    assert _error(flags={"keys": "app.refresh"}) == (
        "command line: keys: expected id=keys, not 'app.refresh'"
    )
    assert _error(environ={"AGENT_CONSOLE_KEYS": "app refresh=f5"}) == (
        "environment variable AGENT_CONSOLE_KEYS: keys: 'app refresh' is not a binding id "
        "(like app.refresh)"
    )
    path = _user_config(tmp_path, '[keys]\n"app.quit" = "ctrl q"\n')
    assert _error() == (
        f"{path}, line 1: keys: app.quit: 'ctrl q' is not a key list (like f5,ctrl+r)"
    )
