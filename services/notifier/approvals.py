"""A card awaiting approval, announced on the ``notify_approvals`` channels with its action links.

Each announcement carries two links of its own (``runtime/action_links.py``), minted for that channel: approve,
and request changes. Telegram gets an inline keyboard whose Approve button is answered through the Bot API
(``callback_data`` ``act:<nonce>``, read by ``telegram_poller.py``) and whose Request changes button opens the
link's page; Slack and Discord get link buttons; a webhook gets the links as JSON. Without
``notify_links_base_url`` there is no page to open: only Telegram's Approve button acts, the rest is text.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from autarch.contracts.actions import ActionKind, ActionSource
from autarch.contracts.events import LoopBlocked, WorkflowApprovalNeeded
from autarch.contracts.loops import NotifyTarget
from autarch.runtime.action_links import mint
from autarch.runtime.settings import NotifierSettings

from .messages import DISCORD_LIMIT, NO_MENTIONS, TELEGRAM_LIMIT, Intent, clip, delivery_id
from .outbox import LinkRow

__all__ = ["APPROVAL_EVENT", "CALLBACK_PREFIX", "approval_intents", "approval_targets", "with_stop_links"]

APPROVAL_EVENT = "workflow:approval_needed"
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


def approval_intents(event: WorkflowApprovalNeeded, *, event_key: str, settings: NotifierSettings, key: bytes,
                     now: float | None = None) -> tuple[list[Intent], list[LinkRow]]:
    """The announcement of ``event`` to every approval target, and the links its Telegram buttons name."""
    if event.version is None:
        return [], []  # recorded by an orchestrator that does not say the card's version: no link could name it
    clock = time.time() if now is None else now
    expires = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(clock + settings.notify_link_ttl))
    summary = _summary(event.artifact)
    text = f"🗳️ The {event.stage} card of workflow {event.workflow_id} awaits your approval."
    if summary:
        text += f"\n{summary}"
    base = settings.notify_links_base_url.rstrip("/") if settings.notify_links_base_url else None
    intents: list[Intent] = []
    links: list[LinkRow] = []
    for target in approval_targets(settings):
        channel: ActionSource = target.kind
        did = delivery_id(event_key, target)

        def link(action: ActionKind, channel: ActionSource = channel) -> tuple[str, str]:
            token, made = mint(key, workflow_id=event.workflow_id, stage=event.stage, card_version=event.version or 0,
                               action=action, channel=channel, ttl=settings.notify_link_ttl, now=clock)
            return token, made.nonce

        approve_token, approve_nonce = link("approve")
        changes_token, _ = link("request_changes")
        urls = {"approve": f"{base}/act/{approve_token}", "request_changes": f"{base}/act/{changes_token}"} \
            if base else None
        said = text + (f"\nThe buttons work once, until {expires}." if urls or target.kind == "telegram" else
                       "\n(No action links: notify_links_base_url is not set.)")
        body = _body(target, event, said, urls, approve_nonce, expires=clock + settings.notify_link_ttl)
        intents.append(Intent(delivery_id=did, session_id=event.workflow_id, event=APPROVAL_EVENT, target=target,
                              text=said, body=body, occurred_at=event.occurred_at.isoformat()))
        if target.kind == "telegram":
            links.append(LinkRow(nonce=approve_nonce, delivery_id=did, workflow_id=event.workflow_id,
                                 token=approve_token, chat_id=target.chat_id))
    return intents, links


def _body(target: NotifyTarget, event: WorkflowApprovalNeeded, text: str, urls: dict[str, str] | None,
          approve_nonce: str, *, expires: float) -> dict[str, Any]:
    if target.kind == "telegram":
        row: list[dict[str, str]] = [{"text": "✅ Approve", "callback_data": f"{CALLBACK_PREFIX}{approve_nonce}"}]
        if urls:
            row.append({"text": "✏️ Request changes", "url": urls["request_changes"]})
        return {"chat_id": target.chat_id, "text": clip(text, TELEGRAM_LIMIT),
                "reply_markup": {"inline_keyboard": [row]}}
    if target.kind == "slack":
        body: dict[str, Any] = {"text": text, "blocks": [{"type": "section", "text": {"type": "plain_text",
                                                                                      "text": text}}]}
        if urls:
            body["blocks"].append({"type": "actions", "elements": [
                {"type": "button", "action_id": "approve", "style": "primary", "url": urls["approve"],
                 "text": {"type": "plain_text", "text": "Approve"}},
                {"type": "button", "action_id": "request_changes", "url": urls["request_changes"],
                 "text": {"type": "plain_text", "text": "Request changes"}}]})
        return body
    if target.kind == "discord":
        body = {"content": clip(text, DISCORD_LIMIT), "allowed_mentions": NO_MENTIONS}
        if urls:
            # Style 5: a link button (opens the URL; Discord calls no bot back).
            body["components"] = [{"type": 1, "components": [
                {"type": 2, "style": 5, "label": "Approve", "url": urls["approve"]},
                {"type": 2, "style": 5, "label": "Request changes", "url": urls["request_changes"]}]}]
        return body
    return {"workflow_id": event.workflow_id, "event": APPROVAL_EVENT, "stage": event.stage,
            "card_version": event.version, "text": text, "actions": urls or {},
            "expires_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires)),
            "occurred_at": event.occurred_at.isoformat()}


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
        token, made = mint(key, workflow_id=event.workflow_id, stage="blocked", card_version=event.iteration_number,
                           action="stop", channel=target.kind, ttl=settings.notify_link_ttl, now=clock)
        url = f"{base}/act/{token}" if base else None
        body = dict(intent.body)
        if target.kind == "telegram":
            body["reply_markup"] = {"inline_keyboard": [[{"text": "⏹️ Stop the session",
                                                          "callback_data": f"{CALLBACK_PREFIX}{made.nonce}"}]]}
            links.append(LinkRow(nonce=made.nonce, delivery_id=intent.delivery_id, workflow_id=event.workflow_id,
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
