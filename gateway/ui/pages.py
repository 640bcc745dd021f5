"""The UI's pages: an HTML shell per page holding the current state as JSON; ``app.js`` renders it and streams.

A page is the state at one instant plus the stream sequence read *before* that state: the script opens
``/api/events?since=<sequence>`` and applies what follows, so an event that happened while the page was being
built is applied (harmlessly, the rendering is keyed by ids) rather than lost. Every later read and every
action goes through the public JSON API, with the session cookie and the CSRF token.

The pages check the session cookie themselves (a signed-out browser gets the sign-in page, not a JSON 401) and
are left out of the OpenAPI document: they are not part of the API.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import uuid
from pathlib import Path
from typing import Any

import msgspec
from litestar import Request, Response, get, post
from litestar.datastructures import Cookie, State
from litestar.enums import MediaType
from litestar.params import FromPath
from litestar.response import Redirect
from litestar.static_files import create_static_files_router
from litestar.types import ControllerRouterHandler
from nats.errors import Error as NatsError

from autarch.contracts import subjects
from autarch.contracts.agents import GetSession, ListSessions, SessionList, SessionView, WorkflowCostList, WorkflowCosts
from autarch.contracts.workflows import (
    GetArtifacts,
    GetWorkflow,
    ListWorkflows,
    WorkflowArtifacts,
    WorkflowList,
    WorkflowView,
)
from autarch.runtime.errors import RemoteError

from ..auth import NO_AUTH
from ..orchestrator_client import ask_orchestrator, ask_service, nc_of
from .signin import LOGIN_PATH, SESSION_COOKIE, SESSION_TTL, LoginLinks, csrf_token, new_session, session_of

log = logging.getLogger(__name__)

__all__ = ["UI_ROUTES"]

STATIC = Path(__file__).parent / "static"

_PAGE: dict[str, Any] = {"include_in_schema": False, "opt": NO_AUTH}

_HEADERS = {
    # Scripts and styles from our own origin only: a card's text can never become code.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; "
                               "form-action 'self'",
    # The login link's query must not travel to another site in a Referer.
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}

TURNS_SHOWN = 40
"""Turns of a workflow's agents the page carries at first (the newest); the API has the rest."""

TOOL_CALLS_SHOWN = 200
"""Tool calls the page carries at first, the newest, across those turns (one turn may make thousands)."""

_OUTPUT_SHOWN = 4000
"""Characters of a tool call's output a page carries (the session API has it all)."""


def _token(state: State) -> str:
    return state["ui_token"]


def _page(title: str, body_class: str, data: dict[str, Any], *, csrf: str, status: int = 200) -> Response[str]:
    # ``</`` cannot end the JSON's script element early, whatever a card says.
    blob = json.dumps(data, separators=(",", ":"), default=str).replace("</", "<\\/")
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="csrf-token" content="{html.escape(csrf)}">
<title>{html.escape(title)} · Autarch</title>
<link rel="stylesheet" href="/ui/static/style.css">
<script type="module" src="/ui/static/app.js"></script>
</head><body class="{body_class}">
<header class="top"><a href="/" class="brand">Autarch</a><nav><a href="/">Workflows</a>
<a href="/channels">Channels</a><a href="/loops">Loops</a></nav>
<span id="live" class="live" role="status" aria-live="polite">connecting…</span>
<button type="button" id="signout">Sign out</button>
</header>
<main id="main" tabindex="-1"><noscript>This page needs JavaScript.</noscript></main>
<script type="application/json" id="state">{blob}</script>
</body></html>"""
    return Response(page, media_type=MediaType.HTML, status_code=status, headers=_HEADERS)


def _signed_out(reason: str = "", *, status_code: int = 401) -> Response[str]:
    text = html.escape(reason or "You are not signed in.")
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in · Autarch</title><link rel="stylesheet" href="/ui/static/style.css"></head>
<body class="signin"><main id="main"><h1>Autarch</h1><p id="signin-reason">{text}</p>
<p>Run <code>autarch ui</code> on the machine that runs Autarch: it opens this page with a one-time sign-in
link. The API keeps taking the bearer token (<code>&lt;data dir&gt;/token</code>).</p></main></body></html>"""
    return Response(page, media_type=MediaType.HTML, status_code=status_code, headers=_HEADERS)


def _sid(request: Request, state: State) -> str | None:
    return session_of(_token(state), request.cookies.get(SESSION_COOKIE))


async def _last_sequence(state: State) -> int:
    try:
        info = await nc_of(state).jetstream(timeout=state["settings"].request_timeout).stream_info(
            subjects.EVENTS_STREAM)
    except (NatsError, TimeoutError):
        return 0
    return info.state.last_seq


