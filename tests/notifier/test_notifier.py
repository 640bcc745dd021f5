"""The notifier over a real nats-server and real HTTP receivers: wording, formats, retries, final failures,
independence of targets, restarts and redeliveries (counted by ``Idempotency-Key``)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter

from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.js import api

from autarch.contracts.events import LoopBlocked, LoopCompleted, LoopFailed, LoopIterationCompleted, LoopStarted
from autarch.contracts.loops import NotifyTarget
from autarch.services.notifier.service import consumer_config

from .conftest import deliveries, now, publish
from .receiver import Receiver


def _iteration(session: str, number: int, signal: str = "CONTINUE", summary: str = "Built login component.",
               notify: list[NotifyTarget] | None = None) -> LoopIterationCompleted:
    return LoopIterationCompleted(session_id=session, occurred_at=now(), iteration_number=number, max_iterations=10,
                                  status="complete", signal=signal, signal_source="explicit",  # type: ignore[arg-type]  # tests pass any text as the signal
                                  output_summary=summary, commit_hash="abc123", notify=notify or [])


def _session() -> str:
    return str(uuid.uuid4())


async def _wait_state(nc: Client, session: str, state: str, count: int = 1, timeout: float = 30.0) -> list:
    """Poll the record served over NATS until ``count`` deliveries of ``session`` are in ``state``."""
    async def poll() -> list:
        while True:
            try:
                found = [d for d in (await deliveries(nc, session)).deliveries if d.state == state]
            except NoRespondersError:  # a notifier process still starting
                found = []
            if len(found) >= count:
                return found
            await asyncio.sleep(0.02)

    return await asyncio.wait_for(poll(), timeout)


async def test_wording_and_every_target_format(nc: Client, notifier_factory, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    receiver = await Receiver().start()
    session = _session()
    targets = [NotifyTarget(kind="slack", url=f"{receiver.url}/slack"),
               NotifyTarget(kind="discord", url=f"{receiver.url}/discord"),
               NotifyTarget(kind="telegram", chat_id="42")]
    await notifier_factory(notify_webhooks=(f"{receiver.url}/hook",), notify_telegram_token="T0KEN",
                           notify_telegram_base_url=f"{receiver.url}/tg")
    await publish(nc, LoopStarted(session_id=session, occurred_at=now(), project_name="p", project_path="/p",
                                  goal="g", max_iterations=10, branch_name="b", created_by="api",
                                  context_strategy="none", notify=targets))
    await publish(nc, _iteration(session, 3, notify=targets))
    await publish(nc, _iteration(session, 4, summary="Wired the form", notify=targets))
    await publish(nc, _iteration(session, 5, signal="COMPLETE", notify=targets))  # says nothing itself
    await publish(nc, LoopBlocked(session_id=session, occurred_at=now(), iteration_number=5,
                                  reason="Need API key for Stripe integration", notify=targets))
    await publish(nc, LoopCompleted(session_id=session, occurred_at=now(), reason="COMPLETE signal", iterations=5,
                                    commits=3, notify=targets))
    await publish(nc, LoopCompleted(session_id=session, occurred_at=now(), reason="max iterations reached (10)",
                                    iterations=10, commits=1, notify=targets))
    await publish(nc, LoopFailed(session_id=session, occurred_at=now(), reason="not a git repository",
                                 notify=targets))
    expected = ["📍 Iteration 3/10: Built login component. Continuing...",
                "📍 Iteration 4/10: Wired the form. Continuing...",
                "⏸️ Blocked: Need API key for Stripe integration",
                "✅ Session complete (5 iterations, 3 commits)",
                "✅ Session complete (10 iterations, 1 commit): max iterations reached (10)",
                "❌ Failed: not a git repository"]
    hook = await receiver.wait_for(6, "/hook")
    slack = await receiver.wait_for(6, "/slack")
    discord = await receiver.wait_for(6, "/discord")
    telegram = await receiver.wait_for(6, "/tg/botT0KEN/sendMessage")
    assert [r.body["text"] for r in hook] == expected
    assert [r.body for r in slack] == [{"text": t} for t in expected]
    # Discord pings nobody, whatever the agent wrote.
    assert [r.body for r in discord] == [{"content": t, "allowed_mentions": {"parse": []}} for t in expected]
    assert [r.body for r in telegram] == [{"chat_id": "42", "text": t} for t in expected]
    first = hook[0].body
    assert set(first) == {"session_id", "event", "text", "iteration", "max_iterations", "signal", "commit_hash",
                          "occurred_at"}
    assert (first["session_id"], first["event"], first["iteration"], first["max_iterations"], first["signal"],
            first["commit_hash"]) == (session, "loop:iteration_completed", 3, 10, "CONTINUE", "abc123")
    keys = [r.headers["idempotency-key"] for r in receiver.received]
    assert len(keys) == 24 and len(set(keys)) == 24
    # The receiver answers before the notifier records the answer: wait for the record to catch up.
    await _wait_state(nc, session, "delivered", 24)
    record = (await deliveries(nc, session)).deliveries
    assert len(record) == 24 and {d.state for d in record} == {"delivered"}
    assert all(d.attempts == 1 and d.delivered_at is not None for d in record)
    assert "T0KEN" not in str(record) and "T0KEN" not in caplog.text  # the bot token is never logged
    await receiver.stop()


async def test_retries_until_a_late_receiver_answers_once_per_key(nc: Client, notifier_factory) -> None:
    receiver = Receiver()  # not started: the endpoint is down
    session = _session()
    await notifier_factory(notify_webhooks=(f"{receiver.url}/hook",))
    await publish(nc, _iteration(session, 1))
    await publish(nc, _iteration(session, 2))
    # Down for a while: several attempts fail before the receiver comes up.
    async def failed_twice() -> None:
        while not any(d.attempts >= 2 for d in (await deliveries(nc, session)).deliveries):
            await asyncio.sleep(0.02)

    await asyncio.wait_for(failed_twice(), 30)
    await receiver.start()
    await _wait_state(nc, session, "delivered", 2)
    got = await receiver.wait_for(2)
    assert [r.body["iteration"] for r in got] == [1, 2]
    assert Counter(r.headers["idempotency-key"] for r in got) == {d.delivery_id: 1 for d in
                                                                  (await deliveries(nc, session)).deliveries}
    record = (await deliveries(nc, session)).deliveries
    assert record[0].attempts >= 3 and record[0].last_status == 200
    await receiver.stop()


async def test_final_failure_is_recorded_after_max_attempts(nc: Client, notifier_factory) -> None:
    receiver = await Receiver(status=500).start()
    session = _session()
    await notifier_factory(notify_webhooks=(f"{receiver.url}/hook",), notify_max_attempts=3)
    gone = await Receiver(status=410).start()
    await publish(nc, LoopBlocked(session_id=session, occurred_at=now(), iteration_number=1, reason="stuck",
                                  notify=[NotifyTarget(kind="telegram", chat_id="7"),
                                          NotifyTarget(kind="slack", url=f"{gone.url}/gone"),
                                          NotifyTarget(kind="discord")]))
    failed = await _wait_state(nc, session, "failed", 4)
    by_kind = {d.kind: d for d in failed}
    assert (by_kind["slack"].attempts, by_kind["slack"].last_status) == (1, 410)  # refused: not asked again
    assert by_kind["discord"].attempts == 0 and "without url" in (by_kind["discord"].last_error or "")
    await gone.stop()
    assert (by_kind["webhook"].attempts, by_kind["webhook"].last_status) == (3, 500)
    assert "HTTP 500" in (by_kind["webhook"].last_error or "")
    assert by_kind["telegram"].attempts == 0 and "no bot token" in (by_kind["telegram"].last_error or "")
    assert by_kind["webhook"].delivered_at is None
    await receiver.stop()


async def test_a_dead_endpoint_does_not_delay_another_target(nc: Client, notifier_factory) -> None:
    held = asyncio.Event()
    dead = await Receiver(hold=held).start()  # takes every request and never answers until released
    alive = await Receiver().start()
    session = _session()
    await notifier_factory(notify_webhooks=(f"{dead.url}/hook", f"{alive.url}/hook"), notify_timeout=60.0)
    for number in (1, 2, 3):
        await publish(nc, _iteration(session, number))
    got = await alive.wait_for(3)
    assert [r.body["iteration"] for r in got] == [1, 2, 3]
    assert dead.received == []  # still holding the first request: the live target did not wait for it
    held.set()
    await dead.wait_for(3)
    await _wait_state(nc, session, "delivered", 6)
    await dead.stop()
    await alive.stop()


async def test_restart_mid_way_loses_and_doubles_nothing(nc: Client, notifier_factory) -> None:
    receiver = Receiver()
    session = _session()
    first = await notifier_factory(notify_webhooks=(f"{receiver.url}/hook",))
    for number in (1, 2, 3):
        await publish(nc, _iteration(session, number))
    await _wait_state(nc, session, "pending", 3)  # recorded and acknowledged, none delivered
    await first.stop()
    await receiver.start()
    for number in (4, 5):  # published while the notifier is down
        await publish(nc, _iteration(session, number))
    await notifier_factory(notify_webhooks=(f"{receiver.url}/hook",))
    await _wait_state(nc, session, "delivered", 5)
    got = await receiver.wait_for(5)
    assert sorted(r.body["iteration"] for r in got) == [1, 2, 3, 4, 5]
    assert set(Counter(r.headers["idempotency-key"] for r in got).values()) == {1}
    await receiver.stop()


async def test_a_redelivered_message_records_nothing_new(nc: Client, notifier_factory) -> None:
    receiver = await Receiver().start()
    session = _session()
    service = await notifier_factory(notify_webhooks=(f"{receiver.url}/hook",))
    await publish(nc, _iteration(session, 1))
    await _wait_state(nc, session, "delivered", 1)
    await service.stop()
    # The stream hands every message out again (the consumer starts over), then a new event as a marker.
    js = nc.jetstream()
    info = await js.consumer_info("AUTARCH_EVENTS", notifier_factory.consumer)
    await js.delete_consumer("AUTARCH_EVENTS", notifier_factory.consumer)
    await js.add_consumer("AUTARCH_EVENTS", config=consumer_config(
        notifier_factory.consumer, deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=info.config.opt_start_seq))
    await notifier_factory(notify_webhooks=(f"{receiver.url}/hook",))
    await publish(nc, _iteration(session, 2))
    await _wait_state(nc, session, "delivered", 2)
    got = await receiver.wait_for(2)
    assert [r.body["iteration"] for r in got] == [1, 2]
    assert len((await deliveries(nc, session)).deliveries) == 2
    await receiver.stop()
