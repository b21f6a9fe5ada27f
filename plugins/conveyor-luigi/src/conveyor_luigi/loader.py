"""The ``luigi`` task loader: rebuilds Luigi tasks, adapts them, and parses ``conveyor run``.

It is loaded in every process that meets an object or a command line that is not conveyor's,
so it imports ``luigi`` (and :mod:`conveyor_luigi.adapter`) only when it must: :meth:`adapt`
answers None at once while ``luigi`` is not imported (nothing can be a Luigi task then).

``conveyor run mymod.Family --date 2024-01-01`` is parsed by Luigi's own
``luigi.cmdline_parser.CmdlineParser``: the flags are Luigi's (``--date``, the global
``--Family-param`` forms, ``luigi.cfg`` defaults). Its instance stays in force for the rest of
the process, as it does during a ``luigi`` run, so tasks made in ``requires()`` see the
command line; the root task's module and the words are also left in the environment variable
:data:`COMMAND_LINE_VARIABLE`, with this process's pid, so that the attempt processes of this
run (``python -m conveyor.executors.runner`` children of this process: the ``subprocess``
executor) import that module and put the same command line in force there, the first time
the loader is used in the process (rebuilding a Luigi task, or adapting one that a conveyor
task's ``requires()`` made). Any other process ignores the variable, so a process that a task
starts (a nested ``conveyor.build()``, say) never sees the run's flags. The ``fork`` executor's
attempts inherit the command line in force.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import logging
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from conveyor.errors import ParameterError, TaskLoadError
from conveyor.loaders import may_import, task_loader
from conveyor.secrets import (
    REDACTED,
    hide_secret_params,
    is_secret_name,
    redact_text,
    redact_words,
)
from conveyor.task_registry import registered_task_classes
from conveyor.tasklike import DEFAULT_LOADER, TaskLike

if TYPE_CHECKING:
    import luigi

    from .adapter import LuigiTask

__all__ = ["COMMAND_LINE_VARIABLE", "LuigiLoader"]

COMMAND_LINE_VARIABLE = "CONVEYOR_LUIGI_COMMAND_LINE"
"""The command line given to Luigi's parser by ``conveyor run``: JSON ``{"module": the root
task's module, "words": [its family, the words after TASK that are not conveyor run's], "pid":
the pid of the ``conveyor run`` process}``."""

RUNNER_MODULE = "conveyor.executors.runner"
"""The ``__main__`` module of an attempt process of the ``subprocess`` executor."""

log = logging.getLogger("conveyor_luigi")

_FROM_ENVIRONMENT: list[bool] = []  # not empty once this process looked at the variable
# The Luigi tasks that existed when the variable's command line was put in force here: made
# without it (a conveyor task's requires() ran first), they are made again when adapted.
_MADE_BEFORE: dict[int, luigi.Task] = {}


class LuigiLoader:
    """The task loader ``luigi`` (entry point of ``conveyor.task_loaders``)."""

    def load(self, module: str, family: str, params: Mapping[str, str]) -> TaskLike:
        """The Luigi task ``family`` of ``module`` from its string ``params``
        (``from_str_params``); a conveyor task of that module and family (one a Luigi task
        yielded or requires) is built by conveyor's own loader. TaskLoadError if neither."""
        mod = _imported(module)
        if "luigi" in sys.modules:
            cls = _luigi_class(mod, family)
            if cls is not None:
                _command_line_from_environment()
                from .adapter import adapted

                try:
                    task = _rebuilt(cls, params)
                except TaskLoadError:
                    raise
                except Exception as exc:  # a parameter's parse or the constructor raised
                    shown = hide_secret_params(
                        f"{dict(params)!r}: {type(exc).__name__}: {exc}", params
                    )
                    raise TaskLoadError(
                        f"luigi loader: cannot build {module}.{family} from {shown}"
                    ) from None
                return adapted(task)
        return task_loader(DEFAULT_LOADER).load(module, family, params)

    def adapt(self, value: object) -> LuigiTask | None:
        """``value`` as a :class:`~conveyor_luigi.adapter.LuigiTask` if it is a ``luigi.Task``
        object, else None (at once while ``luigi`` is not imported)."""
        if "luigi" not in sys.modules:
            return None
        import luigi

        if not isinstance(value, luigi.Task):
            return None
        from .adapter import adapted

        if not _FROM_ENVIRONMENT:
            _command_line_from_environment()
        if _MADE_BEFORE.get(id(value)) is value:
            value = _made_again(value)
        return adapted(value)

    def task_from_command_line(self, module: str, family: str, args: list[str]) -> TaskLike | None:
        """The Luigi task ``module``/``family`` with the parameters in ``args``, parsed by
        Luigi's own command-line parser; None when ``module`` defines no Luigi task;
        ParameterError (one line) for an unknown family (naming the Luigi tasks of
        ``module``), an unknown flag, a value that does not parse or a parameter Luigi's
        parser cannot take."""
        try:
            mod = importlib.import_module(module)
        except Exception:  # conveyor run's own error about the module stands
            return None
        if "luigi" not in sys.modules:
            return None
        cls = _luigi_class(mod, family)
        if cls is None:
            families = _luigi_families(mod)
            if not families:
                return None
            ours = sorted(fam for mod, fam in registered_task_classes() if mod == module)
            also = f"; its conveyor tasks: {', '.join(ours)}" if ours else ""
            raise ParameterError(
                f"{module} has no task {family!r}; its Luigi tasks: {', '.join(families)}{also}",
                task=family,
            )
        words = [cls.get_task_family(), *args]
        parser = _parsed(words, cls, family)
        before = _put_in_force(parser)  # (the task's --Family-param flags and luigi.cfg apply)
        try:
            task = self._built(cls, family, parser)
        except BaseException:
            _put_in_force(before)  # a refused command line is not left in force
            raise
        os.environ[COMMAND_LINE_VARIABLE] = json.dumps(
            {"module": module, "words": words, "pid": os.getpid()}
        )
        from .adapter import adapted

        return adapted(task)

    @staticmethod
    def _built(cls: type[luigi.Task], family: str, parser: Any) -> luigi.Task:
        """The task of ``cls`` from the values ``parser`` holds (ParameterError if a value
        does not parse or the constructor refuses them)."""
        known = parser.known_args
        kwargs: dict[str, Any] = {}
        for name, param in cls.get_params():
            text = getattr(known, name, None)
            if text:
                try:
                    kwargs[name] = param.parse(text)
                except Exception as exc:
                    flag = "--" + name.replace("_", "-")
                    if is_secret_name(name):  # neither the value nor a message echoing it
                        raise ParameterError(
                            f"{family}: bad value {REDACTED} for {flag}: {type(exc).__name__}",
                            task=family,
                            parameter=name,
                            value=REDACTED,
                        ) from None
                    raise ParameterError(
                        f"{family}: bad value {text!r} for {flag}: {type(exc).__name__}: {exc}",
                        task=family,
                        parameter=name,
                        value=text,
                    ) from None
        try:
            task = cls(**kwargs)
        except Exception as exc:  # a missing parameter, a bad default from luigi.cfg, ...
            said = _without_secrets(f"{type(exc).__name__}: {exc}", cls, kwargs)
            raise ParameterError(f"{family}: {said}", task=family) from None
        return task


