"""``/act/{token}``: the action links the notifier sends (``runtime/action_links.py``), followed from a phone.

``GET`` changes nothing: it shows what the link would do, with a button that POSTs it. Chat apps fetch every
link in a message to draw its preview, and mail scanners fetch links too: an action on GET would be taken by
them, before the person has even read the message. ``POST`` does it, once (a request-changes link needs the
feedback, from the page's form or a JSON body). No bearer token: the signed link is the credential, for one
action on one card, for a set time. Answers are JSON (``ActionOutcome`` / ``ErrorReply``) unless the client
asks for HTML (a browser's form), which gets a page saying the same.
"""

from __future__ import annotations

import html
import json
import logging
from typing import Annotated, Any
from urllib.parse import parse_qs

from litestar import Request, Response, get, post
from litestar.datastructures import State
from litestar.enums import MediaType
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import PathParameter

from autarch.contracts.actions import ActionOutcome
from autarch.contracts.errors import ErrorCode, ErrorReply
from autarch.contracts.loops import LoopErrorCode
from autarch.contracts.workflows import GetWorkflow, WorkflowView
from autarch.runtime.action_links import ActionLink, LinkRefused, UsedLinks, redeem, verify
from autarch.runtime.errors import RemoteError
from autarch.runtime.settings import GatewaySettings

from .auth import NO_AUTH
from .orchestrator_client import ask_orchestrator, nc_of
from .workflow_routes import _STATUS as _WORKFLOW_STATUS

__all__ = ["ACTION_ROUTES"]

log = logging.getLogger(__name__)

_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    # The link is the credential: it must not travel to another site in a Referer, nor sit in a cache.
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Robots-Tag": "noindex",
}
_WHEN = {
    400: "Not an action link (`link_malformed`), or a body without the feedback a change request needs "
         "(`bad_request`)",
    403: "Not signed by this system: changed, or made with another key (`link_forged`)",
    409: "The card was answered or replaced, or the halt is over (`card_moved_on`), or the workflow is finished "
         "(`finished`)",
    410: "Expired (`link_expired`) or used already (`link_used`)",
    503: "The orchestrator did not answer (`unavailable`): nothing happened, the link still works",
    504: "The orchestrator did not answer in time (`timeout`): the link still works",
}

