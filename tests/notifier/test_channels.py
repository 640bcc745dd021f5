"""Discord threads (Bot API, or a webhook into a thread) and SMS (a Twilio-compatible API), each against a real
HTTP receiver the test starts: the exact request (path, auth, body), the record, and what cannot be sent."""

from __future__ import annotations

import base64
import logging
import sqlite3
import uuid

from nats.aio.client import Client

from autarch.contracts.events import LoopBlocked, LoopCompleted
from autarch.contracts.loops import NotifyTarget
from autarch.services.notifier.outbox import Outbox

from .conftest import deliveries, now, publish
from .receiver import Receiver
from .test_notifier import _iteration, _wait_state

THREAD = "1187654321098765432"
PHONE = "+15557654321"
TEXTS = ["📍 Iteration 1/10: Built login component. Continuing...", "⏸️ Blocked: Need API key for Stripe integration",
         "✅ Session complete (5 iterations, 3 commits)"]


async def _publish_three(nc: Client, session: str, targets: list[NotifyTarget]) -> None:
    await publish(nc, _iteration(session, 1, notify=targets))
    await publish(nc, LoopBlocked(session_id=session, occurred_at=now(), iteration_number=1,
                                  reason="Need API key for Stripe integration", notify=targets))
    await publish(nc, LoopCompleted(session_id=session, occurred_at=now(), reason="COMPLETE signal", iterations=5,
                                    commits=3, notify=targets))


