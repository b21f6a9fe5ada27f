"""The ``luigi`` task loader: rebuilds Luigi tasks, adapts them, and parses ``conveyor run``.

It is loaded in every process that meets an object or a command line that is not conveyor's,
so it imports ``luigi`` (and :mod:`conveyor_luigi.adapter`) only when it must: :meth:`adapt`
answers None at once while ``luigi`` is not imported (nothing can be a Luigi task then).

``conveyor run mymod.Family --date 2024-01-01`` is parsed by Luigi's own
``luigi.cmdline_parser.CmdlineParser``: the flags are Luigi's (``--date``, the global
``--Family-param`` forms, ``luigi.cfg`` defaults). Its instance stays in force for the rest of
the process, as it does during a ``luigi`` run, so tasks made in ``requires()`` see the
command line; the words are also left in the environment variable :data:`COMMAND_LINE_VARIABLE`
so that attempt processes started from here (``subprocess``) put the same command line in
force before they rebuild a task.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from conveyor.errors import ParameterError, TaskLoadError
from conveyor.loaders import task_loader
from conveyor.tasklike import DEFAULT_LOADER, TaskLike

if TYPE_CHECKING:
    import luigi

    from .adapter import LuigiTask

__all__ = ["COMMAND_LINE_VARIABLE", "LuigiLoader"]

COMMAND_LINE_VARIABLE = "CONVEYOR_LUIGI_COMMAND_LINE"
"""The command line given to Luigi's parser by ``conveyor run`` (JSON list of words)."""

_IN_FORCE: list[Any] = []  # the entered CmdlineParser.global_instance() contexts, kept alive


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
                    task = cls.from_str_params(_task_classes_imported(cls, params))
                except Exception as exc:  # a parameter's parse or the constructor raised
                    raise TaskLoadError(
                        f"luigi loader: cannot build {module}.{family} from {dict(params)!r}: "
                        f"{type(exc).__name__}: {exc}"
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

        return adapted(value)

    def task_from_command_line(self, module: str, family: str, args: list[str]) -> TaskLike | None:
        """The Luigi task ``module``/``family`` with the parameters in ``args``, parsed by
        Luigi's own command-line parser; None when it is no Luigi task class; ParameterError
        (one line) for an unknown flag or a value that does not parse."""
        try:
            mod = importlib.import_module(module)
        except Exception:  # conveyor run's own error about the module stands
            return None
        if "luigi" not in sys.modules:
            return None
        cls = _luigi_class(mod, family)
        if cls is None:
            return None
        words = [cls.get_task_family(), *args]
        parser = _parser_in_force(words, family)
        known = parser.known_args
        kwargs: dict[str, Any] = {}
        for name, param in cls.get_params():
            text = getattr(known, name, None)
            if text:
                try:
                    kwargs[name] = param.parse(text)
                except Exception as exc:
                    flag = "--" + name.replace("_", "-")
                    raise ParameterError(
                        f"{family}: bad value {text!r} for {flag}: {type(exc).__name__}: {exc}",
                        task=family,
                        parameter=name,
                        value=text,
                    ) from None
        try:
            task = cls(**kwargs)
        except Exception as exc:  # a missing parameter, a bad default from luigi.cfg, ...
            raise ParameterError(f"{family}: {type(exc).__name__}: {exc}", task=family) from None
        os.environ[COMMAND_LINE_VARIABLE] = json.dumps(words)
        from .adapter import adapted

        return adapted(task)


def _imported(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except Exception as exc:  # any import-time failure of user code is a load error
        raise TaskLoadError(
            f"cannot import task module {module!r}: {type(exc).__name__}: {exc}"
        ) from None


def _task_classes_imported(cls: type[luigi.Task], params: Mapping[str, str]) -> dict[str, str]:
    """``params`` in the form ``from_str_params`` takes: each ``TaskParameter`` written
    ``module:Family`` (by the adapter) becomes the family, once its module is imported; a value
    None, which ``to_str_params`` writes ``"None"`` and an ``IntParameter`` (say) cannot parse
    back, is left out so that the parameter takes its default (None)."""
    import luigi

    out = dict(params)
    for name, param in cls.get_params():
        text = out.get(name)
        if text == "None":
            try:
                param.parse(text)
            except Exception:
                del out[name]
        elif isinstance(param, luigi.TaskParameter) and text is not None and ":" in text:
            module, family = text.split(":", 1)
            _imported(module)
            out[name] = family
    return out


def _luigi_class(mod: Any, family: str) -> type[luigi.Task] | None:
    """The Luigi task class of ``mod`` named ``family`` (its attribute of that name, or a
    class defined there whose task family is ``family``), or None."""
    import luigi
    from luigi.task_register import Register, TaskClassException

    value = getattr(mod, family, None)
    if isinstance(value, type) and issubclass(value, luigi.Task):
        return value
    try:
        found = Register.get_task_cls(family)
    except TaskClassException:
        return None
    if isinstance(found, type) and found.__module__ == mod.__name__:
        return found
    return None


def _parser_in_force(words: list[str], family: str) -> Any:
    """Luigi's ``CmdlineParser`` of ``words``, made its global instance for the rest of the
    process; ParameterError with argparse's one-line complaint if the words do not parse."""
    from luigi.cmdline_parser import CmdlineParser

    errors = io.StringIO()
    context = CmdlineParser.global_instance(words, allow_override=True)
    try:
        with contextlib.redirect_stderr(errors):
            parser = context.__enter__()
    except SystemExit as exc:
        if exc.code in (0, None):  # --help: Luigi printed it
            raise
        said = [line for line in errors.getvalue().splitlines() if "error:" in line]
        reason = said[-1].split("error:", 1)[1].strip() if said else "bad command line"
        raise ParameterError(f"{family}: {reason}", task=family) from None
    _IN_FORCE.append(context)
    return parser


def _command_line_from_environment() -> None:
    """Put the command line of ``conveyor run`` in force in this process (an attempt's
    process), once, if it was given one and none is in force."""
    from luigi.cmdline_parser import CmdlineParser

    if _IN_FORCE or CmdlineParser.get_instance() is not None:
        return
    text = os.environ.get(COMMAND_LINE_VARIABLE)
    if not text:
        return
    try:
        words = json.loads(text)
        _parser_in_force([str(w) for w in words], str(words[0]))
    except (ValueError, IndexError, ParameterError):
        return  # not ours to complain about here: the worker parsed it already