def _imported(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except Exception as exc:  # any import-time failure of user code is a load error
        raise TaskLoadError(
            f"cannot import task module {module!r}: {type(exc).__name__}: {exc}"
        ) from None


def _rebuilt(cls: type[luigi.Task], params: Mapping[str, str]) -> luigi.Task:
    """The task of ``cls`` from the adapter's string ``params``, as Luigi's
    ``from_str_params`` builds it, except that a ``TaskParameter`` written ``module:Family``
    (by the adapter) has its module imported first, and the text ``"None"`` that the
    parameter cannot parse (an ``IntParameter`` given None, say) is the value None."""
    import luigi

    kwargs: dict[str, Any] = {}
    for name, param in cls.get_params():
        if name not in params:
            continue  # left out: the parameter's default
        text = params[name]
        if isinstance(param, luigi.TaskParameter) and ":" in text:
            module, text = text.split(":", 1)
            if module not in sys.modules and not may_import(module):
                raise TaskLoadError(
                    f"luigi loader: {cls.get_task_family()}'s parameter {name} names a task of "
                    f"module {module!r}, which is not in [worker] task_modules; refused without "
                    "importing it"
                )
            _imported(module)
        if text == "None":
            try:
                kwargs[name] = param.parse(text)
            except Exception:
                kwargs[name] = None
            continue
        kwargs[name] = param.parse(text)
    return cls(**kwargs)


def _luigi_classes(mod: Any) -> list[type[luigi.Task]]:
    """The Luigi task classes defined in ``mod`` (not those it imports)."""
    import luigi

    name = getattr(mod, "__name__", "")
    return [
        value
        for value in vars(mod).values()
        if isinstance(value, type) and issubclass(value, luigi.Task) and value.__module__ == name
    ]


def _luigi_families(mod: Any) -> list[str]:
    """The task families of the Luigi task classes defined in ``mod``, sorted."""
    return sorted({str(cls.get_task_family()) for cls in _luigi_classes(mod)})


def _luigi_class(mod: Any, family: str) -> type[luigi.Task] | None:
    """The Luigi task class of ``mod`` named ``family``: its attribute of that name, else a
    class defined there whose task family is ``family`` (even when Luigi's register finds the
    family ambiguous: the module decides), or None."""
    import luigi
    from luigi.task_register import Register, TaskClassException

    value = getattr(mod, family, None)
    if isinstance(value, type) and issubclass(value, luigi.Task):
        return value
    for cls in _luigi_classes(mod):
        if cls.get_task_family() == family:
            return cls
    try:
        found = Register.get_task_cls(family)
    except TaskClassException:
        return None
    if isinstance(found, type) and found.__module__ == getattr(mod, "__name__", None):
        return found
    return None


def _registered(cls: type[luigi.Task]) -> bool:
    """Whether Luigi's register finds ``cls`` by its family (not ambiguous, not another)."""
    from luigi.task_register import Register, TaskClassException

    try:
        return bool(Register.get_task_cls(cls.get_task_family()) is cls)
    except TaskClassException:
        return False


def _parsed(words: list[str], cls: type[luigi.Task], family: str) -> Any:
    """Luigi's ``CmdlineParser`` of ``words`` (``words[0]`` is the family of ``cls``), or
    ParameterError with a one-line reason (argparse's complaint, a parameter clashing with a
    flag of Luigi's, ...). When Luigi's register cannot name ``cls`` by its family (another
    imported module defines a Luigi task of that family too), the parser is built the same
    way with ``cls``'s flags added: the module named on the command line decides."""
    from luigi.cmdline_parser import CmdlineParser

    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            if _registered(cls):
                return CmdlineParser(words)
            return _parser_of(cls, words)
    except SystemExit as exc:
        if exc.code in (0, None):  # --help: Luigi printed it
            raise
        said = [line for line in errors.getvalue().splitlines() if "error:" in line]
        if said:
            reason = said[-1].split("error:", 1)[1].strip()
        else:
            reason = exc.code if isinstance(exc.code, str) else "bad command line"
        raise ParameterError(f"{family}: {_hide_flag_values(reason)}", task=family) from None
    except argparse.ArgumentError as exc:
        raise ParameterError(
            f"{family}: a parameter clashes with a flag of Luigi's command line ({exc}): "
            "rename the parameter",
            task=family,
        ) from None
    except Exception as exc:
        raise ParameterError(
            f"{family}: Luigi cannot parse the command line: {type(exc).__name__}: "
            f"{_hide_flag_values(str(exc))}",
            task=family,
        ) from None


def _parser_of(cls: type[luigi.Task], words: list[str]) -> Any:
    """A ``CmdlineParser`` of ``words`` for ``cls``, whose family Luigi's register does not
    resolve to it: Luigi's flags of every other task plus those of ``cls`` (its local
    ``--param`` and global ``--Family-param`` forms), as Luigi's parser builds them."""
    from luigi.cmdline_parser import CmdlineParser

    parser = CmdlineParser._build_parser()
    family = cls.get_task_family()
    for name, param in cls.get_params():
        local = "--" + name.replace("_", "-")
        if getattr(cls, "use_cmdline_section", True):
            flag = "--" + f"{family}_{name}".replace("_", "-")
            parser.add_argument(flag, **param._parser_kwargs(name, family))
        parser.add_argument(local, **param._parser_kwargs(name))
    made = CmdlineParser.__new__(CmdlineParser)
    made.known_args = parser.parse_args(args=words)
    if made.known_args.core_help or made.known_args.core_help_all:  # as Luigi's parser does
        parser.print_help()
        sys.exit()
    return made


def _put_in_force(parser: Any) -> Any:
    """Make ``parser`` Luigi's global command line for the rest of the process (as a ``luigi``
    run does), replacing any earlier one, which is returned."""
    from luigi.cmdline_parser import CmdlineParser

    before = CmdlineParser._instance
    CmdlineParser._instance = parser
    return before


def _hide_flag_values(text: str) -> str:
    """``text`` (argparse's complaint quoting words) with the values of secret-named flags
    (``--api-token X``, ``--api-token=X``) hidden."""
    return redact_text(" ".join(redact_words(text.split(" "))))


def _without_secrets(text: str, cls: type[luigi.Task], kwargs: Mapping[str, Any]) -> str:
    """``text`` without the values of ``cls``'s secret-named parameters given in ``kwargs``."""
    secrets = {name: str(value) for name, value in kwargs.items() if is_secret_name(name)}
    return hide_secret_params(text, secrets)


def _command_line_from_environment() -> None:
    """Put the command line of ``conveyor run`` in force in this process, once, if this is an
    attempt process of that run (see :func:`_for_this_process`) and none is in force: import
    the root task's module, then parse the words. The Luigi tasks that exist already (a
    conveyor task's ``requires()`` made them) were made without the command line: they are
    remembered, to be made again when adapted (:func:`_made_again`). Any failure
    is a warning, never a failed load: the task is rebuilt from its explicit parameters all
    the same."""
    from luigi.cmdline_parser import CmdlineParser

    if _FROM_ENVIRONMENT:
        return
    _FROM_ENVIRONMENT.append(True)
    text = os.environ.get(COMMAND_LINE_VARIABLE)
    if not text or CmdlineParser.get_instance() is not None:
        return
    try:
        given = json.loads(text)
        module = str(given["module"])
        words = [str(w) for w in given["words"]]
        pid = int(given["pid"])
    except Exception as exc:
        _warn(exc)
        return
    if not _for_this_process(pid):
        return
    try:
        if module not in sys.modules and not may_import(module):
            raise TaskLoadError(f"{module!r} is not in [worker] task_modules")
        cls = _luigi_class(importlib.import_module(module), words[0])
        if cls is None:
            raise LookupError(f"{module} has no Luigi task {words[0]!r}")
        parser = _parsed(words, cls, words[0])
    except (Exception, SystemExit) as exc:
        _warn(exc)
        return
    _MADE_BEFORE.update((id(task), task) for task in _made_so_far())
    _put_in_force(parser)


def _warn(exc: BaseException) -> None:
    log.warning(
        "conveyor-luigi: the command line of conveyor run is not in force in this process "
        "(tasks take their parameters without it): %s: %s",
        type(exc).__name__,
        exc,
    )


def _for_this_process(pid: int) -> bool:
    """Whether the command line of the ``conveyor run`` process ``pid`` applies here: in its
    attempt processes (the ``subprocess`` executor's runner, a child of that process), not in
    any other process that inherited the variable (started by a task, or by a nested run)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return os.getppid() == pid and getattr(spec, "name", None) == RUNNER_MODULE


def _made_so_far() -> list[luigi.Task]:
    """The Luigi tasks made in this process so far (those Luigi's instance cache holds)."""
    from luigi.task_register import Register

    cache = getattr(Register, "_Register__instance_cache", None) or {}
    return [task for task in list(cache.values()) if task is not None]


def _made_again(task: luigi.Task) -> luigi.Task:
    """``task``, made before the command line was put in force here, made again under it: each
    parameter whose value is what it would be without the command line (a default, or from
    ``luigi.cfg``) is left to Luigi, so that a ``--Family-param`` flag applies to it. (An
    explicit value equal to that default is taken for a default as well.)"""
    from luigi.cmdline_parser import CmdlineParser

    cls = type(task)
    family = cls.get_task_family()
    parser = CmdlineParser.get_instance()
    kwargs = dict(task.param_kwargs)
    changed = False
    for name, param in cls.get_params():
        flag = getattr(parser.known_args, param._parser_global_dest(name, family), None)
        if flag is None or name not in kwargs:
            continue
        CmdlineParser._instance = None
        try:  # the value without the command line: a default or luigi.cfg's
            plain = param.task_value(family, name) if param.has_task_value(family, name) else None
        except Exception:
            continue
        finally:
            CmdlineParser._instance = parser
        if plain is not None and plain == kwargs[name]:
            del kwargs[name]
            changed = True
    _MADE_BEFORE.pop(id(task), None)
    if not changed:
        return task
    try:
        return cls(**kwargs)
    except Exception as exc:
        log.warning("conveyor-luigi: %s kept its parameters: %s: %s", task, type(exc).__name__, exc)
        return task
