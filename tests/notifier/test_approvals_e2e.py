"""Approve from anywhere (issue 36): every service as a process (``autarch up``) with the scripted model, fakes of
Telegram, Slack, Discord and a webhook receiver the test starts. A card awaiting approval is announced on each
with its own signed, one-time links; the test answers the way a phone does: a Telegram button press read back
through ``getUpdates``, plain HTTP GET and POST of the links. Every refusal is typed and changes nothing."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from autarch.cli.local.natsserver import free_port
from autarch.runtime.action_links import KEY_FILE, mint
from autarch.services.scripted_model import ScriptedModelServer
from tests.cli.test_pulse_cmd import FILES, wait_status
from tests.system import System
from tests.workflows.conftest import Client, demo_scenario, make_repo

from .fake_apis import FakeApis, Posted

TOKEN = "123456789:T3LEGRAM-S3CRET"
CHAT = 4242
STRANGER = 777


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeApis]:
    apis = FakeApis(TOKEN).start()
    yield apis
    apis.stop()


def _scenario() -> dict[str, Any]:
    scenario = demo_scenario()
    # A loop session started with script "stop" blocks in its first iteration; the demo answers the workflows.
    scenario["scripts"]["loop:stop.i1"] = ["<signal>BLOCKED: which database?</signal>"]
    return scenario


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(_scenario()) as server:
        yield server


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory, fake: FakeApis, model: ScriptedModelServer) -> Iterator[System]:
    data = tmp_path_factory.mktemp("approvals-e2e") / "data"
    data.mkdir()
    port = free_port()  # chosen here: the links start with the gateway's address
    env = {"AUTARCH_ANTHROPIC_BASE_URL": model.base_url, "AUTARCH_ANTHROPIC_API_KEY": "scripted",
           "AUTARCH_REQUEST_TIMEOUT": "30", "AUTARCH_AGENT_MAX_STEPS": "10",
           "AUTARCH_NOTIFY_BACKOFF_INITIAL": "0.1", "AUTARCH_NOTIFY_BACKOFF_MAX": "0.5",
           "AUTARCH_NOTIFY_TELEGRAM_TOKEN": TOKEN, "AUTARCH_NOTIFY_TELEGRAM_BASE_URL": fake.url,
           "AUTARCH_NOTIFY_TELEGRAM_POLL_TIMEOUT": "5",
           "AUTARCH_NOTIFY_APPROVALS": f"telegram:{CHAT},slack:{fake.url}/slack,discord:{fake.url}/discord,"
                                       f"webhook:{fake.url}/hook",
           "AUTARCH_NOTIFY_LINKS_BASE_URL": f"http://127.0.0.1:{port}", "AUTARCH_NOTIFY_BLOCKED_LINKS": "true",
           "AUTARCH_LOOP_ITERATION_TIMEOUT": "20"}
    sys_ = System(data_dir=data, port=port, nats_port=free_port(),
                  services="orchestrator,tools,git,agent_runner,notifier", extra_env=env)
    sys_.start(timeout=60)
    yield sys_
    if sys_.proc is not None:
        sys_.stop()


@pytest.fixture
def client(system: System) -> Iterator[Client]:
    c = Client(system)
    yield c
    c.http.close()


@pytest.fixture
def phone(system: System) -> Iterator[httpx.Client]:
    """A client with no token: what a phone following a link has."""
    with httpx.Client(timeout=30, trust_env=False) as http:
        yield http


def _start(client: Client, tmp_path: Path) -> str:
    return client.create(make_repo(tmp_path / "repo", demo_scenario()["files"]))


def _card_text(workflow_id: str, stage: str) -> str:
    return f"The {stage} card of workflow {workflow_id} awaits your approval."


def _telegram_card(fake: FakeApis, workflow_id: str, stage: str) -> dict[str, Any]:
    """The Telegram announcement of ``workflow_id``'s ``stage`` card."""
    return fake.wait_for(lambda: next((b for b in fake.sent if str(b["chat_id"]) == str(CHAT)
                                       and _card_text(workflow_id, stage) in b["text"]), None),
                         f"the Telegram announcement of the {stage} card")


def _posted(fake: FakeApis, path: str, workflow_id: str, stage: str) -> Posted:
    """The announcement of the card posted to ``path`` (Slack, Discord or the webhook)."""
    return fake.wait_for(lambda: next((p for p in fake.posted if p.path.split("?")[0] == path
                                       and _card_text(workflow_id, stage) in str(p.body)), None),
                         f"the announcement of the {stage} card to {path}")


