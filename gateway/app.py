"""The Litestar app: the HTTP API and SSE in front of the services on NATS."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import asynccontextmanager
from typing import Annotated

from litestar import Litestar, Request, Response, get, post
from litestar.datastructures import State
from litestar.openapi import OpenAPIConfig
from litestar.params import FromPath, HeaderParameter, JSONBody, QueryParameter
from litestar.response import ServerSentEvent
from nats.aio.client import Client
from nats.errors import Error as NatsError

from autarch.contracts import subjects
from autarch.contracts.errors import ErrorCode, ErrorReply
from autarch.contracts.http import CreateWorkflowBody, Health
from autarch.contracts.workflows import CreateWorkflow, GetWorkflow, ListWorkflows, WorkflowList, WorkflowView
from autarch.runtime.action_links import key_of
from autarch.runtime.bus import close_quietly, connect, ensure_event_stream
from autarch.runtime.errors import RemoteError
from autarch.runtime.settings import GatewaySettings, narrow
from autarch.runtime.token import ensure_token

from .action_routes import ACTION_ROUTES
from .auth import NO_AUTH, token_guard
from .bead_routes import BEAD_ROUTES
from .control_routes import CONTROL_ROUTES
from .diff_routes import DIFF_ROUTES
from .errors import EXCEPTION_HANDLERS, error_response
from .health import check_health
from .input_rules import MAX_SEQUENCE, check_resume_point, check_workflow_target, parse_sequence
from .loop_routes import LOOP_ROUTES
from .mail_routes import MAIL_ROUTES
from .openapi import complete_allow_header, truthful_render_plugins
from .orchestrator_client import ask_orchestrator, nc_of
from .params import bad_request, resolve_repo
from .session_routes import SESSION_ROUTES
from .sse import end_streams_on_signals, event_stream
from .strict_body import strict_body
from .ui.pages import UI_ROUTES
from .ui.redeemed import SharedRedemptions
from .ui.signin import LoginLinks
from .workflow_routes import WORKFLOW_ROUTES

__all__ = ["create_app"]

# Idempotency-Key → workflow id: the same key always names the same workflow.
_IDEMPOTENCY_NS = uuid.UUID("6f0b7c1e-3a51-4d5e-9a57-5a3c2f0e8b11")


@post("/api/workflows", status_code=201, summary="Create a workflow", tags=["workflows"])
async def create_workflow(
    data: JSONBody[CreateWorkflowBody],
    state: State,
    idempotency_key: Annotated[str | None, HeaderParameter(name="Idempotency-Key", required=False)] = None,
) -> WorkflowView:
    """Start a workflow for ``repo``. Send ``Idempotency-Key`` to make retries safe."""
    repo = resolve_repo(data.repo)
    settings: GatewaySettings = state["settings"]
    check_workflow_target(repo, given=data.repo, base_branch=data.base_branch, branch=data.branch,
                          data_dir=settings.data_path)
    workflow_id = str(uuid.uuid5(_IDEMPOTENCY_NS, idempotency_key) if idempotency_key else uuid.uuid4())
    command = CreateWorkflow(
        workflow_id=workflow_id, title=data.title, request=data.request, repo=str(repo),
        base_branch=data.base_branch, branch=data.branch, script=data.script,
    )
    # The orchestrator's create is idempotent on workflow_id, so retrying through a crash is safe.
    return await ask_orchestrator(state, "create_workflow", command, WorkflowView, idempotent=True)


@get("/api/workflows", summary="List workflows", tags=["workflows"])
async def list_workflows(
    state: State,
    limit: Annotated[int, QueryParameter(ge=1, le=10_000)] = 1000,
    offset: Annotated[int, QueryParameter(ge=0)] = 0,
) -> WorkflowList:
    """``{"items": [...], "total": N}``: the workflows in creation order, ``limit`` of them from ``offset``."""
    query = ListWorkflows(limit=limit, offset=offset)
    return await ask_orchestrator(state, "list_workflows", query, WorkflowList, idempotent=True)


@get("/api/workflows/{workflow_id:str}", summary="Get one workflow", tags=["workflows"])
async def get_workflow(workflow_id: FromPath[str], state: State) -> WorkflowView | Response[ErrorReply]:
    """The workflow's stage, status, halt, path, branch and counts. 404 for an unknown or malformed id."""
    try:
        uuid.UUID(workflow_id)
    except ValueError:
        return error_response(ErrorReply(code=ErrorCode.NOT_FOUND, message=f"no workflow {workflow_id}"))
    query = GetWorkflow(workflow_id=str(uuid.UUID(workflow_id)))
    return await ask_orchestrator(state, "get_workflow", query, WorkflowView, idempotent=True)


