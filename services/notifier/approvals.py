"""A card awaiting approval, or a halted workflow, announced on the ``notify_approvals`` channels with its action
links.

Each announcement carries links of its own (``runtime/action_links.py``), minted for that channel: for a card
approve, request changes and stop; for a halt resume (when ``resume`` lifts it) and stop. Stop *abandons* the
workflow: while it waits for the user no agent works, so there is nothing else to stop. Telegram gets an inline
keyboard whose Approve, Resume and Stop buttons are answered through the Bot API (``callback_data``
``act:<nonce>``, read by ``telegram_poller.py``) and whose Request changes button opens the link's page; Slack
and Discord get link buttons; a webhook gets the links as JSON. Without ``notify_links_base_url`` there is no
page to open: only Telegram's callback buttons act, the rest is text.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from autarch.contracts.actions import ActionKind, ActionSource
from autarch.contracts.events import LoopBlocked, WorkflowApprovalNeeded, WorkflowHalted
from autarch.contracts.execution import RESUMABLE
from autarch.contracts.loops import NotifyTarget
from autarch.contracts.workflows import WorkflowView
from autarch.runtime.action_links import mint
from autarch.runtime.settings import NotifierSettings

from .messages import DISCORD_LIMIT, NO_MENTIONS, TELEGRAM_LIMIT, Intent, clip, delivery_id
from .outbox import LinkRow

__all__ = ["APPROVAL_EVENT", "CALLBACK_PREFIX", "HALT_EVENT", "approval_intents", "approval_targets", "halt_intents",
           "with_stop_links"]

APPROVAL_EVENT = "workflow:approval_needed"
HALT_EVENT = "workflow:halted"
CALLBACK_PREFIX = "act:"
_SUMMARY_FIELDS = ("title", "summary", "approachSummary", "approach_summary", "recommendation")
_SUMMARY_LIMIT = 600


def approval_targets(settings: NotifierSettings) -> list[NotifyTarget]:
    """The ``notify_approvals`` entries as targets (the settings checked their shape)."""
    targets = []
    for entry in settings.notify_approvals:
        kind, _, address = entry.partition(":")
        if kind == "telegram":
            targets.append(NotifyTarget(kind="telegram", chat_id=address))
        else:
            targets.append(NotifyTarget(kind=kind, url=address))  # type: ignore[arg-type]  # checked by the settings
    return targets


def _summary(artifact: dict[str, Any]) -> str:
    for name in _SUMMARY_FIELDS:
        value = artifact.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()[:_SUMMARY_LIMIT]
    return ""


@dataclasses.dataclass(frozen=True)
class _Button:
    key: str
    """The action's name in a webhook's ``actions`` and Slack's ``action_id``."""
    label: str
    action: ActionKind
    callback: bool
    """Telegram answers it through the Bot API (a callback button); else it opens the link's page."""
    style: str | None = None


_CARD_BUTTONS = ((_Button("approve", "✅ Approve", "approve", True, "primary"),
                  _Button("request_changes", "✏️ Request changes", "request_changes", False)),
                 (_Button("stop", "⏹️ Stop (end the workflow)", "abandon", True, "danger"),))
_HALT_BUTTONS = ((_Button("resume", "▶️ Resume", "resume", True, "primary"),
                  _Button("stop", "⏹️ Stop (end the workflow)", "abandon", True, "danger")),)
_STOP_ONLY = ((_Button("stop", "⏹️ Stop (end the workflow)", "abandon", True, "danger"),),)


def approval_intents(event: WorkflowApprovalNeeded, *, event_key: str, settings: NotifierSettings, key: bytes,
                     now: float | None = None) -> tuple[list[Intent], list[LinkRow]]:
    """The announcement of ``event`` to every approval target, and the links its Telegram buttons name."""
    if event.version is None:
        return [], []  # recorded by an orchestrator that does not say the card's version: no link could name it
    summary = _summary(event.artifact)
    text = f"🗳️ The {event.stage} card of workflow {event.workflow_id} awaits your approval."
    if summary:
        text += f"\n{summary}"
    return _announce(event, APPROVAL_EVENT, event.version, text, _CARD_BUTTONS, event_key=event_key,
                     settings=settings, key=key, now=now)


