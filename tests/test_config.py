"""Tests of worker.toml loading, layering, validation and TOML output (conveyor.config)."""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from conveyor.config import (
    SCHEMA,
    Config,
    Field,
    load_config,
    to_toml,
    validate_backend_settings,
)
from conveyor.errors import ConfigError


def write(directory: Path, text: str, name: str = "worker.toml") -> Path:
    """Write ``text`` to ``directory/name`` and return the path."""
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def load(path: Path | str | None = None, *, cwd: Path, **env: str) -> Config:
    """load_config isolated from the real environment and working directory."""
    return load_config(path, env=env, cwd=cwd)


def error_of(path: Path | str | None = None, *, cwd: Path, **env: str) -> str:
    """The message of the ConfigError that loading raises."""
    with pytest.raises(ConfigError) as info:
        load(path, cwd=cwd, **env)
    return str(info.value)


# --- defaults and discovery ---------------------------------------------------------------------


def test_defaults_match_the_spec(tmp_path: Path) -> None:
    """Without a file or variables every section holds the SPEC §5 defaults."""
    config = load(cwd=tmp_path)
    assert config == Config()
    assert config.source is None
    assert config.worker.workers == 1
    assert config.worker.executor == "auto"
    assert config.worker.complete_check_timeout == 60.0
    assert config.worker.task_modules == ()
    assert config.scheduler.url == "http://127.0.0.1:8082"
    assert config.scheduler.retry_delay == 900.0
    assert isinstance(config.scheduler.retry_delay, float)
    assert dict(config.scheduler.resources) == {}
    assert config.server.port == 8082
    assert config.notifiers.on == ("failed", "timed_out", "process_died", "broken")
    assert config.logging.level == "auto"
    assert set(config.backends) == {"executors", "schedulers", "notifiers", "state_stores"}


def test_schema_defaults_equal_dataclass_defaults() -> None:
    """The schema table and the dataclasses cannot drift apart."""
    config = Config()
    for section, keys in SCHEMA.items():
        settings = getattr(config, section)
        for key, spec in keys.items():
            assert getattr(settings, key) == spec.default, f"{section}.{key}"


def test_settings_are_frozen(tmp_path: Path) -> None:
    """Settings objects and their mappings cannot be changed after loading."""
    config = load(cwd=tmp_path, CONVEYOR_SCHEDULER__RESOURCES__DB="2")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.worker.workers = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.scheduler.resources["db"] = 5  # type: ignore[index]


def test_explicit_path_wins_over_env_and_cwd(tmp_path: Path) -> None:
    """An explicit path is used even when $CONVEYOR_CONFIG and ./worker.toml exist."""
    write(tmp_path, "[worker]\nworkers = 2\n")
    from_env = write(tmp_path, "[worker]\nworkers = 3\n", "env.toml")
    explicit = write(tmp_path, "[worker]\nworkers = 4\n", "explicit.toml")
    config = load(explicit, cwd=tmp_path, CONVEYOR_CONFIG=str(from_env))
    assert config.worker.workers == 4
    assert config.source == str(explicit)


def test_env_config_wins_over_cwd_file(tmp_path: Path) -> None:
    """$CONVEYOR_CONFIG is used before ./worker.toml."""
    write(tmp_path, "[worker]\nworkers = 2\n")
    write(tmp_path, "[worker]\nworkers = 3\n", "env.toml")
    config = load(cwd=tmp_path, CONVEYOR_CONFIG="env.toml")
    assert config.worker.workers == 3
    assert config.source == str(tmp_path / "env.toml")


def test_cwd_worker_toml_is_discovered(tmp_path: Path) -> None:
    """./worker.toml in the working directory is read when nothing else names a file."""
    write(tmp_path, "[worker]\nworkers = 2\n")
    config = load(cwd=tmp_path)
    assert config.worker.workers == 2
    assert config.source == str(tmp_path / "worker.toml")


def test_missing_explicit_file_is_an_error(tmp_path: Path) -> None:
    """An explicit path that does not exist is a ConfigError naming it."""
    message = error_of(tmp_path / "nope.toml", cwd=tmp_path)
    assert "nope.toml" in message
    assert "does not exist" in message


