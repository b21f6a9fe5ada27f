"""The scheduler transport protocol: requests in, answers out.

A worker says everything it has to say to its scheduler as one of the frozen request values of
:data:`conveyor.protocol.ROUTES` (``AddTasks``, ``GetWork``, ``TaskDone``, ``TaskFailed``, …)
handed to one method, :meth:`SchedulerTransport.call`, which returns the answer the route names
(``Ok``, ``WorkAnswer``, ``TaskFailedAnswer``, …). The in-process :class:`conveyor.Scheduler`
satisfies it directly; the ``http`` transport sends each request to the central server's route
of the same name. Requests and answers are plain values, never live task objects.

Evolving the protocol means adding a defaulted field to a request: a request that leaves it at
its default is sent as before the field existed (:func:`conveyor.protocol.encode_request`), so
an older scheduler takes it, and a newer one fills in the default for an older worker. Nothing
inspects signatures or matches error messages.

A transport written against the earlier method-style protocol (``add_tasks(...)``,
``get_work(...)``, …, no ``call``) still works: :func:`as_transport` wraps it in
:class:`MethodTransport`, with a deprecation warning.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import structlog

from ..config import Config, SchedulerSettings
from ..protocol import route_of

__all__ = ["MethodTransport", "SchedulerTransport", "TransportContext", "as_transport"]

log = structlog.get_logger("conveyor.worker")


@dataclass(frozen=True, slots=True)
class TransportContext:
    """What a transport is built with (``cls(context)``): the worker's ``[scheduler]`` settings
    and the transport's own ``[schedulers.<name>]`` table, validated against its
    ``settings_schema``."""

    scheduler: SchedulerSettings
    settings: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, config: Config) -> TransportContext:
        """The context of a transport built by hand from ``config`` (no own settings)."""
        return cls(config.scheduler)


@runtime_checkable
class SchedulerTransport(Protocol):
    """What a worker needs from a scheduler: one method, ``call``.

    The entry point in ``conveyor.schedulers`` names a callable (a class, or a function) that
    the worker calls once with a :class:`TransportContext`; it returns the transport.
    """

    def call(self, request: Any) -> Any:
        """Deliver ``request`` (a request value of :data:`conveyor.protocol.ROUTES`) to the
        scheduler and return its answer, of the type ``ROUTES[name].answer`` names.

        Raises :class:`~conveyor.errors.StaleReport` for a ``TaskDone`` / ``TaskFailed``
        about an attempt that is no longer the task's latest (nothing changed), and
        :class:`~conveyor.errors.SchedulerUnavailable` when the scheduler cannot be reached
        (after the transport's own retries): the worker keeps its results and sends them
        again later, so a report must be safe to deliver twice.
        """


class MethodTransport:
    """A transport of the earlier method-style protocol, seen through :meth:`call`.

    ``call(request)`` calls the method of ``target`` named by the request's route
    (``target.task_failed(...)`` for a ``TaskFailed``) with the request's required fields
    positionally and each defaulted field that is not at its default by keyword
    (:meth:`conveyor.protocol.Route.arguments`), and makes its result the route's answer
    (:meth:`conveyor.protocol.Route.answer_of`). So a method written before a defaulted field
    existed keeps working while the field is left at its default; one the worker does use
    (``Release.task_ids``, ``TaskFailed.outcome`` other than ``failed``) must be a parameter of
    the method. A method that predates such a field and raises ``TypeError`` when given it is
    called again without it, newest field first (fields are added to a request at its end), until
    the call is one it takes; this transport then leaves those fields out of that route's calls
    for good, with one warning per field (what they said is dropped: a timeout reaches such a
    ``task_failed`` as a plain failure). Only a ``TypeError`` of the call itself counts (one
    raised inside the method is the method's own and is raised), and ``attempt``, which fences
    stale reports and which every method-style transport took, is never dropped. A target
    without the route's method raises ``AttributeError`` (the worker's ``release`` at the end
    of a run is best effort: it logs that and carries on).
    """

    def __init__(self, target: object) -> None:
        """Adapt ``target``, an object with the method-style calls."""
        self.target = target
        self._untaken: dict[str, set[str]] = {}  # route name -> fields its method does not take

    def call(self, request: Any) -> Any:
        """The answer of ``target``'s method for ``request``'s route."""
        route = route_of(request)
        args, kwargs = route.arguments(request)
        method = getattr(self.target, route.name)
        untaken = self._untaken.get(route.name)
        if untaken:
            kwargs = {name: value for name, value in kwargs.items() if name not in untaken}
        while True:
            try:
                return route.answer_of(method(*args, **kwargs))
            except TypeError as exc:
                # only a call the method's signature refused (raised before its body ran, so in
                # this frame alone) is retried; never without `attempt`, which fences reports
                newest = list(kwargs)[-1] if kwargs else ""
                if not newest or newest in _KEPT or exc.__traceback__ is None:
                    raise
                if exc.__traceback__.tb_next is not None:  # raised inside the method
                    raise
                del kwargs[newest]
                self._untaken.setdefault(route.name, set()).add(newest)
                kind = type(self.target)
                log.warning(
                    "the transport's method does not take a newer field of its request; "
                    "calling it without that field from now on",
                    transport=f"{kind.__module__}.{kind.__qualname__}",
                    method=route.name,
                    field=newest,
                    error=str(exc),
                )


_KEPT = frozenset({"attempt"})
"""Fields :class:`MethodTransport` never drops: every method-style transport took them."""
_WARNED: set[type[Any]] = set()


def as_transport(scheduler: object) -> SchedulerTransport:
    """``scheduler`` itself if it has a ``call`` method, else it wrapped in a
    :class:`MethodTransport` (a transport of the earlier method-style protocol), with a
    ``DeprecationWarning`` and a log line, once per class."""
    if callable(getattr(scheduler, "call", None)):
        return scheduler  # type: ignore[return-value]
    kind = type(scheduler)
    if kind not in _WARNED:
        _WARNED.add(kind)
        message = (
            f"the scheduler transport {kind.__module__}.{kind.__qualname__} has no call() "
            "method: it is used through conveyor.transports.base.MethodTransport, which calls "
            "its add_tasks(), get_work(), ... methods; implement call(request) instead"
        )
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        log.warning("deprecated transport protocol", transport=kind.__qualname__)
    return MethodTransport(scheduler)