def _stage_events(client: Client, workflow_id: str, count: int) -> list[dict[str, Any]]:
    """The workflow's first ``count`` user answers (stage changes and change requests), from the stream."""
    answers = ("workflow:stage_changed", "workflow:changes_requested")
    events = client.events(workflow_id, until=lambda found: len([e for e in found if e["type"] in answers]) >= count)
    return [e for e in events if e["type"] in answers]


def test_a_telegram_button_approves_once_and_the_event_says_telegram(
        system: System, client: Client, fake: FakeApis, phone: httpx.Client, tmp_path: Path) -> None:
    wid = _start(client, tmp_path)
    card = client.wait_awaiting(wid, "scoping")
    body = _telegram_card(fake, wid, "scoping")
    (approve, changes), (stop,) = body["reply_markup"]["inline_keyboard"]
    assert approve["text"] == "✅ Approve" and re.fullmatch(r"act:[A-Za-z0-9_-]{16}", approve["callback_data"])
    assert changes["url"].startswith(f"{system.url}/act/")
    assert stop["text"] == "⏹️ Stop (end the workflow)" and stop["callback_data"].startswith("act:")
    assert "once" in body["text"]

    fake.press(CHAT, approve["callback_data"])
    moved = client.wait(wid, lambda v: v["stage"] == "research", "research after the Telegram approval")
    assert moved["path"] == "full"
    (event,) = _stage_events(client, wid, 1)
    assert (event["from_stage"], event["to_stage"], event["source"]) == ("scoping", "research", "telegram")
    done = fake.wait_sent_bodies(2, CHAT)
    assert any(b["text"].startswith("✅ Approved the scoping card of ") and wid in b["text"] for b in done)

    # The same button again: refused, said in the chat, nothing changed (the research agent works on; the
    # refusal is made before the orchestrator is asked, so no answer can have been recorded).
    fake.press(CHAT, approve["callback_data"])
    refused = _wait_text(fake, "⛔ Not done: link_used: this link was used already")
    assert refused
    assert client.get(wid)["stage"] == "research"
    assert any(p["text"].startswith("⛔ Not done: link_used") for p in fake.pressed)
    # A stranger pressing a copy of the button in another chat does nothing either.
    fake.press(STRANGER, approve["callback_data"])
    texts = fake.wait_sent(1, STRANGER)
    assert texts == ["⛔ This button is not an action link this notifier sent to this chat: nothing was done."]

    # The scoping card's other links now name a card that moved on: refused with its own code, nothing changed.
    slack = _posted(fake, "/slack", wid, "scoping")
    slack_approve = next(e["url"] for b in slack.body["blocks"] if b["type"] == "actions" for e in b["elements"]
                         if e["action_id"] == "approve")
    answer = phone.post(slack_approve)
    assert answer.status_code == 409 and answer.json()["code"] == "card_moved_on", answer.text
    assert phone.post(changes["url"], json={"feedback": "smaller"}).json()["code"] == "card_moved_on"
    view = client.get(wid)
    assert (card["stage"], view["stage"], view["last_feedback"]) == ("scoping", "research", None)


def _wait_text(fake: FakeApis, prefix: str) -> str:
    return fake.wait_for(lambda: next((b["text"] for b in fake.sent if str(b["chat_id"]) == str(CHAT)
                                       and b["text"].startswith(prefix)), None), f"a message starting {prefix!r}")


