"""Every service as a process (``autarch up``) with the scripted model, and fakes of Telegram, Discord and a
Twilio-compatible SMS API the test starts: a session's notifications reach a Discord thread and a phone, and a
``/pulse`` sent to the Telegram bot starts a session whose notifications come back to that chat."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from autarch.services.scripted_model import ScriptedModelServer
from tests.cli.test_pulse_cmd import FILES, wait_status, write
from tests.system import System
from tests.workflows.conftest import make_repo, scripted_system

from .fake_apis import FakeApis

TOKEN = "123456789:T3LEGRAM-S3CRET"
CHAT = 4242
STRANGER = 777
THREAD = "1187654321098765432"
PHONE = "+15557654321"
SCRIPTS = {
    "loop": ["<signal>BLOCKED: no script for this session</signal>"],
    # A session started from Telegram carries no script: its iterations are "i1", "i2".
    "loop:i1": [{"content": [write("a.txt", "a\n")]}, "feat(shop): add a\n<signal>CONTINUE</signal>"],
    "loop:i2": [{"content": [write("b.txt", "b\n")]}, "feat(shop): add b\n<signal>COMPLETE</signal>"],
    "loop:chan.i1": [{"content": [write("c.txt", "c\n")]}, "feat(shop): add c\n<signal>CONTINUE</signal>"],
    "loop:chan.i2": ["<signal>BLOCKED: which database?</signal>"],
}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeApis]:
    apis = FakeApis(TOKEN).start()
    yield apis
    apis.stop()


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repo(tmp_path_factory.mktemp("projects") / "shop", FILES)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project listed for Telegram that is no git repository: the orchestrator refuses to start on it."""
    path = tmp_path_factory.mktemp("projects") / "plain"
    path.mkdir()
    return path


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory, fake: FakeApis, shop: Path, plain: Path) -> Iterator[System]:
    with ScriptedModelServer({"scripts": SCRIPTS, "files": FILES}) as model:
        yield from scripted_system(
            tmp_path_factory, model, "channels-e2e", services="orchestrator,tools,git,indexer,agent_runner,notifier",
            AUTARCH_REQUEST_TIMEOUT="30", AUTARCH_AGENT_MAX_STEPS="10", AUTARCH_LOOP_ITERATION_TIMEOUT="20",
            AUTARCH_NOTIFY_BACKOFF_INITIAL="0.1", AUTARCH_NOTIFY_BACKOFF_MAX="0.5",
            AUTARCH_NOTIFY_TELEGRAM_TOKEN=TOKEN, AUTARCH_NOTIFY_TELEGRAM_BASE_URL=fake.url,
            AUTARCH_NOTIFY_TELEGRAM_ALLOWED_CHATS=str(CHAT), AUTARCH_NOTIFY_TELEGRAM_PROJECTS=f"{shop},{plain}",
            AUTARCH_NOTIFY_TELEGRAM_POLL_TIMEOUT="5",
            AUTARCH_NOTIFY_DISCORD_BOT_TOKEN="D1SC0RD-T0KEN", AUTARCH_NOTIFY_DISCORD_BASE_URL=f"{fake.url}/discord",
            AUTARCH_NOTIFY_SMS_BASE_URL=f"{fake.url}/twilio", AUTARCH_NOTIFY_SMS_ACCOUNT_SID="AC0123",
            AUTARCH_NOTIFY_SMS_AUTH_TOKEN="SMS-S3CRET", AUTARCH_NOTIFY_SMS_FROM="+15550001111")


@pytest.fixture
def http(system: System) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=system.url, headers=system.headers, timeout=30, trust_env=False) as client:
        yield client


def test_a_session_notifies_a_discord_thread_and_a_phone(system: System, http: httpx.Client, fake: FakeApis,
                                                         tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "shop", FILES)
    started = http.post("/api/pulse/start", json={
        "projectName": "shop", "projectPath": str(repo), "goal": "c, then a database", "script": "chan",
        "createdBy": "sms", "notify": [{"kind": "discord", "discordThreadId": THREAD},
                                       {"kind": "sms", "phoneNumber": PHONE}]}).raise_for_status().json()
    assert started["created_by"] == "sms"
    wait_status(http, started["id"], "blocked")
    discord = fake.wait_posted(2, f"/discord/channels/{THREAD}/messages")
    sms = fake.wait_posted(2, "/twilio/2010-04-01/Accounts/AC0123/Messages.json")
    texts = [p.body["content"] for p in discord]
    assert texts[0].startswith("📍 Iteration 1/10: ") and texts[0].endswith(". Continuing...")
    assert texts[1] == "⏸️ Blocked: which database?"
    assert [p.body for p in discord] == [{"content": t, "allowed_mentions": {"parse": []}} for t in texts]
    assert [p.body for p in sms] == [{"To": PHONE, "From": "+15550001111", "Body": t} for t in texts]
    assert {p.headers["authorization"] for p in discord} == {"Bot D1SC0RD-T0KEN"}
    assert {p.headers["authorization"] for p in sms} == {f"Basic {base64.b64encode(b'AC0123:SMS-S3CRET').decode()}"}
    log = system.log.read_text() if system.log else ""
    assert "D1SC0RD-T0KEN" not in log and "SMS-S3CRET" not in log


def test_a_telegram_command_starts_a_session_whose_notifications_come_back(
        system: System, http: httpx.Client, fake: FakeApis, shop: Path, plain: Path) -> None:
    before = http.get("/api/pulse").raise_for_status().json()["total"]
    fake.say(STRANGER, "/pulse shop Add a and b")  # not an allowed chat: refused, starts nothing
    fake.say(CHAT, "/pulse shop")  # no goal: the usage
    fake.say(CHAT, "/pulse plain Add a and b")  # the orchestrator refuses: said, nothing started
    fake.say(CHAT, "/pulse shop Add a and b")
    refused = fake.wait_sent(1, STRANGER)
    assert refused == ["⛔ This chat (id 777) may not start loop sessions: it is not one of the notifier's "
                       "notify_telegram_allowed_chats."]
    # The session's own notifications may follow at once: the first three are the replies to the commands.
    usage, not_started, started = fake.wait_sent(3, CHAT)[:3]
    assert usage.startswith("Give the goal after the project.\nUsage: /pulse <project> <goal>")
    assert not_started.startswith("❌ Could not start a session on plain: not_a_repository: "), not_started
    assert str(plain) in not_started
    match = re.fullmatch(r"▶️ Session ([0-9a-f-]{36}) started on shop \(branch autarch/loop-([0-9a-f]{8}), at most 10 "
                         r"iterations\): Add a and b", started)
    assert match, started
    session_id = match[1]
    view = wait_status(http, session_id, "complete")
    assert (view["created_by"], view["project_path"], view["goal"]) == ("telegram", str(shop), "Add a and b")
    assert view["notify"] == [{"kind": "telegram", "url": None, "chatId": str(CHAT), "discordThreadId": None,
                               "phoneNumber": None}]
    texts = fake.wait_sent(5, CHAT)
    assert texts[3].startswith("📍 Iteration 1/10: ") and texts[3].endswith(". Continuing...")
    assert texts[4] == "✅ Session complete (2 iterations, 2 commits)"
    assert http.get("/api/pulse").raise_for_status().json()["total"] == before + 1
    assert fake.wait_sent(1, STRANGER) == refused  # nothing more to the stranger
    log = system.log.read_text() if system.log else ""
    assert TOKEN not in log