def halt_intents(event: WorkflowHalted, *, event_key: str, settings: NotifierSettings, key: bytes,
                 now: float | None = None) -> tuple[list[Intent], list[LinkRow]]:
    """The announcement of a halt to every approval target: Resume (for a halt ``resume`` lifts) and Stop, each
    good for this halt only; a halt waiting for answers or an extension is answered in the UI."""
    if event.version is None:
        return [], []
    text = f"⏸️ Workflow {event.workflow_id} halted in {event.stage} ({event.reason}): {event.message[:_SUMMARY_LIMIT]}"
    resumable = event.reason in RESUMABLE
    if not resumable:
        text += "\nAnswer it in the UI; Stop ends the workflow."
    return _announce(event, HALT_EVENT, event.version, text, _HALT_BUTTONS if resumable else _STOP_ONLY,
                     event_key=event_key, settings=settings, key=key, now=now)


def _announce(event: WorkflowApprovalNeeded | WorkflowHalted, name: str, version: int, text: str,
              rows: tuple[tuple[_Button, ...], ...], *, event_key: str, settings: NotifierSettings, key: bytes,
              now: float | None) -> tuple[list[Intent], list[LinkRow]]:
    clock = time.time() if now is None else now
    expires = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(clock + settings.notify_link_ttl))
    base = settings.notify_links_base_url.rstrip("/") if settings.notify_links_base_url else None
    intents: list[Intent] = []
    links: list[LinkRow] = []
    for target in approval_targets(settings):
        channel: ActionSource = target.kind
        did = delivery_id(event_key, target)
        made: dict[str, tuple[str, str]] = {}  # button key -> (token, nonce)
        for button in (b for row in rows for b in row):
            token, link = mint(key, run_id=event.workflow_id, stage=event.stage, card_version=version,
                               action=button.action, channel=channel, ttl=settings.notify_link_ttl, now=clock)
            made[button.key] = (token, link.nonce)
        urls = {k: f"{base}/act/{token}" for k, (token, _) in made.items()} if base else None
        said = text + (f"\nThe buttons work once, until {expires}." if urls or target.kind == "telegram" else
                       "\n(No action links: notify_links_base_url is not set.)")
        body = _body(target, event, name, version, said, rows, urls, made, expires=clock + settings.notify_link_ttl)
        intents.append(Intent(delivery_id=did, session_id=event.workflow_id, event=name, target=target,
                              text=said, body=body, occurred_at=event.occurred_at.isoformat()))
        if target.kind == "telegram":
            links.extend(LinkRow(nonce=made[b.key][1], delivery_id=did, run_id=event.workflow_id,
                                 token=made[b.key][0], chat_id=target.chat_id)
                         for row in rows for b in row if b.callback)
    return intents, links


