"""``autarch beads …``: the request each verb makes, its tables and ``--json``, and how refusals read.

The real gateway (in this event loop, under uvicorn) and nats-server; behind them the stand-in orchestrator of
the bead route tests, which records what it was sent. The command runs in a thread (it is synchronous, the
gateway answers in the loop). ``tests/swarm/test_bead_api.py`` runs the same verbs against a running swarm.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from autarch.cli.main import main
from autarch.contracts.beads import AddDependency, CloseBead, CreateBead, GetBead, ReadyBeads
from tests.cli.stand_in import Cli, serve_gateway
from tests.gateway.conftest import stand_in_orchestrator
from tests.gateway.test_bead_routes import EPIC, NO_EPIC, VERBS, StandInBeads


@pytest.fixture(scope="module")
async def gateway(nats_server, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[list[str]]:
    """The gateway under uvicorn; the connection arguments every command gets."""
    async for connection in serve_gateway(nats_server.url, tmp_path_factory.mktemp("beads-cli")):
        yield connection


@pytest.fixture
async def beads(nats_server) -> AsyncIterator[StandInBeads]:
    """The stand-in's bead verbs, plus ``list_workflows`` (an epic given as a prefix of its workflow id)."""
    stand_in = StandInBeads()
    async with stand_in_orchestrator(nats_server.url, VERBS, stand_in.answer, "bead CLI", epic=EPIC):
        yield stand_in


