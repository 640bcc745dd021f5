"""How each kind of target is sent: the HTTP request a recorded delivery becomes, built from the settings when it
is sent (so no secret is ever recorded, and a corrected setting applies to what is still pending)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from autarch.runtime.settings import NotifierSettings

from .outbox import Pending

__all__ = ["Request", "redact", "request_for"]

_DISCORD_USER_AGENT = "DiscordBot (autarch, 0.1.0)"
"""Discord asks every bot request for a ``DiscordBot (url, version)`` user agent."""


@dataclass(frozen=True, kw_only=True)
class Request:
    """One POST: a JSON body or form fields, with its headers and basic auth."""

    url: str
    json: dict[str, Any] | None = None
    form: dict[str, str] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    auth: tuple[str, str] | None = None


def request_for(delivery: Pending, settings: NotifierSettings) -> Request | str:
    """The request that makes ``delivery``, or why none can (the delivery is then given up at once)."""
    target = delivery.target
    headers = {"Idempotency-Key": delivery.delivery_id}
    if target.kind == "telegram":
        if not settings.notify_telegram_token:
            return "telegram target but no bot token configured (notify_telegram_token)"
        if not target.chat_id:
            return "telegram target without chat_id"
        return Request(url=f"{_base(settings.notify_telegram_base_url)}/bot{settings.notify_telegram_token}"
                           "/sendMessage", json=delivery.body, headers=headers)
    if target.kind == "sms":
        sid, token, sender = (settings.notify_sms_account_sid, settings.notify_sms_auth_token,
                              settings.notify_sms_from)
        if not (sid and token and sender):
            return ("sms target but no SMS account configured (notify_sms_account_sid, notify_sms_auth_token, "
                    "notify_sms_from)")
        if not target.phone_number:
            return "sms target without phone_number"
        return Request(url=f"{_base(settings.notify_sms_base_url)}/2010-04-01/Accounts/{sid}/Messages.json",
                       form={**delivery.body, "From": sender}, headers=headers, auth=(sid, token))
    if target.kind == "discord" and target.discord_thread_id and not target.url:
        token = settings.notify_discord_bot_token
        if not token:
            return "discord thread target but no bot token configured (notify_discord_bot_token)"
        return Request(url=f"{_base(settings.notify_discord_base_url)}/channels/{target.discord_thread_id}/messages",
                       json=delivery.body,
                       headers={**headers, "Authorization": f"Bot {token}", "User-Agent": _DISCORD_USER_AGENT})
    if not target.url:
        return f"{target.kind} target without url"
    url = target.url
    if target.kind == "discord" and target.discord_thread_id:
        url = _with_query(url, f"thread_id={target.discord_thread_id}")  # the webhook posts into that thread
    if target.kind == "discord" and "components" in delivery.body:
        url = _with_query(url, "with_components=true")  # a webhook's link buttons are dropped without it
    return Request(url=url, json=delivery.body, headers=headers)


def redact(text: str, settings: NotifierSettings) -> str:
    """``text`` (an error, a log line) with every secret of the settings replaced by ``***``."""
    for secret in (settings.notify_telegram_token, settings.notify_discord_bot_token, settings.notify_sms_auth_token):
        if secret:
            text = text.replace(secret, "***")
    return text


def _base(url: str) -> str:
    return url.rstrip("/")


def _with_query(url: str, pair: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(query=f"{parts.query}&{pair}" if parts.query else pair))
