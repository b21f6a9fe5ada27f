"""The ``conveyor`` command line: parse arguments, build settings, hand over (see docs/cli.md).

User mistakes (bad flags, bad configuration, unknown backends, tasks that cannot be imported)
end with one ``conveyor: error: ...`` line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from . import __version__
from .backends import check_selected, describe_installed, other_task_loaders
from .config import Config, load_config, to_toml
from .core.summary import first_line
from .errors import (
    ConfigError,
    ConveyorError,
    ParameterError,
    PluginError,
    SchedulerUnavailable,
    TaskLoadError,
)
from .log import configure_logging, resolve_level
from .parameters import allow_task_modules, task_modules_named
from .progress import ProgressPlugin, TerminalStream
from .protocol import TaskInfo, TaskList, TaskStatus, encode
from .secrets import REDACTED, hide_secret_params, is_secret_name
from .task import Task, load_task_class, use_task_defaults
from .tasklike import ParsesCommandLines, TaskLike
from .worker.loop import PROCESS_EXECUTOR, Worker

__all__ = ["main"]

USAGE_ERROR = 2
UNREACHABLE = 3  # a command that talks to the central scheduler could not reach it
_CONTROL_COMMANDS = frozenset({"tasks", "plan", "submit", "cancel"})  # (exit 3 then)

# conveyor run's own options: flag → (dest, takes a value)
_RUN_OPTIONS: dict[str, tuple[str, bool]] = {
    "--module": ("module", True),
    "--workers": ("workers", True),
    "--executor": ("executor", True),
    "--scheduler-url": ("scheduler_url", True),
    "--local-scheduler": ("local_scheduler", False),
    "--config": ("config", True),
    "--log-format": ("log_format", True),
    "--log-level": ("log_level", True),
}
_RUN_HELP: dict[str, tuple[str | None, str]] = {
    "--module": ("MODULE", "the module TASK is in, when TASK is a bare Family"),
    "--workers": ("N", "concurrent task slots, >= 1 ([worker] workers; default 1)"),
    "--executor": (
        "NAME",
        "auto (inline with 1 worker, else fork), inline, thread, fork, subprocess, or an "
        "installed conveyor.executors name ([worker] executor)",
    ),
    "--scheduler-url": ("URL", "use the central scheduler at URL (the http transport)"),
    "--local-scheduler": (None, "use the in-process scheduler even if the config names a server"),
    "--config": ("PATH", "the worker.toml to read (default: $CONVEYOR_CONFIG, ./worker.toml)"),
    "--log-format": ("FORMAT", "auto (console on a terminal, else json), console or json"),
    "--log-level": (
        "LEVEL",
        "auto, debug, info, warning, error or critical (default auto: warning on a terminal, "
        "under the progress line; else info)",
    ),
}
_RUN_EPILOG = (
    "conveyor's own options may come before or after TASK; after TASK, a task parameter of "
    "the same name wins. Exit codes: 0 complete, 1 a task failed, 2 usage or configuration "
    "error, 3 scheduling error, 4 missing external data, 5 incomplete for another reason "
    "(e.g. running on another worker), 130/143 SIGINT/SIGTERM."
)


class UsageError(ConveyorError):
    """The command line is wrong."""


class _HelpRequested(Exception):
    """``--help`` among run's own options with no TASK: print run's help."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises UsageError instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        """Turn argparse's complaint into a UsageError."""
        raise UsageError(f"{self.prog}: {message}")


@dataclass(frozen=True)
class TaskCommand:
    """A command that takes ``TASK [--<param> VALUE ...]`` and options of its own
    (``conveyor run``, ``plan``, ``invalidate``, ``submit``): how to parse and describe it."""

    name: str
    options: Mapping[str, tuple[str, bool]]  # flag → (dest, takes a value)
    help: Mapping[str, tuple[str | None, str]]  # flag → (metavar, text)
    description: str
    epilog: str

    @property
    def prog(self) -> str:
        """``conveyor <name>``."""
        return f"conveyor {self.name}"