def test_missing_env_config_file_is_an_error(tmp_path: Path) -> None:
    """A $CONVEYOR_CONFIG naming a missing file is a ConfigError naming the file and variable."""
    message = error_of(cwd=tmp_path, CONVEYOR_CONFIG="gone.toml")
    assert "gone.toml" in message
    assert "CONVEYOR_CONFIG" in message


# --- precedence and the environment ---------------------------------------------------------------


def test_precedence_file_then_env_then_overrides(tmp_path: Path) -> None:
    """Environment beats the file and overrides beat the environment."""
    write(tmp_path, "[worker]\nworkers = 2\nkill_grace = 1\n[scheduler]\nretry_delay = 5\n")
    config = load(cwd=tmp_path, CONVEYOR_WORKER__WORKERS="3", CONVEYOR_WORKER__KILL_GRACE="2.5")
    assert config.worker.workers == 3
    assert config.worker.kill_grace == 2.5
    assert config.scheduler.retry_delay == 5.0
    overridden = config.with_overrides(workers=4, executor="fork", timeout=None)
    assert overridden.worker.workers == 4
    assert overridden.worker.executor == "fork"
    assert overridden.worker.kill_grace == 2.5
    assert config.worker.workers == 3


def test_env_values_are_toml_with_string_fallback(tmp_path: Path) -> None:
    """Variables are read as TOML values, and text that is not TOML is a plain string."""
    config = load(
        cwd=tmp_path,
        CONVEYOR_WORKER__EXECUTOR="fork",
        CONVEYOR_WORKER__KEEP_ALIVE="true",
        CONVEYOR_WORKER__TASK_MODULES='["a.b", "c"]',
        CONVEYOR_SCHEDULER__URL="http://sched.example:9000/x",
        CONVEYOR_SERVER__STATE_PATH='"quoted path.db"',
        CONVEYOR_LOGGING__LEVEL="DEBUG",
    )
    assert config.worker.executor == "fork"
    assert config.worker.keep_alive is True
    assert config.worker.task_modules == ("a.b", "c")
    assert config.scheduler.url == "http://sched.example:9000/x"
    assert config.server.state_path == "quoted path.db"
    assert config.logging.level == "debug"


def test_env_text_with_extra_toml_keys_stays_a_string(tmp_path: Path) -> None:
    """A value cannot smuggle in more TOML keys: such text is taken as a string."""
    config = load(cwd=tmp_path, CONVEYOR_SERVER__STATE_PATH='"x"\ny = 1')
    assert config.server.state_path == '"x"\ny = 1'


def test_non_override_variables_are_ignored(tmp_path: Path) -> None:
    """Variables without a double underscore are not configuration overrides."""
    config = load(cwd=tmp_path, CONVEYOR_DISABLE_PLUGINS="x", CONVEYOR_DISABLE_PLUGIN_AUTOLOAD="1")
    assert config == Config()


def test_unknown_env_key_names_the_variable(tmp_path: Path) -> None:
    """An unknown key in a variable is an error naming the variable, with a suggestion."""
    message = error_of(cwd=tmp_path, CONVEYOR_WORKER__WOKERS="2")
    assert message == (
        "$CONVEYOR_WORKER__WOKERS: unknown key 'worker.wokers'; did you mean 'workers'?"
    )


def test_unknown_env_section_is_an_error(tmp_path: Path) -> None:
    """An unknown section in a variable is an error like in the file."""
    message = error_of(cwd=tmp_path, CONVEYOR_SHEDULER__URL="http://x")
    assert message.startswith("$CONVEYOR_SHEDULER__URL: unknown section 'sheduler'")
    assert "did you mean 'scheduler'?" in message


def test_wrong_env_type_names_the_variable(tmp_path: Path) -> None:
    """A bad value in a variable names the variable, the key, the value and what is expected."""
    message = error_of(cwd=tmp_path, CONVEYOR_WORKER__WORKERS="many")
    assert message == (
        '$CONVEYOR_WORKER__WORKERS: worker.workers = "many" has the wrong type; '
        "expected an integer >= 1"
    )


