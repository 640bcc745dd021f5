"""Telegram commands read by the notifier (``getUpdates`` long polling against a fake Bot API the test starts):
who is answered what, what starts nothing, and an offset that survives a restart. Starting a session needs the
orchestrator: ``test_channels_e2e.py`` does that with every service running."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from autarch.contracts import subjects
from autarch.services.notifier.telegram_poller import bot_id_of

from .conftest import deliveries
from .fake_apis import FakeApis

TOKEN = "123456789:T3LEGRAM-S3CRET"
ALLOWED = 4242
STRANGER = 777


@pytest.fixture
def fake() -> Any:
    apis = FakeApis(TOKEN).start()
    yield apis
    apis.stop()


@pytest.fixture
async def start_requests(nc: Client) -> Any:
    """Every ``start_loop`` request sent on NATS while the test runs (none is answered: there is no orchestrator)."""
    seen: list[bytes] = []

    async def record(msg: Any) -> None:
        seen.append(msg.data)

    sub = await nc.subscribe(subjects.request("orchestrator", "start_loop"), cb=record)
    yield seen
    await sub.unsubscribe()


def _settings(fake: FakeApis, tmp_path: Path, **changes: Any) -> dict[str, Any]:
    return {"notify_telegram_token": TOKEN, "notify_telegram_base_url": fake.url,
            "notify_telegram_allowed_chats": (str(ALLOWED), "-1001"),
            "notify_telegram_projects": (str(tmp_path / "shop"), str(tmp_path / "web")),
            "notify_telegram_poll_timeout": 5, **changes}


async def _sent(fake: FakeApis, count: int, chat: int | None = None) -> list[str]:
    return await asyncio.to_thread(fake.wait_sent, count, chat, 30.0)


async def test_who_is_answered_what_and_nothing_is_started(nc: Client, notifier_factory, fake: FakeApis,
                                                           start_requests: list[bytes], tmp_path: Path,
                                                           caplog) -> None:
    caplog.set_level(logging.DEBUG)
    await notifier_factory(**_settings(fake, tmp_path))
    fake.say(STRANGER, "/pulse shop Add a health endpoint")
    fake.say(STRANGER, "hello bot")  # not a command: not answered, even with a refusal
    fake.say(ALLOWED, "/pulse")
    fake.say(ALLOWED, "/pulse nope Add a health endpoint")
    fake.say(ALLOWED, "/pulse@AutarchBot shop")
    fake.say(ALLOWED, "/weather")
    fake.say(ALLOWED, "just chatting")
    fake.say(ALLOWED, "", update={"edited_message": {"message_id": 1, "chat": {"id": ALLOWED}, "text": "/help"}})
    fake.say(ALLOWED, "", update={"message": {"message_id": 99, "chat": {"id": ALLOWED}, "photo": []}})
    last = fake.say(ALLOWED, "/help")
    usage = ("Usage: /pulse <project> <goal>\nStarts a loop session on <project> working towards <goal> (at most 10 "
             "iterations); its notifications come to this chat.\nProjects: shop, web")
    assert await _sent(fake, 5, ALLOWED) == [
        f"Name a project and a goal.\n{usage}", f"Unknown project nope.\n{usage}",
        f"Give the goal after the project.\n{usage}", f"Unknown command /weather.\n{usage}", usage]
    assert await _sent(fake, 1, STRANGER) == [
        "⛔ This chat (id 777) may not start loop sessions: it is not one of the notifier's "
        "notify_telegram_allowed_chats."]
    await asyncio.to_thread(fake.wait_polled, last + 1)  # every update handled, the offset past the last
    assert len(fake.sent) == 6 and start_requests == []
    record = [d for d in (await deliveries(nc)).deliveries if d.event == "telegram:command"]
    assert len(record) == 6 and {(d.kind, d.session_id) for d in record} == {("telegram", "")}
    assert TOKEN not in caplog.text and TOKEN.split(":")[1] not in str(record)


async def test_a_restart_neither_repeats_nor_loses_a_message(notifier_factory, fake: FakeApis,
                                                             tmp_path: Path) -> None:
    first = await notifier_factory(**_settings(fake, tmp_path))
    before = fake.say(ALLOWED, "/help")
    await _sent(fake, 1)
    await asyncio.to_thread(fake.wait_polled, before + 1)
    await first.stop()
    while_down = fake.say(ALLOWED, "/pulse")  # sent while no notifier runs
    polls = len(fake.offsets)
    await notifier_factory(**_settings(fake, tmp_path))
    texts = await _sent(fake, 2)
    await asyncio.to_thread(fake.wait_polled, while_down + 1)
    # The fake still serves the first message to anyone asking without the offset: the restarted notifier asked
    # from the recorded one, so it was not read again.
    assert fake.offsets[polls] == before + 1
    assert texts[1].startswith("Name a project and a goal.") and len(fake.sent) == 2


async def test_a_failing_bot_api_is_asked_again_and_loses_nothing(notifier_factory, fake: FakeApis,
                                                                  tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    fake.poll_failures = 3
    fake.say(ALLOWED, "/help")
    await notifier_factory(**_settings(fake, tmp_path))
    assert (await _sent(fake, 1))[0].startswith("Usage: /pulse")
    assert fake.offsets[:4] == [None, None, None, None]
    assert "Telegram getUpdates failed (_PollError: HTTP 502" in caplog.text
    assert TOKEN not in caplog.text


async def test_without_an_allowed_chat_the_bot_is_not_read(notifier_factory, fake: FakeApis, tmp_path: Path) -> None:
    await notifier_factory(**_settings(fake, tmp_path, notify_telegram_allowed_chats=()))
    fake.say(ALLOWED, "/help")
    await asyncio.sleep(0.5)  # a quiet window: a poller would have asked by now; the assertion is that nothing asked
    assert fake.offsets == [] and fake.sent == []


def test_the_bot_id_is_the_public_part_of_the_token() -> None:
    assert bot_id_of(TOKEN) == "123456789"
    assert bot_id_of("no-colon-secret") != "no-colon-secret" and len(bot_id_of("no-colon-secret")) == 16
