"""What a loop event says (seed 001's wording) and how it is sent to each kind of target."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from autarch.contracts.events import LoopBlocked, LoopCompleted, LoopEvent, LoopFailed, LoopIterationCompleted
from autarch.contracts.loops import NotifyTarget

__all__ = ["Intent", "delivery_id", "intents_for", "text_for"]

_ITERATION_LIMIT = "max iterations"
"""In the reason of a session ended by its iteration limit (the orchestrator's "max iterations reached (N)")."""


def text_for(event: LoopEvent) -> str | None:
    """The notification of ``event``, or None when it says nothing (an iteration that ended the session: the
    session's own event says it, so nothing is said twice)."""
    if isinstance(event, LoopIterationCompleted):
        if event.signal != "CONTINUE":
            return None
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
    kind: str
    url: str
    """The URL POSTed to; for Telegram the path after the bot token (``/sendMessage``) is kept, not the token."""
    chat_id: str | None
    text: str
    body: dict[str, Any]
    occurred_at: str


def _target_key(target: NotifyTarget) -> str:
    return f"{target.kind}|{target.url or ''}|{target.chat_id or ''}"


def delivery_id(event_key: str, target: NotifyTarget) -> str:
    """Deterministic from the event (its ``Nats-Msg-Id``, else its stream sequence) and the target."""
    return hashlib.sha256(f"{event_key}\n{_target_key(target)}".encode()).hexdigest()[:32]


def intents_for(event: LoopEvent, *, event_key: str, default_webhooks: tuple[str, ...]) -> list[Intent]:
    """The deliveries ``event`` asks for: its own ``notify`` targets and the default webhooks, each once."""
    text = text_for(event)
    if text is None:
        return []
    targets: list[NotifyTarget] = list(getattr(event, "notify", []))
    targets += [NotifyTarget(kind="webhook", url=url) for url in default_webhooks]
    event_type = type(event).__struct_config__.tag  # type: ignore[union-attr]
    occurred_at = event.occurred_at.isoformat()
    seen: set[str] = set()
    intents = []
    for target in targets:
        key = _target_key(target)
        if key in seen:
            continue
        seen.add(key)
        intents.append(Intent(
            delivery_id=delivery_id(event_key, target), session_id=event.workflow_id, event=str(event_type),
            kind=target.kind, url=target.url or "", chat_id=target.chat_id, text=text,
            body=_body(event, target, text, str(event_type), occurred_at), occurred_at=occurred_at))
    return intents


def _body(event: LoopEvent, target: NotifyTarget, text: str, event_type: str, occurred_at: str) -> dict[str, Any]:
    if target.kind == "slack":
        return {"text": text}
    if target.kind == "discord":
        return {"content": text}
    if target.kind == "telegram":
        return {"chat_id": target.chat_id, "text": text}
    iteration = getattr(event, "iteration_number", None)
    if isinstance(event, LoopCompleted):
        iteration = event.iterations
    return {
        "session_id": event.workflow_id,
        "event": event_type,
        "text": text,
        "iteration": iteration,
        "max_iterations": getattr(event, "max_iterations", None),
        "signal": getattr(event, "signal", None),
        "commit_hash": getattr(event, "commit_hash", None),
        "occurred_at": occurred_at,
    }