# --- validation ---------------------------------------------------------------------------------


def test_unknown_key_suggests_the_closest(tmp_path: Path) -> None:
    """A misspelt key names section and key and suggests the closest valid key."""
    path = write(tmp_path, "[worker]\nwokers = 2\n")
    message = error_of(path, cwd=tmp_path)
    assert message == f"{path}: unknown key 'worker.wokers'; did you mean 'workers'?"


def test_unknown_key_in_discovered_file_uses_short_name(tmp_path: Path) -> None:
    """Errors in a discovered ./worker.toml are reported against 'worker.toml'."""
    write(tmp_path, "[worker]\nwokers = 2\n")
    message = error_of(cwd=tmp_path)
    assert message == "worker.toml: unknown key 'worker.wokers'; did you mean 'workers'?"


def test_unknown_section_suggests_the_closest(tmp_path: Path) -> None:
    """A misspelt section is an error with a suggestion."""
    write(tmp_path, "[wroker]\nworkers = 2\n")
    message = error_of(cwd=tmp_path)
    assert message == "worker.toml: unknown section 'wroker'; did you mean 'worker'?"


def test_unknown_key_without_close_match_lists_valid_keys(tmp_path: Path) -> None:
    """Without a close match the error lists the valid keys."""
    write(tmp_path, "[logging]\nzzz = 1\n")
    message = error_of(cwd=tmp_path)
    assert message == "worker.toml: unknown key 'logging.zzz'; expected one of: format, level"


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        (
            'workers = "4"',
            'worker.workers = "4" has the wrong type; expected an integer >= 1',
        ),
        ("workers = true", "worker.workers = true has the wrong type; expected an integer >= 1"),
        ("workers = 2.0", "worker.workers = 2.0 has the wrong type; expected an integer >= 1"),
        ("keep_alive = 1", "worker.keep_alive = 1 has the wrong type; expected true or false"),
        (
            'task_modules = "a"',
            'worker.task_modules = "a" has the wrong type; expected a list of strings',
        ),
        (
            "timeout = true",
            "worker.timeout = true has the wrong type; expected a number of seconds >= 0",
        ),
    ],
)
def test_wrong_type_names_key_value_and_expectation(
    tmp_path: Path, toml: str, expected: str
) -> None:
    """A value of the wrong type names section.key, the value and what is expected."""
    write(tmp_path, f"[worker]\n{toml}\n")
    assert error_of(cwd=tmp_path) == f"worker.toml: {expected}"


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("[worker]\nworkers = 0", "worker.workers = 0 is out of range; expected an integer >= 1"),
        (
            "[worker]\ntimeout = -1.5",
            "worker.timeout = -1.5 is out of range; expected a number of seconds >= 0",
        ),
        (
            "[worker]\nkill_grace = nan",
            "worker.kill_grace = nan is out of range; expected a number of seconds >= 0",
        ),
        (
            "[server]\nport = 70000",
            "server.port = 70000 is out of range; expected an integer between 1 and 65535",
        ),
        (
            '[logging]\nlevel = "verbose"',
            'logging.level = "verbose" is not one of the allowed values; expected one of: '
            '"auto", "debug", "info", "warning", "error", "critical"',
        ),
        (
            '[scheduler]\nurl = "ftp://x"',
            'scheduler.url = "ftp://x" is invalid; expected an http:// or https:// URL',
        ),
        (
            '[server]\npublic_url = "http://h:8082"\nleader_lease = 0',
            "server.leader_lease = 0 is out of range; expected a number of seconds > 0",
        ),
    ],
)
def test_out_of_range_names_key_value_and_expectation(
    tmp_path: Path, toml: str, expected: str
) -> None:
    """A value out of range or not among the choices names section.key, value and expectation."""
    write(tmp_path, toml + "\n")
    assert error_of(cwd=tmp_path) == f"worker.toml: {expected}"


