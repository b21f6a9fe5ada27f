"""The worker-facing routes' request schemas: validation and the OpenAPI document.

Schemas are data (field → kind, required), so validation errors name the field and what was
expected, and ``/openapi.json`` is generated from the same table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..scheduler.policy import STATUSES, TaskSpec

_SPEC_STATUSES = ("PENDING", "DONE", "DISABLED", "UNKNOWN")  # what a registration may say

__all__ = ["ROUTES", "FieldError", "openapi_document", "parse_specs", "validate"]

# field -> (kind, required); kinds: str, bool, int, str_list, str_map, int_map, any, tasks
ROUTES: dict[str, dict[str, tuple[str, bool]]] = {
    "add_tasks": {
        "worker_id": ("str", True),
        "assistant": ("bool", False),
        "tasks": ("tasks", True),
    },
    "get_work": {
        "worker_id": ("str", True),
        "assistant": ("bool", False),
        "running": ("str_list", False),
    },
    "work_left": {"worker_id": ("str", True)},
    "task_done": {"worker_id": ("str", True), "task_id": ("str", True)},
    "task_failed": {
        "worker_id": ("str", True),
        "task_id": ("str", True),
        "explanation": ("str", True),
    },
    "annotate": {"task_id": ("str", True), "kind": ("note", True), "value": ("any", True)},
    "ping": {"worker_id": ("str", True)},
    "statuses": {"task_ids": ("str_list", True)},
    "explanation": {"task_id": ("str", True)},
}

_TASK_FIELDS: dict[str, tuple[str, bool]] = {
    "task_id": ("str", True),
    "family": ("str", False),
    "module": ("str", False),
    "params": ("str_map", False),
    "status": ("spec_status", False),
    "deps": ("str_list", False),
    "priority": ("int", False),
    "resources": ("int_map", False),
    "runnable": ("bool", False),
    "retry_count": ("opt_int", False),
    "explanation": ("str", False),
}


class FieldError(ValueError):
    """A request field is missing or has the wrong type."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def _check(kind: str, value: Any, field: str) -> None:
    ok = {
        "str": lambda v: isinstance(v, str),
        "bool": lambda v: isinstance(v, bool),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "opt_int": lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
        "str_list": lambda v: isinstance(v, list) and all(isinstance(i, str) for i in v),
        "str_map": lambda v: isinstance(v, dict) and all(isinstance(i, str) for i in v.values()),
        "int_map": lambda v: (
            isinstance(v, dict)
            and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v.values())
        ),
        "status": lambda v: v in STATUSES,
        "spec_status": lambda v: v in _SPEC_STATUSES,
        "note": lambda v: v in ("status_message", "progress", "tracking_url"),
        "any": lambda v: isinstance(v, str | int | float),
    }
    if kind == "tasks":
        if not isinstance(value, list):
            raise FieldError(field, "expected a list of task objects")
        for index, item in enumerate(value):
            _check_object(_TASK_FIELDS, item, f"{field}[{index}]")
        return
    if not ok[kind](value):
        raise FieldError(field, f"expected {_EXPECT[kind]}, got {type(value).__name__}")


_EXPECT = {
    "str": "a string",
    "bool": "true or false",
    "int": "an integer",
    "opt_int": "an integer or null",
    "str_list": "a list of strings",
    "str_map": "an object of strings",
    "int_map": "an object of non-negative integers",
    "status": "one of " + ", ".join(STATUSES),
    "spec_status": "one of PENDING, DONE, DISABLED, UNKNOWN",
    "note": "one of status_message, progress, tracking_url",
    "any": "a string or a number",
}


def _check_object(fields: Mapping[str, tuple[str, bool]], body: Any, where: str) -> None:
    if not isinstance(body, dict):
        raise FieldError(where or "body", "expected a JSON object")
    for name, (kind, required) in fields.items():
        path = f"{where}.{name}" if where else name
        if name not in body:
            if required:
                raise FieldError(path, "missing required field")
            continue
        _check(kind, body[name], path)
    unknown = sorted(set(body) - set(fields))
    if unknown:
        path = f"{where}.{unknown[0]}" if where else unknown[0]
        raise FieldError(path, "unknown field; expected one of " + ", ".join(fields))


def validate(route: str, body: Any) -> None:
    """Raise FieldError unless ``body`` fits the route's schema."""
    _check_object(ROUTES[route], body, "")
    if route == "annotate":
        _check_note(body["kind"], body["value"])


def _check_note(kind: str, value: Any) -> None:
    if kind == "progress":
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not 0 <= value <= 100:
            raise FieldError(
                "value", f"expected a progress percentage from 0 to 100, got {value!r}"[:200]
            )
    elif not isinstance(value, str):
        raise FieldError("value", f"expected a string for {kind}, got {type(value).__name__}")


def parse_specs(items: list[dict[str, Any]]) -> list[TaskSpec]:
    """Validated task objects as TaskSpecs."""
    return [
        TaskSpec(
            task_id=item["task_id"],
            family=item.get("family", ""),
            module=item.get("module", ""),
            params=item.get("params", {}),
            status=item.get("status", "PENDING"),
            deps=tuple(item.get("deps", ())),
            priority=item.get("priority", 0),
            resources=item.get("resources", {}),
            runnable=item.get("runnable", True),
            retry_count=item.get("retry_count"),
            explanation=item.get("explanation", ""),
        )
        for item in items
    ]


_JSON_SCHEMA = {
    "str": {"type": "string"},
    "bool": {"type": "boolean"},
    "int": {"type": "integer"},
    "opt_int": {"type": ["integer", "null"]},
    "str_list": {"type": "array", "items": {"type": "string"}},
    "str_map": {"type": "object", "additionalProperties": {"type": "string"}},
    "int_map": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
    "status": {"type": "string", "enum": list(STATUSES)},
    "spec_status": {"type": "string", "enum": ["PENDING", "DONE", "DISABLED", "UNKNOWN"]},
    "note": {"type": "string", "enum": ["status_message", "progress", "tracking_url"]},
    "any": {"type": ["string", "number"]},
}


def _object_schema(fields: Mapping[str, tuple[str, bool]]) -> dict[str, Any]:
    props = {
        name: (
            {"type": "array", "items": _object_schema(_TASK_FIELDS)}
            if kind == "tasks"
            else _JSON_SCHEMA[kind]
        )
        for name, (kind, _) in fields.items()
    }
    required = [name for name, (_, req) in fields.items() if req]
    return {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }


def openapi_document() -> dict[str, Any]:
    """An OpenAPI 3.1 description of every route."""
    error = {
        "description": "error",
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {"error": {"type": "string"}, "field": {"type": "string"}},
                }
            }
        },
    }
    paths: dict[str, Any] = {
        "/health": {"get": {"responses": {"200": {"description": "alive"}}, "security": []}},
        "/api/v1/tasks": {
            "get": {"responses": {"200": {"description": "the task list"}, "401": error}}
        },
        "/api/v1/workers": {
            "get": {"responses": {"200": {"description": "the workers"}, "401": error}}
        },
    }
    for name, fields in ROUTES.items():
        paths[f"/api/v1/{name}"] = {
            "post": {
                "operationId": name,
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _object_schema(fields)}},
                },
                "responses": {
                    "200": {"description": "done"},
                    "400": error,
                    "401": error,
                    "413": error,
                    "422": error,
                },
            }
        }
    return {
        "openapi": "3.1.0",
        "info": {"title": "conveyor central scheduler", "version": "1"},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": paths,
    }