def test_links_followed_like_a_phone_and_every_refusal(system: System, client: Client, fake: FakeApis,
                                                       phone: httpx.Client, tmp_path: Path) -> None:
    wid = _start(client, tmp_path)
    client.wait_awaiting(wid, "scoping")
    slack = _posted(fake, "/slack", wid, "scoping")
    urls = {e["action_id"]: e["url"] for b in slack.body["blocks"] if b["type"] == "actions" for e in b["elements"]}
    discord = _posted(fake, "/discord", wid, "scoping")
    assert "with_components=true" in discord.path
    (row,) = discord.body["components"]
    assert [(c["style"], c["label"]) for c in row["components"]] == [
        (5, "Approve"), (5, "Request changes"), (5, "Stop (end the workflow)")]
    hook = _posted(fake, "/hook", wid, "scoping")
    assert hook.body["stage"] == "scoping" and set(hook.body["actions"]) == {"approve", "request_changes", "stop"}
    version = client.get(wid)["version"]
    assert hook.body["card_version"] == version

    # A link preview (GET) shows the page and does nothing.
    page = phone.get(urls["approve"])
    assert page.status_code == 200 and "Approve the scoping card" in page.text and 'method="post"' in page.text
    assert page.headers["referrer-policy"] == "no-referrer"
    assert client.get(wid)["version"] == version

    # Tampered: one character of the signature changed.
    token = urls["approve"].rsplit("/", 1)[1]
    fields, signature = token.split(".")
    forged = f"{fields}.{('A' if signature[0] != 'A' else 'B')}{signature[1:]}"
    answer = phone.post(f"{system.url}/act/{forged}")
    assert answer.status_code == 403 and answer.json()["code"] == "link_forged", answer.text
    # Tampered fields (another workflow's id, say) fail the same check.
    other = f"{fields[:-2]}{'AA' if fields[-2:] != 'AA' else 'BB'}.{signature}"
    assert phone.post(f"{system.url}/act/{other}").json()["code"] in ("link_forged", "link_malformed")
    # Not shaped like a link: refused by the route's documented pattern; shaped like one, unsigned: forged.
    assert phone.post(f"{system.url}/act/nonsense").json()["code"] == "bad_request"
    unsigned = "bm9uc2Vuc2U." + "A" * 43
    assert phone.post(f"{system.url}/act/{unsigned}").json()["code"] == "link_forged"  # signature first
    # Expired: signed with this system's key, but its time is up.
    key = (system.data_dir / KEY_FILE).read_text().strip().encode()
    stale, _ = mint(key, run_id=wid, stage="scoping", card_version=version, action="approve", channel="slack",
                    ttl=-1)
    answer = phone.post(f"{system.url}/act/{stale}")
    assert answer.status_code == 410 and answer.json()["code"] == "link_expired", answer.text
    assert "expired" in phone.get(f"{system.url}/act/{stale}").text
    # A change request without feedback is refused before the link is spent.
    answer = phone.post(urls["request_changes"])
    assert answer.status_code == 400 and answer.json()["code"] == "bad_request"
    assert client.get(wid)["version"] == version

    # The real link, posted: approved, recorded as from Slack; a second post is refused.
    done = phone.post(urls["approve"])
    assert done.status_code == 200, done.text
    assert (done.json()["action"], done.json()["source"], done.json()["workflow"]["stage"]) == (
        "approve", "slack", "research")
    again = phone.post(urls["approve"])
    assert again.status_code == 410 and again.json()["code"] == "link_used"
    assert phone.get(urls["approve"]).status_code == 410
    (event,) = _stage_events(client, wid, 1)
    assert event["source"] == "slack"

    # The research card's Discord link sends it back with feedback, recorded as from Discord.
    client.wait_awaiting(wid, "research")
    discord = _posted(fake, "/discord", wid, "research")
    send_back = discord.body["components"][0]["components"][1]["url"]
    form = phone.post(send_back, data={"feedback": "Look at the tests too"}, headers={"Accept": "text/html"})
    assert form.status_code == 200 and "sent back with your feedback" in form.text
    answers = _stage_events(client, wid, 2)
    assert answers[1]["type"] == "workflow:changes_requested"
    assert (answers[1]["stage"], answers[1]["feedback"], answers[1]["source"]) == (
        "research", "Look at the tests too", "discord")
    # An approval made through the API says so.
    assert _api_source_recorded(client, tmp_path)


def _api_source_recorded(client: Client, tmp_path: Path) -> bool:
    wid = client.create(make_repo(tmp_path / "api-repo", demo_scenario()["files"]))
    client.wait_awaiting(wid, "scoping")
    client.approve(wid)
    (event,) = _stage_events(client, wid, 1)
    return bool(event["source"] == "api")


