"""A hook plugin's own settings (SPEC §12): a top-level ``[<name>]`` table named like an
installed ``conveyor.plugins`` entry point is accepted and kept raw in
``Config.plugin_tables``; the plugin checks it with ``Config.plugin_settings`` and refuses a
bad one from ``conveyor_configure`` (a ConfigError: exit 2, one line).

The plugins are those of tests/thirdparty-plugin: ``recorder`` (no settings of its own) and
``attemptprobe``, which validates ``[attemptprobe]`` (``label``, ``api_token``,
``flush_within``) in ``conveyor_configure``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import conveyor
from conveyor.errors import ConfigError
from conveyor.settings import Field
from conveyor.testing.processes import free_port

RunCli = Callable[..., subprocess.CompletedProcess[str]]  # the run_cli fixture (conftest.py)

SCHEMA = {
    "out": Field("str", "", doc="where to write"),
    "every": Field("int", 1, ge=1),
    "labels": Field("str_list", ()),
}


def _write(directory: Path, text: str, name: str = "worker.toml") -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_table_named_like_an_installed_plugin_is_kept(tmp_path: Path) -> None:
    """``[recorder]`` (an installed entry point) is accepted, kept as written (nested tables
    too), read-only, and its source is the file."""
    path = _write(tmp_path, '[recorder]\nout = "x.jsonl"\nevery = 3\n[recorder.extra]\na = 1\n')
    config = conveyor.load_config(path, env={})
    assert dict(config.plugin_tables) == {
        "recorder": {"out": "x.jsonl", "every": 3, "extra": {"a": 1}}
    }
    assert config.plugin_sources["recorder"] == str(path)
    with pytest.raises(TypeError):
        config.plugin_tables["recorder"]["out"] = "y"  # type: ignore[index]


def test_a_plugin_variable_lands_in_its_table(tmp_path: Path) -> None:
    """``CONVEYOR_RECORDER__EVERY`` sets ``[recorder] every`` (read as a TOML value) over the
    file's, and becomes the table's source."""
    path = _write(tmp_path, '[recorder]\nout = "x.jsonl"\nevery = 3\n')
    config = conveyor.load_config(path, env={"CONVEYOR_RECORDER__EVERY": "7"})
    assert dict(config.plugin_tables["recorder"]) == {"out": "x.jsonl", "every": 7}
    assert config.plugin_sources["recorder"] == "$CONVEYOR_RECORDER__EVERY"
    empty = tmp_path / "empty"
    empty.mkdir()
    alone = conveyor.load_config(None, env={"CONVEYOR_RECORDER__OUT": "y"}, cwd=empty)
    assert dict(alone.plugin_tables) == {"recorder": {"out": "y"}}


def test_an_unknown_section_is_still_an_error_listing_the_known_ones(tmp_path: Path) -> None:
    """A top-level name no installed plugin has is an unknown section: one line naming the
    file, listing conveyor's sections and the installed plugins' (or suggesting the nearest)."""
    path = _write(tmp_path, '[gauges]\nout = "x"\n')
    with pytest.raises(ConfigError) as caught:
        conveyor.load_config(path, env={})
    message = str(caught.value)
    assert "\n" not in message
    assert str(path) in message and "unknown section 'gauges'" in message
    for known in ("worker", "notifiers", "tasks", "recorder", "attemptprobe"):
        assert known in message
    typo = _write(tmp_path, '[recordr]\nout = "x"\n', "typo.toml")
    fine = _write(tmp_path, "", "fine.toml")
    with pytest.raises(ConfigError, match="unknown section 'recordr'; did you mean 'recorder'"):
        conveyor.load_config(typo, env={})
    with pytest.raises(ConfigError, match=r"\$CONVEYOR_GAUGES__OUT: unknown section 'gauges'"):
        conveyor.load_config(fine, env={"CONVEYOR_GAUGES__OUT": "y"})


def test_plugin_settings_fills_defaults(tmp_path: Path) -> None:
    """Given keys are checked and kept, missing ones get their defaults; no table at all is
    every default."""
    path = _write(tmp_path, '[recorder]\nevery = 4\nlabels = ["a", "b"]\n')
    config = conveyor.load_config(path, env={})
    assert config.plugin_settings("recorder", SCHEMA) == {
        "out": "",
        "every": 4,
        "labels": ("a", "b"),
    }
    assert conveyor.Config().plugin_settings("recorder", SCHEMA) == {
        "out": "",
        "every": 1,
        "labels": (),
    }


@pytest.mark.parametrize(
    ("text", "env", "where", "what"),
    [
        ("[recorder]\nevry = 4\n", {}, "worker.toml", "unknown key 'recorder.evry'"),
        ("[recorder]\nevery = 0\n", {}, "worker.toml", "recorder.every = 0"),
        ('[recorder]\nevery = "often"\n', {}, "worker.toml", "recorder.every"),
        ("", {"CONVEYOR_RECORDER__EVERY": "0"}, "$CONVEYOR_RECORDER__EVERY", "recorder.every"),
        ("", {"CONVEYOR_RECORDER__NOPE": "1"}, "$CONVEYOR_RECORDER__NOPE", "'recorder.nope'"),
    ],
)
def test_plugin_settings_errors_are_one_line_naming_where_and_the_key(
    text: str, env: dict[str, str], where: str, what: str, tmp_path: Path
) -> None:
    """An unknown key or a bad value is a one-line ConfigError naming the file (or the
    variable) and the key."""
    path = _write(tmp_path, text)
    config = conveyor.load_config(path, env=env)
    with pytest.raises(ConfigError) as caught:
        config.plugin_settings("recorder", SCHEMA)
    message = str(caught.value)
    assert "\n" not in message
    assert where in message and what in message, message


def test_conveyor_config_prints_the_plugin_table_redacted(run_cli: RunCli, tmp_path: Path) -> None:
    """``conveyor config`` shows ``[attemptprobe]`` as written, its secret-named key as
    ``***`` (never the value)."""
    _write(tmp_path, '[attemptprobe]\nlabel = "mine"\napi_token = "s3cret-value"\n')
    result = run_cli("config", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    table = result.stdout.split("[attemptprobe]\n", 1)[1]
    assert 'label = "mine"' in table
    assert 'api_token = "***"' in table
    assert "s3cret-value" not in result.stdout


TASKS = """
import conveyor