def _plain(value: Any) -> Any:
    return msgspec.to_builtins(value)


@get(LOGIN_PATH, **_PAGE)
async def login(request: Request, state: State) -> Response[str] | Redirect:
    """Redeem a one-time link from ``autarch ui``: set the session cookie and go to the page asked for."""
    query = request.query_params
    links: LoginLinks = state["ui_login_links"]
    try:
        redeemed = await links.redeem(_token(state), query.get("n", ""), query.get("e", ""), query.get("s", ""))
    except Exception as exc:  # the claim shared by every gateway could not be made: never redeem without it
        log.warning("sign-in refused: could not claim the link's nonce (%r)", exc)
        return _signed_out("Sign-in is unavailable right now (the gateway cannot reach NATS); the link is "
                           "still good until it expires: try it again in a moment.", status_code=503)
    if not redeemed:
        return _signed_out("This sign-in link is expired, already used or not ours.")
    target = query.get("next", "/")
    # Only a path on this site: a link must not send the browser elsewhere.
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        target = "/"
    cookie = Cookie(key=SESSION_COOKIE, value=new_session(_token(state)), max_age=SESSION_TTL, path="/",
                    httponly=True, samesite="lax", secure=request.url.scheme == "https")
    return Redirect(target, status_code=303, cookies=[cookie], headers=_HEADERS)


@post("/ui/logout", status_code=303, include_in_schema=False)
async def logout() -> Redirect:
    """Forget the session cookie (the guard checked it and its CSRF token)."""
    return Redirect("/", status_code=303, cookies=[Cookie(key=SESSION_COOKIE, value="", max_age=0, path="/",
                                                          httponly=True, samesite="lax")])


async def _summaries(state: State, run_id: str | None = None) -> list[dict[str, Any]]:
    """The session summaries (of one run, or all); nothing when the agent runner is away."""
    try:
        sessions = await ask_service(state, "agent_runner", "list_sessions", ListSessions(run_id=run_id),
                                     SessionList, idempotent=True)
    except RemoteError:
        return []
    return [_plain(i) for i in sessions.items]


async def _workflow_costs(state: State, workflow_ids: list[str]) -> dict[str, float]:
    """Cost of each of these workflows (the runner's per-workflow totals, not a list of every session, which at
    scale is more than the bus carries); nothing when the agent runner is away."""
    try:
        reply = await ask_service(state, "agent_runner", "workflow_costs", WorkflowCosts(workflow_ids=workflow_ids),
                                  WorkflowCostList, idempotent=True)
    except RemoteError:
        return {}
    return reply.costs


SHOWN = 500
"""Workflows the index page lists: the newest, with the count of all of them (app.js asks for as many)."""


@get("/", **_PAGE)
async def workflows_page(request: Request, state: State) -> Response[str]:
    sid = _sid(request, state)
    if sid is None:
        return _signed_out()
    since = await _last_sequence(state)
    # The newest SHOWN workflows (the list is in creation order): a page the bus carries however many there are.
    head = await ask_orchestrator(state, "list_workflows", ListWorkflows(limit=1), WorkflowList, idempotent=True)
    newest = ListWorkflows(limit=SHOWN, offset=max(0, head.total - SHOWN))
    listing = await ask_orchestrator(state, "list_workflows", newest, WorkflowList, idempotent=True)
    costs = await _workflow_costs(state, [wf.id for wf in listing.items])
    data = {"page": "workflows", "since": since, "workflows": _plain(listing.items), "costs": costs,
            "total": listing.total,
            "cwd": str(Path.cwd())}
    return _page("Workflows", "workflows", data, csrf=csrf_token(_token(state), sid))


def _trim_turns(sessions: list[SessionView]) -> tuple[list[dict[str, Any]], int]:
    """The sessions with only the newest turns and tool calls and shortened outputs, and how many turns were
    left out (a turn that lost tool calls says how many in ``hidden_tool_calls``)."""
    turns = sorted(((s, t) for s in sessions for t in s.turns), key=lambda st: st[1].started_at)
    kept = {id(t) for _, t in turns[-TURNS_SHOWN:]}
    calls_left: dict[int, int] = {}
    budget = TOOL_CALLS_SHOWN
    for _, turn in reversed(turns[-TURNS_SHOWN:]):
        calls_left[id(turn)] = min(budget, len(turn.tool_calls))
        budget -= calls_left[id(turn)]
    shown = []
    for session in sessions:
        view = msgspec.structs.asdict(session)
        view["turns"] = []
        for turn in session.turns:
            if id(turn) not in kept:
                continue
            room = calls_left[id(turn)]
            plain = _plain(msgspec.structs.replace(turn, tool_calls=turn.tool_calls[len(turn.tool_calls) - room:]
                                                   if room else []))
            plain["hidden_tool_calls"] = len(turn.tool_calls) - room
            for call in plain["tool_calls"]:
                output = call.get("output")
                if isinstance(output, str) and len(output) > _OUTPUT_SHOWN:
                    call["output"] = output[:_OUTPUT_SHOWN] + f"\n… ({len(output) - _OUTPUT_SHOWN} more characters)"
            view["turns"].append(plain)
        shown.append(_plain(view))
    return shown, max(0, len(turns) - TURNS_SHOWN)


