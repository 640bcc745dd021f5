"""The notifier's queries and replies: what was delivered where, and what was given up.

The notifier follows the loop events on ``AUTARCH_EVENTS`` and delivers the seed-001 notifications
("📍 Iteration 3/10: … Continuing...", "✅ Session complete (…)", "⏸️ Blocked: …", "❌ Failed: …") to
webhooks, Slack, Discord (webhook or thread), Telegram and SMS, and answers the Telegram commands that start
sessions. Every delivery is recorded; ``list_deliveries`` serves the record.
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
    """The loop session (the workflow for an approval announcement); empty for the answer to a Telegram command
    that started none."""
    event: str
    """The loop event type (``loop:completed``, …); ``workflow:approval_needed`` for a card announced with its
    action links; ``telegram:command`` for the answer to a Telegram command, ``telegram:action`` for what an
    approval button did."""
    kind: NotifyKind
    url: str
    """The target's webhook URL; empty for the Bot APIs and SMS (their URLs are built from the notifier's settings
    when sent; Telegram's holds the bot token, a setting never recorded)."""
    chat_id: str | None = None
    discord_thread_id: str | None = None
    phone_number: str | None = None
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