@dataclass(frozen=True)
class BuiltTask:
    """What :func:`build_task` made of a command line: the task and the command's options."""

    task: TaskLike
    options: dict[str, Any]
    config: Config


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return _dispatch(args)
    except (UsageError, ConfigError, PluginError, TaskLoadError, ConveyorError) as exc:
        print(f"conveyor: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        print("conveyor: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `conveyor tasks --json | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _dispatch(args: list[str]) -> int:
    if not args or args[0] in ("-h", "--help"):
        print(_HELP)
        return 0 if args else USAGE_ERROR
    if args[0] == "--version":
        print(f"conveyor {__version__}")
        return 0
    command, rest = args[0], args[1:]
    handlers = {
        "run": cmd_run,
        "plugins": cmd_plugins,
        "config": cmd_config,
        "scheduler": cmd_scheduler,
        "worker": cmd_worker,
        "tasks": cmd_tasks,
        "plan": cmd_plan,
        "invalidate": cmd_invalidate,
        "submit": cmd_submit,
        "cancel": cmd_cancel,
    }
    if command in handlers:
        try:
            return handlers[command](rest)
        except SchedulerUnavailable as exc:
            if command not in _CONTROL_COMMANDS:
                raise  # (run and worker: a usage error, exit 2, as always)
            print(f"conveyor: error: {exc}", file=sys.stderr)
            return UNREACHABLE
    raise UsageError(f"unknown command {command!r}; expected one of: {', '.join(handlers)}")


_HELP = """usage: conveyor <command> [options]

commands:
  run TASK [--<param> VALUE ...]   run a task and everything it needs
  plugins [--json] [--config PATH] list installed backends and hook plugins
  config [--config PATH]           validate and print the effective configuration
  scheduler [--host H] [--port P] [--state-path PATH] [--recover] [--config PATH]
                                   serve the central scheduler (needs the 'server' extra)
  worker --scheduler-url URL [--workers N] [--config PATH]
                                   a long-running assistant of a central scheduler
  tasks --scheduler-url URL [--json] [--state S] [--family F] [--match TEXT]
                                   the central scheduler's task list
  plan TASK [--<param> VALUE ...] [--json]
                                   what a run would do, and why (a dry run)
  invalidate TASK [--<param> VALUE ...] [--downstream-of ROOT] [--yes] [--dry-run]
                                   remove TASK's outputs (and those downstream of it)
  submit TASK [--<param> VALUE ...] --scheduler-url URL
                                   have the central scheduler's assistants run TASK
  cancel TASK_ID [--downstream] --scheduler-url URL
                                   stop a task (and what needs it) on the central scheduler
  --version                        print the version

'conveyor run --help' lists run's options."""


# --- conveyor run ---------------------------------------------------------------------------


_RUN = TaskCommand(
    "run",
    _RUN_OPTIONS,
    _RUN_HELP,
    "Run TASK (package.module.Family, or Family with --module) and everything it needs. "
    "'conveyor run TASK --help' lists TASK's parameters.",
    _RUN_EPILOG,
)


def command_parser(command: TaskCommand, task_cls: type[Task] | None) -> _Parser:
    """The parser for ``command``'s options; with a task class, its parameters take
    precedence."""
    if task_cls is None:
        parser = _Parser(
            prog=command.prog,
            usage=f"{command.prog} TASK [--<param> VALUE ...] [options]",
            description=command.description,
            epilog=command.epilog,
        )
    else:
        parser = _Parser(
            prog=f"{command.prog} {task_cls.__module__}.{task_cls.__name__}",
            add_help=False,
            description=(task_cls.__doc__ or "").strip().split("\n\n")[0] or None,
            epilog=command.epilog,
        )
    taken: set[str] = set()
    if task_cls is not None:
        group = parser.add_argument_group(f"parameters of {task_cls.get_task_family()}")
        for name, param in task_cls.parameters():
            flag = "--" + name.replace("_", "-")
            taken.add(flag)
            if param.is_flag:
                group.add_argument(
                    flag,
                    dest=f"param:{name}",
                    action=argparse.BooleanOptionalAction,
                    help=_param_help(param),
                )
                taken.add("--no-" + name.replace("_", "-"))
            else:
                group.add_argument(
                    flag,
                    dest=f"param:{name}",
                    metavar=_metavar(param.type_name),
                    help=_param_help(param),
                )
    own = parser.add_argument_group(f"{command.prog} options")
    for flag, (dest, takes_value) in command.options.items():
        if flag in taken:
            continue
        metavar, text = command.help[flag]
        if takes_value:
            own.add_argument(flag, dest=dest, metavar=metavar, help=text)
        else:
            own.add_argument(flag, dest=dest, action="store_true", default=None, help=text)
    return parser


def _metavar(type_name: str) -> str:
    """INT, STR, ... — but a choice list such as {eu,us} as it is typed."""
    return type_name if type_name.startswith("{") else type_name.upper()


def _param_help(param: Any) -> str:
    """A task parameter's help: its description, allowed values and default (secrets hidden)."""
    parts = [param.description] if param.description else []
    choices = getattr(param, "choices", None)
    enum = getattr(param, "enum", None)
    if choices:
        parts.append("one of: " + ", ".join(map(str, choices)))
    elif enum is not None:
        parts.append("one of: " + ", ".join(member.name for member in enum))
    if not param.has_default:
        parts.append("required")
    elif is_secret_name(param.name):
        parts.append("default: ***")
    elif not param.is_flag:
        parts.append(f"default: {param.serialize(param.default)!r}")
    return "; ".join(parts)


def _split_at_task(command: TaskCommand, args: list[str]) -> tuple[list[str], str, list[str]]:
    """Find TASK: the first word that is neither an option nor an option's value."""
    options = command.options
    index = 0
    while index < len(args):
        word = args[index]
        if not word.startswith("-"):
            return args[:index], word, args[index + 1 :]
        flag = word.split("=", 1)[0]
        if flag not in options and flag not in ("-h", "--help"):
            raise UsageError(
                f"{command.prog}: unknown option {word!r} before TASK; task parameters go "
                f"after TASK, and {command.name}'s own options are: " + ", ".join(options)
            )
        takes_value = flag in options and options[flag][1] and "=" not in word
        index += 2 if takes_value else 1
    if "-h" in args or "--help" in args:
        raise _HelpRequested()
    raise UsageError(
        f"{command.prog}: missing TASK (package.module.Family, or Family with --module)"
    )


def build_task(
    command: TaskCommand,
    args: list[str],
    config_of: Callable[[dict[str, Any]], Config] | None = None,
) -> BuiltTask | int:
    """The task ``args`` name (``TASK [--<param> VALUE ...]``, ``command``'s own options
    before or after TASK), built with the ``[tasks.*]`` defaults and task id style of the
    configuration ``config_of(options)`` makes (default: the file ``--config`` names); or the
    exit code when help or usage was printed instead.
    A task class of another framework (a ``luigi.Task``) is built by the first installed task
    loader that parses command lines. Mistakes raise :class:`UsageError` and friends."""
    if not args:
        command_parser(command, None).print_usage(sys.stderr)
        print(
            f"{command.prog}: error: missing TASK; '{command.prog} --help' lists the options",
            file=sys.stderr,
        )
        return USAGE_ERROR
    if args[0] in ("-h", "--help"):
        command_parser(command, None).print_help()
        return 0
    try:
        before, task_name, after = _split_at_task(command, args)
    except _HelpRequested:
        command_parser(command, None).print_help()
        return 0
    early = vars(command_parser(command, None).parse_args(before))
    module, family = _task_location(command, task_name, _module_from(early, after))
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        task_cls = load_task_class(module, family)
    except TaskLoadError as not_ours:  # perhaps a task of another framework (a luigi.Task)
        return _build_foreign(command, module, family, early, after, not_ours, config_of)
    parser = command_parser(command, task_cls)
    if "-h" in after or "--help" in after:
        parser.print_help()
        return 0
    late = _parse_task_args(command, parser, after, task_cls)
    merged = {**early, **{k: v for k, v in late.items() if v is not None}}
    options = {k: v for k, v in merged.items() if not k.startswith("param:")}
    params = {k[6:]: v for k, v in late.items() if k.startswith("param:") and v is not None}
    config = (config_of or _config_named)(options)
    # [tasks.*] and the task id style of this run's file
    use_task_defaults(config.tasks, config.task_sources, config.worker.task_id_style)
    # a task-class flag (--of mymod.Daily) may import the module it names: the user typed it
    with allow_task_modules(task_modules_named(task_cls.parameters(), params)):
        task = task_cls(**{k: _flag_value(v) for k, v in params.items()})
    return BuiltTask(task, options, config)


def _config_named(options: dict[str, Any]) -> Config:
    return load_config(options.get("config"))


def cmd_run(args: list[str]) -> int:
    """``conveyor run``: build the task from flags and run it with a worker."""
    built = build_task(_RUN, args, _run_config)
    if isinstance(built, int):
        return built
    config = built.config
    # on a terminal, log lines and the progress line share one stream that keeps them apart
    terminal = TerminalStream(sys.stderr) if sys.stderr.isatty() else None
    # level "auto": warning under the progress line, else info (also for the attempts' logs)
    level = resolve_level(config.logging.level, progress_line=terminal is not None)
    config = config.with_overrides(log_level=level)
    configure_logging(config.logging, terminal)
    return _run_task(built.task, config, terminal)


def _build_foreign(
    command: TaskCommand,
    module: str,
    family: str,
    early: dict[str, Any],
    after: list[str],
    not_ours: TaskLoadError,
    config_of: Callable[[dict[str, Any]], Config] | None,
) -> BuiltTask | int:
    """A task class of another framework: the first installed task loader that parses command
    lines (:class:`~conveyor.tasklike.ParsesCommandLines`) and claims ``module``/``family``
    builds the task from the words after TASK that are not the command's own options; with
    none, the error of conveyor's own loader stands."""
    if module not in sys.modules:  # (it could not be imported: no loader can do better)
        raise not_ours
    own, rest = _split_own_options(command, after)
    wants_help = "-h" in rest or "--help" in rest
    if wants_help:  # the loader's own help (its parser exits), then the command's options
        rest = ["--help"]
    late = vars(command_parser(command, None).parse_args(own))
    options = {**early, **{k: v for k, v in late.items() if v is not None}}
    task: TaskLike | None = None
    for loader in other_task_loaders():
        if isinstance(loader, ParsesCommandLines):
            try:
                task = loader.task_from_command_line(module, family, rest)
            except ParameterError as exc:
                raise UsageError(f"{command.prog}: {exc}") from None
            except ConveyorError:
                raise
            except Exception as exc:  # a third party's loader failing: its error, no traceback
                raise PluginError(
                    f"{command.prog}: the task loader {type(loader).__name__} failed on "
                    f"{module}.{family}: {type(exc).__name__}: {exc}"
                ) from None
            except SystemExit as exc:  # a framework's parser that printed its --help, or gave up
                if wants_help:
                    print(f"\n{command.prog}'s own options, for {module}.{family} too:")
                    command_parser(command, None).print_help()
                if exc.code is None or isinstance(exc.code, int):
                    return exc.code or 0
                print(exc.code, file=sys.stderr)  # (as Python itself does with sys.exit(text))
                return 1
            if task is not None:
                break
    if task is None:
        raise not_ours
    return BuiltTask(task, options, (config_of or _config_named)(options))


def _split_own_options(command: TaskCommand, words: list[str]) -> tuple[list[str], list[str]]:
    """``words`` split into the command's own options (with their values) and the rest."""
    own: list[str] = []
    rest: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        flag = word.split("=", 1)[0]
        if flag in command.options:
            takes_value = command.options[flag][1] and "=" not in word
            own += words[index : index + (2 if takes_value else 1)]
            index += 2 if takes_value else 1
        else:
            rest.append(word)
            index += 1
    return own, rest


def _parse_task_args(
    command: TaskCommand, parser: _Parser, after: list[str], task_cls: type[Task]
) -> dict[str, Any]:
    """Parse what follows TASK; an unknown flag is named along with the valid ones."""
    namespace, unknown = parser.parse_known_args(after)
    if unknown:
        flags = [
            "--" + name.replace("_", "-") + ("/--no-" + name.replace("_", "-") if p.is_flag else "")
            for name, p in task_cls.parameters()
        ]
        raise UsageError(
            f"{command.prog}: unknown argument {unknown[0]!r} for task "
            f"{task_cls.get_task_family()}; its parameters are: {', '.join(flags) or '(none)'}; "
            f"{command.name}'s own options are: " + ", ".join(command.options)
        )
    return vars(namespace)


def _module_from(early: dict[str, Any], after: list[str]) -> str | None:
    """--module may come before or after TASK (a task parameter named module wins after)."""
    if early.get("module"):
        return str(early["module"])
    for index, word in enumerate(after):
        if word == "--module" and index + 1 < len(after):
            return after[index + 1]
        if word.startswith("--module="):
            return word.split("=", 1)[1]
    return None


def _task_location(command: TaskCommand, task_name: str, module: str | None) -> tuple[str, str]:
    if module:
        return module, task_name
    mod, _, family = task_name.rpartition(".")
    if not mod:
        raise UsageError(
            f"{command.prog}: TASK {task_name!r} has no module; write package.module.{task_name} "
            "or add --module package.module"
        )
    return mod, family


def _flag_value(value: object) -> object:
    return ("true" if value else "false") if isinstance(value, bool) else value


def _run_config(options: dict[str, Any]) -> Config:
    _one_scheduler("run", options)
    workers = options.get("workers")
    if workers is not None:
        try:
            workers = int(workers)
        except ValueError:
            raise UsageError(f"conveyor run: --workers {workers!r} is not an integer") from None
    config = load_config(options.get("config"))
    return config.with_overrides(
        workers=workers,
        executor=options.get("executor"),
        scheduler_url=options.get("scheduler_url"),
        local_scheduler=options.get("local_scheduler"),
        log_level=options.get("log_level"),
        log_format=options.get("log_format"),
    )


def _one_scheduler(command: str, options: dict[str, Any]) -> None:
    """UsageError when ``--scheduler-url`` and ``--local-scheduler`` are both given."""
    if options.get("scheduler_url") and options.get("local_scheduler"):
        raise UsageError(
            f"conveyor {command}: --scheduler-url and --local-scheduler exclude each other"
        )


def _run_task(task: TaskLike, config: Config, terminal: TerminalStream | None) -> int:
    plugins = [ProgressPlugin(terminal)] if terminal is not None else []
    with Worker(config=config, plugins=plugins) as worker:
        worker.add(task)
        worker.run()
    report = worker.report
    assert report is not None
    print(report.summary)
    return report.exit_code


# --- conveyor plugins / config --------------------------------------------------------------


def cmd_plugins(args: list[str]) -> int:
    """``conveyor plugins``: every installed backend and hook plugin, and whether it loads."""
    parser = _Parser(prog="conveyor plugins")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--config")
    opts = parser.parse_args(args)
    sys.path.insert(0, os.getcwd())  # local plugins are found as `conveyor run` finds them
    try:
        local = load_config(opts.config).plugins.local
    except ConfigError as exc:  # still list what is installed: this is the diagnostic command
        print(f"conveyor: warning: [plugins] local not listed: {exc}", file=sys.stderr)
        local = ()
    with contextlib.redirect_stdout(sys.stderr):  # whatever a plugin prints at import
        rows = describe_installed(local)
    if opts.json:
        print(json.dumps([row_dict(r) for r in rows], indent=2))
    else:
        print(_table(rows))
    return 0 if all(r.loads for r in rows) else 1


def row_dict(row: Any) -> dict[str, Any]:
    """One installed plugin as a JSON-able dict."""
    return {
        "group": row.group,
        "name": row.name,
        "distribution": row.distribution,
        "version": row.version,
        "loads": row.loads,
        "error": row.error,
        "warning": row.warning,
    }


def _table(rows: Sequence[Any]) -> str:
    header = ("GROUP", "NAME", "DISTRIBUTION", "VERSION", "STATUS")
    body = [
        (r.group, r.name, r.distribution, r.version, _status(r.loads, r.error, r.warning))
        for r in rows
    ]
    widths = [max(len(line[i]) for line in (header, *body)) for i in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line[:4])) + "  " + line[4]
        for line in (header, *body)
    )


def _status(loads: bool, error: str, warning: str) -> str:
    if not loads:
        return f"FAILED: {error}"
    return f"WARNING: {warning}" if warning else "ok"


def cmd_scheduler(args: list[str]) -> int:
    """``conveyor scheduler``: serve the central scheduler until stopped."""
    parser = _Parser(prog="conveyor scheduler")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--state-path")
    parser.add_argument("--recover", action="store_true")
    parser.add_argument("--config")
    opts = parser.parse_args(args)
    config = load_config(opts.config)
    overrides = {"host": opts.host, "port": opts.port, "state_path": opts.state_path}
    if opts.recover:  # move unusable state rows aside instead of refusing to start
        overrides["on_corrupt_state"] = "quarantine"
    config = config.with_section("server", **overrides)
    configure_logging(config.logging)
    from .server.main import serve

    return serve(config)


def cmd_worker(args: list[str]) -> int:
    """``conveyor worker``: run tasks for a central scheduler (assistant) until a signal."""
    parser = _Parser(prog="conveyor worker")
    parser.add_argument("--scheduler-url", required=True)
    parser.add_argument("--workers", type=int)
    parser.add_argument("--config")
    parser.add_argument("--log-format")
    parser.add_argument("--log-level")
    opts = parser.parse_args(args)
    config = load_config(opts.config).with_overrides(
        scheduler_url=opts.scheduler_url,
        workers=opts.workers,
        assistant=True,
        keep_alive=True,
        log_format=opts.log_format,
        log_level=opts.log_level,
    )
    if config.worker.executor == "auto":  # a long-running assistant runs every attempt in a
        # process of its own, even with one slot: one attempt can be stopped (a cancel), and
        # no task can take the assistant down
        config = config.with_overrides(executor=PROCESS_EXECUTOR)
    configure_logging(config.logging)
    sys.path.insert(0, os.getcwd())
    with Worker(config=config) as worker:
        worker.run()
    report = worker.report
    assert report is not None
    print(report.summary)
    return report.exit_code if report.exit_code in (130, 143) else 0


_FAILED_STATES = (TaskStatus.FAILED, TaskStatus.DISABLED, TaskStatus.UNKNOWN)


def cmd_tasks(args: list[str]) -> int:
    """``conveyor tasks``: print the central scheduler's task list, filtered and sorted."""
    parser = _Parser(prog="conveyor tasks")
    parser.add_argument("--scheduler-url", required=True)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--config")
    parser.add_argument("--state", action="append", default=[], metavar="STATE")
    parser.add_argument("--family", action="append", default=[], metavar="FAMILY")
    parser.add_argument("--match", metavar="TEXT")
    opts = parser.parse_args(args)
    states = {s.strip().upper() for value in opts.state for s in value.split(",") if s.strip()}
    unknown = sorted(states - set(TaskStatus))
    if unknown:
        raise UsageError(
            f"conveyor tasks: unknown --state {', '.join(unknown)}; expected one of: "
            + ", ".join(TaskStatus)
        )
    config = load_config(opts.config).with_overrides(scheduler_url=opts.scheduler_url)
    from .control.client import Client

    with Client.from_config(config) as client:  # (tries a silent scheduler again for 30 s)
        listed = _select(client.tasks(), states, set(opts.family), opts.match)
    tasks = [_shown(t) for t in listed]
    if opts.json:
        print(json.dumps(encode(TaskList(tuple(tasks))), indent=2))
        return 0
    rows = [(t.status, t.task_id, t.worker or "", _task_note(t)) for t in tasks]
    header = ("STATUS", "TASK", "WORKER", "REASON/MESSAGE")
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(3)]
    for row in (header, *rows):
        cells = "  ".join(c.ljust(widths[i]) for i, c in enumerate(row[:3]))
        print(f"{cells}  {row[3]}".rstrip())
    return 0


def _select(
    tasks: list[TaskInfo], states: set[str], families: set[str], match: str | None
) -> list[TaskInfo]:
    """The tasks that pass the filters, ordered by state (in TaskStatus order), family, then id."""
    needle = (match or "").lower()

    def wanted(task: TaskInfo) -> bool:
        if states and task.status not in states:
            return False
        if families and task.family not in families:
            return False
        if not needle:
            return True
        public = (v for k, v in task.params.items() if not is_secret_name(k))
        return any(needle in text.lower() for text in (task.task_id, *public))

    order = {state: index for index, state in enumerate(TaskStatus)}
    return sorted(filter(wanted, tasks), key=lambda t: (order[t.status], t.family, t.task_id))


def _shown(task: TaskInfo) -> TaskInfo:
    """``task`` as people may see it: secret-named parameter values, and their appearances
    and URL credentials in its texts, hidden."""
    params = task.params
    return replace(
        task,
        params={k: REDACTED if is_secret_name(k) and v else v for k, v in params.items()},
        explanation=hide_secret_params(task.explanation, params),
        status_message=hide_secret_params(task.status_message, params),
        tracking_url=hide_secret_params(task.tracking_url, params),
    )


def _task_note(task: TaskInfo) -> str:
    """One line: why a failed task failed (secrets hidden), why a ready task waits, else its
    status message."""
    if task.status in _FAILED_STATES and task.explanation:
        return first_line(task.explanation, 120)  # (hidden by _shown)
    if task.status == TaskStatus.PENDING and task.waiting:
        return task.waiting
    return task.status_message.replace("\n", " ")


# --- conveyor plan (region: plan) -----------------------------------------------------------


_PLAN_OPTIONS: dict[str, tuple[str, bool]] = {
    "--json": ("json", False),
    "--scheduler-url": ("scheduler_url", True),
    "--local-scheduler": ("local_scheduler", False),
    "--module": ("module", True),
    "--config": ("config", True),
}
_PLAN_HELP: dict[str, tuple[str | None, str]] = {
    "--json": (None, "print the plan as JSON instead of a tree"),
    "--scheduler-url": (
        "URL",
        "also ask the central scheduler at URL which of the tasks that would run are running "
        'on another worker (default: [scheduler] url, when transport = "http")',
    ),
    "--local-scheduler": (None, "ask no central scheduler, even if the config names one"),
    "--module": ("MODULE", "the module TASK is in, when TASK is a bare Family"),
    "--config": (
        "PATH",
        "the worker.toml whose [worker] settings rule the walk and whose [tasks.*] defaults "
        "build the tasks (default: $CONVEYOR_CONFIG, ./worker.toml)",
    ),
}
_PLAN = TaskCommand(
    "plan",
    _PLAN_OPTIONS,
    _PLAN_HELP,
    "Say what 'conveyor run TASK' would do, and why, without running anything: the graph is "
    "walked with complete() checks only (run() is never called) and each task is shown with "
    "its verdict (complete, will run, running elsewhere, missing external data, blocked, "
    "disabled, failed, broken) and reason. 'conveyor plan TASK --help' lists TASK's parameters.",
    "Exit codes: 0 nothing would run (every task complete, or what is not cannot run: the "
    "plan says why), 1 something would run, 2 usage or configuration error, 3 the central "
    "scheduler could not be reached.",
)


def cmd_plan(args: list[str]) -> int:
    """``conveyor plan``: a dry run, printing each task with what a run would do and why."""
    built = build_task(_PLAN, args, _plan_config)
    if isinstance(built, int):
        return built
    from .control.plan import plan

    with contextlib.redirect_stdout(sys.stderr):  # (what task code prints: not in the plan)
        planned = plan(built.task, config=built.config)
    if built.options.get("json"):
        print(json.dumps(planned.to_json(), indent=2))
    else:
        print(planned.tree())
        print(planned.summary())
    return planned.exit_code


def _plan_config(options: dict[str, Any]) -> Config:
    """``--config``'s file with ``--scheduler-url`` or ``--local-scheduler`` applied."""
    _one_scheduler("plan", options)
    return load_config(options.get("config")).with_overrides(
        scheduler_url=options.get("scheduler_url"),
        local_scheduler=options.get("local_scheduler"),
    )


# --- end of region: plan ---------------------------------------------------------------------

# --- conveyor invalidate (region: invalidate) -----------------------------------------------


_INVALIDATE_OPTIONS: dict[str, tuple[str, bool]] = {
    "--downstream-of": ("downstream_of", True),
    "--yes": ("yes", False),
    "--dry-run": ("dry_run", False),
    "--module": ("module", True),
    "--config": ("config", True),
}
_INVALIDATE_HELP: dict[str, tuple[str | None, str]] = {
    "--downstream-of": (
        "ROOT",
        "also remove the outputs of every task of ROOT's graph that needs TASK (directly or "
        "not); ROOT is package.module.Family, with its parameters in the same quoted "
        "argument: --downstream-of 'pkg.mod.Report --date 2024-01-01'",
    ),
    "--yes": (None, "remove without asking (required when stdin is not a terminal)"),
    "--dry-run": (None, "list what would be removed, and remove nothing"),
    "--module": ("MODULE", "the module TASK (and a bare ROOT) is in, when given as a Family"),
    "--config": (
        "PATH",
        "the worker.toml whose [tasks.*] defaults build the tasks (default: "
        "$CONVEYOR_CONFIG, ./worker.toml)",
    ),
}
_INVALIDATE = TaskCommand(
    "invalidate",
    _INVALIDATE_OPTIONS,
    _INVALIDATE_HELP,
    "Remove the outputs of TASK (package.module.Family, or Family with --module) through each "
    "target's remove(), and with --downstream-of ROOT those of every task of ROOT's graph "
    "that needs TASK, so that the next 'conveyor run ROOT' makes them again. Lists them and "
    "asks first. 'conveyor invalidate TASK --help' lists TASK's parameters.",
    "Exit codes: 0 removed (or nothing to remove), 1 an output could not be removed (or the "
    "answer was no), 2 usage or configuration error (TASK not in ROOT's graph; no terminal "
    "to ask on and no --yes), 3 ROOT's graph could not be walked (a requires() failed).",
)
_INVALIDATE_ROOT = TaskCommand(
    "invalidate --downstream-of",
    {"--module": ("module", True)},
    {"--module": _INVALIDATE_HELP["--module"]},
    "ROOT of 'conveyor invalidate --downstream-of': package.module.Family [--<param> VALUE ...]"
    ", given as one quoted argument.",
    "",
)
_GRAPH_BROKEN = 3  # as conveyor run's "scheduling error": a requires() raised


def cmd_invalidate(args: list[str]) -> int:
    """``conveyor invalidate``: list the outputs of TASK (and of what needs it in ROOT's
    graph), ask, and remove them."""
    built = build_task(_INVALIDATE, args)
    if isinstance(built, int):
        return built
    options = built.options
    root: TaskLike | None = None
    if options.get("downstream_of") is not None:
        made = _invalidate_root(str(options["downstream_of"]), options.get("module"), built)
        if isinstance(made, int):
            return made
        root = made
    from .control.invalidate import GraphError, invalidate

    try:
        found = invalidate(built.task, root, dry_run=True)
    except GraphError as exc:
        print(f"conveyor: error: {exc}", file=sys.stderr)
        return _GRAPH_BROKEN
    print(_invalidation_listing(found))
    if found.nothing_to_remove:
        aside = " (external data aside)" if any(t.external for t in found.tasks) else ""
        print(f"Nothing to remove: none of these outputs exists{aside}.")
        return 0
    if options.get("dry_run") or not found.removed:
        if not found.removed:
            print(f"Nothing can be removed: {_count(len(found.unremovable), 'output')} stay.")
        else:
            print(f"Dry run: nothing removed ({_invalidation_size(found)} would be).")
        return 0 if found.ok else 1
    if not options.get("yes"):
        refused = _invalidation_refused(found)
        if refused is not None:
            return refused
    done = found.apply()
    print(_invalidation_outcome(done))
    return 0 if done.ok else 1


def _invalidate_root(text: str, module: str | None, built: BuiltTask) -> TaskLike | int:
    """ROOT from ``--downstream-of``'s one argument, parsed as TASK is (a bare Family gets
    TASK's --module), under the same configuration."""
    import shlex

    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"conveyor invalidate: --downstream-of {text!r}: {exc}") from None
    if not words:
        raise UsageError(
            "conveyor invalidate: --downstream-of is empty; expected ROOT: "
            "package.module.Family [--<param> VALUE ...] as one argument"
        )
    if module and words and "." not in words[0] and not words[0].startswith("-"):
        words = ["--module", module, *words]
    made = build_task(_INVALIDATE_ROOT, words, lambda _options: built.config)
    return made if isinstance(made, int) else made.task


def _invalidation_listing(found: Any) -> str:
    """Each task of an :class:`~conveyor.Invalidation` and what happens to its outputs."""
    if found.root_id is None:
        lines = [f"Outputs of {found.task_id}:"]
    else:
        others = _count(len(found.tasks) - 1, "task")
        lines = [f"Outputs of {found.task_id} and of the {others} needing it in {found.root_id}:"]
    for task in found.tasks:
        lines.append(f"  {task.task_id}")
        rows = [f"remove    {path}" for path in task.removed]
        rows += [f"absent    {path}" for path in task.absent]
        rows += [f"keep      {path} (external data, made elsewhere)" for path in task.external]
        rows += [f"CANNOT    {item.path}: {item.reason}" for item in task.unremovable]
        lines += [f"    {row}" for row in rows or ["(no outputs)"]]
    return "\n".join(lines)


def _invalidation_refused(found: Any) -> int | None:
    """Ask on the terminal; None when the answer is yes, else the exit code."""
    if sys.stdin is None or not sys.stdin.isatty():
        print(
            "conveyor: error: conveyor invalidate: stdin is not a terminal to ask on; pass "
            "--yes to remove these outputs without asking (--dry-run only lists them)",
            file=sys.stderr,
        )
        return USAGE_ERROR
    sys.stdout.flush()
    print(f"Remove {_invalidation_size(found)}? [y/N] ", end="", file=sys.stderr, flush=True)
    if sys.stdin.readline().strip().lower() in ("y", "yes"):
        return None
    print("Nothing removed.")
    return 1


def _invalidation_outcome(done: Any) -> str:
    """What was removed, and each output that stays with the reason."""
    lines = [f"Removed {_invalidation_size(done)}."]
    if done.unremovable:
        lines.append(f"Could not remove {_count(len(done.unremovable), 'output')}:")
        lines += [f"  {u.path} ({u.task_id}): {u.reason}" for u in done.unremovable]
    return "\n".join(lines)


def _invalidation_size(found: Any) -> str:
    """``N outputs of M tasks``: what was (or would be) removed."""
    tasks = sum(1 for task in found.tasks if task.removed)
    return f"{_count(len(found.removed), 'output')} of {_count(tasks, 'task')}"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


# --- end of region: invalidate ---------------------------------------------------------------

# --- conveyor submit and cancel (region: submit) --------------------------------------------


_SUBMIT_OPTIONS: dict[str, tuple[str, bool]] = {
    "--scheduler-url": ("scheduler_url", True),
    "--as": ("by", True),
    "--json": ("json", False),
    "--module": ("module", True),
    "--config": ("config", True),
}
_SUBMIT_HELP: dict[str, tuple[str | None, str]] = {
    "--scheduler-url": (
        "URL",
        "the central scheduler (default: [scheduler] url of the config, with transport http)",
    ),
    "--as": ("NAME", "who submits, as the server records it (default: user@host)"),
    "--json": (None, 'print {"task_id": ..., "status": ...} instead of the id alone'),
    "--module": ("MODULE", "the module TASK is in, when TASK is a bare Family"),
    "--config": ("PATH", "the worker.toml to read (default: $CONVEYOR_CONFIG, ./worker.toml)"),
}
_SUBMIT = TaskCommand(
    "submit",
    _SUBMIT_OPTIONS,
    _SUBMIT_HELP,
    "Have the central scheduler's assistants ('conveyor worker') run TASK: it is registered "
    "(not its graph) and an assistant whose [worker] task_modules allow its module walks its "
    "graph and runs it. Prints the task id at once.",
    "Exit codes: 0 submitted, 2 usage or configuration error (or refused by the scheduler), "
    "3 the scheduler could not be reached.",
)


def _control_config(command: str, options: dict[str, Any]) -> Config:
    """The configuration of a command that talks to the central scheduler: ``--config``'s
    file, with ``--scheduler-url``; a UsageError when neither names a scheduler."""
    config = load_config(options.get("config"))
    url = options.get("scheduler_url")
    if url:
        return config.with_overrides(scheduler_url=url)
    if config.scheduler.transport != "http":
        raise UsageError(
            f"conveyor {command}: no central scheduler: give --scheduler-url URL, or set "
            '[scheduler] url (and transport = "http") in the config'
        )
    return config


def _caller(options: dict[str, Any]) -> str:
    """Who runs a control command, as it tells the server: --as, else user@host."""
    if options.get("by"):
        return str(options["by"])
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except Exception:  # (no user name in the environment nor the password database)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def cmd_submit(args: list[str]) -> int:
    """``conveyor submit``: register TASK with the central scheduler for its assistants;
    print its id."""
    built = build_task(_SUBMIT, args, lambda o: _control_config("submit", o))
    if isinstance(built, int):
        return built
    from .control.client import Client

    with Client.from_config(built.config) as client:
        answer = client.submit_answer(built.task, by=_caller(built.options))
    if built.options.get("json"):
        print(json.dumps({"task_id": answer.task_id, "status": str(answer.status)}))
    else:
        print(answer.task_id)
    return 0


def cmd_cancel(args: list[str]) -> int:
    """``conveyor cancel``: disable a task (and, with --downstream, what needs it) on the
    central scheduler, stopping its running attempts."""
    parser = _Parser(
        prog="conveyor cancel",
        description="Cancel TASK_ID on the central scheduler: it becomes DISABLED with the "
        'reason "cancelled", and a running attempt is stopped through its worker. DONE tasks '
        "stay DONE.",
        epilog="Exit codes: 0 cancelled, 2 usage or configuration error or a task id the "
        "scheduler does not know, 3 the scheduler could not be reached.",
    )
    parser.add_argument(
        "task_id",
        metavar="TASK_ID",
        help="the task's id, as `conveyor tasks` or `conveyor submit` print it",
    )
    parser.add_argument(
        "--downstream", action="store_true", help="cancel every task that needs it too"
    )
    parser.add_argument("--scheduler-url", metavar="URL", help=_SUBMIT_HELP["--scheduler-url"][1])
    parser.add_argument("--as", dest="by", metavar="NAME", help=_SUBMIT_HELP["--as"][1])
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")
    parser.add_argument("--config", metavar="PATH", help=_SUBMIT_HELP["--config"][1])
    options = vars(parser.parse_args(args))
    config = _control_config("cancel", options)
    from .control.client import Client

    with Client.from_config(config) as client:
        answer = client.cancel_answer(
            options["task_id"], downstream=options["downstream"], by=_caller(options)
        )
    if options["json"]:
        print(json.dumps(encode(answer), indent=2))
        return 0
    for task_id in answer.cancelled:
        stopping = " (its worker is told to stop its running attempt)"
        stopping = stopping if task_id in answer.stopping else ""
        print(f"cancelled {task_id}{stopping}")
    for task_id in answer.kept:
        print(f"kept {task_id}: it is DONE")
    return 0


# --- end of region: submit -------------------------------------------------------------------


def cmd_config(args: list[str]) -> int:
    """``conveyor config``: validate and print the effective configuration, secrets redacted."""
    parser = _Parser(prog="conveyor config")
    parser.add_argument("--config")
    opts = parser.parse_args(args)
    config = load_config(opts.config)
    check_selected(config)  # a selected backend's table is checked as a worker would
    print(to_toml(config, redact=True), end="")
    return 0