def test_a_blocked_loop_session_is_stopped_from_its_telegram_button_once(
        system: System, client: Client, fake: FakeApis, phone: httpx.Client, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "shop", FILES)
    started = client.http.post("/api/pulse/start", json={
        "projectName": "shop", "projectPath": str(repo), "goal": "a database", "script": "stop",
        "notify": [{"kind": "telegram", "chatId": str(CHAT)}, {"kind": "slack", "url": f"{fake.url}/slack"}]})
    sid = started.raise_for_status().json()["id"]
    wait_status(client.http, sid, "blocked")
    blocked = fake.wait_for(lambda: next((b for b in fake.sent if b["text"] == "⏸️ Blocked: which database?"
                                          and "reply_markup" in b), None), "the Blocked message with its button")
    ((stop,),) = blocked["reply_markup"]["inline_keyboard"]
    assert stop["text"] == "⏹️ Stop the session"
    slack = fake.wait_for(lambda: next((p for p in fake.posted if p.path == "/slack"
                                        and p.body.get("text") == "⏸️ Blocked: which database?"), None),
                          "the Blocked message on Slack")
    (slack_stop,) = slack.body["blocks"][1]["elements"]

    fake.press(CHAT, stop["callback_data"])
    view = wait_status(client.http, sid, "aborted")
    assert "stopped from telegram" in str(view)
    assert _wait_text(fake, f"⏹️ Stopped loop session {sid}.")
    fake.press(CHAT, stop["callback_data"])
    assert _wait_text(fake, "⛔ Not done: link_used")
    # Slack's Stop link names the same block, which is over: refused, typed.
    answer = phone.post(slack_stop["url"])
    assert answer.status_code == 409 and answer.json()["code"] == "card_moved_on", answer.text


def _halt_text(workflow_id: str, stage: str) -> str:
    return f"Workflow {workflow_id} halted in {stage} (error)"


def _halt_events(client: Client, workflow_id: str, count: int) -> list[dict[str, Any]]:
    """The workflow's first ``count`` halts, resumes and abandonment, from the stream."""
    kinds = ("workflow:halted", "workflow:resumed", "workflow:abandoned")
    events = client.events(workflow_id, until=lambda found: len([e for e in found if e["type"] in kinds]) >= count)
    return [e for e in events if e["type"] in kinds]


def _slack_url(posted: Posted, action: str) -> str:
    return next(e["url"] for b in posted.body["blocks"] if b["type"] == "actions" for e in b["elements"]
                if e["action_id"] == action)