class Never(conveyor.Task):
    def complete(self):
        return False

    def run(self):
        raise AssertionError("a worker refused at start-up runs nothing")
"""


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ('[attemptprobe]\nlabl = "x"\n', {}, "worker.toml: unknown key 'attemptprobe.labl'"),
        (
            "",
            {"CONVEYOR_ATTEMPTPROBE__FLUSH_WITHIN": "-1"},
            "$CONVEYOR_ATTEMPTPROBE__FLUSH_WITHIN: attemptprobe.flush_within = -1",
        ),
    ],
)
def test_a_plugin_refusing_its_table_makes_conveyor_run_exit_2(
    text: str,
    env: dict[str, str],
    expected: str,
    run_cli: RunCli,
    task_module: Callable[..., str],
    tmp_path: Path,
) -> None:
    """The attemptprobe plugin raises plugin_settings' ConfigError from conveyor_configure:
    ``conveyor run`` exits 2 with one ``conveyor: error:`` line, no traceback."""
    module = task_module(TASKS)
    _write(tmp_path, text)
    result = run_cli("run", f"{module}.Never", cwd=tmp_path, env=env)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("conveyor: error:")]
    assert len(errors) == 1, result.stderr
    assert expected in errors[0], errors[0]


def test_a_valid_plugin_table_lets_the_run_go_on(
    run_cli: RunCli, task_module: Callable[..., str], tmp_path: Path
) -> None:
    """The same plugin with a valid ``[attemptprobe]`` table: the run goes on (exit 0)."""
    module = task_module(FINE)
    _write(tmp_path, '[attemptprobe]\nlabel = "ok"\nflush_within = 2\n')
    result = run_cli("run", f"{module}.Fine", "--path", str(tmp_path / "fine.txt"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "fine.txt").read_text() == "fine"


def test_a_plugin_refusing_its_table_stops_the_server(run_cli: RunCli, tmp_path: Path) -> None:
    """The central server configures its plugins too: a bad ``[attemptprobe]`` table in its
    configuration makes ``conveyor scheduler`` exit 2 with one line, before it serves."""
    _write(tmp_path, "[attemptprobe]\nflush_within = -1\n", "server.toml")
    result = run_cli(
        "scheduler",
        "--config",
        str(tmp_path / "server.toml"),
        "--port",
        str(free_port()),
        "--state-path",
        str(tmp_path / "state.db"),
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("conveyor: error:")]
    assert len(errors) == 1, result.stderr
    assert "attemptprobe.flush_within = -1" in errors[0], errors[0]


FINE = """
import conveyor


class Fine(conveyor.Task):
    path = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(self.path)

    def run(self):
        with self.output().open("w") as out:
            out.write("fine")
"""