def test_durations_accept_ints_and_floats(tmp_path: Path) -> None:
    """Durations are seconds, given as integers or floats, and stored as floats."""
    write(tmp_path, "[worker]\ntimeout = 30\nkill_grace = 0.25\n[scheduler]\nretry_delay = 1.5\n")
    config = load(cwd=tmp_path)
    assert config.worker.timeout == 30.0
    assert isinstance(config.worker.timeout, float)
    assert config.worker.kill_grace == 0.25
    assert config.scheduler.retry_delay == 1.5


def test_logging_level_is_case_insensitive(tmp_path: Path) -> None:
    """logging.level accepts any case and is stored lower-case."""
    write(tmp_path, '[logging]\nlevel = "WARNING"\nformat = "json"\n')
    config = load(cwd=tmp_path)
    assert config.logging.level == "warning"
    assert config.logging.format == "json"


def test_notifier_on_values_are_limited(tmp_path: Path) -> None:
    """[notifiers] on accepts only the documented events."""
    write(tmp_path, '[notifiers]\non = ["failed", "exploded"]\n')
    message = error_of(cwd=tmp_path)
    assert message.startswith('worker.toml: notifiers.on = ["failed", "exploded"] contains ')
    assert '"exploded", which is not allowed' in message
    assert '"run_finished"' in message


def test_syntax_error_names_file_line_and_column(tmp_path: Path) -> None:
    """A TOML syntax error is reported as file:line:column."""
    path = write(tmp_path, "[worker]\nworkers = 2\nexecutor fork\n")
    message = error_of(path, cwd=tmp_path)
    assert message.startswith(f"{path}:3:10: invalid TOML: ")
    assert "(at line" not in message


def test_syntax_error_at_end_of_document_has_a_position(tmp_path: Path) -> None:
    """An error at the end of the file still gets a line and column."""
    write(tmp_path, '[worker]\nexecutor = "fork')
    assert error_of(cwd=tmp_path).startswith("worker.toml:2:17: invalid TOML: Unterminated string")


def test_inline_executor_with_several_workers_is_an_error(tmp_path: Path) -> None:
    """executor = "inline" with workers > 1 is a configuration error (SPEC §4.1)."""
    write(tmp_path, '[worker]\nexecutor = "inline"\nworkers = 2\n')
    message = error_of(cwd=tmp_path)
    assert message.startswith('worker.toml: worker.executor = "inline" runs one task at a time')
    assert "worker.workers = 2" in message


def test_inline_conflict_from_override_names_overrides(tmp_path: Path) -> None:
    """The inline rule also applies to overrides, and then blames the overrides."""
    write(tmp_path, '[worker]\nexecutor = "inline"\n')
    config = load(cwd=tmp_path)
    with pytest.raises(ConfigError, match=r"^overrides: worker.executor = \"inline\""):
        config.with_overrides(workers=3)


def test_section_that_is_not_a_table_is_an_error(tmp_path: Path) -> None:
    """A top-level value where a section belongs is an error."""
    write(tmp_path, "worker = 3\n")
    assert error_of(cwd=tmp_path) == "worker.toml: worker = 3 is not a table; expected [worker]"


# --- tokens -------------------------------------------------------------------------------------


def test_token_file_is_read_and_stripped(tmp_path: Path) -> None:
    """token_file is read at load time with surrounding whitespace stripped."""
    secret = write(tmp_path, "  s3cret-token \n\n", "token.txt")
    write(tmp_path, f'[scheduler]\ntoken_file = "{secret}"\n[server]\ntoken = "plain"\n')
    config = load(cwd=tmp_path)
    assert config.scheduler.token == "s3cret-token"
    assert config.scheduler.token_file == str(secret)
    assert config.server.token == "plain"


def test_relative_token_file_is_taken_from_cwd(tmp_path: Path) -> None:
    """A relative token_file is resolved against the working directory."""
    write(tmp_path, "abc\n", "token.txt")
    config = load(cwd=tmp_path, CONVEYOR_SERVER__TOKEN_FILE="token.txt")
    assert config.server.token == "abc"


def test_token_and_token_file_together_are_an_error(tmp_path: Path) -> None:
    """Setting both token and token_file is an error."""
    secret = write(tmp_path, "x", "token.txt")
    write(tmp_path, f'[server]\ntoken = "a"\ntoken_file = "{secret}"\n')
    message = error_of(cwd=tmp_path)
    assert message == (
        "worker.toml: server.token and server.token_file are both set; expected only one"
    )