async def test_a_discord_thread_is_posted_to_through_the_bot_api(nc: Client, notifier_factory, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    receiver = await Receiver().start()
    session = str(uuid.uuid4())
    await notifier_factory(notify_discord_bot_token="D1SC0RD-T0KEN", notify_discord_base_url=f"{receiver.url}/api/v10/")
    await _publish_three(nc, session, [NotifyTarget(kind="discord", discord_thread_id=THREAD)])
    got = await receiver.wait_for(3, f"/api/v10/channels/{THREAD}/messages")
    assert [r.body for r in got] == [{"content": t, "allowed_mentions": {"parse": []}} for t in TEXTS]
    for request in got:
        assert request.headers["authorization"] == "Bot D1SC0RD-T0KEN"
        assert request.headers["user-agent"].startswith("DiscordBot (")
        assert request.headers["content-type"] == "application/json"
    record = await _wait_state(nc, session, "delivered", 3)
    assert [r.headers["idempotency-key"] for r in got] == [d.delivery_id for d in record]
    assert {(d.kind, d.url, d.discord_thread_id, d.attempts) for d in record} == {("discord", "", THREAD, 1)}
    assert "D1SC0RD-T0KEN" not in str(record) and "D1SC0RD-T0KEN" not in caplog.text
    await receiver.stop()


async def test_a_discord_webhook_with_a_thread_posts_into_that_thread(nc: Client, notifier_factory) -> None:
    receiver = await Receiver().start()
    session = str(uuid.uuid4())
    await notifier_factory()  # no bot token: a webhook needs none
    target = NotifyTarget(kind="discord", url=f"{receiver.url}/webhooks/1/abc?wait=true", discord_thread_id=THREAD)
    await publish(nc, _iteration(session, 1, notify=[target]))
    [got] = await receiver.wait_for(1)
    assert got.path == f"/webhooks/1/abc?wait=true&thread_id={THREAD}"
    assert "authorization" not in got.headers
    assert got.body == {"content": TEXTS[0], "allowed_mentions": {"parse": []}}
    await _wait_state(nc, session, "delivered", 1)
    await receiver.stop()


async def test_an_sms_goes_through_a_twilio_compatible_api(nc: Client, notifier_factory, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    receiver = await Receiver(status=201).start()  # Twilio answers 201 Created
    session = str(uuid.uuid4())
    await notifier_factory(notify_sms_base_url=f"{receiver.url}/twilio", notify_sms_account_sid="AC0123",
                           notify_sms_auth_token="SMS-S3CRET", notify_sms_from="+15550001111")
    await _publish_three(nc, session, [NotifyTarget(kind="sms", phone_number=PHONE)])
    got = await receiver.wait_for(3, "/twilio/2010-04-01/Accounts/AC0123/Messages.json")
    assert [r.body for r in got] == [{"To": PHONE, "From": "+15550001111", "Body": t} for t in TEXTS]
    basic = base64.b64encode(b"AC0123:SMS-S3CRET").decode()
    for request in got:
        assert request.headers["authorization"] == f"Basic {basic}"
        assert request.headers["content-type"] == "application/x-www-form-urlencoded"
    record = await _wait_state(nc, session, "delivered", 3)
    assert [r.headers["idempotency-key"] for r in got] == [d.delivery_id for d in record]
    assert {(d.kind, d.url, d.phone_number, d.last_status) for d in record} == {("sms", "", PHONE, 201)}
    assert "SMS-S3CRET" not in str(record) and "SMS-S3CRET" not in caplog.text
    await receiver.stop()


async def test_long_texts_are_cut_to_what_each_service_takes(nc: Client, notifier_factory) -> None:
    receiver = await Receiver().start()
    session = str(uuid.uuid4())
    await notifier_factory(notify_discord_bot_token="t", notify_discord_base_url=receiver.url,
                           notify_sms_base_url=receiver.url, notify_sms_account_sid="AC1", notify_sms_auth_token="t",
                           notify_sms_from="+15550001111", notify_telegram_token="t",
                           notify_telegram_base_url=receiver.url)
    reason = "🧱" * 3000  # outside the BMP: two UTF-16 units each, as the services count
    await publish(nc, LoopBlocked(session_id=session, occurred_at=now(), iteration_number=1, reason=reason,
                                  notify=[NotifyTarget(kind="discord", discord_thread_id=THREAD),
                                          NotifyTarget(kind="sms", phone_number=PHONE),
                                          NotifyTarget(kind="telegram", chat_id="42")]))
    await _wait_state(nc, session, "delivered", 3)
    discord = receiver.at(f"/channels/{THREAD}/messages")[0].body["content"]
    sms = receiver.at("/2010-04-01/Accounts/AC1/Messages.json")[0].body["Body"]
    telegram = receiver.at("/bott/sendMessage")[0].body["text"]
    for text, limit in ((discord, 2000), (sms, 1600), (telegram, 4096)):
        assert text.startswith("⏸️ Blocked: 🧱") and text.endswith("🧱…")
        assert limit - 2 <= len(text.encode("utf-16-le")) // 2 <= limit
    await receiver.stop()


async def test_a_target_its_settings_cannot_serve_fails_at_once(nc: Client, notifier_factory) -> None:
    session = str(uuid.uuid4())
    await notifier_factory(notify_sms_account_sid="AC1")  # no token, no sender; no Discord bot token
    await publish(nc, LoopBlocked(session_id=session, occurred_at=now(), iteration_number=1, reason="stuck",
                                  notify=[NotifyTarget(kind="discord", discord_thread_id=THREAD),
                                          NotifyTarget(kind="sms", phone_number=PHONE)]))
    failed = {d.kind: d for d in await _wait_state(nc, session, "failed", 2)}
    assert failed["discord"].attempts == 0
    assert failed["discord"].last_error == ("discord thread target but no bot token configured "
                                            "(notify_discord_bot_token)")
    assert failed["sms"].attempts == 0
    assert failed["sms"].last_error == ("sms target but no SMS account configured (notify_sms_account_sid, "
                                        "notify_sms_auth_token, notify_sms_from)")
    assert len((await deliveries(nc, session)).deliveries) == 2


def test_an_outbox_written_before_these_channels_opens_with_its_pending_deliveries(tmp_path) -> None:
    path = tmp_path / "outbox.sqlite"
    old = sqlite3.connect(path)
    old.executescript("""
        CREATE TABLE deliveries (
            delivery_id TEXT PRIMARY KEY, seq INTEGER NOT NULL,
            session_id TEXT NOT NULL, event TEXT NOT NULL, kind TEXT NOT NULL, url TEXT NOT NULL, chat_id TEXT,
            text TEXT NOT NULL, body TEXT NOT NULL, occurred_at TEXT NOT NULL,
            state TEXT NOT NULL DEFAULT 'pending', attempts INTEGER NOT NULL DEFAULT 0,
            last_status INTEGER, last_error TEXT, created_at REAL NOT NULL, delivered_at REAL);
        INSERT INTO deliveries (delivery_id, seq, session_id, event, kind, url, chat_id, text, body, occurred_at,
                                created_at) VALUES ('d1', 1, 's', 'loop:blocked', 'telegram', '', '42', 'hi',
                                '{"chat_id": "42", "text": "hi"}', '2025-01-01T00:00:00+00:00', 0);
    """)
    old.close()
    outbox = Outbox(path)
    [pending] = outbox.pending()
    assert pending.target == NotifyTarget(kind="telegram", chat_id="42")
    assert pending.body == {"chat_id": "42", "text": "hi"}
    [listed] = outbox.list()
    assert (listed.chat_id, listed.discord_thread_id, listed.phone_number) == ("42", None, None)
    outbox.close()
