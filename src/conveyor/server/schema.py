"""``/openapi.json``: the worker-facing routes described from :mod:`conveyor.protocol`.

The request and answer of each route are protocol dataclasses; their JSON Schemas come from the
same type annotations and field rules that :func:`conveyor.protocol.decode` validates against
(identifiers' lengths and characters, number ranges, ``Annotate.value`` by ``kind``, the latter
as a ``oneOf`` of ``components/schemas`` with a ``discriminator``).
"""

from __future__ import annotations

from typing import Any

from ..protocol import ROUTES, TaskList, json_schema

__all__ = ["openapi_document"]


_REPORTS = ("task_done", "task_failed")  # refused with 409 for a superseded attempt
_NAMES_A_TASK = ("cancel",)  # answered 404 for a task the scheduler does not know


def openapi_document() -> dict[str, Any]:
    """An OpenAPI 3.1 description of every route."""
    schemas: dict[str, Any] = {}  # what a discriminator names (Annotate's kinds)
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

    def answer(description: str, cls: type[Any]) -> dict[str, Any]:
        return {
            "description": description,
            "content": {"application/json": {"schema": json_schema(cls, components=schemas)}},
        }

    # every request: a Host that is not the server's (421), another site's Origin (403)
    foreign = {"403": error, "421": error}
    paths: dict[str, Any] = {
        "/health": {
            "get": {"responses": {"200": {"description": "alive"}, **foreign}, "security": []}
        },
        "/api/v1/tasks": {
            "get": {
                "responses": {"200": answer("the task list", TaskList), "401": error, **foreign}
            }
        },
        "/api/v1/workers": {
            "get": {"responses": {"200": {"description": "the workers"}, "401": error, **foreign}}
        },
    }
    for name, route in ROUTES.items():
        paths[f"/api/v1/{name}"] = {
            "post": {
                "operationId": name,
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": json_schema(route.request, components=schemas)
                        }
                    },
                },
                "responses": {
                    "200": answer("done", route.answer),
                    "400": error,
                    "401": error,
                    "413": error,
                    "415": error,
                    "422": error,
                    "503": error,  # the state store cannot store a change (Retry-After)
                    **({"409": error} if name in _REPORTS else {}),
                    **({"404": error} if name in _NAMES_A_TASK else {}),
                    **foreign,
                },
            }
        }
    return {
        "openapi": "3.1.0",
        "info": {"title": "conveyor central scheduler", "version": "1"},
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }
