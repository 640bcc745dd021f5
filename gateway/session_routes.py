"""Agent sessions over HTTP: discussions in a channel, messages, a session's turns, stopping one.

Requests go to the agent runner (``start_session``, ``send_message``, ``get_session``,
``list_sessions``, ``stop_session``); its typed errors become the HTTP answer (``conflict`` 409,
``not_found`` 404). A turn runs after the answer: follow it on ``/api/events`` (``turn:*`` events;
channel sessions belong to no workflow) or poll ``GET /api/sessions/{id}``.
"""

from __future__ import annotations

import uuid
from typing import Annotated

from litestar import Response, get, post
from litestar.datastructures import State
from litestar.params import FromPath, JSONBody, QueryParameter

from autarch.contracts.agents import (
    GetSession,
    ListSessions,
    SendMessage,
    SessionList,
    SessionStopped,
    SessionView,
    StartSession,
    StopSession,
    TurnAccepted,
    WorkflowCostList,
    WorkflowCosts,
)
from autarch.contracts.errors import ErrorReply
from autarch.contracts.http import ChannelSessionBody, SessionMessageBody, StopSessionBody, WorkflowCostsBody

from .agent_runner_client import ask_agent_runner
from .params import CHANNEL_ID, bad_request, canonical_uuid, error_responses, not_found, resolve_repo

__all__ = ["SESSION_ROUTES", "StopSessionBody"]


@post("/api/channels/{channel_id:str}/session", status_code=201, summary="Start a discussion session in a channel",
      tags=["sessions"], responses=error_responses(400, 409))
async def start_channel_session(
    channel_id: FromPath[str], data: JSONBody[ChannelSessionBody], state: State
) -> TurnAccepted:
    """Open a ``discussion`` session (read-only tools) on the git repository ``repo`` and start its first turn
    with ``message``. Answers 201 at once with the session and turn ids; the turn runs on (``turn:*`` events,
    or poll ``GET /api/sessions/{id}``). ``channel_id``: 1-100 letters, digits, ``_``, ``.``, ``-``.
    Send ``session_id`` (a UUID of your choosing) to make a retry safe: the same start twice opens one session
    (``created: false`` the second time); the same id with another repo, channel or message is 409 ``conflict``.
    400 when ``repo`` is not a git repository."""
    if not CHANNEL_ID.match(channel_id):
        raise bad_request(
            f"channel id must be 1-100 letters, digits, '_', '.' or '-', got {channel_id!r}", field="channel_id"
        )
    root = resolve_repo(data.repo, git=True)
    command = StartSession(
        session_id=data.session_id or str(uuid.uuid4()), role="discussion", root=str(root), kickoff=data.message,
        channel_id=channel_id, script=data.script,
    )
    # Idempotent on session_id (fixed above, before the first attempt): a retry cannot open a second session.
    return await ask_agent_runner(state, "start_session", command, TurnAccepted, idempotent=True)


@post("/api/sessions/{session_id:str}/message", status_code=202, summary="Send the next message to a session",
      tags=["sessions"], responses=error_responses(400, 404, 409))
async def send_message(
    session_id: FromPath[str], data: JSONBody[SessionMessageBody], state: State
) -> TurnAccepted | Response[ErrorReply]:
    """Start the session's next turn with ``text``; answers 202 at once, the turn ends with ``turn:completed``.
    409 ``conflict`` while a turn is still running (wait for it, or stop it) or once the session is closed.
    With ``message_id`` the same message twice starts one turn (``created: false`` the second time)."""
    sid = canonical_uuid(session_id)
    if sid is None:
        return not_found("session", session_id)
    command = SendMessage(session_id=sid, text=data.text, message_id=data.message_id)
    return await ask_agent_runner(state, "send_message", command, TurnAccepted,
                                  idempotent=data.message_id is not None)


@get("/api/sessions/{session_id:str}", summary="Get one session with its turns", tags=["sessions"],
     responses=error_responses(404))
async def get_session(
    session_id: FromPath[str],
    state: State,
    replies: Annotated[bool, QueryParameter(description="Also each turn's model replies, content blocks whole "
                                                        "(what `autarch workflow record` reads)")] = False,
) -> SessionView | Response[ErrorReply]:
    """The session's status (``idle``, ``running``, ``closed``) and every turn: the user's text, the assistant's
    messages, thoughts, tool calls with their output, usage, cost and outcome (``null`` while it runs)."""
    sid = canonical_uuid(session_id)
    if sid is None:
        return not_found("session", session_id)
    return await ask_agent_runner(state, "get_session", GetSession(session_id=sid, replies=replies), SessionView,
                                  idempotent=True)


@get("/api/sessions", summary="List sessions", tags=["sessions"], responses=error_responses(400))
async def list_sessions(
    state: State,
    run: Annotated[str | None, QueryParameter(description="Only this run's sessions (a workflow's or a loop "
                                                      "session's id)")] = None,
    workflow: Annotated[str | None, QueryParameter(description="The name `run` had before loop sessions had "
                                                           "their own (still read): only this workflow's "
                                                           "sessions")] = None,
    running: Annotated[bool | None, QueryParameter(description="Only sessions with (true) or without (false) a "
                                                          "running turn")] = None,
) -> SessionList:
    """``{"items": [{"session_id", "role", "status", "turns", "run_id", "cost_usd"}, ...]}``; ``run_id`` is the
    workflow or loop session the session works for (``null`` for a channel discussion)."""
    runs: set[str] = set()
    for field, given in (("run", run), ("workflow", workflow)):
        if given is not None:
            run_id = canonical_uuid(given)
            if run_id is None:
                raise bad_request(f"{field} must be a workflow or loop session id, got {given!r}", field=field)
            runs.add(run_id)
    if len(runs) > 1:
        return SessionList(items=[])  # both filters, naming two runs: no session works for both
    query = ListSessions(run_id=next(iter(runs), None), running=running)
    return await ask_agent_runner(state, "list_sessions", query, SessionList, idempotent=True)


@post("/api/sessions/{session_id:str}/stop", status_code=200, summary="Stop a session's running turn",
      tags=["sessions"], responses=error_responses(400, 404))
async def stop_session(
    session_id: FromPath[str], state: State, data: JSONBody[StopSessionBody | None] = None
) -> SessionStopped | Response[ErrorReply]:
    """Cancel the running turn (its outcome is ``cancelled``); ``turn_id`` names it, ``null`` when none was
    running. Optional body ``{"reason": "...", "close": true}``: ``close`` also ends the session."""
    sid = canonical_uuid(session_id)
    if sid is None:
        return not_found("session", session_id)
    body = data or StopSessionBody()
    command = StopSession(session_id=sid, reason=body.reason, close=body.close)
    # Stopping twice is harmless (the second finds no running turn), so a lost reply may be retried.
    return await ask_agent_runner(state, "stop_session", command, SessionStopped, idempotent=True)


@post("/api/workflows/costs", status_code=200, summary="What each of these workflows' sessions spent",
      tags=["workflows"], responses=error_responses(400))
async def workflow_costs(data: JSONBody[WorkflowCostsBody], state: State) -> WorkflowCostList:
    """``{"costs": {workflow_id: usd, ...}}`` for every id asked (0.0 when no session of it spent anything), in
    US dollars at list prices. Body ``{"workflow_ids": [...]}``: at most 1,000 workflow ids (canonical UUIDs),
    the ids of a page of the list. A POST because a page's ids are too long for a URL; it changes nothing.
    400 ``bad_request`` for anything else (not a list, more than 1,000, a malformed id, an unknown field)."""
    # The runner answers from its per-workflow totals: the cost of a page, not of every session ever run.
    query = WorkflowCosts(workflow_ids=data.workflow_ids)
    return await ask_agent_runner(state, "workflow_costs", query, WorkflowCostList, idempotent=True)


SESSION_ROUTES = [start_channel_session, send_message, get_session, list_sessions, stop_session, workflow_costs]