def test_missing_token_file_is_an_error(tmp_path: Path) -> None:
    """A token_file that cannot be read is an error naming it."""
    write(tmp_path, '[scheduler]\ntoken_file = "absent.txt"\n')
    message = error_of(cwd=tmp_path)
    assert message.startswith("worker.toml: scheduler.token_file: cannot read token file")
    assert "absent.txt" in message


def test_empty_token_file_is_an_error(tmp_path: Path) -> None:
    """A token file holding only whitespace would disable authentication, so it is refused."""
    write(tmp_path, " \n", "token.txt")
    write(tmp_path, '[server]\ntoken_file = "token.txt"\n')
    assert "is empty; expected a token" in error_of(cwd=tmp_path)


def test_overrides_keep_the_token_read_from_file(tmp_path: Path) -> None:
    """Overriding another key keeps the token read from token_file without re-reading it."""
    secret = write(tmp_path, "t0k\n", "token.txt")
    write(tmp_path, f'[scheduler]\ntoken_file = "{secret}"\n')
    config = load(cwd=tmp_path)
    secret.unlink()
    changed = config.with_section("scheduler", retry_delay=1).with_overrides(workers=2)
    assert changed.scheduler.token == "t0k"
    assert changed.scheduler.retry_delay == 1.0


# --- overrides ----------------------------------------------------------------------------------


def test_scheduler_url_override_selects_http(tmp_path: Path) -> None:
    """scheduler_url sets the URL and the http transport; local_scheduler selects local."""
    remote = Config().with_overrides(scheduler_url="http://sched:8082")
    assert remote.scheduler.transport == "http"
    assert remote.scheduler.url == "http://sched:8082"
    local = remote.with_overrides(local_scheduler=True, log_level="ERROR", log_format="json")
    assert local.scheduler.transport == "local"
    assert local.logging.level == "error"
    assert local.logging.format == "json"


def test_unset_overrides_are_ignored() -> None:
    """None values (CLI flags that were not given) change nothing."""
    assert Config().with_overrides(workers=None, scheduler_url=None, log_level=None) == Config()


def test_unknown_override_suggests_the_closest() -> None:
    """An unknown override name is an error with a suggestion."""
    with pytest.raises(ConfigError) as info:
        Config().with_overrides(wokers=2)
    assert str(info.value) == "overrides: unknown override 'wokers'; did you mean 'workers'?"


def test_overrides_are_validated_like_file_values() -> None:
    """A bad override value gets the same message as a bad file value."""
    with pytest.raises(ConfigError) as info:
        Config().with_overrides(workers=0)
    assert str(info.value) == (
        "overrides: worker.workers = 0 is out of range; expected an integer >= 1"
    )
    with pytest.raises(ConfigError, match="exclude each other"):
        Config().with_overrides(scheduler_url="http://x", local_scheduler=True)


def test_with_section_overrides_one_section() -> None:
    """with_section validates and replaces keys of one section, tables whole."""
    config = Config().with_section("scheduler", retry_delay=5, resources={"db": 1})
    assert config.scheduler.retry_delay == 5.0
    assert dict(config.scheduler.resources) == {"db": 1}
    with pytest.raises(ConfigError, match=r"scheduler.resources.db = -1 is out of range"):
        config.with_section("scheduler", resources={"db": -1})
    with pytest.raises(ConfigError, match=r"unknown section 'shceduler'; did you mean"):
        config.with_section("shceduler", retry_delay=1)


# --- resources and backend sections -------------------------------------------------------------


