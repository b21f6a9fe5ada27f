"""The README's two set-up commands: the test fixtures never reach a user's environment.

The second command (the tests') installs ``tests/thirdparty-plugin`` — a distribution whose
plugins ``recorder``, ``fragile``, ``labelled`` and ``jsonl`` exist only for the tests — into
a virtual environment of its own, so ``conveyor plugins`` in the first command's environment
lists none of them. These tests read the commands (and ``.ci/run``, which must run the second
one verbatim), and run ``conveyor plugins --json`` in an environment that holds only what the
first command installs: conveyor and its requirements.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import venv
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = "tests/thirdparty-plugin"
FIXTURE_PLUGINS = {"recorder", "fragile", "labelled", "jsonl"}


def readme_commands() -> tuple[str, str]:
    """The README's first two ``sh`` blocks: the example's command and the tests'."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```sh\n(.*?)\n```", text, flags=re.S)
    return blocks[0].strip(), blocks[1].strip()


def venv_of(command: str) -> str:
    """The directory that ``python3 -m venv DIR`` in ``command`` creates."""
    words = shlex.split(command)
    for n in range(len(words) - 2):
        if words[n + 1 : n + 3] == ["-m", "venv"]:
            return words[n + 3].rstrip("/")
    raise AssertionError(f"no `python3 -m venv` in {command!r}")


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    """.ci/run holds the README's second command as one line, unchanged."""
    _, tests = readme_commands()
    lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert tests in lines


def test_the_fixtures_are_installed_only_into_the_test_environment() -> None:
    """Command 1 never names the fixture distribution; command 2 creates a venv other than
    command 1's and installs the fixture there, with that venv's pip; .ci/run's static checks
    use that venv too (they are its tools)."""
    example, tests = readme_commands()
    user_venv, test_venv = venv_of(example), venv_of(tests)
    assert user_venv != test_venv
    assert "thirdparty-plugin" not in example
    [install] = [part for part in tests.split("&&") if FIXTURE in part]
    assert shlex.split(install)[0] == f"{test_venv}/bin/pip", install
    tools = re.findall(r"(\S+)/bin/", tests)
    assert set(tools) == {test_venv}, tools
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert f"{user_venv}/bin/" not in ci


def _requirement_names(dist: metadata.Distribution) -> list[str]:
    """The distributions ``dist`` requires at run time (no extras)."""
    names = []
    for requirement in dist.requires or []:
        if "extra ==" in requirement.replace("extra==", "extra =="):
            continue
        match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
        if match:
            names.append(match.group(0))
    return names


def _closure(name: str) -> list[metadata.Distribution]:
    """``name``'s distribution and every one it requires at run time, as installed here."""
    found: dict[str, metadata.Distribution] = {}
    todo = [name]
    while todo:
        key = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if key in found:
            continue
        try:
            dist = metadata.distribution(key)
        except metadata.PackageNotFoundError:
            continue  # a requirement for another platform or Python
        found[key] = dist
        todo += _requirement_names(dist)
    return list(found.values())


def _link_installed(dist: metadata.Distribution, into: Path) -> None:
    """Symlink the top-level entries of an installed distribution (its packages, modules and
    .dist-info directory) into ``into``."""
    tops = {file.parts[0] for file in dist.files or []} - {"..", "__pycache__"}
    for top in tops:
        source = Path(str(dist.locate_file(top)))
        if source.exists() and not top.endswith(".pth") and not (into / top).exists():
            (into / top).symlink_to(source)


@pytest.mark.timeout(120)  # a venv and one CLI start, on a loaded 2-core machine
def test_an_environment_with_what_command_one_installs_lists_none_of_the_fixtures(
    tmp_path: Path,
) -> None:
    """A fresh venv that holds conveyor (this clone's source and its installed metadata) and
    its requirements — what command 1 installs — and nothing else: ``conveyor plugins --json``
    there lists conveyor's own backends and none of the fixture plugins."""
    home = tmp_path / "user-venv"
    venv.EnvBuilder(with_pip=False).create(home)
    python = home / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    linked = tmp_path / "installed"
    linked.mkdir()
    for dist in _closure("conveyor"):
        _link_installed(dist, linked)
    assert list(linked.glob("conveyor-*.dist-info")), "conveyor's metadata was not found"
    (Path(site) / "command_one.pth").write_text(f"{ROOT / 'src'}\n{linked}\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # (no CONVEYOR_*: conftest)
    proc = subprocess.run(
        [str(python), "-m", "conveyor", "plugins", "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    names = {entry["name"] for entry in listed}
    assert {"inline", "fork", "subprocess", "thread", "local", "http", "email"} <= names, names
    assert all(entry["loads"] for entry in listed), listed
    assert names.isdisjoint(FIXTURE_PLUGINS), names & FIXTURE_PLUGINS


def test_the_test_environment_has_the_fixture_plugins(tmp_path: Path) -> None:
    """Here (command 2's environment) ``conveyor plugins --json`` lists all four fixture
    plugins: the check above would see them if they were installed."""
    proc = subprocess.run(
        [sys.executable, "-m", "conveyor", "plugins", "--json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    names = {entry["name"] for entry in json.loads(proc.stdout)}
    assert names >= FIXTURE_PLUGINS, names