def test_a_halt_is_resumed_from_telegram_once_its_stale_links_refused_and_stop_ends_the_workflow(
        system: System, client: Client, fake: FakeApis, phone: httpx.Client, model: ScriptedModelServer,
        tmp_path: Path) -> None:
    # The scoping agent's first model request is refused twice (400: not retried): the workflow halts (error),
    # and halts again when the first resume asks the agent to carry on; the third try answers.
    scenario = _scenario()
    scenario["scripts"]["scoping"][0]["fail_first"] = [400, 400]
    model.use(scenario)
    try:
        wid = _start(client, tmp_path)
        halted = client.wait_halted(wid, "error")
        first = fake.wait_for(lambda: next((b for b in fake.sent if str(b["chat_id"]) == str(CHAT)
                                            and _halt_text(wid, "scoping") in b["text"]), None),
                              "the Telegram announcement of the halt")
        ((resume, stop),) = first["reply_markup"]["inline_keyboard"]
        assert (resume["text"], stop["text"]) == ("▶️ Resume", "⏹️ Stop (end the workflow)")
        hook = fake.wait_for(lambda: next((p for p in fake.posted if p.path == "/hook"
                                           and p.body.get("event") == "workflow:halted"
                                           and p.body.get("workflow_id") == wid), None), "the webhook's halt")
        (halt_event,) = _halt_events(client, wid, 1)
        assert hook.body["halt_version"] == halt_event["version"] and set(hook.body["actions"]) == {"resume", "stop"}
        assert halted["halt"]["version"] == halt_event["version"]
        first_slack = fake.wait_for(lambda: next((p for p in fake.posted if p.path == "/slack"
                                                  and _halt_text(wid, "scoping") in p.body["text"]), None),
                                    "the Slack announcement of the halt")
        # The Stop page says plainly what it does, and does nothing.
        page = phone.get(_slack_url(first_slack, "stop"))
        assert page.status_code == 200 and "ends this workflow for good" in page.text
        assert client.get(wid)["version"] == halted["version"]

        # Resume through the Telegram button: recorded as from Telegram; the agent fails again and halts again.
        fake.press(CHAT, resume["callback_data"])
        assert _wait_text(fake, "▶️ Resumed workflow ")
        events = _halt_events(client, wid, 3)
        assert [(e["type"], e.get("source")) for e in events] == [
            ("workflow:halted", None), ("workflow:resumed", "telegram"), ("workflow:halted", None)]
        # The same button again: used, refused, nothing changed.
        fake.press(CHAT, resume["callback_data"])
        assert _wait_text(fake, "⛔ Not done: link_used")
        # The first halt's Slack links name a halt that is over: refused, typed, nothing changed.
        before = client.get(wid)
        assert before["status"] == "halted"
        for action in ("resume", "stop"):
            answer = phone.post(_slack_url(first_slack, action))
            assert answer.status_code == 409 and answer.json()["code"] == "card_moved_on", answer.text
        assert client.get(wid)["version"] == before["version"]

        # The second halt's Slack Resume link resumes it; this time the agent answers with its card.
        second_slack = fake.wait_for(lambda: next((p for p in fake.posted if p.path == "/slack"
                                                   and _halt_text(wid, "scoping") in p.body["text"]
                                                   and p is not first_slack), None), "the second halt on Slack")
        done = phone.post(_slack_url(second_slack, "resume"))
        assert done.status_code == 200 and (done.json()["action"], done.json()["source"]) == ("resume", "slack")
        client.wait_awaiting(wid, "scoping")
    finally:
        model.use(_scenario())

    # Stop on the card awaiting approval: the workflow ends, recorded as from Telegram.
    card = _telegram_card(fake, wid, "scoping")
    (_, _), (card_stop,) = card["reply_markup"]["inline_keyboard"]
    fake.press(CHAT, card_stop["callback_data"])
    ended = client.wait(wid, lambda v: v["status"] == "abandoned", "abandoned by the Stop button")
    assert ended["stage"] == "scoping"
    assert _wait_text(fake, "⏹️ Stopped workflow ")
    abandoned = _halt_events(client, wid, 5)[-1]
    assert (abandoned["type"], abandoned["source"], abandoned["reason"]) == (
        "workflow:abandoned", "telegram", "stopped from telegram")
    # The card's other links are refused now: the workflow is finished.
    slack = _posted(fake, "/slack", wid, "scoping")
    answer = phone.post(_slack_url(slack, "approve"))
    assert answer.status_code == 409 and answer.json()["code"] == "finished", answer.text


def test_the_api_abandons_a_workflow_at_the_card_it_names(client: Client, tmp_path: Path) -> None:
    wid = _start(client, tmp_path)
    view = client.wait_awaiting(wid, "scoping")
    assert view["card_version"] is not None
    stale = client.post(wid, "abandon", {"version": view["card_version"] - 1})
    assert stale.status_code == 409 and stale.json()["code"] == "card_moved_on", stale.text
    assert client.get(wid)["status"] == "awaiting_approval"
    ended = client.post(wid, "abandon", {"version": view["card_version"], "reason": "not needed after all"})
    assert ended.status_code == 200 and ended.json()["status"] == "abandoned", ended.text
    (event,) = [e for e in _halt_events(client, wid, 1) if e["type"] == "workflow:abandoned"]
    assert (event["source"], event["reason"]) == ("api", "not needed after all")


def test_a_forks_copied_cards_are_not_announced_only_the_card_it_waits_on(
        client: Client, fake: FakeApis, tmp_path: Path) -> None:
    """A fork's stream starts with copies of its original's history: the cards already answered there are not
    announced again (their links could only be refused); the card the fork itself waits on is."""
    wid = _start(client, tmp_path)
    client.wait_awaiting(wid, "scoping")
    client.approve(wid)
    research = client.wait_awaiting(wid, "research")
    _telegram_card(fake, wid, "research")
    fork = client.http.post(f"/api/workflows/{wid}/fork", json={"at": research["card_version"]})
    assert fork.status_code == 201, fork.text
    fid = fork.json()["id"]
    assert client.wait_awaiting(fid, "research")["card_version"] is not None
    _telegram_card(fake, fid, "research")  # the card the fork waits on: announced, with its own links
    announced = [b for b in fake.sent if str(b["chat_id"]) == str(CHAT) and fid in b["text"]]
    assert not [b for b in announced if _card_text(fid, "scoping") in b["text"]], announced
    assert len([b for b in announced if _card_text(fid, "research") in b["text"]]) == 1
