"""The central scheduler's HTTP API: the in-process policy (`SchedulerCore`) over JSON.

Every route under ``/api/v1/`` requires ``Authorization: Bearer <token>`` when a token is set
(checked before the body is looked at, in constant time); state changes only through ``POST``;
bodies over ``max_request_bytes`` get 413 without being read; malformed JSON or fields get a
4xx JSON error naming the field. Each state-changing call runs under one lock and its changes
are committed to the state store before the response is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..scheduler.persist import to_row
from ..scheduler.policy import SchedulerCore, Work, WorkLeft
from .guard import Guard
from .schema import ROUTES, FieldError, openapi_document, parse_specs, validate
from .stores import StateStore

__all__ = ["SchedulerService", "create_app"]


class SchedulerService:
    """Runs policy calls one at a time and commits their changes before returning."""

    def __init__(self, core: SchedulerCore, store: StateStore) -> None:
        """Serve ``core`` (already restored) and persist its changes to ``store``."""
        self.core = core
        self.store = store
        self.lock = threading.Lock()
        core.track_changes()

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Apply ``fn(*args)`` and commit every change it made."""
        with self.lock:
            result = fn(*args)
            records, workers = self.core.take_changes()
            self.store.save([to_row(r) for r in records], workers)
            return result

    def tick(self) -> None:
        """Apply time-based changes (retries, disconnected workers) even when nobody calls."""
        self.call(self.core.statuses, ())


def _work(work: Work | None) -> dict[str, Any]:
    if work is None:
        return {"work": None}
    return {
        "work": {
            "task_id": work.task_id,
            "family": work.family,
            "module": work.module,
            "params": dict(work.params),
        }
    }


def _left(left: WorkLeft) -> dict[str, Any]:
    return {
        "pending": left.pending,
        "unique_pending": left.unique_pending,
        "running_elsewhere": left.running_elsewhere,
    }


_OK = {"ok": True}


def _handlers(service: SchedulerService) -> dict[str, Callable[[dict[str, Any]], Any]]:
    """Each worker-facing route: validated body in, JSON-able answer out."""
    core, call = service.core, service.call

    def add_tasks(b: dict[str, Any]) -> Any:
        call(core.add_tasks, b["worker_id"], parse_specs(b["tasks"]), b.get("assistant", False))
        return _OK

    def get_work(b: dict[str, Any]) -> Any:
        running = b.get("running")
        return _work(call(core.get_work, b["worker_id"], b.get("assistant", False), running))

    def task_done(b: dict[str, Any]) -> Any:
        call(core.task_done, b["worker_id"], b["task_id"])
        return _OK

    def task_failed(b: dict[str, Any]) -> Any:
        return {"status": call(core.task_failed, b["worker_id"], b["task_id"], b["explanation"])}

    def annotate(b: dict[str, Any]) -> Any:
        call(core.annotate, b["task_id"], b["kind"], b["value"])
        return _OK

    def ping(b: dict[str, Any]) -> Any:
        call(core.ping, b["worker_id"])
        return _OK

    return {
        "add_tasks": add_tasks,
        "get_work": get_work,
        "work_left": lambda b: _left(call(core.work_left, b["worker_id"])),
        "task_done": task_done,
        "task_failed": task_failed,
        "annotate": annotate,
        "ping": ping,
        "statuses": lambda b: {"statuses": call(core.statuses, b["task_ids"])},
        "explanation": lambda b: {"explanation": core.explanation(b["task_id"])},
    }


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def load_json(raw: bytes) -> Any:
    """Parse a request body strictly: ValueError (with the reason) for anything not plain JSON.

    NaN and Infinity, nesting too deep to handle, and strings that are not valid Unicode (lone
    surrogates) are refused here, so nothing the server stores can fail to be written back.
    """
    try:
        body = json.loads(raw, parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError("the request body is nested too deeply") from None
    except ValueError as exc:
        raise ValueError(f"the request body is not valid JSON: {exc}") from None
    _check_unicode(body)
    return body


def _check_unicode(value: Any) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(
                    "the request body holds a string that is not valid Unicode"
                ) from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _error(status: int, message: str, field: str = "") -> JSONResponse:
    body = {"error": message, **({"field": field} if field else {})}
    return JSONResponse(body, status_code=status)


def _post_route(name: str, handler: Callable[[dict[str, Any]], Any]) -> Route:
    async def endpoint(request: Request) -> JSONResponse:
        try:
            body = load_json(await request.body())
        except ValueError as exc:
            return _error(400, str(exc))
        try:
            validate(name, body)
            result = await asyncio.to_thread(handler, body)
        except FieldError as exc:
            return _error(422, str(exc), exc.field)
        return JSONResponse(result)

    return Route(f"/api/v1/{name}", endpoint, methods=["POST"], name=name)


def create_app(service: SchedulerService, token: str, max_request_bytes: int) -> Starlette:
    """The ASGI application serving ``service``."""
    handlers = _handlers(service)
    document = openapi_document()
    guard = Guard(None, token=token, max_request_bytes=max_request_bytes)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "api_requests": guard.api_requests})

    async def openapi(request: Request) -> JSONResponse:
        return JSONResponse(document)

    async def tasks(request: Request) -> JSONResponse:
        return JSONResponse(
            {"tasks": await asyncio.to_thread(service.call, service.core.task_list)}
        )

    async def workers(request: Request) -> JSONResponse:
        return JSONResponse({"workers": service.core.worker_list()})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async def ticker() -> None:
            while True:
                await asyncio.sleep(1.0)
                await asyncio.to_thread(service.tick)

        task = asyncio.create_task(ticker())
        try:
            yield
        finally:
            task.cancel()

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/api/v1/tasks", tasks, methods=["GET"]),
        Route("/api/v1/workers", workers, methods=["GET"]),
        *(_post_route(name, handlers[name]) for name in ROUTES),
    ]

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        status = getattr(exc, "status_code", 500)
        return _error(status, str(getattr(exc, "detail", "")) or "error")

    guard.app = Starlette(
        routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error}
    )
    return guard  # type: ignore[return-value]