@pytest.fixture
def cli(gateway: list[str], capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(gateway, capsys)


async def test_list_prints_a_line_per_bead_and_the_critical_path(cli: Cli, beads: StandInBeads):
    out = await cli("beads", "list", EPIC)
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["a", "closed"] and lines[1].split()[:2] == ["b", "open"]
    assert "after a" in lines[1] and "bead b" in lines[1]
    assert lines[-1] == "critical path: a → b"
    await cli("beads", "list", EPIC[:8], "--status", "open")
    assert [(q.epic_id, q.status) for q in beads.received] == [(EPIC, None), (EPIC, "open")]


async def test_json_prints_the_gateways_answer(cli: Cli, beads: StandInBeads):
    listed = json.loads(await cli("beads", "list", EPIC, "--json"))
    assert listed["epic_id"] == EPIC and [b["id"] for b in listed["beads"]] == ["a", "b"]
    ready = json.loads(await cli("beads", "ready", EPIC, "--json"))
    assert ready["ready"][0]["bead_id"] == "b" and ready["ready"][0]["unblocks"] == ["c"]
    shown = json.loads(await cli("beads", "show", EPIC, "b", "--json"))
    assert shown["id"] == "b" and shown["verify"] == ["pytest -q"]
    closed = json.loads(await cli("beads", "close", EPIC, "b", "--reason", "done", "--json"))
    assert closed["status"] == "closed" and closed["close_reason"] == "done"


async def test_ready_is_a_ranked_table_marking_the_critical_path(cli: Cli, beads: StandInBeads):
    out = await cli("beads", "ready", EPIC)
    header, row, path = out.splitlines()
    assert "score" in header and "pagerank" in header
    assert row.startswith("* b ") and "0.900" in row and row.endswith("bead b")
    assert path == "critical path: b → c"
    assert [type(q) for q in beads.received] == [ReadyBeads]


async def test_show_prints_the_beads_fields(cli: Cli, beads: StandInBeads):
    out = await cli("beads", "show", EPIC, "b")
    assert out.splitlines()[0].split()[:2] == ["b", "open"]
    assert "files: a.py" in out and "verify: pytest -q" in out and "priority 2" in out
    [query] = beads.received
    assert isinstance(query, GetBead) and (query.epic_id, query.bead_id) == (EPIC, "b")


async def test_create_sends_what_the_flags_say(cli: Cli, beads: StandInBeads):
    out = await cli("beads", "create", EPIC, "--title", "Tidy the notes", "--id", "tidy", "--description", "why",
                    "--file", "NOTES.md", "--file", "docs/a.md", "--verify", "test -s NOTES.md", "--depends-on",
                    "a", "--depends-on", "b", "--priority", "1", "--tdd-red", "false", "--tdd-green", "true")
    assert out.splitlines()[0].startswith("tidy") and "Tidy the notes" in out
    [command] = beads.received
    assert isinstance(command, CreateBead) and (command.epic_id, command.id, command.title) == (
        EPIC, "tidy", "Tidy the notes")
    assert (command.description, command.files, command.verify, command.priority) == (
        "why", ["NOTES.md", "docs/a.md"], ["test -s NOTES.md"], 1)
    assert [(d.bead_id, d.type) for d in command.dependencies] == [("a", "blocks"), ("b", "blocks")]
    assert command.testing_mode == "tdd-required" and command.tdd_steps is not None
    assert (command.tdd_steps.red, command.tdd_steps.green) == ("false", "true")


async def test_create_with_only_a_title_leaves_the_rest_to_the_orchestrator(cli: Cli, beads: StandInBeads):
    out = await cli("beads", "create", EPIC, "--title", "Something")
    assert out.startswith("u1")
    [command] = beads.received
    assert (command.id, command.files, command.verify, command.dependencies, command.priority,
            command.testing_mode, command.tdd_steps) == (None, [], [], [], 2, "standard", None)


async def test_dep_and_close(cli: Cli, beads: StandInBeads):
    linked = await cli("beads", "dep", EPIC, "b", "--on", "a")
    assert linked.startswith("b") and "after a" in linked
    await cli("beads", "dep", EPIC, "b", "--on", "g", "--type", "parent-child")
    closed = await cli("beads", "close", EPIC, "b", "--reason", "done by hand")
    assert closed.split()[:2] == ["b", "closed"]
    first, second, close = beads.received
    assert isinstance(first, AddDependency) and (first.bead_id, first.depends_on, first.type) == ("b", "a", "blocks")
    assert (second.depends_on, second.type) == ("g", "parent-child")
    assert isinstance(close, CloseBead) and close.reason == "done by hand"


@pytest.mark.parametrize(("argv", "message"), [
    (("beads", "dep", EPIC, "b", "--on", "loop"), "dependency_cycle: refused"),
    (("beads", "create", EPIC, "--title", "x", "--id", "dup"), "duplicate_bead: refused"),
    (("beads", "close", EPIC, "held", "--reason", "x"), "not_closable: refused"),
    (("beads", "show", EPIC, "ghost"), "not_found: refused"),
    (("beads", "ready", NO_EPIC), "no_epic: workflow"),
    (("beads", "list", "zzzz"), "'zzzz' is not a workflow id"),
])
async def test_refusals_go_to_stderr_with_their_code(cli: Cli, beads: StandInBeads, argv: tuple[str, ...],
                                                     message: str):
    err = await cli(*argv, code=1)
    assert err.startswith("autarch: ") and message in err


@pytest.mark.parametrize("half", [("--tdd-red", "false"), ("--tdd-green", "true")])
async def test_a_tdd_step_without_the_other_is_refused(cli: Cli, beads: StandInBeads, half: tuple[str, str]):
    err = await cli("beads", "create", EPIC, "--title", "x", *half, code=2)
    assert "--tdd-red and --tdd-green go together" in err
    assert beads.received == []


@pytest.mark.parametrize("argv", [
    ("beads", "create", EPIC, "--title", "x", "--priority", "7"),
    ("beads", "create", EPIC),  # no --title
    ("beads", "dep", EPIC, "b"),  # no --on
    ("beads", "dep", EPIC, "b", "--on", "a", "--type", "related"),
    ("beads", "close", EPIC, "b"),  # no --reason
    ("beads", "list", EPIC, "--status", "done"),
])
async def test_bad_arguments_are_refused_before_any_request(cli: Cli, beads: StandInBeads, argv: tuple[str, ...],
                                                            capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exit_:
        await asyncio.to_thread(main, [*argv, *cli.connection])
    assert exit_.value.code == 2 and "usage: autarch beads" in capsys.readouterr().err
    assert beads.received == []


def test_the_group_lists_its_verbs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["beads", "--help"])
    out = capsys.readouterr().out
    assert all(verb in out for verb in ("list", "show", "ready", "create", "dep", "close"))


def test_titles_and_descriptions_never_reach_the_terminal_raw():
    from autarch.cli.beads_cmd import bead_line, ready_lines, show_lines

    bead = {"id": "x", "status": "open", "title": "T\x1b[31mred\n", "attempt": 0, "dependencies": [],
            "description": "bell\x07"}
    assert bead_line(bead).endswith("T\\x1b[31mred\\x0a")
    assert all("\x1b" not in line and "\x07" not in line for line in show_lines(bead))
    ranked = {"ready": [{"bead_id": "x", "title": "a\x00b", "score": 1.0, "pagerank": 1.0, "betweenness": 0.0,
                         "blocker_ratio": 0.0, "staleness": 0.0, "priority": 2, "on_critical_path": True}]}
    assert "a\\x00b" in ready_lines(ranked)[1]