LinkToken = Annotated[str, PathParameter(pattern=r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$", max_length=2048)]
"""An action link's token as minted: base64url fields, a dot, the base64url HMAC-SHA256 signature (43 characters),
at most 2,048 characters in all (``action_links.verify``'s bound): anything else is refused before it is read."""


def _responses(*statuses: int) -> dict[int, ResponseSpec]:
    return {status: ResponseSpec(ErrorReply, description=_WHEN[status], generate_examples=False)
            for status in statuses}


_STATUS = {**_WORKFLOW_STATUS, **dict.fromkeys(LoopErrorCode.CONFLICTS, 409)}

_VERB = {"approve": "Approve", "request_changes": "Request changes to", "stop": "Stop"}


async def _workflow_control_page(state: State, link: ActionLink) -> Response[Any]:
    """The page of a Resume link (a halt) or a Stop link (a card or a halt: it abandons the workflow)."""
    about = ""
    try:
        view = await ask_orchestrator(state, "get_workflow", GetWorkflow(workflow_id=link.run_id), WorkflowView,
                                      idempotent=True)
        waits = f"halted ({view.halt.reason})" if view.halt else (
            "awaiting approval" if view.awaiting_approval else view.status)
        about = f"<p>Workflow <b>{html.escape(view.title)}</b> ({html.escape(view.id)}), in " \
                f"{html.escape(view.stage)}, {html.escape(waits)}.</p>"
    except RemoteError as exc:
        about = f"<p>The workflow could not be read ({html.escape(exc.code)}).</p>"
    card = f'<p><a href="/workflows/{html.escape(link.run_id)}">Open the workflow in the UI</a> (signed in).</p>'
    if link.action == "resume":
        return _page("Resume the halted workflow",
                     about + '<form method="post"><button type="submit">Resume</button></form>' + card +
                     "<p>The link works once, and only while the workflow still waits at this halt.</p>")
    return _page("Stop: end the workflow",
                 about + "<p><b>Stopping ends this workflow for good</b>: it is abandoned, its agents closed and its "
                 "worktree removed (its branch stays). It cannot be resumed.</p>"
                 '<form method="post"><button type="submit">End the workflow</button></form>' + card +
                 "<p>The link works once, and only while the workflow still waits where it did when the link "
                 "was sent.</p>")


def _key(state: State) -> bytes:
    return state["action_key"]


def _used(state: State) -> UsedLinks:
    used = state.get("used_links")
    if used is None:
        settings: GatewaySettings = state["settings"]
        used = state["used_links"] = UsedLinks(nc_of(state), replicas=settings.stream_replicas,
                                               timeout=settings.request_timeout)
    return used


def _wants_html(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return "text/html" in accept and "application/json" not in accept


def _page(title: str, body: str, status: int = 200) -> Response[str]:
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex"><title>{html.escape(title)} · Autarch</title>
<style>body{{font:16px/1.4 system-ui,sans-serif;max-width:36em;margin:2em auto;padding:0 1em}}
button{{font-size:1.1em;padding:.5em 1.2em}}textarea{{width:100%;min-height:8em}}</style></head>
<body><h1>{html.escape(title)}</h1>{body}</body></html>"""
    return Response(page, media_type=MediaType.HTML, status_code=status, headers=_HEADERS)


def _refusal(reply: ErrorReply, status: int, as_html: bool) -> Response[Any]:
    if as_html:
        return _page("This link does nothing", f"<p><code>{html.escape(reply.code)}</code>: "
                                               f"{html.escape(reply.message)}</p>", status)
    return Response(reply, status_code=status, headers=_HEADERS, media_type=MediaType.JSON)


@get("/act/{token:str}", summary="What an action link does (changes nothing)", tags=["actions"], opt=NO_AUTH,
     responses=_responses(400, 403, 410), media_type=MediaType.HTML)
async def show_action(token: LinkToken, request: Request, state: State) -> Response[Any]:
    """A page saying what the link does, to which card, with the button that does it (a ``POST`` of the same
    URL). Safe for link previews: nothing happens on ``GET``. An invalid link's page says why
    (``link_malformed`` 400, ``link_forged`` 403, ``link_expired`` or ``link_used`` 410): an HTML page for a
    browser (``Accept: text/html``), else the ``ErrorReply``."""
    as_html = _wants_html(request)
    try:
        link = verify(_key(state), token)
        earlier = await _used(state).used(link.nonce)
    except LinkRefused as exc:
        return _refusal(exc.reply, exc.status, as_html)
    if earlier is not None:
        return _refusal(ErrorReply(code="link_used", message="this link was used already; it works once"), 410,
                        as_html)
    if link.action == "stop":
        return _page("Stop the blocked loop session",
                     f"<p>Loop session {html.escape(link.run_id)}, blocked at iteration {link.card_version}: "
                     "stopping ends it for good (its work stays on its branch).</p>"
                     '<form method="post"><button type="submit">Stop the session</button></form>'
                     "<p>The link works once, and only while the session is still blocked there.</p>")
    if link.action in ("resume", "abandon"):
        return await _workflow_control_page(state, link)
    title = f"{_VERB[link.action]} the {link.stage} card"
    about = ""
    try:
        view = await ask_orchestrator(state, "get_workflow", GetWorkflow(workflow_id=link.run_id), WorkflowView,
                                      idempotent=True)
        about = f"<p>Workflow <b>{html.escape(view.title)}</b> ({html.escape(view.id)}), now in " \
                f"{html.escape(view.stage)}{', awaiting approval' if view.awaiting_approval else ''}.</p>"
        if view.stage != link.stage or not view.awaiting_approval:
            about += "<p>This card has moved on: the link will be refused.</p>"
    except RemoteError as exc:
        about = f"<p>The workflow could not be read ({html.escape(exc.code)}).</p>"
    card = f'<p><a href="/workflows/{html.escape(link.run_id)}">Open the card in the UI</a> (signed in).</p>'
    if link.action == "approve":
        form = '<form method="post"><button type="submit">Approve</button></form>'
    else:
        form = ('<form method="post"><label for="feedback">What should change?</label>'
                '<textarea id="feedback" name="feedback" required></textarea>'
                '<button type="submit">Send the card back</button></form>')
    return _page(title, about + form + card + "<p>The link works once.</p>")


@post("/act/{token:str}", status_code=200, summary="Do what an action link says, once", tags=["actions"],
      opt=NO_AUTH, responses={200: ResponseSpec(ActionOutcome, description="What the link did",
                                                generate_examples=False), **_responses(400, 403, 409, 410, 503, 504)})
async def take_action(token: LinkToken, request: Request, state: State) -> Response[Any]:
    """Approve, or request changes to, the link's card, or resume the link's halt; the workflow's event records the
    channel the link was sent to (``source``). A workflow's Stop link (on a card or a halt) ends the workflow
    (``workflow:abandoned``); a loop's aborts its blocked session (reason ``stopped from <channel>``).
    A request-changes link needs ``{"feedback": "..."}`` (or the form field). Refused, with
    nothing changed: ``link_malformed`` (400), ``link_forged`` (403), ``link_expired`` / ``link_used`` (410),
    ``card_moved_on`` (409: the card was answered or replaced) or another lifecycle conflict (409). A link
    refused by the workflow is spent; one the orchestrator could not be asked about (503/504) works again."""
    as_html = _wants_html(request)
    raw = await request.body()
    try:
        feedback = _feedback(raw, request.headers.get("content-type", ""))
    except ValueError as exc:
        return _refusal(ErrorReply(code=ErrorCode.BAD_REQUEST, message=str(exc)), 400, as_html)
    settings: GatewaySettings = state["settings"]
    try:
        outcome = await redeem(nc_of(state), _key(state), token, _used(state),
                               partitions=settings.orchestrator_partitions, timeout=settings.request_timeout,
                               feedback=feedback)
    except LinkRefused as exc:
        return _refusal(exc.reply, exc.status, as_html)
    except RemoteError as exc:
        return _refusal(exc.reply, _STATUS.get(exc.code, 500), as_html)
    log.info("action link: %s of the %s card of %s from %s", outcome.action, outcome.stage, outcome.run_id,
             outcome.source)
    if as_html and outcome.workflow is not None and outcome.action in ("resume", "abandon"):
        done = "resumed" if outcome.action == "resume" else "ended (abandoned)"
        return _page("Done", f"<p>Workflow <b>{html.escape(outcome.workflow.title)}</b> was {done}.</p>")
    if as_html and outcome.workflow is not None:
        done = "approved" if outcome.action == "approve" else "sent back with your feedback"
        return _page("Done", f"<p>The {html.escape(outcome.stage)} card of <b>{html.escape(outcome.workflow.title)}"
                             f"</b> was {done}; the workflow is now in {html.escape(outcome.workflow.stage)}.</p>")
    if as_html:
        return _page("Done", f"<p>Loop session {html.escape(outcome.run_id)} was stopped.</p>")
    return Response(outcome, headers=_HEADERS, media_type=MediaType.JSON)


def _feedback(raw: bytes, content_type: str) -> str | None:
    """The feedback of a JSON body or the page's form; None for an empty body."""
    if not raw.strip():
        return None
    if content_type.startswith("application/x-www-form-urlencoded"):
        values = parse_qs(raw.decode("utf-8", "replace")).get("feedback")
        return values[0] if values else None
    try:
        body = json.loads(raw)
    except ValueError:
        raise ValueError("the body is neither JSON nor the page's form") from None
    if not isinstance(body, dict) or set(body) - {"feedback"} or not isinstance(body.get("feedback", ""), str):
        raise ValueError('the body takes one field, {"feedback": "<what to change>"}')
    return body.get("feedback")


ACTION_ROUTES = [show_action, take_action]
