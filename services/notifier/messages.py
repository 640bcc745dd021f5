"""What a loop event says (seed 001's wording) and the body each kind of target is sent."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from autarch.contracts.events import LoopBlocked, LoopCompleted, LoopEvent, LoopFailed, LoopIterationCompleted
from autarch.contracts.loops import NotifyTarget

__all__ = ["Intent", "chat_body", "clip", "delivery_id", "intents_for", "target_key", "text_for"]

_ITERATION_LIMIT = "max iterations"
"""In the reason of a session ended by its iteration limit (the orchestrator's "max iterations reached (N)")."""


def text_for(event: LoopEvent) -> str | None:
    """The notification of ``event``, or None when it says nothing (an iteration that ended the session: the
    session's own event says it, so nothing is said twice)."""
    if isinstance(event, LoopIterationCompleted):
        if event.signal != "CONTINUE" or event.status != "complete":
            return None  # its CONTINUE was not followed: the iteration failed (``loop:failed`` says why)
        summary = event.output_summary.strip().rstrip(".") or "done"
        return f"📍 Iteration {event.iteration_number}/{event.max_iterations}: {summary}. Continuing..."
    if isinstance(event, LoopCompleted):
        iterations = "iteration" if event.iterations == 1 else "iterations"
        commits = "commit" if event.commits == 1 else "commits"
        text = f"✅ Session complete ({event.iterations} {iterations}, {event.commits} {commits})"
        if _ITERATION_LIMIT in event.reason.lower():
            text += f": {event.reason}"
        return text
    if isinstance(event, LoopBlocked):
        return f"⏸️ Blocked: {event.reason}"
    if isinstance(event, LoopFailed):
        return f"❌ Failed: {event.reason}"
    return None


@dataclass(frozen=True, kw_only=True)
class Intent:
    """One notification to one target, as the outbox records it before the stream message is acknowledged."""

    delivery_id: str
    session_id: str
    event: str
    target: NotifyTarget
    """Where it goes; the Bot API and SMS URLs are built from the settings when it is sent (never recorded: the
    Telegram URL holds the bot token)."""
    text: str
    body: dict[str, Any]
    occurred_at: str


DISCORD_LIMIT = 2000
TELEGRAM_LIMIT = 4096
SMS_LIMIT = 1600
"""Longest message each service takes (Discord's content, Telegram's text, Twilio's Body); longer is refused."""
NO_MENTIONS: dict[str, list[str]] = {"parse": []}
"""Discord's ``allowed_mentions`` that pings nobody: a summary the agent wrote saying ``@everyone`` stays text."""


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` UTF-16 code units (Telegram's count; for an emoji the stricter one elsewhere),
    ending in "…" when cut."""
    if len(text.encode("utf-16-le")) // 2 <= limit:
        return text
    kept, used = [], 0
    for char in text:
        size = 2 if ord(char) > 0xFFFF else 1
        if used + size > limit - 1:
            break
        kept.append(char)
        used += size
    return "".join(kept) + "…"


def target_key(target: NotifyTarget) -> str:
    """What tells two targets apart (the same key as before the Discord-thread and SMS fields existed)."""
    key = f"{target.kind}|{target.url or ''}|{target.chat_id or ''}"
    if target.discord_thread_id:
        key += f"|thread:{target.discord_thread_id}"
    if target.phone_number:
        key += f"|phone:{target.phone_number}"
    return key


def delivery_id(event_key: str, target: NotifyTarget) -> str:
    """Deterministic from the event (its ``Nats-Msg-Id``, else its stream sequence) and the target."""
    return hashlib.sha256(f"{event_key}\n{target_key(target)}".encode()).hexdigest()[:32]


def intents_for(event: LoopEvent, *, event_key: str, default_webhooks: tuple[str, ...]) -> list[Intent]:
    """The deliveries ``event`` asks for: its own ``notify`` targets and the default webhooks, each once."""
    text = text_for(event)
    if text is None:
        return []
    targets: list[NotifyTarget] = list(getattr(event, "notify", []))
    targets += [NotifyTarget(kind="webhook", url=url) for url in default_webhooks]
    event_type = type(event).__struct_config__.tag
    occurred_at = event.occurred_at.isoformat()
    seen: set[str] = set()
    intents = []
    for target in targets:
        key = target_key(target)
        if key in seen:
            continue
        seen.add(key)
        intents.append(Intent(
            delivery_id=delivery_id(event_key, target), session_id=event.session_id, event=str(event_type),
            target=target, text=text, body=_body(event, target, text, str(event_type), occurred_at),
            occurred_at=occurred_at))
    return intents


def chat_body(target: NotifyTarget, text: str) -> dict[str, Any]:
    """The body of a message to a chat target (every kind but ``webhook``)."""
    if target.kind == "slack":
        return {"text": text}
    if target.kind == "discord":
        return {"content": clip(text, DISCORD_LIMIT), "allowed_mentions": NO_MENTIONS}
    if target.kind == "telegram":
        return {"chat_id": target.chat_id, "text": clip(text, TELEGRAM_LIMIT)}
    if target.kind == "sms":
        # Form fields of the Twilio API; ``From`` is the sender setting, added when sent.
        return {"To": target.phone_number, "Body": clip(text, SMS_LIMIT)}
    raise ValueError(f"no chat body for a {target.kind} target")


def _body(event: LoopEvent, target: NotifyTarget, text: str, event_type: str, occurred_at: str) -> dict[str, Any]:
    if target.kind != "webhook":
        return chat_body(target, text)
    iteration = getattr(event, "iteration_number", None)
    if isinstance(event, LoopCompleted):
        iteration = event.iterations
    return {
        "session_id": event.session_id,
        "event": event_type,
        "text": text,
        "iteration": iteration,
        "max_iterations": getattr(event, "max_iterations", None),
        "signal": getattr(event, "signal", None),
        "commit_hash": getattr(event, "commit_hash", None),
        "occurred_at": occurred_at,
    }
