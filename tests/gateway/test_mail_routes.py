"""``/api/mail``: the HTTP side of the mail reading verbs — validation, the request each route sends, error statuses.

The real gateway and nats-server; behind them a stand-in orchestrator that answers ``list_mail`` and
``get_mail`` with canned messages and typed errors and records every request it was sent (so "refused before
the orchestrator" is "nothing was sent"). The mailbox itself is tested in ``tests/mail``, with a swarm's real
mail in ``tests/mail/test_mail_api.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from autarch.contracts.mail import GetMail, ListMail, MailList, MailMessage
from autarch.runtime.errors import ServiceFailure

from .conftest import Gateway, assert_error, stand_in_orchestrator

EPIC = "6a000000-0000-4000-8000-000000000001"
"""An epic whose mailbox holds :data:`MESSAGES`."""
REFUSING = {"m404": ("not_found", 404), "m409": ("conflict", 409), "m999": ("surprise", 500)}
"""Message ids the stand-in refuses, with the status the gateway must answer."""
VERBS = (("list_mail", ListMail), ("get_mail", GetMail))


def message(message_id: str, sender: str, to: list[str], subject: str, **over: Any) -> MailMessage:
    fields: dict[str, Any] = dict(message_id=message_id, epic_id=EPIC, thread_id=EPIC, topic=f"epic-{EPIC}",
                                  sender=sender, to=to, subject=subject, body_md=f"body of {message_id}",
                                  created_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    fields.update(over)
    return MailMessage(**fields)


MESSAGES = [
    message("m1", "AmberFalcon", ["coordinator"], "Started base"),
    message("m2", "coordinator", ["AmberFalcon"], "Re: Started base", reply_to="m1", delivered_to=["AmberFalcon"]),
    message("m3", "BlueHeron", ["coordinator"], "File conflict on units", topic="conflicts"),
]


@dataclass
class StandInMail:
    received: list[Any] = field(default_factory=list)

    async def answer(self, request: Any) -> Any:
        self.received.append(request)
        if isinstance(request, ListMail):
            if request.epic_id != EPIC:
                return MailList(epic_id=request.epic_id, messages=[])
            return MailList(epic_id=EPIC, messages=[
                m for m in MESSAGES if request.topic in (None, m.topic)
                and request.agent in (None, m.sender, *m.to)])
        if request.message_id in REFUSING:
            code = REFUSING[request.message_id][0]
            raise ServiceFailure(code, f"refused: {code}", {"message_id": request.message_id})
        found = [m for m in MESSAGES if m.message_id == request.message_id and request.epic_id == EPIC]
        if not found:
            raise ServiceFailure.not_found(f"no message {request.message_id} in epic {request.epic_id}",
                                           message_id=request.message_id)
        return found[0]


@pytest.fixture
async def mail(nats_server) -> AsyncIterator[StandInMail]:
    stand_in = StandInMail()
    async with stand_in_orchestrator(nats_server.url, VERBS, stand_in.answer, "mail route"):
        yield stand_in



async def test_list_sends_the_canonical_epic_and_the_filters(gateway: Gateway, mail: StandInMail):
    async with gateway.client() as http:
        everything = await http.get("/api/mail", params={"epic_id": EPIC.upper()})
        on_topic = await http.get("/api/mail", params={"epic_id": EPIC, "topic": "conflicts"})
        one_agent = await http.get("/api/mail", params={"epic_id": EPIC, "agent": "AmberFalcon"})
    assert everything.status_code == on_topic.status_code == one_agent.status_code == 200, everything.text
    assert [(q.epic_id, q.topic, q.agent) for q in mail.received] == [
        (EPIC, None, None), (EPIC, "conflicts", None), (EPIC, None, "AmberFalcon")]
    listed = everything.json()
    assert listed["epic_id"] == EPIC and [m["message_id"] for m in listed["messages"]] == ["m1", "m2", "m3"]
    second = listed["messages"][1]
    assert (second["sender"], second["to"], second["reply_to"], second["delivered_to"]) == (
        "coordinator", ["AmberFalcon"], "m1", ["AmberFalcon"])
    assert second["created_at"].startswith("2026-01-02T03:04:05")
    assert [m["message_id"] for m in on_topic.json()["messages"]] == ["m3"]
    assert [m["message_id"] for m in one_agent.json()["messages"]] == ["m1", "m2"]


async def test_an_epic_without_mail_lists_none(gateway: Gateway, mail: StandInMail):
    other = "6a000000-0000-4000-8000-0000000000ff"
    async with gateway.client() as http:
        reply = await http.get("/api/mail", params={"epic_id": other})
    assert reply.status_code == 200 and reply.json() == {"epic_id": other, "messages": []}


async def test_the_epic_is_required_and_well_formed(gateway: Gateway, mail: StandInMail):
    async with gateway.client() as http:
        missing = await http.get("/api/mail")
        malformed = await http.get("/api/mail", params={"epic_id": "not-a-uuid"})
    assert_error(missing, 400, "bad_request")
    assert_error(malformed, 404, "not_found")
    assert mail.received == []


async def test_get_one_message(gateway: Gateway, mail: StandInMail):
    async with gateway.client() as http:
        reply = await http.get(f"/api/mail/{EPIC.upper()}/m2")
    assert reply.status_code == 200, reply.text
    shown = reply.json()
    assert (shown["message_id"], shown["subject"], shown["body_md"], shown["thread_id"]) == (
        "m2", "Re: Started base", "body of m2", EPIC)
    [query] = mail.received
    assert isinstance(query, GetMail) and (query.epic_id, query.message_id) == (EPIC, "m2")


@pytest.mark.parametrize("path", ["/api/mail/nope/m1", f"/api/mail/{EPIC}/x1", f"/api/mail/{EPIC}/m1%0A",
                                  f"/api/mail/{EPIC}/m{'1' * 13}", f"/api/mail/{EPIC}/-m1"])
async def test_malformed_ids_are_404_and_send_nothing(gateway: Gateway, mail: StandInMail, path: str):
    async with gateway.client() as http:
        reply = await http.get(path)
    assert_error(reply, 404, "not_found")
    assert mail.received == []


@pytest.mark.parametrize(("message_id", "code", "status"), [
    ("m7", "not_found", 404), *((m, code, status) for m, (code, status) in REFUSING.items()),
])
async def test_the_orchestrators_refusals_keep_their_code(gateway: Gateway, mail: StandInMail, message_id: str,
                                                          code: str, status: int):
    async with gateway.client() as http:
        reply = await http.get(f"/api/mail/{EPIC}/{message_id}")
    assert assert_error(reply, status, code)["details"]["message_id"] == message_id
    assert len(mail.received) == 1


@pytest.mark.parametrize("path", [f"/api/mail?epic_id={EPIC}", f"/api/mail/{EPIC}/m1"])
async def test_every_mail_route_needs_the_token(gateway: Gateway, mail: StandInMail, path: str):
    async with httpx.AsyncClient(base_url=gateway.url, timeout=15) as http:
        wrong = await http.get(path, headers={"Authorization": "Bearer wrong"})
        missing = await http.get(path)
    assert_error(wrong, 401, "unauthorized")
    assert_error(missing, 401, "unauthorized")
    assert mail.received == []


async def test_the_mail_routes_are_read_only(gateway: Gateway, mail: StandInMail):
    async with gateway.client() as http:
        posted = await http.post("/api/mail", json={"epic_id": EPIC})
        deleted = await http.delete(f"/api/mail/{EPIC}/m1")
    assert posted.status_code == deleted.status_code == 405
    assert mail.received == []


async def test_the_mail_routes_are_documented(gateway: Gateway):
    async with gateway.client() as http:
        schema = (await http.get("/schema/openapi.json")).json()
    expected = {("/api/mail", "get"): ({"200", "400", "404"}, "MailList"),
                ("/api/mail/{epic_id}/{message_id}", "get"): ({"200", "404"}, "MailMessage")}
    for (path, method), (statuses, reply) in expected.items():
        operation = schema["paths"][path][method]
        assert operation["summary"] and len(operation["description"]) > 40, (path, method)
        assert operation["tags"] == ["mail"], (path, method)
        assert statuses | {"401", "503", "504"} <= set(operation["responses"]), (path, method)
        assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
            "$ref": f"#/components/schemas/{reply}"}
    listing = schema["paths"]["/api/mail"]["get"]
    assert {(p["name"], p["required"]) for p in listing["parameters"] if p["in"] == "query"} == {
        ("epic_id", True), ("topic", False), ("agent", False)}
    assert {"MailList", "MailMessage"} <= set(schema["components"]["schemas"])
