"""The notifier's queries and replies: what was delivered where, and what was given up.

The notifier follows the loop events on ``AUTARCH_EVENTS`` and delivers the seed-001 notifications
("📍 Iteration 3/10: … Continuing...", "✅ Session complete (…)", "⏸️ Blocked: …", "❌ Failed: …") to
webhooks, Slack, Discord and Telegram. Every delivery is recorded; ``list_deliveries`` serves the record.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from .base import Query, Reply
from .loops import NotifyKind

__all__ = ["Delivery", "DeliveryList", "DeliveryState", "ListDeliveries"]

DeliveryState = Literal["pending", "delivered", "failed"]
"""``pending``: not delivered yet (being retried); ``delivered``: the receiver answered 2xx; ``failed``: given up
after the last attempt, or undeliverable (``last_error`` says why)."""


class ListDeliveries(Query, kw_only=True):
    """The recorded deliveries, oldest first; ``session_id`` keeps one loop session's."""

    session_id: str | None = None
    state: DeliveryState | None = None
    limit: int = 1000


class Delivery(Reply, kw_only=True):
    """One notification to one target."""

    delivery_id: str
    """Deterministic from the event and the target; sent as the ``Idempotency-Key`` header."""
    session_id: str
    event: str
    """The loop event type (``loop:completed``, …)."""
    kind: NotifyKind
    url: str
    """Where it is POSTed; empty for Telegram (that URL holds the bot token, a setting never recorded)."""
    chat_id: str | None = None
    text: str
    state: DeliveryState
    attempts: int
    last_status: int | None = None
    """The receiver's last HTTP status (None: no answer)."""
    last_error: str | None = None
    created_at: datetime
    delivered_at: datetime | None = None


class DeliveryList(Reply, kw_only=True):
    deliveries: list[Delivery]
