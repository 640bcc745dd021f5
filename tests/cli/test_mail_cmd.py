"""``autarch mail …``: the request each verb makes, its lines and ``--json``, escaping, and how refusals read.

The real gateway (in this event loop, under uvicorn) and nats-server; behind them the stand-in orchestrator of
the mail route tests, which records what it was sent. The command runs in a thread (it is synchronous, the
gateway answers in the loop). ``tests/mail/test_mail_api.py`` runs the same verbs on a swarm's real mail.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from autarch.cli.main import main
from autarch.contracts.mail import GetMail, ListMail
from tests.cli.stand_in import Cli, serve_gateway
from tests.gateway import test_mail_routes as mail_routes
from tests.gateway.conftest import stand_in_orchestrator
from tests.gateway.test_mail_routes import EPIC, MESSAGES, VERBS, StandInMail, message


@pytest.fixture(scope="module")
async def gateway(nats_server, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[list[str]]:
    """The gateway under uvicorn; the connection arguments every command gets."""
    async for connection in serve_gateway(nats_server.url, tmp_path_factory.mktemp("mail-cli")):
        yield connection


@pytest.fixture
async def mail(nats_server) -> AsyncIterator[StandInMail]:
    """The stand-in's mail verbs, plus ``list_workflows`` (an epic given as a prefix of its workflow id)."""
    stand_in = StandInMail()
    async with stand_in_orchestrator(nats_server.url, VERBS, stand_in.answer, "mail CLI", epic=EPIC):
        yield stand_in


@pytest.fixture
def cli(gateway: list[str], capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(gateway, capsys)


async def test_list_prints_a_line_per_message(cli: Cli, mail: StandInMail):
    out = await cli("mail", "list", EPIC)
    assert out.splitlines() == [
        "m1     2026-01-02 03:04:05  AmberFalcon → coordinator  Started base",
        "m2     2026-01-02 03:04:05  coordinator → AmberFalcon  Re: Started base",
        "m3     2026-01-02 03:04:05  BlueHeron → coordinator  File conflict on units",
    ]
    [query] = mail.received
    assert isinstance(query, ListMail) and (query.epic_id, query.topic, query.agent) == (EPIC, None, None)


async def test_list_filters_and_a_prefix_of_the_epic(cli: Cli, mail: StandInMail):
    on_topic = await cli("mail", "list", EPIC[:8], "--topic", "conflicts")
    one_agent = await cli("mail", "list", EPIC, "--agent", "AmberFalcon")
    assert [line.split()[0] for line in on_topic.splitlines()] == ["m3"]
    assert [line.split()[0] for line in one_agent.splitlines()] == ["m1", "m2"]
    assert [(q.epic_id, q.topic, q.agent) for q in mail.received] == [
        (EPIC, "conflicts", None), (EPIC, None, "AmberFalcon")]


async def test_an_empty_mailbox_says_so(cli: Cli, mail: StandInMail):
    assert await cli("mail", "list", EPIC, "--topic", "nothing-here") == "no mail\n"


async def test_show_prints_the_headers_and_the_body(cli: Cli, mail: StandInMail):
    out = await cli("mail", "show", EPIC, "m2")
    headers, body = out.split("\n\n", 1)
    assert headers.splitlines() == [
        "message:   m2", "date:      2026-01-02 03:04:05", "from:      coordinator", "to:        AmberFalcon",
        "subject:   Re: Started base", f"thread:    {EPIC}", f"topic:     epic-{EPIC}", "reply to:  m1",
        "delivered: AmberFalcon"]
    assert body == "body of m2\n"
    [query] = mail.received
    assert isinstance(query, GetMail) and (query.epic_id, query.message_id) == (EPIC, "m2")


async def test_json_prints_the_gateways_answer(cli: Cli, mail: StandInMail):
    listed = json.loads(await cli("mail", "list", EPIC, "--json"))
    assert listed["epic_id"] == EPIC and [m["message_id"] for m in listed["messages"]] == ["m1", "m2", "m3"]
    shown = json.loads(await cli("mail", "show", EPIC, "m3", "--json"))
    assert shown["message_id"] == "m3" and shown["topic"] == "conflicts" and shown["body_md"] == "body of m3"


async def test_control_characters_print_escaped(cli: Cli, mail: StandInMail, monkeypatch: pytest.MonkeyPatch):
    evil = message("m1", "AmberFalcon", ["coordinator"], "red \x1b[31mtitle\x07",
                   body_md="first line\n\tindented \x1b]0;owned\x07\r\nnul \x00 c1 \x9b end")
    monkeypatch.setattr(mail_routes, "MESSAGES", [evil, *MESSAGES[1:]])
    listed = await cli("mail", "list", EPIC)
    shown = await cli("mail", "show", EPIC, "m1")
    for out in (listed, shown):
        assert not any(c in out for c in "\x1b\x07\x00\x9b\r"), out
    assert "red \\x1b[31mtitle\\x07" in listed.splitlines()[0]
    body = shown.split("\n\n", 1)[1].splitlines()
    assert body == ["first line", "    indented \\x1b]0;owned\\x07\\x0d", "nul \\x00 c1 \\x9b end"]


@pytest.mark.parametrize(("argv", "message"), [
    (("mail", "show", EPIC, "m7"), "not_found: no message m7"),
    (("mail", "show", EPIC, "m409"), "conflict: refused"),
    (("mail", "show", EPIC, "m1?x=1"), "not_found: no message m1?x=1"),
    (("mail", "show", EPIC, "x/../m1"), "not_found"),
    (("mail", "list", "zzzz"), "'zzzz' is not a workflow id"),
    (("mail", "list", "ffff"), "not_found: no workflow ffff"),
])
async def test_refusals_go_to_stderr_with_their_code(cli: Cli, mail: StandInMail, argv: tuple[str, ...],
                                                     message: str):
    err = await cli(*argv, code=1)
    assert err.startswith("autarch: ") and message in err


@pytest.mark.parametrize("argv", [("mail", "list"), ("mail", "show", EPIC), ("mail", "send", EPIC)])
async def test_bad_arguments_are_refused_before_any_request(cli: Cli, mail: StandInMail, argv: tuple[str, ...],
                                                            capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exit_:
        await asyncio.to_thread(main, [*argv, *cli.connection])
    assert exit_.value.code == 2 and "usage: autarch mail" in capsys.readouterr().err
    assert mail.received == []


def test_the_group_lists_its_verbs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["mail", "--help"])
    out = capsys.readouterr().out
    assert "list" in out and "show" in out