@get("/api/events", summary="Live events (Server-Sent Events)", tags=["events"], opt={"query_token": True})
async def events(
    request: Request,
    state: State,
    workflow: Annotated[str | None, QueryParameter(description="Only this workflow's events")] = None,
    since: Annotated[int | None, QueryParameter(ge=0, le=MAX_SEQUENCE,
                                                description="Resume after this sequence (0: all); at most the "
                                                            "stream's last sequence (else 400)")] = None,
    deltas: Annotated[bool, QueryParameter(description="Also send the live token deltas (turn:message_delta, "
                                                       "turn:thought_delta), without id")] = True,
) -> ServerSentEvent:
    """Every recorded event as SSE, ``id:`` = its stream sequence; ``Last-Event-ID`` (or ``since``) resumes
    right after that event. Unless ``deltas=false``, the live ``turn:message_delta`` / ``turn:thought_delta``
    events come too, without ``id:`` (they are not stored: a client that falls behind loses some, and
    ``turn:completed`` carries the full text). While nothing flows a ``: keep-alive`` comment comes every
    ``sse_keepalive`` seconds, so a read timeout somewhat longer than that tells a dead connection; a stopping
    gateway ends the stream with ``: gateway stopping`` (resume with ``Last-Event-ID``)."""
    after, field = since, "since"
    last_event_id = request.headers.get("last-event-id")
    if last_event_id:
        after, field = parse_sequence(last_event_id, field="Last-Event-ID"), "Last-Event-ID"
    if workflow is not None:
        try:
            workflow = str(uuid.UUID(workflow))
        except ValueError:
            raise bad_request(f"workflow must be a workflow id, got {workflow!r}", field="workflow") from None
    settings: GatewaySettings = state["settings"]
    if after is not None:
        # Checked before the stream opens, so a bad resume point is an HTTP 400, not a stream that never speaks.
        check_resume_point(after, last=await _last_sequence(nc_of(state), settings.request_timeout), field=field)
    return event_stream(nc_of(state), workflow=workflow, after=after, keepalive=settings.sse_keepalive,
                        deltas=deltas, stopping=state.get("stopping"))


async def _last_sequence(nc: Client, timeout: float) -> int:
    """The event stream's last sequence (0 when empty); ``unavailable`` when JetStream does not answer."""
    try:
        info = await nc.jetstream(timeout=timeout).stream_info(subjects.EVENTS_STREAM)
    except (NatsError, TimeoutError) as exc:
        raise RemoteError(ErrorReply(code=ErrorCode.UNAVAILABLE, message=f"the event stream did not answer: {exc}"),
                          subject=subjects.EVENTS_STREAM) from None
    return info.state.last_seq


@get("/healthz", summary="Health of NATS and every service", tags=["health"], opt=NO_AUTH)
async def healthz(state: State) -> Response[Health]:
    """200 when NATS and every expected service answer ``$SRV.PING`` (every orchestrator partition), else 503. No
    token needed."""
    health = await check_health(state.get("nc"), list(state["expected_services"]))
    return Response(health, status_code=200 if health.status == "ok" else 503)


def create_app(settings: GatewaySettings, *, expected_services: tuple[str, ...] | None = None) -> Litestar:
    """Build the gateway for ``settings``; NATS is connected in the app's lifespan.

    Args:
        settings: the gateway's settings (the aggregate is narrowed to them).
        expected_services: what ``/health/ready`` waits for; default ``settings.expected_services``.
    """
    settings = narrow(settings, GatewaySettings)
    if expected_services is None:
        expected_services = settings.expected_services
    token = ensure_token(settings.token_path)

    @asynccontextmanager
    async def nats_connection(app: Litestar):
        app.state["nc"] = await connect(settings.effective_nats_url, name="autarch-gateway")
        # SSE consumers need the stream even before the first service has created it.
        await ensure_event_stream(
            app.state["nc"], duplicate_window=settings.duplicate_window, replicas=settings.stream_replicas
        )
        # A login link works once on the whole system, not once per gateway.
        app.state["ui_login_links"] = LoginLinks(SharedRedemptions(
            app.state["nc"], replicas=settings.stream_replicas, timeout=settings.request_timeout).claim)
        # Open SSE streams end when the server is told to stop, or its graceful shutdown would wait on them.
        app.state["stopping"] = stopping = asyncio.Event()
        undo_signals = end_streams_on_signals(stopping)
        try:
            yield
        finally:
            stopping.set()
            undo_signals()
            await close_quietly(app.state["nc"])

    return Litestar(
        route_handlers=[
            create_workflow, list_workflows, get_workflow, *WORKFLOW_ROUTES, *DIFF_ROUTES, *CONTROL_ROUTES,
            *SESSION_ROUTES, *LOOP_ROUTES, *BEAD_ROUTES, *MAIL_ROUTES, *ACTION_ROUTES, events, healthz,
            *UI_ROUTES,
        ],
        guards=[token_guard(token), strict_body],
        exception_handlers=EXCEPTION_HANDLERS,
        before_send=[complete_allow_header],
        lifespan=[nats_connection],
        state=State({"settings": settings, "expected_services": expected_services, "ui_token": token,
                     "action_key": key_of(settings.data_path)}),
        openapi_config=OpenAPIConfig(
            title="Autarch",
            version="0.1.0",
            description="Turn a developer's request into reviewed, committed code. Bearer token required "
            "(see <data dir>/token) except on /healthz.",
            path="/schema",
            use_handler_docstrings=True,
            render_plugins=truthful_render_plugins(),
        ),
    )
