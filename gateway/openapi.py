"""The OpenAPI document made true: what Litestar generates, corrected with what the gateway really does.

Litestar documents a reply typed ``X | Response[ErrorReply]`` as ``oneOf: [X, {}]`` (which no reply
satisfies, since ``{}`` matches everything too), its own validation body for 400, every request body as
required, and knows nothing of the bearer token, of ``forbid_unknown_fields`` or of the SSE stream. The
routes stay as they are written; this module rewrites the generated document once, from the routes'
own declarations (their ``opt``, their ``data`` default), so the document cannot drift from the code.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import pkgutil
from typing import Any

import msgspec
from litestar import Litestar, Request
from litestar.datastructures import MutableScopeHeaders
from litestar.openapi.plugins import JsonRenderPlugin, OpenAPIRenderPlugin, SwaggerRenderPlugin
from litestar.routes import HTTPRoute
from litestar.types import Message, Scope

import autarch.contracts as contracts_pkg
from autarch.contracts.errors import ErrorReply

from .errors import WWW_AUTHENTICATE
from .params import CHANNEL_ID

__all__ = ["allowed_methods", "complete_allow_header", "truthful_document", "truthful_render_plugins"]

UUID_PATTERN = r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$(?!\n)"
"""What the gateway takes as an id (hyphens optional, any case); anything else names nothing (404)."""

_UUID_PARAMS = {"workflow_id", "session_id"}
"""Path parameters that are UUIDs; the others are free strings the services look up."""

_UUID_QUERY = {"workflow", "workflow_id", "run"}
"""Query parameters that name a workflow or a run (a workflow or a loop session): anything else is a 400."""

_ERRORS = {
    400: "Malformed body, parameter or header, or a rule of the input refused (`bad_request`); "
         "`details.field` names the culprit",
    401: "Missing or wrong bearer token (`unauthorized`); the `WWW-Authenticate` header names the scheme",
    404: "Unknown or malformed id (`not_found`, or a domain code such as `no_branch`)",
    409: "Not possible in the current state; the `code` says why (`conflict`, `not_awaiting_approval`, "
         "`wrong_stage`, `not_halted`, `wrong_halt`, `not_running`, `finished`, …)",
    500: "A bug, or a service answered with a code the gateway does not know (`internal` or that code)",
    503: "No service answered (`unavailable`): retry",
    504: "The service did not answer in time (`timeout`): retry if the request is idempotent",
}

_ERROR_REF = {"$ref": "#/components/schemas/ErrorReply"}


def _error_response(status: int, description: str | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description or _ERRORS[status],
                                "content": {"application/json": {"schema": _ERROR_REF}}}
    if status == 401:
        response["headers"] = {"WWW-Authenticate": {"description": f"Always `{WWW_AUTHENTICATE}`",
                                                    "schema": {"type": "string"}}}
    return response


def _contract_structs() -> dict[str, type[msgspec.Struct]]:
    """Every Struct of ``autarch.contracts`` by class name (the name Litestar gives its component)."""
    found: dict[str, type[msgspec.Struct]] = {}
    for info in pkgutil.iter_modules(contracts_pkg.__path__):
        module = importlib.import_module(f"{contracts_pkg.__name__}.{info.name}")
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, msgspec.Struct) and obj.__module__ == module.__name__:
                found.setdefault(name, obj)
    return found


def _msgspec_components(schemas: dict[str, Any]) -> None:
    """Replace Litestar's component of each contract Struct by msgspec's own schema of it.

    Litestar drops the constraints of items (``list[NonEmpty]`` becomes a list of any strings) and knows
    nothing of ``forbid_unknown_fields``; msgspec's schema is what its decoder enforces.
    """
    structs = _contract_structs()
    wanted = [structs[name] for name in schemas if name in structs]
    _, components = msgspec.json.schema_components(wanted, ref_template="#/components/schemas/{name}")
    for name, schema in components.items():
        kind = structs.get(name)
        if kind is not None and kind.__struct_config__.forbid_unknown_fields and schema.get("type") == "object":
            schema["additionalProperties"] = False
        schemas[name] = schema


def _drop_anything(schema: dict[str, Any]) -> dict[str, Any]:
    """``oneOf: [X, {}]`` → ``X``: the ``{}`` stands for the error branch, documented under its own status."""
    options = schema.get("oneOf")
    if isinstance(options, list) and {} in options:
        kept = [o for o in options if o != {}]
        return kept[0] if len(kept) == 1 else {**schema, "oneOf": kept}
    return schema


def _handlers(app: Litestar) -> dict[tuple[str, str], Any]:
    found = {}
    for route in app.routes:
        if isinstance(route, HTTPRoute):
            for handler in route.route_handlers:
                for method in handler.http_methods:
                    found[(route.path_format, method.lower())] = handler
    return found


def _events_operation(operation: dict[str, Any]) -> None:
    operation["responses"]["200"] = {
        "description": "A stream of Server-Sent Events (`text/event-stream`) that stays open: each recorded event "
                       "as `event: <type>` (seed 003's names, `workflow:created`, …), `id: <stream sequence>` and "
                       "`data: <the event as JSON>` (see `docs/contracts/schemas/events.AnyEvent.json`); live "
                       "deltas without `id:`; comments (`: connected`, `: keep-alive`, `: gateway stopping`).",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
    params = operation.setdefault("parameters", [])
    for param in params:
        if param["name"] == "workflow":
            param["schema"] = {"type": "string", "pattern": UUID_PATTERN}
    params.append({
        "name": "Last-Event-ID", "in": "header", "required": False,
        "description": "Resume right after this stream sequence (wins over `since`); what an EventSource sends "
                       "when it reconnects. ASCII digits, at most the stream's last sequence (else 400).",
        "schema": {"type": "string", "pattern": r"^[0-9]{1,19}$(?!\n)", "maxLength": 19},
    })
    params.append({
        "name": "access_token", "in": "query", "required": False,
        "description": "The bearer token, for EventSource clients that cannot set headers.",
        "schema": {"type": "string"},
    })


_LINKS = {
    ("/api/workflows", "post"): {"workflow_id": "$response.body#/id"},
    ("/api/beads", "post"): {"epic_id": "$response.body#/epic_id", "bead_id": "$response.body#/id"},
}
"""Creating operations and, for each path parameter, where its value is in their answer: every operation that
takes all of these parameters in its path is linked from the creation (OpenAPI links; a stateful client, such
as schemathesis' stateful phase, follows them)."""


def _add_links(doc: dict[str, Any]) -> None:
    """Link each creating operation's success answer to the operations that take what it created."""
    for (source_path, source_method), values in _LINKS.items():
        source = doc.get("paths", {}).get(source_path, {}).get(source_method)
        if source is None:
            continue
        success = next((r for status, r in source["responses"].items() if status.startswith("2")), None)
        if success is None:
            continue
        links: dict[str, Any] = {}
        for path, methods in doc["paths"].items():
            if not all(f"{{{name}}}" in path for name in values):
                continue
            for operation in methods.values():
                taken = {p["name"] for p in operation.get("parameters", []) if p.get("in") == "path"}
                if set(values) <= taken and "operationId" in operation:
                    links[operation["operationId"]] = {
                        "operationId": operation["operationId"],
                        "parameters": {f"path.{name}": value for name, value in values.items()},
                    }
        if links:
            success["links"] = links


def truthful_document(generated: dict[str, Any], app: Litestar) -> dict[str, Any]:
    """The generated document corrected (see the module's docstring); ``generated`` is left as it was."""
    doc = copy.deepcopy(generated)
    components = doc.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    schemas["ErrorReply"] = msgspec.json.schema_components([ErrorReply], ref_template="#/components/schemas/{name}")[
        1]["ErrorReply"]
    _msgspec_components(schemas)
    components["securitySchemes"] = {
        "bearer": {"type": "http", "scheme": "bearer",
                   "description": "The token in `<data dir>/token` (created at first start)."},
        "accessToken": {"type": "apiKey", "in": "query", "name": "access_token",
                        "description": "The same token as a query parameter; only `/api/events` takes it."},
    }
    doc["security"] = [{"bearer": []}]
    handlers = _handlers(app)
    for path, methods in doc.get("paths", {}).items():
        for method, operation in methods.items():
            handler = handlers.get((path, method))
            opt = handler.opt if handler is not None else {}
            responses = operation.setdefault("responses", {})
            for response in responses.values():
                for media in response.get("content", {}).values():
                    if "schema" in media:
                        media["schema"] = _drop_anything(media["schema"])
            if opt.get("no_auth"):
                operation["security"] = []
                if path == "/healthz":
                    # Degraded health is a 503 with the same Health body (not an ErrorReply): say so.
                    responses["503"] = {**copy.deepcopy(responses["200"]),
                                        "description": "NATS or an expected service does not answer "
                                                       "(`status: degraded`)"}
                continue
            if opt.get("query_token"):
                operation["security"] = [{"bearer": []}, {"accessToken": []}]
            statuses = {400, 401, 500, 503, 504}
            if "{" in path:
                statuses.add(404)
            if method in ("post", "patch", "put", "delete"):
                statuses.add(409)
            for status in sorted(statuses):
                existing = responses.get(str(status))
                description = existing.get("description") if existing and status != 400 else None
                responses[str(status)] = _error_response(status, description)
            body = operation.get("requestBody")
            if body is not None and handler is not None:
                data = handler.parsed_fn_signature.parameters.get("data")
                # ``data: JSONBody[X | None] = None``: the route works without a body.
                body["required"] = not (data is not None and data.has_default)
            for param in operation.get("parameters", []):
                if param.get("in") == "query" and param["name"] in _UUID_QUERY:
                    param["schema"] = {"type": "string", "pattern": UUID_PATTERN}
                if param.get("in") != "path":
                    continue
                if param["name"] in _UUID_PARAMS:
                    param["schema"] = {"type": "string", "pattern": UUID_PATTERN}
                elif param["name"] == "channel_id":
                    param["schema"] = {"type": "string", "pattern": CHANNEL_ID.pattern}
            if path == "/api/events":
                _events_operation(operation)
    _add_links(doc)
    _installation_limits(schemas, app)
    return doc


def _installation_limits(schemas: dict[str, Any], app: Litestar) -> None:
    """State the limits this installation's settings add to the contracts' own (its ``loop_max_iterations_limit``)."""
    settings = app.state.get("settings")
    limit = getattr(settings, "loop_max_iterations_limit", None)
    field = schemas.get("StartLoopBody", {}).get("properties", {}).get("maxIterations")
    if limit is not None and field is not None:
        bound = field.get("maximum", limit)
        field["maximum"] = min(bound, limit)
        field["description"] = (f"At most {field['maximum']} on this installation (its `loop_max_iterations_limit` "
                                f"setting; the contract's own bound is {bound}).")


def allowed_methods(app: Litestar) -> dict[str, str]:
    """The ``Allow`` value of each path template: every method any of its handlers takes, and OPTIONS."""
    methods: dict[str, set[str]] = {}
    for (path, method) in _handlers(app):
        methods.setdefault(path, {"OPTIONS"}).add(method.upper())
    return {path: ", ".join(sorted(names)) for path, names in methods.items()}


async def complete_allow_header(message: Message, scope: Scope) -> None:
    """``before_send`` hook: an OPTIONS answer's ``Allow`` lists every method of the path (RFC 9110 §10.2.1).

    Litestar answers OPTIONS from the handlers registered together, so a path served by two handlers
    (``GET`` and ``POST /api/workflows``) would announce only one of them.
    """
    if message["type"] != "http.response.start" or scope.get("method") != "OPTIONS":
        return
    allow = allowed_methods(scope["app"]).get(scope.get("path_template", ""))
    if allow:
        MutableScopeHeaders.from_message(message)["allow"] = allow


class _TruthfulDocument:
    """The corrected document of the generated one last given (Litestar generates it once per app)."""

    def __init__(self) -> None:
        self._generated: dict[str, Any] | None = None
        self._document: dict[str, Any] = {}

    def of(self, generated: dict[str, Any], app: Litestar) -> dict[str, Any]:
        if generated is not self._generated:
            self._document, self._generated = truthful_document(generated, app), generated
        return self._document


class _TruthfulSwagger(SwaggerRenderPlugin):
    """The Swagger page, with the corrected document in it."""

    def __init__(self, document: _TruthfulDocument) -> None:
        super().__init__()
        self._document = document

    def render(self, request: Request, openapi_schema: dict[str, Any]) -> bytes:
        return super().render(request, self._document.of(openapi_schema, request.app))


class _TruthfulJson(JsonRenderPlugin):
    """``/schema/openapi.json``: the corrected document."""

    def __init__(self, document: _TruthfulDocument) -> None:
        super().__init__()
        self._document = document

    def render(self, request: Request, openapi_schema: dict[str, Any]) -> bytes:
        return super().render(request, self._document.of(openapi_schema, request.app))


def truthful_render_plugins() -> list[OpenAPIRenderPlugin]:
    """The render plugins of one app: its Swagger page (the default, first) and its JSON document, both serving
    :func:`truthful_document` of what Litestar generated (Litestar's public render-plugin API; no hook sees the
    document before them)."""
    document = _TruthfulDocument()
    return [_TruthfulSwagger(document), _TruthfulJson(document)]