@get("/workflows/{workflow_id:str}", **_PAGE)
async def workflow_page(request: Request, state: State, workflow_id: FromPath[str]) -> Response[str]:
    sid = _sid(request, state)
    if sid is None:
        return _signed_out()
    try:
        wf = str(uuid.UUID(workflow_id))
    except ValueError:
        wf = None
    csrf = csrf_token(_token(state), sid)
    since = await _last_sequence(state)
    try:
        view, cards = await asyncio.gather(
            ask_orchestrator(state, "get_workflow", GetWorkflow(workflow_id=wf or ""), WorkflowView, idempotent=True),
            ask_orchestrator(state, "get_artifacts", GetArtifacts(workflow_id=wf or ""), WorkflowArtifacts,
                             idempotent=True),
        ) if wf else (None, None)
    except RemoteError as exc:
        if exc.code != "not_found":
            raise
        view = cards = None
    if view is None:
        return _page("Not found", "missing", {"page": "missing", "what": f"workflow {workflow_id}"}, csrf=csrf,
                     status=404)
    summaries = await _summaries(state, wf)
    replies = await asyncio.gather(*(
        ask_service(state, "agent_runner", "get_session", GetSession(session_id=s["session_id"]), SessionView,
                    idempotent=True) for s in summaries), return_exceptions=True)
    for reply in replies:
        if isinstance(reply, BaseException) and not isinstance(reply, RemoteError):
            raise reply
    # The workflow and its cards are what the page is for: a session the agent runner cannot give now only
    # leaves its turns out (the page says so).
    sessions = [r for r in replies if isinstance(r, SessionView)]
    shown, hidden = _trim_turns(sessions)
    data = {"page": "workflow", "since": since, "workflow": _plain(view), "artifacts": _plain(cards),
            "sessions": shown, "hidden_turns": hidden, "sessions_unavailable": len(replies) - len(sessions)}
    return _page(view.title, "workflow", data, csrf=csrf)


@get("/loops", **_PAGE)
async def loops_page(request: Request, state: State) -> Response[str]:
    """Loop sessions: the script reads them from ``/api/pulse`` (after the sequence given here)."""
    sid = _sid(request, state)
    if sid is None:
        return _signed_out()
    return _page("Loops", "loops", {"page": "loops", "since": await _last_sequence(state)},
                 csrf=csrf_token(_token(state), sid))


@get("/channels", **_PAGE)
async def channels_page(request: Request, state: State) -> Response[str]:
    """Discussions: a form to open one in a channel, and the discussion sessions so far."""
    sid = _sid(request, state)
    if sid is None:
        return _signed_out()
    summaries = await _summaries(state)
    discussions = [s for s in summaries if s["role"] == "discussion"]
    return _page("Channels", "channels", {"page": "channels", "sessions": discussions, "cwd": str(Path.cwd())},
                 csrf=csrf_token(_token(state), sid))


@get("/sessions/{session_id:str}", **_PAGE)
async def session_page(request: Request, state: State, session_id: FromPath[str]) -> Response[str]:
    """One discussion as a chat: its turns so far, then the stream; the next message from a form."""
    sid = _sid(request, state)
    if sid is None:
        return _signed_out()
    csrf = csrf_token(_token(state), sid)
    since = await _last_sequence(state)
    try:
        session = await ask_service(state, "agent_runner", "get_session", GetSession(session_id=session_id),
                                    SessionView, idempotent=True)
    except RemoteError as exc:
        if exc.code not in ("not_found", "bad_request"):
            raise
        return _page("Not found", "missing", {"page": "missing", "what": f"session {session_id}"}, csrf=csrf,
                     status=404)
    shown, hidden = _trim_turns([session])
    return _page(f"Discussion {session.channel_id or ''}", "session",
                 {"page": "session", "since": since, "sessions": shown, "hidden_turns": hidden}, csrf=csrf)


UI_ROUTES: list[ControllerRouterHandler] = [
    login, logout, workflows_page, workflow_page, loops_page, channels_page, session_page,
    create_static_files_router(path="/ui/static", directories=[STATIC], include_in_schema=False, opt=NO_AUTH,
                               name="ui-static"),
]