def test_resources_from_file_and_env(tmp_path: Path) -> None:
    """[scheduler.resources] is read from the file and refined entry by entry by variables."""
    write(tmp_path, "[scheduler.resources]\ndb = 2\ngpu = 1\n")
    config = load(cwd=tmp_path, CONVEYOR_SCHEDULER__RESOURCES__DB="5")
    assert dict(config.scheduler.resources) == {"db": 5, "gpu": 1}


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("db = -1", "scheduler.resources.db = -1 is out of range; expected an integer >= 0"),
        ('db = "2"', 'scheduler.resources.db = "2" has the wrong type; expected an integer >= 0'),
    ],
)
def test_bad_resource_capacity_is_an_error(tmp_path: Path, toml: str, expected: str) -> None:
    """Resource capacities must be integers >= 0."""
    write(tmp_path, f"[scheduler.resources]\n{toml}\n")
    assert error_of(cwd=tmp_path) == f"worker.toml: {expected}"


def test_backend_sections_are_kept_raw(tmp_path: Path) -> None:
    """Backend tables are kept unvalidated and read-only, merged with their variables."""
    write(
        tmp_path,
        "[notifiers]\nenabled = ['email']\n"
        "[notifiers.email]\nsmtp_host = 'mail'\nrecipients = ['a@b']\n"
        "[executors.dask]\nadress = 'tcp://x'\n"
        "[state_stores.postgres]\ndsn = 'postgres://db'\n",
    )
    config = load(cwd=tmp_path, CONVEYOR_NOTIFIERS__EMAIL__SMTP_PORT="2525")
    email = config.backends["notifiers"]["email"]
    assert dict(email) == {"smtp_host": "mail", "recipients": ("a@b",), "smtp_port": 2525}
    assert config.backends["executors"]["dask"]["adress"] == "tcp://x"
    assert config.backends["state_stores"]["postgres"]["dsn"] == "postgres://db"
    assert config.notifiers.enabled == ("email",)
    with pytest.raises(TypeError):
        email["smtp_host"] = "other"  # type: ignore[index]


def test_backend_group_entries_must_be_tables(tmp_path: Path) -> None:
    """Unselected backend sections are not validated, but they must be tables."""
    write(tmp_path, "[executors]\ndask = 3\n")
    assert error_of(cwd=tmp_path) == (
        "worker.toml: executors.dask = 3 is not a table; expected [executors.dask]"
    )


DASK_SCHEMA: Mapping[str, Field] = {
    "address": Field("str", required=True),
    "timeout": Field("seconds", 10.0, gt=0),
    "retries": Field("int", 3, ge=0),
    "tags": Field("str_list"),
}


def test_validate_backend_settings_fills_defaults() -> None:
    """A backend table is checked against the backend's schema and completed with defaults."""
    settings = validate_backend_settings(
        "executors", "dask", {"address": "tcp://x", "tags": ["a"], "timeout": 3}, DASK_SCHEMA
    )
    assert settings == {"address": "tcp://x", "timeout": 3.0, "retries": 3, "tags": ("a",)}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            {"adress": "tcp://x"},
            "worker.toml: unknown key 'executors.dask.adress'; did you mean 'address'?",
        ),
        (
            {"address": "x", "timeout": 0},
            "worker.toml: executors.dask.timeout = 0 is out of range; "
            "expected a number of seconds > 0",
        ),
        ({}, "worker.toml: missing key 'executors.dask.address'; expected a string"),
    ],
)
def test_validate_backend_settings_errors(raw: dict[str, Any], expected: str) -> None:
    """Backend settings errors read like the rest of the file's."""
    with pytest.raises(ConfigError) as info:
        validate_backend_settings("executors", "dask", raw, DASK_SCHEMA, "worker.toml")
    assert str(info.value) == expected


def test_backend_settings_of_a_loaded_config(tmp_path: Path) -> None:
    """Config.backend_settings validates the selected backend's table from the file."""
    write(tmp_path, "[executors.dask]\naddress = 'tcp://s:8786'\n")
    config = load(cwd=tmp_path)
    assert config.backend_settings("executors", "dask", DASK_SCHEMA)["address"] == "tcp://s:8786"


# --- TOML output --------------------------------------------------------------------------------