def _body(target: NotifyTarget, event: WorkflowApprovalNeeded | WorkflowHalted, name: str, version: int, text: str,
          rows: tuple[tuple[_Button, ...], ...], urls: dict[str, str] | None, made: dict[str, tuple[str, str]], *,
          expires: float) -> dict[str, Any]:
    buttons = [b for row in rows for b in row]
    if target.kind == "telegram":
        links = urls or {}  # without a base URL only the callback buttons are shown
        keyboard = [[{"text": b.label, "callback_data": f"{CALLBACK_PREFIX}{made[b.key][1]}"} if b.callback else
                     {"text": b.label, "url": links[b.key]} for b in row if b.callback or b.key in links]
                    for row in rows]
        return {"chat_id": target.chat_id, "text": clip(text, TELEGRAM_LIMIT),
                "reply_markup": {"inline_keyboard": [row for row in keyboard if row]}}
    if target.kind == "slack":
        body: dict[str, Any] = {"text": text, "blocks": [{"type": "section", "text": {"type": "plain_text",
                                                                                      "text": text}}]}
        if urls:
            body["blocks"].append({"type": "actions", "elements": [
                {"type": "button", "action_id": b.key, "url": urls[b.key], **({"style": b.style} if b.style else {}),
                 "text": {"type": "plain_text", "text": _plain(b.label)}} for b in buttons]})
        return body
    if target.kind == "discord":
        body = {"content": clip(text, DISCORD_LIMIT), "allowed_mentions": NO_MENTIONS}
        if urls:
            # Style 5: a link button (opens the URL; Discord calls no bot back).
            body["components"] = [{"type": 1, "components": [
                {"type": 2, "style": 5, "label": _plain(b.label), "url": urls[b.key]} for b in buttons]}]
        return body
    extra: dict[str, Any] = {"card_version": version} if name == APPROVAL_EVENT else {
        "halt_version": version, "reason": getattr(event, "reason", None)}
    return {"workflow_id": event.workflow_id, "event": name, "stage": event.stage, **extra,
            "text": text, "actions": urls or {},
            "expires_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires)),
            "occurred_at": event.occurred_at.isoformat()}


def _plain(label: str) -> str:
    """A label without its leading emoji (Slack and Discord buttons are plain)."""
    return label.split(" ", 1)[1]


def with_stop_links(intents: list[Intent], event: LoopBlocked, *, settings: NotifierSettings, key: bytes,
                    now: float | None = None) -> tuple[list[Intent], list[LinkRow]]:
    """``intents`` (a ``loop:blocked`` notification's) each with a Stop link of its own channel: a Telegram button,
    a Slack or Discord link button, a webhook's ``actions.stop``; an SMS is left as it is."""
    clock = time.time() if now is None else now
    base = settings.notify_links_base_url.rstrip("/") if settings.notify_links_base_url else None
    changed: list[Intent] = []
    links: list[LinkRow] = []
    for intent in intents:
        target = intent.target
        if target.kind == "sms" or (target.kind != "telegram" and base is None):
            changed.append(intent)
            continue
        token, made = mint(key, run_id=event.session_id, stage="blocked", card_version=event.iteration_number,
                           action="stop", channel=target.kind, ttl=settings.notify_link_ttl, now=clock)
        url = f"{base}/act/{token}" if base else None
        body = dict(intent.body)
        if target.kind == "telegram":
            body["reply_markup"] = {"inline_keyboard": [[{"text": "⏹️ Stop the session",
                                                          "callback_data": f"{CALLBACK_PREFIX}{made.nonce}"}]]}
            links.append(LinkRow(nonce=made.nonce, delivery_id=intent.delivery_id, run_id=event.session_id,
                                 token=token, chat_id=target.chat_id))
        elif target.kind == "slack":
            button = {"type": "button", "action_id": "stop", "style": "danger", "url": url,
                      "text": {"type": "plain_text", "text": "Stop the session"}}
            body["blocks"] = [{"type": "section", "text": {"type": "plain_text", "text": intent.text}},
                              {"type": "actions", "elements": [button]}]
        elif target.kind == "discord":
            body["components"] = [{"type": 1, "components": [{"type": 2, "style": 5, "label": "Stop the session",
                                                              "url": url}]}]
        else:
            body["actions"] = {"stop": url}
        changed.append(dataclasses.replace(intent, body=body))
    return changed, links


def still_waiting(event: WorkflowApprovalNeeded | WorkflowHalted, view: WorkflowView) -> bool:
    """Whether the workflow still waits where ``event`` says (the same card, the same halt): only then are its
    links worth sending. A fork's copied history, a replayed stream and a card answered before the notifier came
    round to it are not announced."""
    if isinstance(event, WorkflowApprovalNeeded):
        return view.awaiting_approval and view.card_version is not None and view.card_version == event.version
    return view.halt is not None and view.halt.version is not None and view.halt.version == event.version