FULL = """
[worker]
workers = 3
executor = "thread"
timeout = 12.5
task_modules = ["pipelines", "more.tasks"]

[scheduler]
transport = "http"
url = "https://user:pw@sched.example/api?token=abc&x=1"
token = "sched-secret"
rpc_retries = 2

[scheduler.resources]
db = 2
"odd name" = 1

[server]
token_file = "{token_file}"
port = 9000

[notifiers]
enabled = ["email", "slack"]
on = ["failed", "run_finished"]

[notifiers.email]
smtp_host = "mail.example"
password = "hunter2"
subject = "tab\\tquote\\" backslash\\\\ newline\\n é \\u0001"
recipients = ["a@example.com"]

[notifiers.slack]
webhook_url = "https://hooks.slack.com/services/T000/B000/XXXX"

[executors.dask]
address = "tcp://127.0.0.1:8786"
nested = {{ api_key = "k", list = [1, 2.5, true] }}

[logging]
level = "DEBUG"
"""


def full_config(tmp_path: Path) -> Config:
    """A configuration touching every kind of value, with secrets in several places."""
    token_file = write(tmp_path, "server-secret\n", "server.token")
    write(tmp_path, FULL.format(token_file=token_file))
    return load(cwd=tmp_path)


def test_to_toml_round_trips(tmp_path: Path) -> None:
    """Unredacted output parses back with tomllib into an equal Config."""
    config = full_config(tmp_path)
    text = to_toml(config, redact=False)
    again_dir = tmp_path / "again"
    again_dir.mkdir()
    write(again_dir, text)
    again = load(cwd=again_dir)
    assert dataclasses.replace(again, source=config.source) == config
    assert again.server.token == "server-secret"
    assert "server-secret" not in text


def test_to_toml_of_defaults_round_trips(tmp_path: Path) -> None:
    """The defaults written as TOML load back as the defaults."""
    write(tmp_path, to_toml(Config(), redact=False))
    assert dataclasses.replace(load(cwd=tmp_path), source=None) == Config()


def test_to_toml_redacts_secrets(tmp_path: Path) -> None:
    """Redacted output hides tokens, passwords, URL credentials and Slack webhook paths."""
    text = to_toml(full_config(tmp_path))
    document = tomllib.loads(text)
    for secret in ("sched-secret", "server-secret", "hunter2", "user:pw", "XXXX", "abc&"):
        assert secret not in text
    assert document["scheduler"]["token"] == "***"
    assert document["scheduler"]["url"] == "https://***@sched.example/api?token=***&x=1"
    assert document["server"]["token_file"].endswith("server.token")
    assert "token" not in document["server"]
    assert document["notifiers"]["email"]["password"] == "***"
    assert document["notifiers"]["email"]["smtp_host"] == "mail.example"
    slack = document["notifiers"]["slack"]["webhook_url"]
    assert slack == "https://hooks.slack.com/services/***"
    assert document["executors"]["dask"]["nested"]["api_key"] == "***"
    assert document["server"]["port"] == 9000


def test_to_toml_keeps_empty_secrets_visible() -> None:
    """An unset token is shown as empty, so the output says that no token is configured."""
    document = tomllib.loads(to_toml(Config()))
    assert document["scheduler"]["token"] == ""
    assert document["scheduler"]["resources"] == {}


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[schedulers.resources]\ndb = 1\n", "schedulers.resources"),
        ("[schedulers]\nurl = 'http://127.0.0.1:1'\n", "schedulers.url"),
    ],
)
def test_a_scheduler_key_under_schedulers_is_an_error_with_a_hint(
    tmp_path: Path, text: str, key: str
) -> None:
    """[schedulers.<name>] is a transport's own table: a [scheduler] key written there (a
    plural typo) is refused with a hint, not silently ignored."""
    path = tmp_path / "worker.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match="did you mean \\[scheduler\\]") as caught:
        load_config(path)
    assert f"unknown key {key!r}" in str(caught.value) and str(path) in str(caught.value)


def test_public_url_with_credentials_is_refused_without_showing_them(tmp_path: Path) -> None:
    """``[server] public_url`` is shown openly (``/health``, a standby's answers): a URL with a
    user:password is refused, and the error does not repeat the password."""
    write(tmp_path, '[server]\npublic_url = "http://u:s3cret@h:8082"\n')
    error = error_of(cwd=tmp_path)
    assert "server.public_url" in error and "without user:password" in error, error
    assert "s3cret" not in error, error
